"""Ctrl-C and SIGTERM end a run within 5 s in any step: the state files record `interrupted`
and the message says what keeps running on the nodes and how to resume or stop it."""

import signal
import time

import pytest
from tbfixture import testbed

from k3run import k3, k3_bg, out, state

pytestmark = pytest.mark.integration

# bytes/s per connection and per node: the download takes minutes. The node link matters: with
# fan-out each node fetches only its share from the Hub, and at 40 kB/s per connection alone the
# 4 nodes had every file within ~20 s, before `down` came to stop their downloaders.
SLOW_HUB = {"hub_rate": 40_000, "hub_node_rate": 100_000}
# From the signal to the exit: a run stops within interrupt.GRACE_SECONDS (4 s) at the latest
# when a thread hangs; the rest is room for a loaded machine. Each step interrupted here would
# otherwise run for minutes (a slow download, a 300 s pull or load).
STOP_BOUND = 12


def wait_for_step(proc, inv, nodes, step: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            if all(state(inv, n)["steps"].get(step, {}).get("status") == "running" for n in nodes):
                return
        except (FileNotFoundError, ValueError, IndexError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"{step} never ran: {proc.communicate()[0]}")


def interrupt(proc, signum) -> tuple[float, str]:
    # Not a wait for a condition: the step is running already; a moment later the signal most
    # likely lands in its poll loop, the usual case. Any moment must work, so nothing depends on it.
    time.sleep(1.0)
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        output, _ = proc.communicate(timeout=30)
    except BaseException:
        proc.kill()
        raise
    return time.monotonic() - sent, output


def downloader_pids(tb, node) -> str:
    return tb.ssh(node, "cat /proc/$(cat /mnt/nvme/.k3deploy/download.pid)/cmdline 2>/dev/null "
                  "| tr '\\0' ' '").stdout


def test_ctrl_c_during_download_exits_130_and_leaves_the_downloader(tmp_path):
    with testbed(tmp_path, nodes=4, **SLOW_HUB) as tb:
        proc = k3_bg("up", "-i", str(tb.inventory))
        wait_for_step(proc, tb.inventory, tb.nodes, "download")
        took, output = interrupt(proc, signal.SIGINT)
        assert proc.returncode == 130, output
        assert took < STOP_BOUND, f"{took:.1f}s\n{output}"
        assert "interrupted by SIGINT" in output
        assert "still running on node0, node1, node2, node3: the detached weight downloader" \
            in output, output
        assert "k3deploy run resume-download -i" in output and "k3deploy down -i" in output
        for node in tb.nodes:
            assert state(tb.inventory, node)["steps"]["download"]["status"] == "interrupted"
            assert "fetch_weights" in downloader_pids(tb, node)  # it keeps going, detached

        down = k3("down", "-i", str(tb.inventory))  # stops the downloader as the message says
        assert down.returncode == 0, out(down)
        for node in tb.nodes:
            assert "fetch_weights" not in downloader_pids(tb, node)
            assert state(tb.inventory, node)["steps"]["stop-download"]["status"] == "changed"
        again = k3("down", "-i", str(tb.inventory))
        assert again.returncode == 0 and "changed" not in out(again), out(again)


def test_sigterm_while_waiting_for_the_engine_exits_143(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="sglang",
                 load_seconds=300) as tb:
        proc = k3_bg("up", "-i", str(tb.inventory))
        wait_for_step(proc, tb.inventory, tb.nodes[:1], "wait", timeout=200)
        took, output = interrupt(proc, signal.SIGTERM)
        assert proc.returncode == 143, output
        assert took < STOP_BOUND, f"{took:.1f}s\n{output}"
        assert "interrupted by SIGTERM" in output and "stopped during wait" in output
        assert "the engine containers keep running" in output
        assert "detached weight downloader" not in output  # the download had finished
        assert state(tb.inventory, "node0")["steps"]["wait"]["status"] == "interrupted"
        down = k3("down", "-i", str(tb.inventory))
        assert down.returncode == 0, out(down)


def test_ctrl_c_during_the_image_pull(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="sglang",
                 pull_seconds=300) as tb:
        proc = k3_bg("up", "-i", str(tb.inventory))
        wait_for_step(proc, tb.inventory, tb.nodes, "image")
        took, output = interrupt(proc, signal.SIGINT)
        assert proc.returncode == 130, output
        assert took < STOP_BOUND, f"{took:.1f}s\n{output}"
        assert "stopped during image" in output and "docker pull" in output
        assert state(tb.inventory, "node0")["steps"]["image"]["status"] == "interrupted"
