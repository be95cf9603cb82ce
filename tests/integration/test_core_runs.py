"""k3deploy's step engine, state files, lock and CLI against the testbed: the three-pass
check / apply / apply-again pattern, the cluster lock, state files and `status`, a replaced
node, `--log-json`, the CLI's error shape, and `pip install .` into a fresh venv. Tests whose
traces on the nodes are files and processes (the `tb2` fixture removes them) share the module's
2-node testbed; the one that kills and replaces a node starts its own."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tbfixture import testbed

REPO = Path(__file__).resolve().parents[2]
CONF = "/mnt/nvme/k3-app.conf"   # per-node tmpfs, root-owned 0755 dir: the ubuntu user needs sudo
CONTENT = "threads = 8\nname = kimi\n"
COMMANDS = ("plan", "check", "up", "run", "status", "verify", "logs", "down")


def flat(text: str) -> str:
    return " ".join(text.split())


def step_lines(output: str, status: str) -> set[str]:
    """Nodes of the `STATUS node/step` lines the run printed."""
    return {parts[1].split("/")[0] for ln in output.splitlines()
            if len(parts := ln.split()) == 2 and parts[0] == status and "/" in parts[1]}


@pytest.mark.integration
def test_file_step_check_apply_apply_again(tb2, k3, file_playbook, node_state):
    playbook = file_playbook({"path": CONF, "content": CONTENT, "mode": "640"})
    tb = tb2  # node1 logs in as ubuntu: the file is root's, so it needs sudo there

    def on_node(node, command):
        return tb.ssh(node, command, user="root").stdout

    check = k3("run", playbook, "-i", tb.inventory, "--check")
    assert check.returncode == 0, check.output
    assert step_lines(check.output, "would-change") == {"node0", "node1"}, check.output
    assert f"would: write {CONF}: write {CONF} (mode 640)" in check.output
    for node in tb.nodes:
        assert on_node(node, f"test -e {CONF} && echo present || echo absent") == "absent\n"
        assert not node_state.path(tb, node).exists()  # --check records nothing either

    apply = k3("run", playbook, "-i", tb.inventory)
    assert apply.returncode == 0, apply.output
    assert step_lines(apply.output, "changed") == {"node0", "node1"}, apply.output
    for node in tb.nodes:
        assert on_node(node, f"cat {CONF}") == CONTENT
        assert on_node(node, f"stat -c '%a %U' {CONF}") == "640 root\n"

    again = k3("run", playbook, "-i", tb.inventory)
    assert again.returncode == 0, again.output
    assert step_lines(again.output, "ok") == {"node0", "node1"}, again.output
    assert not step_lines(again.output, "changed"), again.output
    # Apply-again does what --check did (one connection, the facts, a plan) and writes nothing:
    # bounded by a multiple of that run, not a fixed figure a loaded machine would blow, it
    # still fails on a retry, a reconnect or a re-write that waits on a timeout.
    assert again.seconds < 2 * check.seconds + 10, \
        f"apply-again took {again.seconds:.1f}s, --check {check.seconds:.1f}s"
    for node in tb.nodes:
        assert node_state(tb, node)["steps"]["file"]["status"] == "ok"

    # The mode alone drifted: only a chmod is planned, then applied.
    on_node("node1", f"chmod 600 {CONF}")
    drift = k3("run", playbook, "-i", tb.inventory, "--check")
    assert f"would: set mode of {CONF}: sudo chmod 640 {CONF}" in drift.output, drift.output
    assert step_lines(drift.output, "ok") == {"node0"}, drift.output
    fixed = k3("run", playbook, "-i", tb.inventory)
    assert fixed.returncode == 0 and step_lines(fixed.output, "changed") == {"node1"}
    assert on_node("node1", f"stat -c %a {CONF}") == "640\n"


@pytest.mark.integration
def test_second_run_is_refused_while_one_holds_the_lock(tb2, k3, k3_background, file_playbook,
                                                        wait_for, node_state, sshd_log):
    playbook = file_playbook({"path": "/tmp/k3-slow", "content": "slow\n"})
    tb = tb2  # the FIFO and a probe still blocked on it are removed by the fixture on failure
    assert tb.ssh("node0", "mkfifo /tmp/k3-slow").returncode == 0
    first = k3_background("run", playbook, "-i", tb.inventory)
    wait_for(lambda: node_state.path(tb, "node0").exists()
             and node_state(tb, "node0")["steps"].get("file", {}).get("status") == "running",
             30, "the first run to be inside its step")

    logins = {n: len(sshd_log(tb, n)) for n in tb.nodes}
    second = k3("run", playbook, "-i", tb.inventory)
    assert second.returncode == 2, second.output
    assert "cluster is locked by k3deploy pid" in flat(second.output), second.output
    assert f"pid {first.pid}" in second.output, second.output
    assert "Traceback" not in second.output
    # Refused at once, not after waiting: the holder stays blocked until we release it, so a
    # waiting run would end only at k3's timeout. And refused before any SSH connection:
    assert {n: sshd_log(tb, n)[logins[n]:] for n in tb.nodes} == {n: [] for n in tb.nodes}

    # Let the first run go: it finishes normally and releases the lock.
    assert tb.ssh("node0", "echo release > /tmp/k3-slow", timeout=20).returncode == 0
    stdout, stderr = first.communicate(timeout=60)
    assert first.returncode == 0, stdout + stderr
    third = k3("run", playbook, "-i", tb.inventory)
    assert third.returncode == 0, third.output


@pytest.mark.integration
def test_state_files_status_and_a_replaced_node(tmp_path, k3, file_playbook, node_state):
    playbook = file_playbook({"path": "/tmp/k3-state", "content": "state\n"})
    with testbed(tmp_path, nodes=2) as tb:
        started = time.time()
        run = k3("run", playbook, "-i", tb.inventory)
        assert run.returncode == 0, run.output
        first = {}
        for node in tb.nodes:
            doc = node_state(tb, node)
            assert oct(node_state.path(tb, node).stat().st_mode & 0o777) == "0o600"
            assert doc["node"] == node and set(doc["identity"]) == {"boot_id", "machine_id"}
            rec = doc["steps"]["file"]
            assert rec["status"] == "changed" and rec["attempts"] == 1
            assert started <= rec["started"] <= rec["finished"] <= time.time()
            assert len(rec["inputs_digest"]) == 16 and rec["last_error"] is None
            first[node] = doc

        status = k3("status", "-i", tb.inventory, "--json")
        assert status.returncode == 1, status.output  # every node answers; nothing serves
        doc = json.loads(status.stdout)  # one JSON document, nothing else on stdout
        assert doc["cluster"]["state"] == "down" and doc["cluster"]["incident"] is None
        assert set(doc["nodes"]) == set(tb.nodes)
        for node in tb.nodes:
            assert doc["nodes"][node]["state"]["file"]["status"] == "changed"
            assert doc["nodes"][node]["live"]["reachable"] is True
        table = k3("status", "-i", tb.inventory)
        assert table.returncode == 1 and "file" in table.stdout and "changed" in table.stdout
        assert "cluster tb" in table.stdout and ": down" in table.stdout

        tb.fault("kill-node", "node1")
        down = k3("status", "-i", tb.inventory, "--json")
        assert down.returncode == 3, down.output
        live = json.loads(down.stdout)["nodes"]
        assert live["node1"]["live"]["reachable"] is False and live["node0"]["live"]["reachable"]
        assert "after 3 attempts" in live["node1"]["live"]["error"]

        # Back as a fresh machine (new boot id): its old step records are stale.
        tb.fault("revive-node", "node1")
        before_rerun = json.loads(k3("status", "-i", tb.inventory, "--json").stdout)["nodes"]
        assert before_rerun["node1"]["replaced"] and not before_rerun["node0"]["replaced"]
        assert before_rerun["node1"]["state"]["file"]["status"] == "stale"
        rerun = k3("run", playbook, "-i", tb.inventory)
        assert rerun.returncode == 0, rerun.output
        replaced = node_state(tb, "node1")
        assert replaced["identity"]["boot_id"] != first["node1"]["identity"]["boot_id"]
        assert replaced["discarded_at"] >= started
        assert replaced["steps"]["file"]["attempts"] == 1  # the old record was dropped
        assert replaced["steps"]["file"]["status"] == "changed"  # a fresh node lost the file
        kept = node_state(tb, "node0")
        assert kept["identity"] == first["node0"]["identity"] and "discarded_at" not in kept
        assert kept["steps"]["file"]["attempts"] == 2 and kept["steps"]["file"]["status"] == "ok"


@pytest.mark.integration
def test_log_json_writes_json_lines_bound_to_node_and_step(tb2, k3, file_playbook):
    playbook = file_playbook({"path": "/tmp/k3-json", "content": "json\n"})
    tb = tb2
    run = k3("--log-json", "run", playbook, "-i", tb.inventory)
    assert run.returncode == 0, run.output
    events = [json.loads(line) for line in run.stderr.splitlines() if line.strip()]
    results = {(e["node"], e["step"]): e["status"] for e in events
               if e["event"] == "step.result"}
    assert results == {("node0", "file"): "changed", ("node1", "file"): "changed"}
    assert all("timestamp" in e and "level" in e for e in events)
    assert events[-1]["event"] == "run.finished" and events[-1]["exit_code"] == 0

    refused = k3("--log-json", "run", "no-such-playbook", "-i", tb.inventory)
    assert refused.returncode == 2
    (error,) = [json.loads(line) for line in refused.stderr.splitlines() if line.strip()]
    assert error["event"] == "error" and "no-such-playbook" in error["lines"][0]


def bad_rank_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text("\n".join([
        "cluster: dup",
        "model: {repo: moonshotai/Kimi-K3}",
        "gpu: {model: h100, count: 8}",
        "nodes:",
        "  - {name: a, address: 10.9.0.1, private_address: 10.9.0.1, nic: eth0, rank: 0}",
        "  - {name: b, address: 10.9.0.2, private_address: 10.9.0.2, nic: eth0, rank: 0}",
        "  - {name: c, address: 10.9.0.3, private_address: 10.9.0.3, nic: eth0, rank: 1}",
        "  - {name: d, address: 10.9.0.4, private_address: 10.9.0.4, nic: eth0, rank: 2}", ""]))
    return path


def test_cli_errors_are_short_and_exit_2(tmp_path, k3):
    bad = bad_rank_inventory(tmp_path)
    for args in (("check", "-i", bad), ("run", "teardown", "-i", bad), ("status", "-i", bad)):
        proc = k3(*args)
        assert proc.returncode == 2, proc.output
        assert str(bad) in proc.stderr and "nodes[1].rank: rank 0 is already claimed by nodes[0] (a)" \
            in proc.stderr
        assert "Traceback" not in proc.output
        assert not (tmp_path / ".k3deploy").exists()  # refused before any state or SSH

    missing = k3("run", tmp_path / "missing.yaml", "-i", bad)
    assert missing.returncode == 2 and "no playbook" in missing.stderr, missing.output
    gone = k3("check", "-i", tmp_path / "nowhere.yaml")
    assert gone.returncode == 2 and "file not found" in gone.stderr, gone.output
    gpu = k3("plan", "--gpu", "a100")
    assert gpu.returncode == 2 and "unknown GPU model 'a100'" in gpu.stderr, gpu.output
    usage = k3("run")
    assert usage.returncode == 2 and "Missing argument" in usage.stderr, usage.output
    for proc in (missing, gone, gpu, usage):
        assert "Traceback" not in proc.output, proc.output


def copy_source(dst: Path) -> Path:
    """The working tree without the dev venv and build leftovers (what a clone would hold);
    building from a copy also keeps build/ and *.egg-info out of the repository."""
    skip = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                  ".pytest_cache", ".k3deploy", "tb-*")
    return Path(shutil.copytree(REPO, dst, ignore=skip))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(600)  # pip may fetch dependencies: its own bound below must come first
def test_pip_install_into_a_fresh_venv_then_check_the_testbed(tmp_path):
    source = copy_source(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(source)],
                             capture_output=True, text=True, timeout=420)
    assert install.returncode == 0, install.stdout + install.stderr
    k3deploy = str(venv / "bin" / "k3deploy")
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import k3deploy; print(k3deploy.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True)
    assert where.stdout.startswith(str(venv)), where.stdout  # the installed copy, not the repo

    helped = subprocess.run([k3deploy, "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    listed = {ln.split()[0] for ln in helped.stdout.split("Commands:")[1].splitlines() if ln.strip()}
    assert listed >= set(COMMANDS), helped.stdout
    for command in COMMANDS:
        sub = subprocess.run([k3deploy, command, "--help"], capture_output=True, text=True)
        assert sub.returncode == 0 and "Usage: k3deploy " + command in sub.stdout, sub.stdout

    with testbed(tmp_path, nodes=4) as tb:
        check = subprocess.run([k3deploy, "check", "-i", str(tb.inventory)], capture_output=True,
                               text=True, cwd=tmp_path, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        assert step_lines(check.stderr, "ok") == set(tb.nodes), check.stderr
