"""The guide's failure modes on a 4x8 H100 testbed, each as the user meets it: `k3deploy` run as
a subprocess; the exit code and what it prints must name the node, the step or check, and
what to do. Every test leaves its cluster as it found it (or has its own)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import string
import subprocess
import sys
import time

import pytest
from tbfixture import testbed

from k3run import CLI_TIMEOUT, REPO, bounded_run, changing_calls, state

pytestmark = pytest.mark.integration

WIDE = {"COLUMNS": "400"}  # tables wide enough that no message is folded across lines
CORRUPT = "model-00007-of-00096.safetensors"


def k3_env(extra: dict | None = None) -> dict:
    """The test's environment without a state-dir override or a developer's HF token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3DEPLOY_") and k != "HF_TOKEN"}
    return {**env, **WIDE, **(extra or {})}


def k3_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "k3deploy", *args]


def run(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT):
    return bounded_run(k3_argv(*args), timeout, cwd=REPO, env=k3_env(env))


def said(proc) -> str:
    """What the user sees: stdout and stderr."""
    return proc.stdout + proc.stderr


def problem_rows(text: str) -> list[tuple[str, str, str]]:
    """(node, check, problem) rows of the problems table."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) == 5 and cells[1].startswith("node"):
            rows.append((cells[1], cells[2], cells[3]))
    return rows


def problem_tables(text: str) -> list[list[tuple[str, str, str]]]:
    """The rows of each problems table the output holds, table by table."""
    tables, rows = [], None
    for line in text.splitlines():
        if line.startswith("┃ node") and "┃ problem" in line:
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("└"):
            rows = None
        elif rows is not None:
            rows += problem_rows(line)
    return tables


def summary(text: str) -> dict[str, dict[str, str]]:
    """node -> step -> status, from the run's summary table."""
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("┃ node") and "preflight" in ln)
    steps = [c.strip() for c in header.split("┃")[2:-1]]
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines[lines.index(header):]
            if ln.startswith("│ node")]
    return {r[0]: dict(zip(steps, r[1:])) for r in rows}


def set_fault(tb, node: str, fault: dict | None) -> None:
    """The stand-in engine's fault hooks, read when a container starts."""
    cmd = "rm -f /run/k3tb/faults.json" if fault is None else \
        f"echo {shlex.quote(json.dumps(fault))} > /run/k3tb/faults.json"
    assert tb.ssh(node, cmd).returncode == 0


def node_calls(tb) -> dict[str, list[list[str]]]:
    return {n: [c["argv"] for c in v["calls"]] for n, v in tb.stats()["nodes"].items()}


def daemon_json(tb, node: str) -> str:
    return tb.ssh(node, "cat /etc/docker/daemon.json 2>/dev/null || echo ABSENT").stdout


def assert_nothing_changed(tb, before: dict) -> None:
    assert changing_calls(tb.stats()) == []
    for node in tb.nodes:
        assert daemon_json(tb, node) == before[node], node
        assert tb.ssh(node, "ls -A /mnt/nvme").stdout.strip() == "", node


# -- a shared, healthy cluster: weights and image on every node, no container running --------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with testbed(tmp_path_factory.mktemp("shared"), nodes=4) as tb:
        first = run("up", "-i", str(tb.inventory))
        assert first.returncode == 0, said(first)
        down = run("down", "-i", str(tb.inventory))
        assert down.returncode == 0, said(down)
        yield tb


@pytest.fixture
def shared(cluster):
    """The shared cluster; afterwards containers, faults and the inventory are as before."""
    inventory = cluster.inventory.read_text()
    yield cluster
    cluster.fault("heal", "node3", check=False)
    cluster.inventory.write_text(inventory)
    for node in cluster.nodes:
        set_fault(cluster, node, None)
    down = run("down", "-i", str(cluster.inventory))
    assert down.returncode == 0, said(down)


# -- 1. CUDA 12 ----------------------------------------------------------------------------

def test_cuda12_on_every_node_runs_the_cu12_image(tmp_path):
    with testbed(tmp_path, nodes=4, cuda="12.8") as tb:
        proc = run("up", "-i", str(tb.inventory))
        assert proc.returncode == 0, said(proc)
        assert "endpoint: http://" in said(proc)
        for node, calls in node_calls(tb).items():
            images = {a[-1] for a in calls if a[:2] == ["docker", "pull"]}
            images |= {a[a.index("sglang") - 1] for a in calls if a[:2] == ["docker", "run"]}
            assert images == {"lmsysorg/sglang:kimi-k3-cu12"}, (node, images)


# -- 2. preflight refusals: one CUDA 12 node among CUDA 13 ones, a node with 7 GPUs, too little
# disk. All three at once, as a real cluster can have them: one run must name each problem in
# its one problems table, and change nothing anywhere.

def test_every_preflight_problem_is_in_one_table_and_nothing_changes(tmp_path):
    faults = {"node1": {"gpus": 7}, "node2": {"cuda": "12.8"}, "node3": {"disk": "20M"}}
    with testbed(tmp_path, nodes=4, overrides=faults) as tb:
        before = {n: daemon_json(tb, n) for n in tb.nodes}
        proc = run("up", "-i", str(tb.inventory))
        assert proc.returncode == 1, said(proc)
        (table,) = problem_tables(said(proc))  # one table, not one per node or per check
        assert sorted((n, c) for n, c, _ in table) == \
            [("node1", "gpus"), ("node2", "identical"), ("node3", "disk")], said(proc)
        message = {n: m for n, _, m in table}
        assert "7 GPUs, the inventory expects 8" in message["node1"]
        assert "replace the node" in message["node1"]  # what to do
        assert "CUDA 12.8 differs" in message["node2"] and "CUDA 13.0" in message["node2"]
        assert "install the others' driver (CUDA 13.0)" in message["node2"]
        found = re.search(r"([\d.]+) GB free on /mnt/nvme .* < ([\d.]+) GB needed", message["node3"])
        assert found, message["node3"]
        free, need = map(float, found.groups())
        assert free == pytest.approx(0.02, abs=0.006) and need > free
        assert "mount a larger NVMe" in message["node3"]
        assert "3 problem(s) found; nothing was changed" in said(proc)
        assert "failed node1/preflight" in said(proc) and "failed node3/preflight" in said(proc)

        assert_nothing_changed(tb, before)
        # The run's first look asks every step's read-only questions at once; nothing else ran.
        reads = (["docker", "info"], ["docker", "image", "inspect"], ["docker", "inspect"],
                 ["docker", "logs"], ["nvidia-smi", "-q"])
        calls = [a for found in node_calls(tb).values() for a in found]
        assert calls and all(any(a[:len(r)] == r for r in reads) for a in calls), calls


# -- 4. a partitioned node -------------------------------------------------------------------
# Exit 1, not 3: 3 promises "the reachable nodes were handled", but a bring-up cannot finish
# without every node, and preflight cannot vouch for a node it never saw (identical GPUs,
# disk, ports). So `up` stops at preflight and changes nothing anywhere; `down` keeps exit 3.

def test_partitioned_node_is_reported_quickly_and_nothing_changes(shared):
    tb = shared
    tb.fault("partition", "node3")
    calls_before = len(changing_calls(tb.stats()))
    started = time.monotonic()
    proc = run("up", "-i", str(tb.inventory), timeout=120)
    took = time.monotonic() - started
    # Quickly: by the 3 connect attempts (5 s connect timeout each), not by the kernel's SYN
    # retries (~130 s) or the 600 s command timeout; with room for a loaded machine.
    assert took < 100, took
    assert proc.returncode == 1, said(proc)
    text = said(proc)
    assert "unreachable node3" in text
    assert re.search(r"\[node3\] cannot reach root@[\d.]+:22 after 3 attempts", text), text
    assert "is the node up" in text
    rows = problem_rows(text)
    assert [(n, c) for n, c, _ in rows] == [("node3", "reachable")], text
    assert "bring it back or replace it" in rows[0][2]
    assert "not finished: node3 could not be reached" in text
    assert len(changing_calls(tb.stats())) == calls_before  # the other three untouched
    check = run("check", "-i", str(tb.inventory), timeout=120)
    assert check.returncode == 3, said(check)  # checked every node it reached: partial
    assert "unreachable node3" in said(check)


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
        assert not any(a[:2] == ["docker", "run"] for a in changing_calls(tb.stats()))
        hub = tb.stats()["hub"]["by_node"]
        for node in tb.nodes:
            # Bounded: the downloader tries a file 3 times, and a run never restarts it after.
            assert hub[node]["files"][CORRUPT]["gets"] == 3, hub[node]["files"][CORRUPT]

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


# -- 6. kimi_k2 reasoning parser carried over ------------------------------------------------

def test_kimi_k2_parser_is_caught_by_verify(shared):
    tb = shared
    text = tb.inventory.read_text()
    assert "  args: {}\n" in text
    tb.inventory.write_text(text.replace("  args: {}\n", "  args: {reasoning-parser: kimi_k2}\n"))
    proc = run("up", "-i", str(tb.inventory))
    assert proc.returncode == 1, said(proc)
    assert "failed node0/verify" in said(proc)
    rows = problem_rows(said(proc))
    assert [(n, c) for n, c, _ in rows] == [("node0", "reasoning")], said(proc)
    message = rows[0][2]
    assert "reasoning_content" in message and "kimi_k2" in message
    assert "engine.args.reasoning-parser: kimi_k2: set it to kimi_k3" in message
    assert "up --replace" in message
    assert "nothing was changed" not in said(proc)  # containers were launched


# -- 7. a rank that loads short --------------------------------------------------------------

def test_short_load_names_the_rank_and_its_memory(shared):
    tb = shared
    set_fault(tb, "node2", {"load_short": True})
    proc = run("up", "-i", str(tb.inventory))
    assert proc.returncode == 1, said(proc)
    assert "failed node2/verify" in said(proc)
    rows = problem_rows(said(proc))
    assert [(n, c) for n, c, _ in rows] == [("node2", "memory")], said(proc)
    found = re.search(r"rank 2, every GPU: ([\d.]+) GiB in use of ([\d.]+) GiB, expected "
                      r"~([\d.]+) GiB: this rank failed to load its shard", rows[0][2])
    assert found, rows[0][2]
    used, total, want = map(float, found.groups())
    assert used == pytest.approx(0.4 * want, rel=0.15) and total == pytest.approx(79.6, abs=0.1)
    assert "k3deploy logs -i" in rows[0][2]


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
                         r"was up; the end of its log", text), text
        assert "CUDA error: an illegal memory access" in text  # the log tail
        assert "[node0/wait] rank 0" not in text and "exited after it" not in text  # no other rank
        assert summary(text)["node1"]["wait"] == "failed"
        assert "k3deploy logs -i" in text
        # Fast: wait's own time, not the whole `up` (slow on a loaded machine): a wait that
        # missed the exit would sit out the load (90 s), or the health timeout after it.
        record = state(tb.inventory, "node0")["steps"]["wait"]
        assert record["finished"] - record["started"] < load - crash, record


# -- 9. a duplicate rank ---------------------------------------------------------------------
# The inventory validator refuses duplicate ranks, so the duplicate is made as a person would
# make it: node3's container replaced by hand with node1's rank, its k3deploy label copied
# (which also makes `launch` take it for its own).

def test_duplicate_rank_is_detected_instead_of_waiting(shared):
    tb = shared
    # The first launch is the shared fixture's, with the inventory as it is now.
    runs = [a for a in node_calls(tb)["node3"] if a[:2] == ["docker", "run"]]
    argv = list(runs[0])
    argv[argv.index("--node-rank") + 1] = "1"
    assert tb.ssh("node3", shlex.join(argv)).returncode == 0
    started = time.monotonic()
    proc = run("up", "-i", str(tb.inventory), timeout=200)
    took = time.monotonic() - started
    assert proc.returncode == 1, said(proc)
    # Room for a loaded machine, yet far below what a wait that missed the duplicate would sit
    # out: the form timeout (900 s), --dist-timeout (3600 s).
    assert took < 150, took
    text = said(proc)
    assert "[node3/wait] the process group can never form: node3 runs --node-rank 1, the " \
           "inventory gives it rank 3" in text, text
    assert "rank 1 on node1 and node3" in text and "rank 3 on no node" in text
    assert "on node3: docker rm -f k3" in text
    assert summary(text)["node3"]["wait"] == "failed"


# -- 10. no secret anywhere ------------------------------------------------------------------

def test_no_token_or_api_key_anywhere(tmp_path):
    token = "hf_" + "".join(secrets.choice(string.ascii_letters) for _ in range(34))
    token_file = tmp_path / "hub-token"
    token_file.write_text(token)
    with testbed(tmp_path, nodes=4, hub_token_file=str(token_file)) as tb:
        inv = str(tb.inventory)
        output_file = tmp_path / "up.out"
        with output_file.open("w") as sink:
            proc = subprocess.Popen(k3_argv("up", "-i", inv), stdout=sink,
                                    stderr=subprocess.STDOUT, cwd=REPO,
                                    env=k3_env({"HF_TOKEN": token}))
            seen, deadline = [], time.monotonic() + 200
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    seen += [tb.ssh(n, "ps -eo args").stdout for n in tb.nodes]
                    time.sleep(0.2)  # a sampling interval: argv is looked at all along the run
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        output = output_file.read_text()
        assert proc.returncode == 0, output
        assert any("fetch_weights" in s for s in seen) and any("sglang serve" in s for s in seen)
        assert any("peer_server.py" in s for s in seen)  # fan-out ran: its secret is checked too

        state = tb.inventory.parent / ".k3deploy"
        key_file = next(state.glob("*/secrets/api-key"))
        key = key_file.read_text().strip()
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        peer_file = key_file.with_name("peer-secret")
        peer = peer_file.read_text().strip()
        assert oct(peer_file.stat().st_mode & 0o777) == "0o600" and len(peer) >= 32
        node_key = "/mnt/nvme/.k3deploy/secrets/sglang-secret.yaml"
        for node in tb.nodes:
            assert tb.ssh(node, ["stat", "-c", "%a", node_key]).stdout.strip() == "600"
            assert key in tb.ssh(node, ["cat", node_key]).stdout  # we grep for the real key
            assert tb.ssh(node, "ls /mnt/nvme/.k3deploy/hf.env").returncode != 0
            node_peer = "/mnt/nvme/.k3deploy/peer.secret"
            assert tb.ssh(node, ["stat", "-c", "%a", node_peer]).stdout.strip() == "600"
            assert tb.ssh(node, ["cat", node_peer]).stdout.strip() == peer
        hub = tb.stats()["hub"]["by_node"]
        assert all(hub[n]["authorized_requests"] > 0 for n in tb.nodes)  # the token was used

        logs = run("logs", "-i", inv, "--out", str(tmp_path / "logs"), env={"HF_TOKEN": token})
        assert logs.returncode == 0, said(logs)
        places = {"k3deploy up output": output, "k3deploy logs output": said(logs),
                  "stand-in argv": json.dumps(tb.stats()["nodes"]), "ps on nodes": "\n".join(seen)}
        files = [p for p in [*state.rglob("*"), *(tmp_path / "logs").rglob("*")]
                 if p.is_file() and p not in (key_file, peer_file)]
        assert any(p.name == "node0-rank0-engine.log" for p in files)
        places |= {str(p): p.read_text(errors="replace") for p in files}
        for node in tb.nodes:
            places[f"{node}:/mnt/nvme/.k3deploy"] = tb.ssh(
                node, "find /mnt/nvme/.k3deploy -path '*/secrets' -prune -o -type f ! -name "
                "peer.secret -exec cat {} +").stdout
        leaks = [where for where, text in places.items()
                 if token in text or key in text or peer in text]
        assert leaks == []
