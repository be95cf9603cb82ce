"""SGLang start-up as the real releases print and do it, on one 2-node testbed (profiles
sglang-0.5.16, sglang-0.5.4, slow-engine-start; scripts/tb/standins/README.md "Profiles"):

- 0.5.16: a load three times the wait's stall limit (the real ratio: 90 minutes against
  1800 s) that shows only in the ranks' CPU time and reads: GPU memory flat from `Load weight
  begin.`, the bar (global rank 0's only) in `docker logs` only at its close, the worker
  silent; it reaches a verified endpoint. `up` again changes nothing; verify; down. Then a
  rank frozen mid-load (SIGSTOP) fails the wait within the stall limit + 60 s, named.
- 0.5.4: the old safetensors bar; up, up again, verify, down.
- slow-engine-start: the engine imports for 20 s, then rejects a value its parser accepted
  (server_args.py check_server_args); `up` fails naming the rank and quoting that line.

The phases share the testbed: each engine start reads the node's node.json afresh.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import threading
import time

import pytest
import yaml
from failure_report import k3_argv, k3_env, run, said
from tbfixture import testbed

from k3run import REPO, changing_calls

pytestmark = pytest.mark.integration

LOAD, FORM, STALL = 30.0, 10.0, 10.0   # the load lasts 3x each limit


def set_node(tb, **values) -> None:
    """Settings every engine start on every node reads (node.json top-level keys)."""
    script = ("import json, sys; p='/run/k3tb/node.json'; d=json.load(open(p)); "
              "d.update(json.loads(sys.argv[1])); json.dump(d, open(p, 'w'))")
    for node in tb.nodes:
        assert tb.ssh(node, ["python3", "-c", script, json.dumps(values)]).returncode == 0


def playbook(tmp_path, **wait):
    """bringup.yaml with the wait step's limits set (the step's `with:`)."""
    doc = yaml.safe_load((REPO / "k3deploy" / "playbooks" / "bringup.yaml").read_text())
    doc["steps"] = [{"step": "wait", "with": wait} if s == "wait" else s for s in doc["steps"]]
    path = tmp_path / "bringup-limits.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def starts(tb) -> int:
    return sum(1 for call in changing_calls(tb.stats()) if call[:2] == ["docker", "run"])


def engine_log(tb, node: str) -> str:
    proc = tb.ssh(node, "docker logs k3 2>&1")
    return proc.stdout


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    with testbed(tmp_path_factory.mktemp("sglang"), nodes=2, gpu="b300",
                 load_seconds=LOAD) as bed:
        yield bed


@pytest.fixture(autouse=True)
def left_down(tb):
    """Each test ends with the group down, passed or failed: a failure that left an engine
    up would have the next test's `up` find it serving and start nothing."""
    yield
    if any(tb.ssh(n, "docker ps -q").stdout.strip() for n in tb.nodes):
        tb.fault("unwedge-engine", "node1", check=False)
        run("down", "-i", str(tb.inventory))


def up_again_verify_down(tb):
    before = starts(tb)
    again = run("up", "-i", str(tb.inventory))
    assert again.returncode == 0, said(again)
    assert starts(tb) == before, "a second up started an engine"
    verify = run("verify", "-i", str(tb.inventory))
    assert verify.returncode == 0, said(verify)
    down = run("down", "-i", str(tb.inventory))
    assert down.returncode == 0, said(down)


def real_engine(tb, node: str) -> bool:
    """The node's engine container is the real launch's (not the dry-fire's dummy weights)."""
    cmd = tb.ssh(node, "docker inspect -f '{{json .Config.Cmd}}' k3 2>/dev/null").stdout
    return bool(cmd.strip()) and "dummy" not in cmd


def start_run(tmp_path, tb) -> subprocess.Popen:
    """The bring-up with the wait's limits, in the background (killed by the caller)."""
    book = playbook(tmp_path, form_timeout=FORM, stall_seconds=STALL, poll_seconds=0.5)
    return subprocess.Popen(k3_argv("run", str(book), "-i", str(tb.inventory)), cwd=REPO,
                            env=k3_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finished(proc: subprocess.Popen, timeout: float = 400) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the run did not end within {timeout:g}s:\n{out}") from None
    return proc.returncode, out


# A sampler that runs on the node itself, every ~0.2 s, until the worker's load ends: from the
# laptop, each sample was an SSH login, and on a loaded 2-core CI machine those took so long
# that the 30 s load got one sample (two SSH round trips one after the other, then at once:
# both failed so). Each sample: the node's clock, the engine's GPU memory on node1, and its
# log, base64 on one line. WORKER waits for a real (not dummy) engine's `Load weight begin.`.
SAMPLER = r"""
end=$(( $(date +%s) + 400 ))
while [ "$(date +%s)" -lt "$end" ]; do
  cmd=$(docker inspect -f '{{json .Config.Cmd}}' k3 2>/dev/null)
  log=$(docker logs k3 2>&1)
  case "$cmd" in ''|*dummy*) sleep 0.1; continue;; esac
  case "$log" in *"Load weight begin."*) ;; *) [ -n "$HEAD" ] || { sleep 0.1; continue; };; esac
  mem=$( [ -n "$HEAD" ] || nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
  echo "#S $(date +%s.%N) $(printf '%s' "$mem" | tr '\n' ' ') $(printf '%s' "$log" | base64 -w0)"
  [ -e /tmp/k3-load-ended ] && exit 0
  case "$log" in *"Load weight end."*) [ -n "$HEAD" ] || { touch /tmp/k3-load-ended; exit 0; };; esac
  sleep 0.2
done
exit 3
"""


def _samples(text: str) -> list[tuple[float, str, str]]:
    """(time, memory, log) of each #S line a node's sampler printed."""
    out = []
    for line in text.splitlines():
        if line.startswith("#S "):
            parts = line.split(" ")
            stamp, encoded, memory = float(parts[1]), parts[-1], " ".join(parts[2:-1]).strip()
            out.append((stamp, memory, base64.b64decode(encoded).decode(errors="replace")))
    return out


def watch_the_load(tb) -> list[tuple[str, str, str]]:
    """(head's log, worker's log, worker's GPU memory) through the real load, from the
    worker's `Load weight begin.` to its `Load weight end.`, sampled on the nodes themselves;
    each worker sample paired with the head's latest sample taken no later than it."""
    for node in tb.nodes:
        tb.ssh(node, "rm -f /tmp/k3-load-ended")
    results: dict[str, str] = {}

    def sample(node: str, head: bool) -> None:
        env = "HEAD=1 " if head else ""
        results[node] = tb.ssh(node, f"{env}sh -c {shlex.quote(SAMPLER)}", timeout=460).stdout

    # node0's sampler ends when node1's does: their /tmp differ (each node its own), so node1
    # tells node0 over SSH once its load ended
    threads = [threading.Thread(target=sample, args=("node0", True), daemon=True),
               threading.Thread(target=sample, args=("node1", False), daemon=True)]
    for t in threads:
        t.start()
    threads[1].join(460)
    tb.ssh("node0", "touch /tmp/k3-load-ended")
    threads[0].join(60)
    heads, workers = _samples(results.get("node0", "")), _samples(results.get("node1", ""))
    if not workers or "Load weight end." not in workers[-1][2]:
        raise AssertionError(f"node1 never finished its load; {len(workers)} samples")
    paired = []
    for stamp, memory, log in workers:
        before = [h for h in heads if h[0] <= stamp]
        paired.append((before[-1][2] if before else "", log, memory))
    return paired


@pytest.mark.timeout(600)   # a bring-up with a 30 s load, up again, verify, down
def test_0516_long_silent_load_passes_on_cpu_and_reads(tb, tmp_path):
    started = time.monotonic()
    proc = start_run(tmp_path, tb)
    try:
        samples = watch_the_load(tb)
        code, out = finished(proc)
    finally:
        proc.kill()
    assert code == 0, out
    assert time.monotonic() - started > LOAD + FORM   # the load outlived every limit
    # The first samples may predate the allocation just after the line (as on a real GPU; on a
    # loaded machine more than one): from the first that shows the full figure, it stays.
    loading = [s for s in samples if "Load weight end." not in s[1]]
    full = next((i for i, s in enumerate(loading) if s[2] == loading[-1][2]), len(loading))
    loading = loading[full:]
    assert len(loading) >= 5, len(loading)
    # GPU memory full from the load's start; no bar in the head's log until it closed; the
    # worker printed nothing after its `Load weight begin.`.
    assert len({s[2] for s in loading}) == 1 and int(loading[0][2].split()[0]) > 0, loading
    head_loading = [s[0] for s in loading if "Load weight end." not in s[0]]
    assert len(head_loading) >= 3 and not any("loading shards" in h for h in head_loading)
    assert len({s[1] for s in loading}) == 1
    head, worker = engine_log(tb, "node0"), engine_log(tb, "node1")
    assert "Multi-thread loading shards: 100% Completed | 96/96" in head
    assert "loading shards" not in worker and "checkpoint shards" not in worker
    # What the user saw instead: each rank's reads and CPU, a new line every stall / 5 s.
    real = out[out.index("changed node0/launch"):]          # not the dry-fire's wait
    views = [line.strip() for line in real.splitlines() if "engine processes: rank 0" in line]
    assert len(set(views)) >= 5, out
    # Each rank's bytes read grew from view to view while it loaded (the shards are read).
    for rank in (0, 1):
        read = [float(m.group(1)) for v in views
                if (m := re.search(rf"rank {rank} read ([\d.]+) MB \([\d.]+ MB/s\), CPU "
                                   r"[\d.]+ cores busy", v))]
        assert len(set(read)) >= 5 and read == sorted(read), (rank, views)
    up_again_verify_down(tb)


@pytest.mark.timeout(600)
def test_0516_rank_stopped_mid_load_is_named_within_the_stall_limit(tb, tmp_path):
    proc = start_run(tmp_path, tb)
    try:
        deadline = time.monotonic() + 400
        while not (real_engine(tb, "node1") and "Load weight begin." in engine_log(tb, "node1")):
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.5)
        time.sleep(3.0)                       # well into its load (30 s)
        stopped = time.monotonic()            # the SIGSTOP lands during the fault's ssh call
        tb.fault("wedge-engine", "node1")
        code, out = finished(proc)
        took = time.monotonic() - stopped
    finally:
        proc.kill()
        tb.fault("unwedge-engine", "node1", check=False)
    assert code == 1, out
    # The wait stamps a look before its facts arrive, so the last look that saw the rank move
    # may be stamped up to one look's latency before the counters it read (a loaded 2-core
    # machine: up to ~1.5 s): the stall as the wait measures it can end that much early.
    assert STALL - 2.0 < took < STALL + 60, (took, out)
    assert "[node1/wait] rank 1 is stuck in its weight load: its engine processes used no CPU " \
        "and read nothing for" in out, out
    assert "Load weight end." not in engine_log(tb, "node1")
    down = run("down", "-i", str(tb.inventory))
    assert down.returncode == 0, said(down)


def test_054_old_loader_line_up_again_verify_down(tb):
    set_node(tb, sglang_version="0.5.4", engine_load_seconds=1.0)
    proc = run("up", "-i", str(tb.inventory))
    assert proc.returncode == 0, said(proc)
    assert "Loading safetensors checkpoint shards: 100% Completed | 96/96" in \
        engine_log(tb, "node0")
    up_again_verify_down(tb)


def test_slow_start_engine_error_names_the_rank_and_its_line(tb):
    set_node(tb, sglang_version="0.5.16", engine_import_seconds=20.0)
    text = tb.inventory.read_text().replace("  args: {}", "  args: {dp-size: 2}")
    assert text != tb.inventory.read_text()
    tb.inventory.write_text(text)
    line = ("rank 0 engine exited (1) during start-up: AssertionError: "
            "multi-node data parallel is not supported unless dp attention!")
    # The dry-fire (dummy weights, during the download) meets it first; without the dry-fire
    # the real launch does. Either way only after the engine's imports.
    for flags, where in (([], "[node0/dry-fire-launch] dry-fire (dummy weights): "),
                         (["--no-dry-fire"], "[node0/launch] ")):
        started = time.monotonic()
        proc = run("up", "-i", str(tb.inventory), *flags)
        took = time.monotonic() - started
        assert proc.returncode == 1, said(proc)
        assert took > 20, (took, said(proc))
        assert where + line in said(proc), said(proc)
