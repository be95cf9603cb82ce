"""The kimi-k3 cookbook image's first multi-node decode and SGLang's scheduler watchdog
(standins/engine/decode_watchdog.py, sgl-project/sglang#39568) on loopback: two ranks serve a
short chat, then the issue's load (32 requests of 8192 prompt tokens) hangs its first decode
until every rank's watchdog ends it with SGLang's lines and exit 137; with the reporter's
working flags the same load answers. No root needed (fixtures in standin_procs.py)."""
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from standin_procs import (CHAT, free_port, http, log_of, make_node, sglang_cmd, wait_exit,
                           wait_health)

SCALE = 0.01   # SGLang's 300 s watchdog fires by 4.5 s
LOAD = {"model": "moonshotai/Kimi-K3", "max_tokens": 16,
        "messages": [{"role": "user", "content": " ".join(["hello"] * 8192)}]}
FIX = ("--disable-flashinfer-autotune", "--watchdog-timeout", "3600")


def _two_ranks(cluster, tmp_path, *flags):
    port, dist = free_port(), free_port()
    runs = [make_node(tmp_path, f"node{r}") for r in range(2)]
    for run in runs:
        node = json.loads((run / "node.json").read_text())
        node.update(first_decode_hang="lmsysorg/sglang:kimi-k3", watchdog_time_scale=SCALE)
        (run / "node.json").write_text(json.dumps(node))

    def cmd(rank, serve_port):
        return sglang_cmd(serve_port, "--nnodes", "2", "--node-rank", str(rank),
                          "--dist-init-addr", f"127.0.0.1:{dist}", *flags, tp=16)
    worker = cluster.start(runs[1], cmd(1, free_port()))
    head = cluster.start(runs[0], cmd(0, port), env={"SGLANG_HOST_IP": "127.0.0.1"})
    wait_health(port, head)
    return port, head, worker


def _load(port):
    with ThreadPoolExecutor(32) as pool:
        return list(pool.map(lambda _: _answer(port), range(32)))


def _answer(port):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(LOAD).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:   # the server ended mid-request
        return None


def test_the_first_decode_of_the_issues_load_outlives_the_watchdog(cluster, tmp_path):
    port, head, worker = _two_ranks(cluster, tmp_path)
    assert http(port, "/v1/chat/completions", CHAT)[0] == 200   # a short request answers
    started = time.monotonic()
    answers = _load(port)
    print(f"load ended {time.monotonic() - started:.1f}s after it was sent")
    assert set(answers) <= {None, 500}, answers
    assert wait_exit(head, 30) == 137 and wait_exit(worker, 30) == 137
    head_log, worker_log = log_of(head), log_of(worker)
    for log, first in ((head_log, 0), (worker_log, 8)):
        assert f" TP{first}] Scheduler debug info:\nscheduler.cur_batch_for_debug.batch_size()=32" \
            in log, log[-2000:]
        assert (f" TP{first + 7}] Scheduler watchdog timeout (self.watchdog_timeout=300, "
                "self.soft=False)") in log
        assert "All pyspy dump attempts failed for PID" in log
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." \
        in head_log
    assert "Received sigquit from a child process. It usually means the child failed." \
        in worker_log


def test_the_working_launch_decodes_the_same_load(cluster, tmp_path):
    port, head, worker = _two_ranks(cluster, tmp_path, *FIX)
    assert _load(port) == [200] * 32
    assert head.poll() is None and worker.poll() is None
    assert "watchdog timeout" not in log_of(head)
