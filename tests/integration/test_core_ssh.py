"""k3deploy's SSH transport against real sshd's on the testbed: one connection per node per
run (counted by each node's sshd), host-key checking, and nodes that die or go silent mid-run.
Tests whose traces on the nodes are files and processes (the `tb2` fixture removes them) share
the module's 2-node testbed; those that kill or cut off a node start their own.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tbfixture import inventory_copy as copy_inventory, testbed

pytestmark = pytest.mark.integration

SLOW = "/tmp/k3-slow"   # a FIFO on the node: the file step's probe blocks reading it


def logins(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("Accepted publickey for ")]


def preauth(lines: list[str]) -> list[str]:
    return [ln for ln in lines if "[preauth]" in ln]


def new_lines(sshd_log, tb, before: dict) -> dict:
    return {n: sshd_log(tb, n)[len(before[n]):] for n in tb.nodes}


def test_bringup_opens_one_ssh_connection_per_node(tmp_path, k3, sshd_log):
    with testbed(tmp_path, nodes=4) as tb:
        before = {n: sshd_log(tb, n) for n in tb.nodes}
        up = k3("up", "-i", tb.inventory, timeout=180)
        assert up.returncode == 0, up.output
        seen = new_lines(sshd_log, tb, before)
        for node in tb.nodes:
            assert len(logins(seen[node])) == 1, (node, seen[node])
            assert preauth(seen[node]) == [], (node, seen[node])


def test_playbook_opens_one_ssh_connection_per_node(tb2, k3, sshd_log, file_playbook):
    playbook = file_playbook({"path": "/mnt/nvme/a.conf", "content": "a\n", "mode": "600"},
                             {"path": "/mnt/nvme/b.conf", "content": "b\n"},
                             {"path": "/mnt/nvme/c.conf", "content": "c\n", "mode": "640"})
    tb = tb2
    before = {n: sshd_log(tb, n) for n in tb.nodes}
    run = k3("run", playbook, "-i", tb.inventory)
    assert run.returncode == 0, run.output
    seen = new_lines(sshd_log, tb, before)
    assert [ln.split(" from ")[0] for ln in logins(seen["node1"])] == \
        ["Accepted publickey for ubuntu"]
    assert len(logins(seen["node0"])) == 1, seen["node0"]
    assert all(preauth(seen[n]) == [] for n in tb.nodes), seen
    for node in tb.nodes:  # all three steps really ran over that one connection
        listing = tb.ssh(node, "cat /mnt/nvme/a.conf /mnt/nvme/b.conf /mnt/nvme/c.conf",
                         user="root")
        assert listing.stdout == "a\nb\nc\n", listing


def inventory_copy(tb, **ssh) -> Path:
    """A copy of the test's inventory next to it (its state files too) with other `ssh:`
    settings; the testbed's own known_hosts stays intact for tb.ssh."""
    return copy_inventory(tb, tb.inventory.parent, **ssh)


def test_host_keys_unknown_accept_new_and_changed(tb2, tmp_path, k3, sshd_log, file_playbook):
    playbook = file_playbook({"path": "/tmp/hostkey-test", "content": "trusted\n"})
    tb = tb2
    real = (tb.dir / "known_hosts").read_text().splitlines()
    key_of = {ln.split()[0]: ln.split(None, 1)[1] for ln in real}
    addr0, addr1 = tb.address("node0"), tb.address("node1")

    default = k3("run", playbook, "-i", tb.inventory, "--check")
    assert default.returncode == 0, default.output

    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = inventory_copy(tb, known_hosts=str(known))
    before = {n: sshd_log(tb, n) for n in tb.nodes}
    refused = k3("run", playbook, "-i", inv)
    assert refused.returncode != 0, refused.output
    for addr in (addr0, addr1):
        assert f"host key of {addr} is unknown" in refused.output, refused.output
    assert "fix:" in refused.output and "--accept-new-host-keys" in refused.output
    assert "Traceback" not in refused.output
    seen = new_lines(sshd_log, tb, before)
    assert all(logins(seen[n]) == [] for n in tb.nodes), seen  # never logged in
    assert known.read_text() == ""
    assert tb.ssh("node0", "test -e /tmp/hostkey-test").returncode == 1

    trusted = k3("run", playbook, "-i", inv, "--accept-new-host-keys")
    assert trusted.returncode == 0, trusted.output
    recorded = {ln.split()[0]: ln.split(None, 1)[1] for ln in known.read_text().splitlines()}
    assert recorded == key_of, known.read_text()

    again = k3("run", playbook, "-i", inv)
    assert again.returncode == 0, again.output
    assert known.read_text().count("\n") == 2

    # node0's address now carries node1's key: a man in the middle, or a rebuilt node.
    known.write_text(f"{addr0} {key_of[addr1]}\n{addr1} {key_of[addr1]}\n")
    before = {n: sshd_log(tb, n) for n in tb.nodes}
    changed = k3("run", playbook, "-i", inv, "--accept-new-host-keys")
    assert changed.returncode == 1, changed.output
    assert f"host key of {addr0} CHANGED" in changed.output, changed.output
    flat = " ".join(changed.output.split())  # rich wraps long lines
    assert f"ssh-keygen -f {known} -R {addr0}" in flat, changed.output
    seen = new_lines(sshd_log, tb, before)
    assert logins(seen["node0"]) == [] and len(logins(seen["node1"])) == 1, seen
    assert known.read_text() == f"{addr0} {key_of[addr1]}\n{addr1} {key_of[addr1]}\n"


def start_blocked_run(tb, k3_background, file_playbook, wait_for, node_state, blocked: str,
                      inventory: Path | None = None):
    """Start a two-step playbook whose first step hangs on `blocked` (its probe reads a FIFO)
    and return the process once the other node finished step one."""
    assert tb.ssh(blocked, ["mkfifo", SLOW], user="root").returncode == 0
    playbook = file_playbook({"path": SLOW, "content": "slow\n"},
                             {"path": "/tmp/k3-after", "content": "after\n"})
    proc = k3_background("run", playbook, "-i", inventory or tb.inventory)
    others = [n for n in tb.nodes if n != blocked]

    def stuck():
        if proc.poll() is not None:
            raise AssertionError(f"run ended early: {proc.communicate()}")
        try:
            states = {n: node_state(tb, n)["steps"].get("file", {}).get("status")
                      for n in tb.nodes}
        except (FileNotFoundError, ValueError):
            return False
        return states[blocked] == "running" and all(states[n] == "changed" for n in others)
    wait_for(stuck, 30, f"{blocked} blocked in step one while the others finished it")
    wait_for(lambda: reads_fifo(tb, blocked), 30, f"the probe on {blocked} to block on {SLOW}")
    return proc


def reads_fifo(tb, node: str) -> bool:
    """A process other than a shell (the probe: the step's facts command) names the FIFO:
    it is blocked opening it. `[/]` keeps the grep from matching itself."""
    found = tb.ssh(node, "ps -eo comm=,args= | grep -Ev '^(sh|bash|dash|sudo) ' "
                   f"| grep -q '[/]{SLOW[1:]}'", user="root")
    return found.returncode == 0


def assert_reported_unreachable(tb, proc, node_state, blocked: str, since: float, bound: float):
    stdout, stderr = proc.communicate(timeout=bound + 30)
    after_fault = time.monotonic() - since
    output = stdout + stderr
    assert proc.returncode == 1, output  # the playbook did not reach its goal on every node
    assert f"not finished: {blocked} could not be reached" in output, output
    assert after_fault < bound, f"{after_fault:.1f}s after the fault\n{output}"
    assert "unreachable" in output and "after 3 attempts" in output, output
    record = node_state(tb, blocked)["steps"]["file"]
    assert record["status"] == "unreachable" and "after 3 attempts" in record["last_error"]
    for node in tb.nodes:
        if node != blocked:  # the others completed both steps
            assert tb.ssh(node, "cat /tmp/k3-after").stdout == "after\n"
            assert node_state(tb, node)["steps"]["file"]["status"] == "changed"
    return after_fault


def test_node_killed_mid_run_is_retried_then_reported(tmp_path, k3_background, file_playbook,
                                                      wait_for, node_state):
    # kill-node cuts the node's network before it kills its processes (a reclaimed VM sends no
    # FIN or RST), so this is noticed by the keepalive, as the silent node below is.
    with testbed(tmp_path, nodes=2) as tb:
        quick = inventory_copy(tb, connect_timeout=2)
        proc = start_blocked_run(tb, k3_background, file_playbook, wait_for, node_state, "node1",
                                 inventory=quick)
        killed_at = time.monotonic()
        tb.fault("kill-node", "node1")
        # The bounds (here and below) leave a loaded machine room (this whole test takes ~30 s
        # unloaded) and stay far below the 600 s command timeout a missed detection sits out.
        assert_reported_unreachable(tb, proc, node_state, "node1", killed_at, bound=90)
        assert time.monotonic() - proc.started < 150


@pytest.mark.slow
def test_silent_node_mid_run_is_detected_then_reported(tmp_path, k3_background, file_playbook,
                                                       wait_for, node_state):
    """A partition drops packets without a FIN or RST (as a reclaimed spot VM): the keepalive
    and TCP user timeout must notice within the bound instead of the 600 s command timeout."""
    with testbed(tmp_path, nodes=2) as tb:
        quick = inventory_copy(tb, connect_timeout=2)  # keepalive every 2 s, reconnects 2 s
        proc = start_blocked_run(tb, k3_background, file_playbook, wait_for, node_state, "node1",
                                 inventory=quick)
        cut_at = time.monotonic()
        tb.fault("partition", "node1")
        took = assert_reported_unreachable(tb, proc, node_state, "node1", cut_at, bound=90)
        assert took > 15  # noticed by the dead-peer timeout, not by something faster


def test_refused_key_is_reported_once_without_retries(tb2, tmp_path, k3, sshd_log, file_playbook,
                                                      wait_for):
    playbook = file_playbook({"path": "/tmp/k3-auth", "content": "auth\n"})
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True, capture_output=True)
    tb = tb2
    inv = inventory_copy(tb, key=str(stranger))
    before = {n: sshd_log(tb, n) for n in tb.nodes}
    run = k3("run", playbook, "-i", inv)
    assert run.returncode == 1, run.output
    assert "SSH authentication to root@" in run.output and "check ssh.user / ssh.key" in run.output

    def closed(node: str) -> list[str]:
        return [ln for ln in new_lines(sshd_log, tb, before)[node]
                if ln.startswith("Connection closed")]
    for node in tb.nodes:  # sshd logs the close after the client has gone: it may lag the run
        wait_for(lambda node=node: closed(node), 10, f"{node}'s sshd to log the refused login")
    seen = new_lines(sshd_log, tb, before)
    for node in tb.nodes:  # one refused connection per node: a bad key is not retried
        assert logins(seen[node]) == [], seen[node]
        assert len(closed(node)) == 1, seen[node]
