"""stop-peer-server: `down` stops the peer server the download step started (peers.py)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.steps.base import Action, AnyFact, Step, cmd
from k3deploy.steps.weights.peers import PeerPaths, stop_script


@dataclass(frozen=True)
class StopPeerFacts:
    running: bool   # the pid file's process is the peer server


class StopPeerServer(Step[StopPeerFacts]):
    name = "stop-peer-server"
    runs_after_failures = True
    Facts = StopPeerFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        paths = PeerPaths(node.inv)
        running = (f"p=$(cat {shlex.quote(paths.pid)}) && grep -q peer_server "
                   "/proc/$p/cmdline")
        return [F.Fact("running", running, F.exit_ok)]

    def plan(self, facts: StopPeerFacts, node: NodeContext) -> list[Action]:
        if not facts.running:
            return []
        return [cmd("stop the peer server", "sh", "-c", stop_script(PeerPaths(node.inv)),
                    retry=True)]
