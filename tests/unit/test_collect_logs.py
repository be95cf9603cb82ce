"""collect-logs: one logs folder per run, settled on the laptop before the nodes are looked at,
and `--check` reports would-change (saving nothing) where a real run saves logs."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from k3deploy.cluster import inventory
from k3deploy.core.status import Status
from k3deploy.node.context import RunContext
from k3deploy.node.facts import MARK
from k3deploy.run.runner import Runner
from k3deploy.steps.teardown import SAVE_LOGS, CollectLogs
from tests.unit.fakes import FakeConn, FakeSession
from tests.unit.invdata import four_nodes


class Logs(FakeConn):
    """Answers every fact of a batch: the engine log has text, the other files are absent."""

    def respond(self, command):
        if MARK not in command:
            return 0, ""
        names = re.findall(rf"{MARK}begin (\S+);", command)
        return 0, "".join(f"{MARK}begin {n}\n{'engine said ' + self.name if n.endswith('engine') else ''}"
                          f"\n{MARK}end {0 if n.endswith('engine') else 1}\n" for n in names)


def _run(tmp_path, check: bool, clock):
    inv = inventory.parse(four_nodes())
    conns = {n.name: Logs(n.name) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns), check=check)
    return Runner(run, [CollectLogs()]).execute(), run


@pytest.fixture
def ticking_clock(monkeypatch):
    """Every read of the clock a second later: a folder picked per node would differ."""
    from k3deploy.node import run_settle
    ticks = iter(range(10**6))
    monkeypatch.setattr(run_settle, "time", SimpleNamespace(
        strftime=lambda fmt: f"20260101-0000{next(ticks):02d}"))


def test_one_folder_for_every_node_picked_once(tmp_path, ticking_clock):
    report, run = _run(tmp_path, False, ticking_clock)
    assert {per["collect-logs"].status for per in report.results.values()} == {Status.OK}
    folder = run.inputs.logs_dir
    saved = sorted(p.name for p in folder.iterdir())
    assert saved == [f"node{i}-rank{i}-engine.log" for i in range(4)]
    assert [p for p in (tmp_path / "state").rglob("2026*") if p.is_dir()] == [folder]
    assert (folder / "node2-rank2-engine.log").read_text() == "engine said node2\n"


def test_check_reports_would_change_and_writes_nothing(tmp_path, ticking_clock):
    report, run = _run(tmp_path, True, ticking_clock)
    results = [per["collect-logs"] for per in report.results.values()]
    assert {r.status for r in results} == {Status.WOULD_CHANGE}
    assert all(r.actions == [f"save the engine log(s) in {run.inputs.logs_dir}"] for r in results)
    assert not run.inputs.logs_dir.exists()
    assert all(run.ledger.last(n.name, SAVE_LOGS) is None for n in run.inv.nodes)


class LogsWithNccl(FakeConn):
    """The engine log and, on node1 only, NCCL's debug files as `head` prints several."""

    def respond(self, command):
        if MARK not in command:
            return 0, ""
        texts = {"engine": "engine said " + self.name,
                 "nccl": ("==> /mnt/nvme/.k3deploy/nccl-logs/node1.77.log <==\n"
                          "node1:77:77 [0] NCCL INFO Using network IB") if self.name == "node1" else ""}
        names = re.findall(rf"{MARK}begin (\S+);", command)
        return 0, "".join(f"{MARK}begin {n}\n{texts.get(n.rsplit('.', 1)[-1], '')}\n"
                          f"{MARK}end {0 if n.rsplit('.', 1)[-1] in texts else 1}\n" for n in names)


def test_the_nccl_debug_files_are_saved_beside_the_engine_log(tmp_path, ticking_clock):
    """docker logs holds none of NCCL's lines (they go to NCCL_DEBUG_FILE): `logs` and `down`
    save the node's NCCL files as their own kind; a node without any saves none."""
    inv = inventory.parse(four_nodes())
    conns = {n.name: LogsWithNccl(n.name) for n in inv.nodes}
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path, conns), check=False)
    Runner(run, [CollectLogs()]).execute()
    saved = sorted(p.name for p in run.inputs.logs_dir.iterdir())
    assert "node1-rank1-nccl.log" in saved and "node2-rank2-nccl.log" not in saved
    assert "Using network IB" in (run.inputs.logs_dir / "node1-rank1-nccl.log").read_text()
