"""Teardown: first the logs (weights on local NVMe vanish with a spot node, logs too), then
the containers and a still running downloader, optionally the weights. Runs on every node that
answers, whatever failed before; unreachable nodes are reported (exit 3)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from k3deploy.facts.docker import Container
from k3deploy.facts.node_doc import parse_reading
from k3deploy.node import run_settle
from k3deploy.node import apikey, detached, guard_config
from k3deploy import engines
from k3deploy.node import facts as F
from k3deploy.node.context import InputsSettled, NodeContext, RunContext
from k3deploy.remote.protocol import WorkPaths
from k3deploy.core.jsonvalue import JSON
from k3deploy.core.redact import redact
from k3deploy.core.status import Status
from k3deploy.steps import probes
from k3deploy.steps.weights import shared_hf
from k3deploy.steps.base import Action, AnyFact, Step, cmd


SAVE_LOGS = "save-logs"


@dataclass(frozen=True)
class LogsFacts:
    """Each log's text as it is on the node, None where there is none; each field's name is
    the kind in the saved file's name."""
    engine: str | None
    download: str | None
    guard: str | None
    incident: str | None          # the guard's incident record (JSON), kept as written
    serve: str | None = None      # over Ray, on the head: the serve's own log file
    nccl: str | None = None       # the rank processes' NCCL debug files (engines/fabric.py)
    saved: tuple[str, ...] = ()   # after the save: the copies on the laptop

    def found(self) -> dict[str, str]:
        """kind -> text of every log there is, the engine's first."""
        texts = {"engine": self.engine, "serve": self.serve, "nccl": self.nccl,
                 "download": self.download, "guard": self.guard, "incident": self.incident}
        return {kind: text for kind, text in texts.items() if text}


def guard_files(node: NodeContext) -> list[AnyFact]:
    """The guard's own log and its incident record, when there are any."""
    paths = guard_config.node_paths(node.inv)
    wanted = {"guard": paths.log, "incident": paths.incident}
    return [F.Fact(kind, f"cat {shlex.quote(path)}", F.text, sudo=True)
            for kind, path in wanted.items()]


class CollectLogs(Step[LogsFacts]):
    name = "collect-logs"
    read_only = True
    runs_after_failures = True
    Facts = LogsFacts

    def prepare(self, run: RunContext) -> None:
        # Registering the key makes redact() mask it: SGLang prints server_args, key included.
        apikey.load_or_create(run.inv, run.session.state_dir, create=False)
        guard_config.load_or_create_secret(run.session.state_dir, create=False)
        run_settle.logs_dir(run)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        logs = engines.docker_logs_argv(node.inv.engine.container)
        # Over Ray the head's container log is `ray start`'s; the serve's is its own file.
        serve = probes.serve_log(node.inv, node.is_head)
        # NCCL's lines are in their own files, not in docker logs (engines/fabric.py):
        # head names each file ("==> host.pid.log <==") before its lines.
        nccl = F.Fact("nccl", f"head -n {probes.NCCL_FILE_LINES} -- "
                      f"{probes.nccl_files_glob(node.inv)} 2>/dev/null; true", F.text, sudo=True)
        return [F.command("engine", logs, F.raw, sudo=True), *([serve] if serve else []), nccl,
                F.command("download", ["cat", WorkPaths(node.inv.paths.work).log], F.raw),
                *guard_files(node)]

    def plan(self, facts: LogsFacts, node: NodeContext) -> list[Action]:
        kinds = list(facts.found())
        if not kinds:   # under --check the runner applies nothing: it reports would-change
            return []
        return [Action(f"save the {', '.join(kinds)} log(s) in {node.run.inputs.logs_dir}",
                       on_laptop=True, tag=SAVE_LOGS)]

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        facts = self.facts(node)   # the log as it is now, not as the plan saw it
        node.run.executor.done(self, node, actions[0], result=self._save(node, facts))

    def recheck(self, node: NodeContext) -> tuple[LogsFacts, list[str]]:
        # A running engine's log grows between two looks: what is checked is the copies.
        done = node.run.ledger.last(node.name, SAVE_LOGS, self.label)
        # what `_save` returned: the paths it wrote
        saved = tuple(p for p in done.result if isinstance(p, str)) \
            if done and isinstance(done.result, tuple) else ()
        copies = LogsFacts(engine=None, download=None, guard=None, incident=None, saved=saved)
        return copies, [f"{p} was not written" for p in saved if not Path(p).is_file()]

    def _save(self, node: NodeContext, found: LogsFacts) -> tuple[str, ...]:
        out = node.run.inputs.logs_dir
        if out is None:
            raise InputsSettled("collect-logs saves logs before its prepare settled where")
        out.mkdir(parents=True, exist_ok=True)
        saved: list[str] = []
        for kind, text in found.found().items():
            ext = "json" if kind == "incident" else "log"
            path = out / f"{node.name}-rank{node.rank}-{kind}.{ext}"
            path.write_text(redact(text))
            saved.append(str(path))
        return tuple(saved)

    def closing_lines(self, run: RunContext, all_facts: dict[str, LogsFacts]) -> list[str]:
        return [f"logs {'would be ' if run.check else ''}saved in {run.inputs.logs_dir}"]

    def detail(self, facts: LogsFacts, node: NodeContext) -> dict[str, JSON] | None:
        return {"saved": list(facts.saved)}


@dataclass(frozen=True)
class ContainerFacts:
    container: Container | None


class RemoveContainers(Step[ContainerFacts]):
    name = "teardown"
    runs_after_failures = True
    Facts = ContainerFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        return [probes.engine_container(node.inv)]

    def plan(self, facts: ContainerFacts, node: NodeContext) -> list[Action]:
        if not facts.container:
            return []
        return [cmd(f"remove container {node.inv.engine.container}",
                    *engines.docker_rm_argv(node.inv.engine.container), sudo=True, retry=True)]

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        super().apply(node, actions)
        logs = node.run.inputs.logs_dir  # set when collect-logs ran first, as in `down`
        node.state.record_teardown(str(logs) if logs else None)


def _live_pid(out: str, code: int) -> int | None:
    return parse_reading(out, code).pid


@dataclass(frozen=True)
class DownloaderFacts:
    downloader: int | None   # its pid, while it runs


class StopDownload(Step[DownloaderFacts]):
    """The detached downloader outlives k3deploy (by design: it survives the laptop); down
    stops it, so a torn-down spot node does not keep pulling 1.56 TB."""

    name = "stop-download"
    runs_after_failures = True
    Facts = DownloaderFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        # The live downloader's pid as every reader of its progress finds it (pids are reused)
        return [probes.download_reading(node.inv, "downloader", _live_pid)]

    def plan(self, facts: DownloaderFacts, node: NodeContext) -> list[Action]:
        pid = facts.downloader
        if pid is None:
            return []
        # SIGTERM lets it finish the file it is writing (partials resume later); KILL after 10 s.
        # The pid goes in as $1, never into the script's text.
        return [cmd(f"stop the downloader (pid {pid})", "sh", "-c",
                    detached.stop('"$1"', tenths=100), "stop", str(pid))]


@dataclass(frozen=True)
class WipeFacts:
    work: bool               # the k3deploy work dir is there
    weights: bool = False    # the model's HF cache is there; asked only where this node deletes it


class WipeWeights(Step[WipeFacts]):
    name = "wipe-weights"
    runs_after_failures = True
    Facts = WipeFacts

    def deletes_weights(self, node: NodeContext) -> bool:
        # A shared cache is one copy: only the head deletes it (and says so, closing_lines).
        return shared_hf.writer(node.inv, node.name)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        wanted = {"work": node.inv.paths.work}
        if self.deletes_weights(node):
            wanted["weights"] = node.inv.model_cache
        return [F.Fact(name, f"test -e {shlex.quote(path)}", F.exit_ok, sudo=True)
                for name, path in wanted.items()]

    def plan(self, facts: WipeFacts, node: NodeContext) -> list[Action]:
        weights = facts.weights and self.deletes_weights(node)
        present = ([node.inv.model_cache] if weights else []) + \
            ([node.inv.paths.work] if facts.work else [])
        what = "weights and k3deploy files" if weights else "k3deploy files"
        return [cmd(f"delete {what}", "rm", "-rf", "--", *present,
                    sudo=True, retry=True)] if present else []

    def closing_lines(self, run: RunContext, all_facts: dict[str, WipeFacts]) -> list[str]:
        """Printed only when every node ran the step (the runner): the head did too."""
        if not shared_hf.shared(run.inv):
            return []
        head, where = run.inv.head.name, run.inv.model_cache
        status = run.session.states[head].step(self.label).get("status")
        if status != Status.CHANGED:
            return [f"the shared copy {where} was already gone"]
        return [f"removed the shared copy {where} once, on the head {head}; the other nodes "
                "removed only their own k3deploy files"]
