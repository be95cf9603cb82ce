"""Failure modes met during a bring-up, each on a 4-node testbed of its own: a corrupt shard on
the Hub (the download fails naming it, the next run fetches only it) and a rank that crashes
while loading (wait fails fast with its log)."""

from __future__ import annotations

import re

import pytest
import hub_bytes
from failure_report import run, said, set_fault, summary
from tbfixture import testbed

from k3run import changing_calls, state

from k3deploy.engines.dry_fire import DRY_FIRE_LABEL

pytestmark = pytest.mark.integration

CORRUPT = "model-00007-of-00096.safetensors"


# -- 5. a corrupt shard on the Hub -----------------------------------------------------------

def test_corrupt_shard_fails_the_download_then_only_it_is_fetched_again(tmp_path):
    with testbed(tmp_path, nodes=4) as tb:
        tb.fault("hub-corrupt", CORRUPT)
        proc = run("up", "-i", str(tb.inventory))
        assert proc.returncode == 1, said(proc)
        text = said(proc)
        for node in tb.nodes:
            assert f"[{node}/download] download failed: {CORRUPT}: sha256 mismatch after 3 " \
                   "downloads" in text, text
        assert "served a file whose checksum does not match" in text  # what to do
        # The engine was never launched on the real weights; the dry-fire (dummy weights,
        # during the download) may have run.
        runs = [a for a in changing_calls(tb.stats()) if a[:2] == ["docker", "run"]]
        assert all(f"{DRY_FIRE_LABEL}=1" in a for a in runs), runs
        hub = tb.stats()["hub"]["by_node"]
        size = hub_bytes.sizes(tb)[CORRUPT]
        for node in tb.nodes:
            # Bounded: the downloader takes the whole file 3 times, and a run never restarts it
            # after (a file is fetched as ranges: an idle connection may take over the tail of
            # one, so requests are not attempts; bytes are).
            got = hub[node]["files"][CORRUPT]["bytes"]
            assert 3 * size <= got < 4 * size, (hub[node]["files"][CORRUPT], size)

        tb.fault("hub-heal")
        before = tb.stats()["hub"]["by_node"]
        again = run("up", "-i", str(tb.inventory))
        assert again.returncode == 0, said(again)
        after = tb.stats()["hub"]["by_node"]
        fetched = {node: {f for f, v in after[node]["files"].items()
                          if v["gets"] != before[node]["files"].get(f, {}).get("gets", 0)}
                   for node in tb.nodes}
        # Fan-out: the file's owner fetches it from the Hub once more, the others from peers.
        assert sorted(fetched.values(), key=len) == [set(), set(), set(), {CORRUPT}], fetched


# -- 8. a rank that crashes while loading ----------------------------------------------------

def test_crashing_rank_fails_wait_fast_with_its_log(tmp_path):
    # Every rank loads for `load` s; node1's dies `crash` s after its start. The crash must come
    # after launch's check (1 s after each start) and wait's first look at the containers: a
    # crash before either is reported by that step, without this message. A stand-in rank
    # whose peer died hangs (as a real one does), so node1 is the only container that exits.
    load, crash = 90, 10
    with testbed(tmp_path, nodes=4, load_seconds=load) as tb:
        set_fault(tb, "node1", {"crash_after_seconds": crash})
        proc = run("up", "-i", str(tb.inventory), timeout=200)
        assert proc.returncode == 1, said(proc)
        text = said(proc)
        assert re.search(r"\[node1/wait\] rank 1 container exited \(1\) before the endpoint "
                         r"was up; its error: RuntimeError: CUDA error: an illegal memory "
                         r"access was encountered; the end of its log", text), text
        assert "CUDA error: an illegal memory access" in text  # the log tail
        assert "[node0/wait] rank 0" not in text and "exited after it" not in text  # no other rank
        assert summary(text)["node1"]["wait"] == "failed"
        assert "k3deploy logs -i" in text
        # Fast: wait's own time, not the whole `up` (slow on a loaded machine): a wait that
        # missed the exit would sit out the load (90 s), or the health timeout after it.
        record = state(tb.inventory, "node0")["steps"]["wait"]
        assert record["finished"] - record["started"] < load - crash, record
