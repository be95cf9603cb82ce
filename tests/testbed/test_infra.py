"""The testbed's infrastructure: nodes, SSH, isolation, faults, stats, and a clean `down`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tbfixture import (TESTBED, assert_nothing_left, leftovers, read_state, run_testbed, testbed,
                       up_args)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DAEMON_JSON = '{"log-opts": {"max-size": "10m"}}'
SHARD_BYTES = 100_000
SMALL_DISK_MIB = 64


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    overrides = {"node0": {"daemon_json": DAEMON_JSON}, "node1": {"user": "ubuntu"},
                 "node3": {"disk": f"{SMALL_DISK_MIB}M", "gpu": "b200", "gpus": 4, "cuda": "12.8"}}
    with testbed(tmp_path_factory.mktemp("infra"), nodes=4, overrides=overrides,
                 shard_bytes=SHARD_BYTES) as bed:
        yield bed


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc.stdout


def _eventually(check, seconds: float = 3) -> bool:
    """The hub flushes stats.json every 0.25 s: poll a little before judging."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# --- the running testbed -----------------------------------------------------------------------

def test_inventory_describes_the_testbed(tb):
    inv = yaml.safe_load(tb.inventory.read_text())
    assert inv["cluster"] == f"tb{tb.idx}"
    assert inv["model"]["endpoint"].startswith(f"http://10.213.{tb.idx}.1:")
    assert inv["engine"]["kind"] == "sglang" and inv["gpu"] == {"model": "h100", "count": 8}
    assert inv["ssh"]["key"] == "id_ed25519" and inv["ssh"]["known_hosts"] == "known_hosts"
    assert (tb.dir / "id_ed25519").exists() and (tb.dir / "known_hosts").exists()
    assert [n["name"] for n in inv["nodes"]] == tb.nodes == ["node0", "node1", "node2", "node3"]
    for i, entry in enumerate(inv["nodes"]):
        assert entry["address"] == entry["private_address"] == f"10.213.{tb.idx}.{10 + i}"
        assert entry["nic"] == "eth0"
    assert inv["nodes"][1]["user"] == "ubuntu" and "user" not in inv["nodes"][0]


def test_root_ssh_on_every_node_with_strict_host_keys(tb):
    for name in tb.nodes:
        out = _ok(tb.ssh(name, "id -u; ip -4 -o addr show eth0", user="root"))
        assert out.splitlines()[0] == "0"
        assert f"{tb.address(name)}/24" in out


def test_ubuntu_login_has_passwordless_sudo_and_stand_ins_first_on_path(tb):
    out = _ok(tb.ssh("node1", "id -un; sudo -n true && echo sudo-ok; sudo -n sh -c 'command -v nvidia-smi'"))
    assert out.split() == ["ubuntu", "sudo-ok", "/usr/local/bin/nvidia-smi"]
    assert _ok(tb.ssh("node1", "echo $PATH")).startswith("/usr/local/bin:")


def test_each_node_sees_only_its_own_nvme_and_docker_dirs(tb):
    _ok(tb.ssh("node0", "echo node0 > /mnt/nvme/mine && echo x > /etc/docker/marker"))
    for other in tb.nodes[1:]:
        out = _ok(tb.ssh(other, "ls -A /mnt/nvme /etc/docker", user="root"))
        assert "mine" not in out and "marker" not in out
    assert not os.path.exists("/mnt/nvme/mine"), "a node's NVMe leaked onto the host"
    sizes = {n: int(_ok(tb.ssh(n, "df -B1M --output=size /mnt/nvme | tail -1"))) for n in tb.nodes}
    assert sizes["node3"] == SMALL_DISK_MIB and sizes["node0"] == 4096


def test_nodes_have_their_own_identity_and_tmp(tb):
    for name in tb.nodes:
        assert _ok(tb.ssh(name, "hostname; sudo -n true 2>&1", user="ubuntu")).split() == [name]
    ids = [_ok(tb.ssh(n, "cat /etc/machine-id /proc/sys/kernel/random/boot_id", user="root")).split()
           for n in tb.nodes]
    assert len({i[0] for i in ids}) == len({i[1] for i in ids}) == len(tb.nodes)
    host_boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert host_boot not in {i[1] for i in ids}
    _ok(tb.ssh("node0", "touch /tmp/k3tb-probe"))
    assert _ok(tb.ssh("node1", "ls /tmp")).split() == []


def test_nvidia_smi_reports_the_node_gpus(tb):
    query = "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
    assert _ok(tb.ssh("node0", query)).splitlines() == ["NVIDIA H100 80GB HBM3, 81559"] * 8
    assert _ok(tb.ssh("node3", query)).splitlines() == ["NVIDIA B200, 183359"] * 4
    assert "CUDA Version: 12.8" in _ok(tb.ssh("node3", "nvidia-smi"))
    node_json = json.loads((tb.dir / "nodes" / "node3" / "run" / "node.json").read_text())
    assert node_json["driver"] == "570.133.20" and node_json["gpu_count"] == 4


def test_stand_ins_load_bytecode_compiled_at_up(tb):
    """/usr/local/bin is read-only on a node, so python cannot cache the stand-ins' bytecode
    there itself: `testbed up` compiles it, or every call would recompile tbstand."""
    trace = tb.ssh("node1", "python3 -v /usr/local/bin/docker ps 2>&1 >/dev/null").stdout
    loaded = [line.split()[-1] for line in trace.splitlines()
              if line.startswith("# code object from") and "/usr/local/bin/tbstand/" in line]
    assert len(loaded) >= 5 and all(path.endswith(".pyc'") for path in loaded), loaded


def test_node_python_has_the_laptop_huggingface_hub(tb):
    import huggingface_hub
    probe = "command -v python3; python3 -c 'import huggingface_hub as h; print(h.__version__)'"
    out = _ok(tb.ssh("node1", probe))
    assert out.split() == ["/usr/local/bin/python3", huggingface_hub.__version__]


def test_nodes_reach_the_hub_and_each_other_but_nothing_else(tb):
    inv = yaml.safe_load(tb.inventory.read_text())
    url = inv["model"]["endpoint"] + "/api/models/moonshotai/Kimi-K3"
    probe = ("import socket, sys, urllib.request\n"
             f"print(urllib.request.urlopen({url!r}, timeout=5).status)\n"
             f"socket.create_connection(({tb.address('node2')!r}, 22), timeout=5).close(); print('peer')\n")
    out = _ok(tb.ssh("node0", ["python3", "-c", probe]))
    assert out.split() == ["200", "peer"], "expected hub 200 and node2 reachable"
    assert _ok(tb.ssh("node0", "ip route show default; ip -6 route show default")) == ""


def test_stats_report_hub_bytes_and_stand_in_calls(tb):
    _ok(tb.ssh("node2", "nvidia-smi -L >/dev/null"))
    doc = tb.stats()
    assert set(doc) == {"hub", "cdn", "nodes"} and list(doc["nodes"]) == tb.nodes
    assert doc["cdn"]["requests"] == 0 == doc["cdn"]["authorized_requests"]  # no --hub-cdn here
    assert doc["hub"]["repo"] == "moonshotai/Kimi-K3"
    assert _eventually(lambda: tb.stats()["hub"]["by_node"].get("node0", {}).get("requests", 0) >= 1)
    calls = doc["nodes"]["node2"]["calls"]
    assert any(c["tool"] == "nvidia-smi" and c["argv"][1:] == ["-L"] for c in calls)
    # The command prints the document tests read in-process (tbfixture.Testbed.stats).
    printed = json.loads(_ok(run_testbed("stats", "--dir", str(tb.dir), "--json")))
    assert printed["nodes"]["node2"]["calls"][:len(calls)] == calls
    assert set(printed) == set(doc) and printed["hub"]["repo_bytes"] == doc["hub"]["repo_bytes"]


# --- faults ------------------------------------------------------------------------------------

def test_partition_drops_packets_and_heal_restores(tb):
    tb.fault("partition", "node2")
    started = time.monotonic()
    proc = tb.ssh("node2", "true", connect_timeout=2)
    # ssh gave up at its 2 s connect timeout, not after the kernel's ~2 min of SYN retries.
    assert proc.returncode == 255 and time.monotonic() - started < 20, proc.stderr
    assert "timed out" in proc.stderr
    assert _ok(tb.ssh("node0", "true"))  == ""  # the rest of the cluster is unaffected
    tb.fault("heal", "node2")
    _ok(tb.ssh("node2", "true", connect_timeout=2))


def test_fill_disk_leaves_under_one_mib(tb):
    tb.fault("fill-disk", "node3")
    free = int(_ok(tb.ssh("node3", "df -B1 --output=avail /mnt/nvme | tail -1")))
    assert free < 1024 * 1024
    other = int(_ok(tb.ssh("node2", "df -B1 --output=avail /mnt/nvme | tail -1")))
    assert other > 1024 ** 3


def test_hub_faults_reach_the_hub(tb):
    fetch = ("import http.client, json, urllib.request, sys\n"
             "url = sys.argv[1] + '/moonshotai/Kimi-K3/resolve/main/model-00001-of-00096.safetensors'\n"
             "try:\n    body = urllib.request.urlopen(url, timeout=10).read()\n"
             "except http.client.IncompleteRead as err:\n    body = err.partial\n"
             "print(len(body))\n")
    endpoint = tb.endpoint
    assert endpoint == yaml.safe_load(tb.inventory.read_text())["model"]["endpoint"]
    tb.fault("hub-drop-after", "1000")
    assert json.loads((tb.dir / "hub" / "faults.json").read_text()) == {"drop_after": 1000}
    assert int(_ok(tb.ssh("node1", ["python3", "-c", fetch, endpoint]))) <= 1000
    tb.fault("hub-corrupt", "config.json")
    tb.fault("hub-heal")
    assert json.loads((tb.dir / "hub" / "faults.json").read_text()) == {}
    assert int(_ok(tb.ssh("node1", ["python3", "-c", fetch, endpoint]))) == SHARD_BYTES


def test_fault_arguments_are_checked(tb):
    assert tb.fault("kill-node", "node9", check=False).returncode == 2
    assert tb.fault("hub-drop-after", "lots", check=False).returncode == 2


def test_kill_node_is_a_spot_reclaim_and_revive_a_fresh_machine(tb):
    before = _ok(tb.ssh("node0", "cat /proc/sys/kernel/random/boot_id /etc/machine-id")).split()
    _ok(tb.ssh("node0", "echo edited > /etc/docker/daemon.json; touch /mnt/nvme/weights; "
                        "setsid nohup sleep 600 >/dev/null 2>&1 < /dev/null &"))
    tb.fault("kill-node", "node0")
    netns = f"k3tb{tb.idx}-node0"
    assert netns not in os.listdir("/run/netns")
    started = time.monotonic()
    proc = tb.ssh("node0", "true", connect_timeout=30)
    elapsed = time.monotonic() - started
    # Refused at once (no route), well before the 30 s connect timeout it was given.
    assert proc.returncode == 255 and elapsed < 20, f"{elapsed:.1f} s: {proc.stderr}"
    assert "No route to host" in proc.stderr
    tb.fault("revive-node", "node0")
    after = _ok(tb.ssh("node0", "cat /proc/sys/kernel/random/boot_id /etc/machine-id")).split()
    assert after[0] != before[0] and after[1] != before[1]
    assert _ok(tb.ssh("node0", "ls -A /mnt/nvme; pgrep -x sleep || true")) == ""
    # the fresh machine's daemon.json again: as seeded, plus the nvidia runtime entry of the
    # default toolkit profile (toolkit-runtime: `nvidia-ctk runtime configure` ran)
    fresh = json.loads(_ok(tb.ssh("node0", "cat /etc/docker/daemon.json")))
    nvidia = {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}
    assert fresh == {**json.loads(DAEMON_JSON), "runtimes": nvidia}


def test_killed_node_can_be_revived_twice_and_others_keep_running(tb):
    tb.fault("kill-node", "node2")
    tb.fault("kill-node", "node2")  # killing a dead node again is harmless
    _ok(tb.ssh("node1", "true"))
    tb.fault("revive-node", "node2")
    tb.fault("revive-node", "node2")  # reviving a live node restarts it fresh
    _ok(tb.ssh("node2", "true"))


# --- down --------------------------------------------------------------------------------------

def test_down_leaves_nothing_behind_and_is_repeatable(tmp_path):
    tb_dir = tmp_path / "testbed"
    with testbed(tmp_path, nodes=2, check_clean=False) as bed:
        _ok(bed.ssh("node1", "setsid nohup sleep 600 >/dev/null 2>&1 < /dev/null & "
                             "python3 -m http.server -b 127.0.0.1 9999 >/dev/null 2>&1 < /dev/null &"))
        bed.fault("partition", "node0")
        assert leftovers(tb_dir, bed.idx), "leftovers() found nothing while the testbed runs"
        bed.down()
        assert_nothing_left(tb_dir, bed.idx)
        assert "nothing is up" in bed.down().stdout
    assert_nothing_left(tb_dir, bed.idx)


def test_an_idx_another_testbed_claimed_since_is_not_this_ones_leftover(tb):
    """Tests run side by side: the idx one testbed gives back at `down` can be claimed by the
    next one before the first checks what it left. The bridge's alias says whose it is."""
    mine = tb.dir.resolve()
    alias = Path(f"/sys/class/net/k3tb{tb.idx}/ifalias").read_text().strip()
    assert alias == str(mine)
    assert f"link k3tb{tb.idx}" in leftovers(mine, tb.idx)   # its own bridge: found
    assert f"link k3tb{tb.idx}" not in leftovers(mine.parent / "gave-it-back", tb.idx)


def test_down_after_a_crashed_up(tmp_path):
    tb_dir = tmp_path / "testbed"
    up = subprocess.Popen([sys.executable, str(TESTBED), *up_args(tb_dir, 8, {"no_hub": True})],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and up.poll() is None:
        state = read_state(tb_dir) if (tb_dir / "testbed.json").exists() else {}
        if any(r.get("init_pid") for r in state.get("nodes", {}).values()):
            break
        time.sleep(0.01)
    up.send_signal(signal.SIGKILL)
    up.wait()
    idx = read_state(tb_dir)["idx"]
    assert leftovers(tb_dir, idx), "the crash happened too late or too early to test anything"
    run_testbed("down", "--dir", str(tb_dir))
    assert_nothing_left(tb_dir, idx)
    run_testbed("down", "--dir", str(tb_dir))


def test_bad_up_arguments_exit_2_and_create_nothing(tmp_path):
    proc = run_testbed(*up_args(tmp_path / "tb", 2, {"node": ["node5:user=ubuntu"]}), check=False)
    assert proc.returncode == 2 and "node5" in proc.stderr
    proc = run_testbed(*up_args(tmp_path / "tb", 2, {"node": ["node1:colour=red"]}), check=False)
    assert proc.returncode == 2 and "colour" in proc.stderr
    assert not (tmp_path / "tb" / "testbed.json").exists()


def test_hub_failure_fails_up_clearly_and_cleans_up(tmp_path):
    proc = run_testbed(*up_args(tmp_path / "tb", 1, {"shard_bytes": 10}), check=False)
    assert proc.returncode == 1 and "mock hub exited before it was ready" in proc.stderr
    state = read_state(tmp_path / "tb")
    assert not state["active"]
    assert_nothing_left(tmp_path / "tb", state["last_idx"])


def test_hub_token_file_makes_the_hub_require_a_bearer_token(tmp_path):
    token = tmp_path / "token"
    token.write_text("hf_testbedtoken\n")
    fetch = ("import sys, urllib.error, urllib.request\n"
             "req = urllib.request.Request(sys.argv[1] + '/api/models/moonshotai/Kimi-K3')\n"
             "if len(sys.argv) > 2: req.add_header('Authorization', 'Bearer ' + sys.argv[2])\n"
             "try:\n    print(urllib.request.urlopen(req, timeout=5).status)\n"
             "except urllib.error.HTTPError as err:\n    print(err.code)\n")
    with testbed(tmp_path, nodes=1, hub_token_file=str(token)) as bed:
        endpoint = yaml.safe_load(bed.inventory.read_text())["model"]["endpoint"]
        assert _ok(bed.ssh("node0", ["python3", "-c", fetch, endpoint])).strip() == "401"
        assert _ok(bed.ssh("node0", ["python3", "-c", fetch, endpoint, "hf_testbedtoken"])).strip() == "200"
        assert _eventually(lambda: bed.stats()["hub"]["by_node"]["node0"]["authorized_requests"] == 1)


@pytest.mark.slow
def test_32_nodes_up_and_down(tmp_path):
    started = time.monotonic()
    with testbed(tmp_path, nodes=32, gpu="b300", engine="vllm") as bed:
        up_seconds = time.monotonic() - started
        assert len(bed.nodes) == 32
        inv = yaml.safe_load(bed.inventory.read_text())
        assert inv["engine"]["kind"] == "vllm" and inv["gpu"]["model"] == "b300"
        assert inv["nodes"][31]["address"] == f"10.213.{bed.idx}.41"
        assert _ok(bed.ssh("node31", "nvidia-smi --query-gpu=name --format=csv,noheader")).count(
            "NVIDIA B300 SXM6 AC") == 8
    total = time.monotonic() - started
    print(f"32 nodes: up {up_seconds:.1f} s, up+down {total:.1f} s")
    # 2.9 s on an idle 2-core VM (nodes are set up together: one `ip -batch`, sshds started
    # side by side). 120 s leaves any load room, and still fails if nodes came up one after
    # another with a wait of a few seconds each (32 x 4 s).
    assert up_seconds < 120
