"""download: the pinned revision on every node at once, verified file by file.

The node-side downloader (remote/fetch_weights.py) runs detached, so it survives the laptop
sleeping; re-running this step re-attaches to it or restarts it where it stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from k3deploy.node import run_settle
from k3deploy.node.output_tail import failure_tail
from k3deploy.core.errors import StepFailed
from k3deploy.core.jsonvalue import JSON
from k3deploy.cluster.fanout import PEER_STALL_SECONDS, peers_enabled
from k3deploy.core.log import get as get_log
from k3deploy.facts import download, record
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.remote import bundled, downloader_files
from k3deploy.remote import protocol
from k3deploy.remote.protocol import WorkPaths
from k3deploy.steps import node_files
from k3deploy.steps.weights import download_report, peers, shared_hf
from k3deploy.steps.weights.hub_restart import START, HeadRestartGrace, restartable, restarts, starts
from k3deploy.node import detached
from k3deploy.node import facts as F
from k3deploy.steps.base import Action, AnyFact, Step, cmd, settled, take_uploads, upload, wait

STATUS = bundled("weights_status.py")
HOLD = bundled("download_hold.py", ("protocol.py", "weights_status.py"))
NO_OP_VARS = ("HF_HUB_ENABLE_HF_TRANSFER",)


class DownloadParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    wait: bool = True                 # False: start (or leave running) and move on
    max_workers: int = Field(default=16, ge=1, le=64)
    poll_seconds: float = Field(default=1.0, gt=0)
    # A running download's look is held on the node this long (its end or its death ends the
    # hold at once), so the progress shown refreshes this often. Each look is a Python process
    # on the node: at 1 s they were a sixth of an 8-node testbed's CPU (scripts/bench --hub-cdn).
    progress_seconds: float = Field(default=5.0, gt=0)
    stall_seconds: float = Field(default=600, gt=0)   # no new byte for this long: fail
    # fan-out: a file's owner unreachable or without progress this long: that file from the Hub
    peer_stall_seconds: float = Field(default=PEER_STALL_SECONDS, gt=0)


class Paths(WorkPaths):
    def __init__(self, node: NodeContext):
        super().__init__(node.inv.paths.work)


@dataclass(frozen=True)
class DownloadFacts:
    # weights_status.py's document (observe refuses a download.Unreadable one)
    status: download.WeightsStatus
    token_file: bool                  # the HF token file is on the node
    log: str | None                   # the downloader log's tail; None when there is none
    node_files: dict[str, str]        # node_files.fact: {path: sha256} of the programs there
    # a shared cache's follower: the head's marker as this node reads it (shared_hf.FACT)
    shared_marker: str | None = None
    hold: bool | None = None          # a wait's look only: held until the downloader ended

    @property
    def error(self) -> str:
        """Why the downloader stopped, as its progress says."""
        found = self.status.progress.error if self.status.progress else None
        seen = self.status.downloader
        if found or seen is None or seen.state != protocol.STOPPED or seen.age is None:
            return found or "the downloader exited"
        # killed (SIGKILL, the OOM killer, a reboot): it never wrote its end
        return (f"the downloader died without a word: its progress, last written "
                f"{seen.age:.0f}s ago, still said {seen.said!r}")


class DownloadWeights(Step[DownloadFacts, DownloadParams]):
    name = "download"
    Params = DownloadParams
    Facts = DownloadFacts

    def default_label(self) -> str:
        return self.name if self.p.wait else "download-start"

    def gate(self, run: RunContext) -> None:
        run_settle.hub_reach(run)

    def prepare(self, run: RunContext) -> None:
        manifest = run_settle.manifest(run)
        run_settle.hf_token(run)
        for var in NO_OP_VARS:
            if os.environ.get(var) or var in run.inv.engine.env:
                get_log(step=self.name).warning(
                    "hf_transfer.ignored", var=var, msg="a no-op in huggingface_hub >= 1.0; "
                    "k3deploy downloads with ranged HTTP through huggingface_hub's client and "
                    "resumes partial shards itself")
        if run.inputs.manifest_json is None:
            doc = manifest.to_json(self.p.max_workers)
            spec = run.inv.download
            doc.update(retry_seconds=spec.retry_minutes * 60, connections=spec.connections,
                       segment_bytes=int(spec.segment_mib * (1 << 20)))
            run.settle(manifest_json=json.dumps(doc))
        if peers_enabled(run.inv):
            run_settle.peer_secret(run)

    def _manifest_json(self, node: NodeContext) -> str:
        """This node's manifest: with peers, each node's names its own share and its peers."""
        base = settled(node.run.inputs.manifest_json, "manifest_json")
        if not peers_enabled(node.inv):
            return base
        return peers.node_manifest(base, node, settled(node.run.inputs.manifest, "manifest"),
                                   self.p.peer_stall_seconds)

    def inputs(self, node: NodeContext) -> dict[str, object]:
        m = node.run.inputs.manifest
        return {"params": self.params, "sha": m.sha if m else None}

    def probes(self, node: NodeContext) -> list[AnyFact]:
        paths = Paths(node)
        extra = peers.PeerPaths(node.inv).status_args() if peers_enabled(node.inv) else []
        programs = [p for p, _ in downloader_files(paths.work)] + [peers.PeerPaths(node.inv).server]
        return [F.python("status", STATUS, [node.inv.paths.hf, paths.progress, paths.pid, *extra],
                         download.parse_status, stdin=self._manifest_json(node)),
                node_files.fact(programs),
                F.native("token_file", "exists", [paths.env], F.exit_ok),
                F.native("log", "tail", [40, paths.log], F.text),
                *([] if shared_hf.writer(node.inv, node.name) else shared_hf.marker_fact(node.inv))]

    def wait_probes(self, node: NodeContext) -> list[AnyFact]:
        """A wait's look is held on the node until the downloader ends, at most
        progress_seconds (never less than a poll): the end is seen at once, not up to a look
        later (the waiter paces looks by their start, so a held look is the whole pace)."""
        if not shared_hf.writer(node.inv, node.name):
            return []
        paths = Paths(node)
        hold = max(self.p.poll_seconds, self.p.progress_seconds)
        return [F.python("hold", HOLD, [paths.progress, paths.pid, f"{hold:g}"], F.exit_ok)]

    def observe(self, found: F.Found, node: NodeContext) -> DownloadFacts:
        seen = record(DownloadFacts, found)
        status: object = seen.status   # parse_status's answer, before it is known readable
        if isinstance(status, download.Unreadable):
            said = "\n".join(failure_tail(status.output)) or f"exit code {status.code}"
            raise StepFailed(node.name, f"could not read the download's status on the node: {said}",
                             step=self.name, hint="is python3 installed there (k3deploy check)?")
        return seen

    def plan(self, facts: DownloadFacts, node: NodeContext) -> list[Action]:
        if not shared_hf.writer(node.inv, node.name):
            return self._follower_plan(facts, node)
        actions = self._peer_actions(facts, node)
        if facts.status.complete:
            # The token is only needed to download: none stays behind, also when the download
            # finished while no k3deploy was waiting for it. Only the waiting step promises
            # that: download-start's detached downloader may finish (and leave the token)
            # between its apply and its re-check, which must not fail the step.
            if self.p.wait and facts.token_file:
                actions.append(cmd("remove the HF token file (download complete)", "rm", "-f",
                                   Paths(node).env, retry=True))
            return actions
        if facts.status.running:
            return actions + (self._waiting(node) if self.p.wait else [])
        restarting = starts(node.run, node.name) > 0
        if restarting and not self._may_restart(facts, node):
            # Started by this run and already dead (e.g. a shard that keeps failing its
            # sha256): a restart would fetch the same bad bytes again; report it instead.
            self._failed(node, facts)
        waiting = self._waiting(node, restarting) if self.p.wait else []
        started = _once(actions + self._start_actions(node))
        return node_files.changed_only(started, facts.node_files) + waiting

    def _may_restart(self, facts: DownloadFacts, node: NodeContext) -> bool:
        return restartable(facts.status, node.name, node.run)

    def _waiting(self, node: NodeContext, restarting: bool = False) -> list[Action]:
        # The token file goes once the last file is verified: the waiting step promises that.
        # Each start has its own wait: a restart's plan does not yield the wait of the one before.
        begun = restarts(node.run, node.name) + int(restarting)
        stall = max(self.p.stall_seconds, node.inv.download.retry_minutes * 60 + 60)
        return [wait("wait until every file is verified", f"every file verified (start {begun + 1})",
                     poll=self.p.poll_seconds, stall=stall,
                     hint=f"see {Paths(node).log} on the node; re-run to resume"),
                cmd("remove the HF token file (download complete)", "rm", "-f", Paths(node).env,
                    retry=True)]

    def _follower_plan(self, facts: DownloadFacts, node: NodeContext) -> list[Action]:
        """A node on the head's shared cache: never a downloader of its own; it waits until
        what it sees of the volume is every file verified (the same status the head reads)."""
        shared_hf.require_marker(facts, node, self.name)
        if facts.status.complete or not self.p.wait:
            return []
        head = node.inv.head.name
        return [wait(f"wait until {head} (the head) has every file verified on the shared "
                     "volume", "every file verified on the shared volume", poll=self.p.poll_seconds,
                     stall=self.p.stall_seconds, cluster=True,
                     hint=f"the head {head} downloads for every node; see its download log")]

    def check_cluster(self, all_facts: dict[str, DownloadFacts], run: RunContext, waited: float,
                      looked_at: float) -> None:
        """A follower's wait: the head's downloader, started by this run, died. One that died of
        the Hub alone is restarted by the head's own wait (within a poll or two): the followers
        keep waiting for it (hub_restart.HEAD_RESTART_GRACE seconds at most per death)."""
        head = run.inv.head.name
        facts = all_facts.get(head)
        if facts and not facts.status.complete and not facts.status.running \
                and self._started_before(head, run, looked_at):
            self._grace = getattr(self, "_grace", None) or HeadRestartGrace()
            if self._grace.waiting(facts.status, run):
                return
            raise StepFailed(head, f"the head's download into the shared cache failed: "
                             f"{facts.error} ({_unverified(facts)})\n"
                             + "\n".join(failure_tail(facts.log or "")), step=self.name,
                             hint=download_report.failed_hint(facts.error, run.inv.source))

    @staticmethod
    def _started_before(head: str, run: RunContext, looked_at: float) -> bool:
        """The head's start had returned when this look began. A follower's look runs beside
        the head's start; one begun before it (the head not running yet, every file missing)
        and judged after it would take the not-yet-started downloader for a dead one."""
        since = run.ledger.last(head, START)
        return since is not None and since.at < looked_at

    def progress(self, facts: DownloadFacts, node: NodeContext) -> int:
        status = facts.status
        if not shared_hf.writer(node.inv, node.name):
            return status.verified_bytes + status.partial_bytes
        if not status.complete and not status.running and not self._may_restart(facts, node):
            self._failed(node, facts)   # the downloader died while we waited
        return status.progress.bytes_done if status.progress else 0

    def show_progress(self, facts: DownloadFacts, node: NodeContext) -> None:
        if node.run.ui and facts.status.progress:
            node.run.ui.download(node.name, facts.status.progress)

    def _peer_actions(self, facts: DownloadFacts, node: NodeContext) -> list[Action]:
        """The node's peer server runs (fan-out on): before the downloader, which asks peers."""
        if not peers_enabled(node.inv):
            return []
        return node_files.changed_only(
            peers.server_actions(facts.status.peer, node, self._manifest_json(node),
                                 settled(node.run.inputs.peer_secret, "peer_secret"),
                                 Paths(node).progress),
            facts.node_files)

    def _start_actions(self, node: NodeContext) -> list[Action]:
        paths, token = Paths(node), node.run.inputs.token
        actions = [Action("create k3deploy work dir", ("mkdir", "-p", paths.work), retry=True),
                   *peers.downloader_uploads(paths.work),
                   upload("upload the pinned manifest", paths.manifest, self._manifest_json(node),
                          mode=0o644)]
        if token:
            actions.append(upload("upload the HF token (0600)", paths.env, f"HF_TOKEN={token}\n"))
        argv = ["python3", paths.fetcher, "--manifest", paths.manifest, "--hf-home",
                node.inv.paths.hf, "--progress", paths.progress]
        if token:
            argv += ["--env-file", paths.env]
        # A dead downloader's progress file still names its pid and error: the first poll
        # after this start would report that stale failure. So it goes, the pid file (read by
        # weights_status) names the new one at once, and the start waits (bounded) for the
        # new downloader's first progress.
        started = detached.start(argv, paths.log, paths.progress, tenths=150, pid_file=paths.pid)
        return actions + [Action("start the downloader, detached", ("sh", "-c", started),
                                 tag=START)]

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        """The plan's actions; after a wait, the plan made on its last look (a downloader
        that died of the Hub meanwhile gets its restart, bounded by MAX_HUB_RESTARTS). With
        nothing after it, that look is also the re-check (Step.recheck): ~1 s of an 8-node
        testbed's wait for the last file (scripts/bench)."""
        queue = list(actions)
        while queue:
            action, *uploads = take_uploads(queue)
            if action.tag == START and starts(node.run, node.name):
                get_log(step=self.name, node=node.name).warning(
                    "download.restart", attempt=starts(node.run, node.name),
                    msg="the downloader stopped on the Hub's errors; started again")
            if action.wait is not None:   # a wait is never one of take_uploads' uploads
                queue = self.plan(self.run_wait(node, action), node)
            else:
                self.run_action(node, action, *uploads)

    def _failed(self, node: NodeContext, facts: DownloadFacts) -> None:
        # The log is mostly "verified" lines; the reason is in its error lines or a traceback.
        tail = failure_tail(facts.log or "")
        progress = facts.status.progress
        if progress and progress.disk:
            raise download_report.disk_error(node.name, self.name, progress.disk, node.inv.source)
        raise StepFailed(node.name, f"download failed: {facts.error} ({_unverified(facts)})\n"
                         + "\n".join(tail), step=self.name,
                         hint=download_report.failed_hint(facts.error, node.inv.source))

    def detail(self, facts: DownloadFacts, node: NodeContext) -> dict[str, JSON] | None:
        m = node.run.inputs.manifest
        return download_report.Detail.of(facts.status, m.sha if m else None).document()

    def closing_lines(self, run: RunContext, all_facts: dict[str, DownloadFacts]) -> list[str]:
        if not self.p.wait or run.inputs.manifest is None:
            return []
        return download_report.closing_lines(run, download_report.kept(run, self.label))


def _unverified(facts: DownloadFacts) -> str:
    return f"{facts.status.missing_count} of {facts.status.total} files not verified"


def _once(actions: list[Action]) -> list[Action]:
    """Drop repeats (the peer server and the downloader both upload fetch_weights.py)."""
    seen, out = set(), []
    for action in actions:
        key = (action.description, action.upload_to, action.argv)
        if key not in seen:
            seen.add(key)
            out.append(action)
    return out
