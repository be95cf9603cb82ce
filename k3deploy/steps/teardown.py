"""Teardown: first the logs (weights on local NVMe vanish with a spot node, logs too), then
the containers, optionally the weights. Runs on every node that answers, whatever failed
before; unreachable nodes are reported (exit 3)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from k3deploy import apikey, engines, guardcfg
from k3deploy import facts as F
from k3deploy.redact import redact
from k3deploy.state import atomic_write_json
from k3deploy.steps import probes
from k3deploy.steps.base import Step, cmd
from k3deploy.steps.preflight import model_cache_dir


def logs_dir(run) -> Path:
    if "logs_dir" not in run.shared:
        out = run.option("out_dir") or run.session.state_dir / "logs" / time.strftime("%Y%m%d-%H%M%S")
        run.shared["logs_dir"] = Path(out)
    return run.shared["logs_dir"]


def guard_files(node) -> dict[str, str | None]:
    """The guard's own log and its incident record, when there are any (one round trip)."""
    paths = guardcfg.node_paths(node.inv)
    wanted = {"guard": paths["log"], "incident": paths["incident"]}
    return F.gather(node.conn, [F.Fact(kind, f"cat {shlex.quote(path)}", F.text, sudo=True)
                                for kind, path in wanted.items()])


class CollectLogs(Step):
    name = "collect-logs"
    summary = "save each node's engine log locally, named by node and rank"
    read_only = True
    runs_after_failures = True

    def prepare(self, run):
        # Registering the key makes redact() mask it: SGLang prints server_args, key included.
        apikey.load_or_create(run.inv, run.session.state_dir, create=False)
        guardcfg.load_or_create_secret(run.session.state_dir, create=False)

    def facts(self, node):
        name = node.inv.engine.container
        logs = node.conn.run(engines.docker_logs_argv(name), sudo=True, check=False, step=self.name)
        dl = node.conn.run(["cat", f"{node.inv.paths.work}/download.log"], check=False)
        found = {"engine": logs.output if logs.ok else None, "download": dl.stdout if dl.ok else None,
                 **guard_files(node)}
        if not node.run.check:
            found["saved"] = self._save(node, found)
        return found

    def _save(self, node, found) -> list[str]:
        out = logs_dir(node.run)
        out.mkdir(parents=True, exist_ok=True)
        saved = []
        for kind, text in found.items():
            if text:
                ext = "json" if kind == "incident" else "log"
                path = out / f"{node.name}-rank{node.rank}-{kind}.{ext}"
                path.write_text(redact(text))
                saved.append(str(path))
        return saved

    def closing_lines(self, run):
        return [f"logs saved in {logs_dir(run)}"]

    def detail(self, facts, node):
        return {"saved": facts.get("saved", [])}


class RemoveContainers(Step):
    name = "teardown"
    summary = "remove the engine container"
    runs_after_failures = True

    def facts(self, node):
        found = F.gather(node.conn, [probes.container(node.inv.engine.container)], step=self.name)
        return {"container": probes.container_summary(found["container"])}

    def plan(self, facts, node):
        if not facts["container"]:
            return []
        return [cmd(f"remove container {node.inv.engine.container}",
                    *engines.docker_rm_argv(node.inv.engine.container), sudo=True, retry=True)]


class WipeWeights(Step):
    name = "wipe-weights"
    summary = "delete the downloaded weights and k3deploy's files on the node"
    runs_after_failures = True

    def targets(self, node) -> list[str]:
        return [model_cache_dir(node.inv), node.inv.paths.work]

    def facts(self, node):
        checks = [F.Fact(f"exists{i}", f"test -e {shlex.quote(p)}", F.exit_ok, sudo=True)
                  for i, p in enumerate(self.targets(node))]
        return F.gather(node.conn, checks, step=self.name)

    def plan(self, facts, node):
        present = [p for i, p in enumerate(self.targets(node)) if facts[f"exists{i}"]]
        return [cmd("delete weights and k3deploy files", "rm", "-rf", "--", *present,
                    sudo=True, retry=True)] if present else []
