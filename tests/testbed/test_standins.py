"""The node stand-ins (docker, nvidia-smi, systemctl) run directly: no root, no namespaces.

Each test gets its own runtime dir, /etc/docker and rootfs (for docker's data roots) in tmp,
and a fake engine entry that reports what the container contract handed it.
"""
import concurrent.futures
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parents[2] / "scripts" / "tb" / "standins"

FAKE_ENTRY = textwrap.dedent('''
    import json, os, signal, subprocess, sys, time
    argv = sys.argv[1:]
    report = {"argv": argv, "exec": os.environ.get("K3TB_EXEC"), "cwd": os.getcwd(),
              "exec_argv": os.environ.get("K3TB_EXEC_ARGV"), "home": os.environ.get("HOME"),
              "container": os.environ.get("K3TB_CONTAINER"), "run": os.environ.get("K3TB_RUN"),
              "env": {k: v for k, v in os.environ.items() if k.startswith("T_")}}
    print("FAKE " + json.dumps(report), flush=True)
    op = argv[0] if argv else ""
    if op == "sleep":
        time.sleep(float(argv[1]))
    elif op == "exit":
        sys.exit(int(argv[1]))
    elif op == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(60)
    elif op == "child":
        child = subprocess.Popen(["sleep", "60"])
        open(argv[1], "w").write(str(child.pid))
        time.sleep(60)
    elif op == "lines":
        for i in range(int(argv[1])):
            print(f"line {i}", flush=True)
            time.sleep(float(argv[2]) if len(argv) > 2 else 0)
    elif op == "bar":  # a tqdm bar: CR + bar per update, one LF at close (argv[3] exists)
        for i in range(int(argv[1])):
            sys.stderr.write(f"\\rbar {i}/{argv[1]}")
            sys.stderr.flush()
        open(argv[2], "w").close()
        while not os.path.exists(argv[3]):
            time.sleep(0.05)
        sys.stderr.write("\\n")
        sys.stderr.flush()
    elif op == "no-newline":  # argv[1] bytes without a newline, then silence
        sys.stdout.write("x" * int(argv[1]))
        sys.stdout.flush()
        open(argv[2], "w").close()
        time.sleep(60)
    elif op == "gpu":
        run = os.environ["K3TB_RUN"]
        with open(os.path.join(run, "gpu.json"), "w") as f:
            json.dump({"pid": os.getpid(), "used_mib": [71000] * 8}, f)
        time.sleep(60)
''')


class Node:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.run_dir = tmp / "run"
        self.etc = tmp / "etc-docker"
        self.etc_containerd = tmp / "etc-containerd"
        self.rootfs = tmp / "rootfs"
        for d in (self.run_dir, self.etc, self.etc_containerd, self.rootfs):
            d.mkdir()
        self.entry = tmp / "entry.py"
        self.entry.write_text(FAKE_ENTRY)
        # containerd.io's containerd runs (dockerd checks that its socket exists)
        (self.rootfs / "run/containerd").mkdir(parents=True)
        (self.rootfs / "run/containerd/containerd.sock").touch()
        self.node_json({})
        self.env = {"PATH": os.environ["PATH"], "K3TB_RUN": str(self.run_dir),
                    "K3TB_ETC_DOCKER": str(self.etc), "K3TB_ROOTFS": str(self.rootfs),
                    "K3TB_ETC_CONTAINERD": str(self.etc_containerd),
                    "K3TB_ENGINE_ENTRY": str(self.entry)}

    def node_json(self, overrides):
        node = {"name": "node0", "gpu": "h100", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 8,
                "gpu_mem_mib": 81559, "cuda": "13.0", "driver": "580.65.06",
                "engine_load_seconds": 0.1, "pull_seconds": 0.05, "nvidia_toolkit": True}
        node.update(overrides)
        (self.run_dir / "node.json").write_text(json.dumps(node))
        # the toolkit as dockerd finds it: its hook on PATH (the testbed does the same per node)
        hook = self.rootfs / "usr/local/sbin/nvidia-container-runtime-hook"
        if node["nvidia_toolkit"]:
            hook.parent.mkdir(parents=True, exist_ok=True)
            hook.write_text("#!/bin/sh\nexit 0\n")
            hook.chmod(0o755)
        elif hook.exists():
            hook.unlink()

    def sh(self, tool, *args, check=None, timeout=30, env=None, bindir=STANDINS, **kw):
        result = subprocess.run([str(bindir / tool), *args], capture_output=True, text=True,
                                timeout=timeout, env={**self.env, **(env or {})}, **kw)
        if check is not None:
            assert result.returncode == check, (result.stdout, result.stderr)
        return result

    def docker(self, *args, **kw):
        return self.sh("docker", *args, **kw)

    def systemctl(self, *args, **kw):
        return self.sh("systemctl", *args, **kw)

    def pull(self, image="lmsysorg/sglang:kimi-k3"):
        return self.docker("pull", image, check=0)

    def containers(self):
        cdir = self.run_dir / "docker" / "containers"
        return list(cdir.iterdir()) if cdir.exists() else []

    def fake_report(self, name, index=0):
        logs = self.docker("logs", name, check=0).stdout
        reports = [json.loads(line[5:]) for line in logs.splitlines() if line.startswith("FAKE ")]
        return reports[index]

    def kill_everything(self):
        for cdir in self.containers():
            state = json.loads((cdir / "state.json").read_text())
            for pid in [state.get("pid")] + [e[0] for e in state.get("execs", [])]:
                if pid:
                    _kill(pid, group=True)
            if state.get("supervisor_pid"):
                _kill(state["supervisor_pid"], group=False)


def _kill(pid, group):
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.kill_everything()


# ---------------------------------------------------------------- nvidia-smi

def test_nvidia_smi_table_shows_driver_cuda_and_every_gpu(node):
    out = node.sh("nvidia-smi", check=0).stdout
    assert "Driver Version: 580.65.06" in out and "CUDA Version: 13.0" in out
    assert out.count("NVIDIA H100 80GB HBM3") == 8
    assert "0MiB /  81559MiB" in out and "No running processes found" in out
    node.node_json({"gpu_count": 4, "cuda": "12.8", "driver": "570.133.20"})
    out = node.sh("nvidia-smi", check=0).stdout
    assert "CUDA Version: 12.8" in out and out.count("NVIDIA H100") == 4


def test_nvidia_smi_list_and_queries(node):
    listed = node.sh("nvidia-smi", "-L", check=0).stdout.splitlines()
    assert len(listed) == 8 and listed[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    q = "--query-gpu=name,memory.total,memory.used,memory.free,driver_version,index,count"
    bare = node.sh("nvidia-smi", q, "--format=csv,noheader,nounits", check=0).stdout.splitlines()
    assert len(bare) == 8
    assert bare[3] == "NVIDIA H100 80GB HBM3, 81559, 0, 81559, 580.65.06, 3, 8"
    full = node.sh("nvidia-smi", q, "--format=csv", check=0).stdout.splitlines()
    assert full[0] == ("name, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
                       "driver_version, index, count")
    assert full[1] == "NVIDIA H100 80GB HBM3, 81559 MiB, 0 MiB, 81559 MiB, 580.65.06, 0, 8"
    uuids = node.sh("nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", check=0).stdout.split()
    assert len(set(uuids)) == 8 and uuids == [line.split("UUID: ")[1].rstrip(")") for line in listed]
    one = node.sh("nvidia-smi", "--query-gpu=index", "--format=csv,noheader", "-i", "5", check=0)
    assert one.stdout == "5\n"


def test_nvidia_smi_topo_prints_the_sourced_transcript_of_such_a_node(node):
    real = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "nvidia-smi"
    out = node.sh("nvidia-smi", "topo", "-m", check=0).stdout     # 8 GPUs, no HCA
    assert out == (real / "unknown" / "topo-m-h100-8x-p5-no-hca.txt").read_text()
    node.node_json({"ib_hcas": 8})
    out = node.sh("nvidia-smi", "topo", "-m", check=0).stdout
    assert out == (real / "570.133.20" / "topo-m-h100-8x-8hca.txt").read_text()
    node.node_json({"ib_hcas": 8, "lost_gpu": 3})
    assert node.sh("nvidia-smi", "topo", "-m", check=255).stdout.startswith("Unable to determine")
    node.node_json({"gpu_count": 4})
    r = node.sh("nvidia-smi", "topo", "-m", check=2)
    assert r.stdout == "" and "no sourced `topo -m` transcript for 4 GPUs with 0 HCAs" in r.stderr


def test_nvidia_smi_rejects_fields_it_does_not_have(node):
    r = node.sh("nvidia-smi", "--query-gpu=name,cuda_version", "--format=csv")
    assert r.returncode == 2
    assert 'Field "cuda_version" is not a valid field to query.' in r.stdout
    r = node.sh("nvidia-smi", "--query-gpu=name")
    assert r.returncode == 2 and "'--format=' switch is missing" in r.stdout
    assert node.sh("nvidia-smi", "--bogus").returncode == 2


def test_nvidia_smi_memory_counts_only_while_the_engine_lives(node):
    engine = subprocess.Popen(["sleep", "30"])
    try:
        (node.run_dir / "gpu.json").write_text(json.dumps({"pid": engine.pid, "used_mib": [71234] * 8}))
        q = ("--query-gpu=memory.used,memory.free", "--format=csv,noheader,nounits")
        assert node.sh("nvidia-smi", *q, check=0).stdout.splitlines()[0] == "71234, 10325"
        assert "71234MiB /  81559MiB" in node.sh("nvidia-smi", check=0).stdout
        apps = node.sh("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader",
                       check=0).stdout.splitlines()
        assert apps[0] == f"{engine.pid}, 71234 MiB" and len(apps) == 8
    finally:
        engine.kill()
        engine.wait()
    assert node.sh("nvidia-smi", *q, check=0).stdout.splitlines()[0] == "0, 81559"


def test_no_gpus_is_reported_like_the_driver(node):
    node.node_json({"gpu_count": 0})
    r = node.sh("nvidia-smi")
    assert r.returncode == 6 and "No devices were found" in r.stdout


# ---------------------------------------------------------------- calls log

def test_every_invocation_is_logged_even_when_concurrent(node):
    calls = [("nvidia-smi", "-L"), ("systemctl", "is-active", "docker"), ("docker", "info")] * 8
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: node.sh(*c), calls))
    lines = (node.run_dir / "calls.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == len(calls)
    assert sorted(tuple(r["argv"]) for r in records) == sorted(calls)
    assert all(r["tool"] == r["argv"][0] and r["t"] > 1e9 for r in records)


def test_standins_work_when_copied_elsewhere(node, tmp_path):
    bindir = tmp_path / "bin"
    shutil.copytree(STANDINS, bindir, ignore=shutil.ignore_patterns("__pycache__"))
    linkdir = tmp_path / "links"
    linkdir.mkdir()
    (linkdir / "nvidia-smi").symlink_to(bindir / "nvidia-smi")
    assert node.sh("nvidia-smi", "-L", bindir=linkdir, check=0).stdout.count("GPU ") == 8
    assert node.sh("docker", "--version", bindir=bindir, check=0).stdout.startswith("Docker version")


# ---------------------------------------------------------------- start-up cost

# Runs a stand-in in-process as its shebang would, then lists every module it loaded.
MODULES_PROBE = textwrap.dedent('''
    import os, sys
    tool = sys.argv[1]
    sys.argv = sys.argv[1:]
    try:
        exec(compile(open(tool).read(), tool, "exec"), {"__name__": "__main__", "__file__": tool})
    except SystemExit:
        pass
    with open(os.environ["T_MODULES"], "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
''')
# Each costs milliseconds to import; k3deploy's fact batches call these tools several times per
# node per step, so only the commands that change things may load them.
# (`site` too: the shebang's -S skips it, the tools use the standard library only.)
HEAVY = {"site", "subprocess", "hashlib", "datetime", "uuid", "secrets", "random", "shutil", "signal",
         "tbstand.lifecycle", "tbstand.supervisor", "tbstand.dockerrun"}


def test_read_only_calls_load_no_process_or_hash_machinery(node, tmp_path):
    node.pull()
    node.docker("run", "-d", "--name", "k3", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    probe = tmp_path / "probe.py"
    probe.write_text(MODULES_PROBE)
    reads = [("docker", "info", "--format", "{{json .}}"), ("docker", "inspect", "--type", "container", "k3"),
             ("docker", "image", "inspect", "lmsysorg/sglang:kimi-k3"), ("docker", "logs", "--tail", "3", "k3"),
             ("docker", "ps", "-a"), ("nvidia-smi", "-q"), ("nvidia-smi", "-L"),
             ("systemctl", "is-active", "docker")]
    for tool, *args in reads:
        listing = tmp_path / "modules.txt"
        shebang = (STANDINS / tool).read_text().splitlines()[0][2:].split()
        run = subprocess.run([*shebang, str(probe), str(STANDINS / tool), *args],
                             capture_output=True, text=True, env={**node.env, "T_MODULES": str(listing)})
        assert run.returncode == 0, (tool, args, run.stderr)
        loaded = set(listing.read_text().split())
        assert "tbstand.runtime" in loaded and loaded & HEAVY == set(), (tool, args)
    # ...while the commands that change things still load what they need
    r = node.docker("rm", "-f", "k3", check=0)
    assert r.stdout == "k3\n" and node.containers() == []


def test_gpu_uuids_and_timestamps_match_the_stdlib_they_replace(node, monkeypatch):
    import datetime
    import random
    import uuid
    listed = node.sh("nvidia-smi", "-L", check=0).stdout.splitlines()
    assert [line.split("UUID: GPU-")[1].rstrip(")") for line in listed] == \
        [str(uuid.uuid5(uuid.NAMESPACE_DNS, f"k3tb.node0.{i}")) for i in range(8)]
    monkeypatch.syspath_prepend(str(STANDINS))
    from tbstand import runtime
    stamps = [random.uniform(1e9, 2e9) for _ in range(20000)]
    stamps += [round(random.uniform(1.7e9, 1.8e9), 6) + 5e-7 for _ in range(20000)]  # rounding ties
    stamps += [1.0000005, 1764547200.9999995, 1764547200.9999996, 1764547201]
    for t in stamps:
        dt = datetime.datetime.fromtimestamp(t, datetime.UTC)
        # Go's RFC3339Nano: trailing zeros of the fraction trimmed, the dot too when none is left
        frac = f".{dt.microsecond:06d}".rstrip("0").rstrip(".")
        assert runtime.rfc3339(t) == dt.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z", t
    assert runtime.rfc3339(0) == "0001-01-01T00:00:00Z"


# ---------------------------------------------------------------- systemctl / daemon

def test_systemctl_stop_start_and_is_active(node):
    r = node.systemctl("is-active", "docker", check=0)
    assert r.stdout == "active\n"
    node.systemctl("stop", "docker", "docker.socket", check=0)
    r = node.systemctl("is-active", "docker", "docker.socket")
    assert r.returncode == 3 and r.stdout == "inactive\ninactive\n"
    r = node.docker("info")
    assert r.returncode == 1
    assert "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" in r.stderr
    assert node.docker("ps").returncode == 1
    assert node.systemctl("status", "docker").returncode == 3
    node.systemctl("start", "docker", check=0)
    assert node.systemctl("is-active", "docker", "docker.socket", check=0).stdout == "active\nactive\n"
    assert "Active: active (running)" in node.systemctl("status", "docker", check=0).stdout
    r = node.systemctl("start", "nginx")
    assert r.returncode == 5 and "Unit nginx.service not found" in r.stderr
    assert node.systemctl("is-active", "--quiet", "docker", check=0).stdout == ""


def test_data_root_moves_only_on_restart_and_hides_old_images(node):
    assert node.docker("info", "--format", "{{.DockerRootDir}}", check=0).stdout == "/var/lib/docker\n"
    node.pull()
    assert (node.rootfs / "var/lib/docker/image/overlay2/repositories.json").exists()
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker"}')
    # the running daemon read its config when it started
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/var/lib/docker\n"
    node.systemctl("restart", "docker", check=0)
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/mnt/nvme/docker\n"
    assert "Docker Root Dir: /mnt/nvme/docker" in node.docker("info", check=0).stdout
    assert node.docker("images", "-q", check=0).stdout == ""
    assert node.docker("image", "inspect", "lmsysorg/sglang:kimi-k3").returncode == 1
    node.pull()
    assert (node.rootfs / "mnt/nvme/docker/image/overlay2/repositories.json").exists()
    assert node.docker("images", "-q", "lmsysorg/sglang:kimi-k3", check=0).stdout.strip()


def test_invalid_daemon_json_fails_the_start(node):
    node.systemctl("stop", "docker", "docker.socket", check=0)
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker",')
    r = node.systemctl("start", "docker")
    assert r.returncode == 1 and "Job for docker.service failed" in r.stderr
    r = node.systemctl("is-active", "docker")
    assert r.returncode == 3 and r.stdout == "failed\n"
    assert node.docker("info").returncode == 1
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker", "no-such-option": 1}')
    # systemd restarted the failed dockerd itself (Restart=always) up to StartLimitBurst: a
    # start by hand within the minute is refused until reset-failed
    r = node.systemctl("start", "docker")
    assert r.returncode == 1 and "attempted too often" in r.stderr
    node.systemctl("reset-failed", "docker", check=0)
    assert node.systemctl("start", "docker").returncode == 1
    assert "no-such-option" in node.systemctl("status", "docker").stdout
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker", "runtimes": {}}')
    node.systemctl("reset-failed", "docker", check=0)
    node.systemctl("start", "docker", check=0)
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/mnt/nvme/docker\n"


def test_socket_activation_restarts_a_stopped_service(node):
    r = node.systemctl("stop", "docker", check=0)
    assert "can still be activated by" in r.stderr
    assert node.systemctl("is-active", "docker").returncode == 3
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker"}')
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/mnt/nvme/docker\n"
    assert node.systemctl("is-active", "docker", check=0).stdout == "active\n"


def test_preseeded_daemon_json_is_read_at_boot(node):
    (node.etc / "daemon.json").write_text('{"data-root": "/mnt/nvme/docker"}')
    assert node.docker("info", "-f", "{{.DockerRootDir}}", check=0).stdout == "/mnt/nvme/docker\n"


# ---------------------------------------------------------------- images

def test_pull_images_and_image_inspect(node):
    node.node_json({"pull_seconds": 0.4})
    t0 = time.monotonic()
    out = node.pull().stdout
    assert time.monotonic() - t0 >= 0.4
    assert "Pull complete" in out and "Status: Downloaded newer image for lmsysorg/sglang:kimi-k3" in out
    assert "Image is up to date" in node.pull().stdout
    listing = node.docker("images", check=0).stdout.splitlines()
    assert listing[0].split() == ["REPOSITORY", "TAG", "IMAGE", "ID", "CREATED", "SIZE"]
    assert listing[1].split()[:2] == ["lmsysorg/sglang", "kimi-k3"]
    image_id = node.docker("images", "-q", "lmsysorg/sglang:kimi-k3", check=0).stdout.strip()
    assert len(image_id) == 12 and image_id in listing[1]
    doc = json.loads(node.docker("image", "inspect", "lmsysorg/sglang:kimi-k3", check=0).stdout)
    assert doc[0]["RepoTags"] == ["lmsysorg/sglang:kimi-k3"]
    r = node.docker("image", "inspect", "lmsysorg/sglang:kimi-k3-cu12")
    assert r.returncode == 1 and "No such image: lmsysorg/sglang:kimi-k3-cu12" in r.stderr
    assert node.docker("images", "-q", "lmsysorg/sglang:kimi-k3-cu12", check=0).stdout == ""
    node.pull("vllm/vllm-openai:some-unknown-tag")
    r = node.docker("pull", "lmsysorg/sglang:does-not-exist")
    assert r.returncode == 1 and "manifest unknown" in r.stderr
    r = node.docker("pull", "Bad/Name")
    assert r.returncode == 1 and "invalid reference format" in r.stderr


def test_full_disk_fails_the_pull(node):
    node.node_json({"image_size_mib": 2})
    (node.etc / "daemon.json").write_text('{"data-root": "/dev/full-root"}')
    root = node.rootfs / "dev/full-root/overlay2"
    root.mkdir(parents=True)
    # every layer file of this pull lands on /dev/full
    for i in range(3):
        import hashlib
        layer = hashlib.sha256(f"lmsysorg/sglang:kimi-k3:{i}".encode()).hexdigest()
        (root / layer / "diff").mkdir(parents=True)
        (root / layer / "diff" / "layer.bin").symlink_to("/dev/full")
    r = node.docker("pull", "lmsysorg/sglang:kimi-k3")
    assert r.returncode == 1 and "no space left on device" in r.stderr.lower()
    assert node.docker("images", "-q", check=0).stdout == ""


# ---------------------------------------------------------------- run / ps / logs / inspect / exec / rm

GUIDE_RUN = ["run", "-d", "--name", "sgl", "--gpus", "all", "--network", "host", "--ipc=host",
             "--shm-size", "32g", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]


def test_run_hands_the_entry_its_contract(node, tmp_path):
    node.pull()
    env_file = tmp_path / "engine.env"
    env_file.write_text("# comment\nT_FROM_FILE=file value\nT_OVERRIDE=file\n")
    hf = tmp_path / "hf"
    r = node.docker(*GUIDE_RUN, "-v", f"{hf}:/root/.cache/huggingface", "-v", f"{tmp_path}/cfg:/cfg:ro",
                    "--env-file", str(env_file), "--env", "T_OVERRIDE=flag", "-e", "T_PLAIN=1",
                    "--label", "k3deploy.rank=0", "--restart", "no",
                    "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    cid = r.stdout.strip()
    assert len(cid) == 64 and hf.is_dir()
    report = wait_for(lambda: "FAKE" in node.docker("logs", "sgl").stdout) and node.fake_report("sgl")
    assert report["argv"] == ["sleep", "30"] and report["exec"] is None and report["cwd"] == "/"
    assert report["exec_argv"] is None and report["home"] == "/root"
    assert report["run"] == str(node.run_dir)
    assert report["env"] == {"T_FROM_FILE": "file value", "T_OVERRIDE": "flag", "T_PLAIN": "1"}
    config_path = Path(report["container"])
    assert config_path == node.run_dir / "docker" / "containers" / cid / "config.json"
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    config = json.loads(config_path.read_text())
    assert config["id"] == cid and config["name"] == "sgl" and config["image"] == "lmsysorg/sglang:kimi-k3"
    assert config["cmd"] == ["sleep", "30"] and config["gpus"] == "all"
    assert config["gpu_indices"] == list(range(8)) and config["network"] == "host"
    assert config["mounts"] == [{"host": str(hf), "container": "/root/.cache/huggingface", "ro": False},
                                {"host": f"{tmp_path}/cfg", "container": "/cfg", "ro": True}]
    assert config["labels"] == {"k3deploy.rank": "0"} and config["env"]["T_PLAIN"] == "1"
    assert config["created"] > 0


def test_ps_inspect_and_logs(node):
    node.pull()
    node.docker(*GUIDE_RUN, "lmsysorg/sglang:kimi-k3", "lines", "5", check=0)
    node.docker("run", "-d", "--name", "other", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    assert wait_for(lambda: node.docker("inspect", "-f", "{{.State.Status}}", "sgl").stdout == "exited\n")
    ps = node.docker("ps", check=0).stdout.splitlines()
    assert ps[0].split()[:2] == ["CONTAINER", "ID"] and len(ps) == 2 and ps[1].endswith("other")
    assert "Up " in ps[1]
    names = node.docker("ps", "-a", "--format", "{{.Names}}|{{.Status}}|{{.Image}}", check=0).stdout
    assert names.splitlines()[0].startswith("other|Up ")
    assert names.splitlines()[1].startswith("sgl|Exited (0) ") and names.endswith(" ago|lmsysorg/sglang:kimi-k3\n")
    assert node.docker("ps", "-a", "--filter", "name=sgl", "--format", "{{.Names}}", check=0).stdout == "sgl\n"
    assert node.docker("ps", "--filter", "name=sgl", "-q", check=0).stdout == ""
    assert node.docker("ps", "-a", "-f", "name=^/sgl$", "--format", "{{.Names}}", check=0).stdout == "sgl\n"
    assert node.docker("ps", "-a", "-f", "name=^sg$", "-q", check=0).stdout == ""
    ids = node.docker("ps", "-aq", "--filter", "status=running", check=0).stdout.split()
    assert len(ids) == 1 and len(ids[0]) == 12
    doc = json.loads(node.docker("inspect", "sgl", check=0).stdout)[0]
    assert doc["Name"] == "/sgl" and doc["State"]["Running"] is False and doc["State"]["ExitCode"] == 0
    assert doc["Config"]["Image"] == "lmsysorg/sglang:kimi-k3" and doc["Config"]["Cmd"] == ["lines", "5"]
    assert doc["HostConfig"]["NetworkMode"] == "host" and doc["HostConfig"]["ShmSize"] == 32 << 30
    assert {"Name": "memlock", "Soft": -1, "Hard": -1} in doc["HostConfig"]["Ulimits"]
    running = node.docker("inspect", "--format", "{{.State.Running}} {{.State.Pid}}", "other", check=0).stdout
    assert running.startswith("true ") and alive(int(running.split()[1]))
    cfg = json.loads(node.docker("inspect", "--format", "{{json .Config}}", "sgl", check=0).stdout)
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in cfg["Env"]
    logs = node.docker("logs", "sgl", check=0).stdout.splitlines()
    assert logs[1:] == [f"line {i}" for i in range(5)]
    assert node.docker("logs", "--tail", "2", "sgl", check=0).stdout == "line 3\nline 4\n"
    r = node.docker("inspect", "nope")
    assert r.returncode == 1 and "No such object: nope" in r.stderr
    r = node.docker("logs", "nope")
    assert r.returncode == 1 and "No such container: nope" in r.stderr


def test_logs_follow_ends_with_the_container(node):
    node.pull()
    node.docker("run", "-d", "--name", "slow", "lmsysorg/sglang:kimi-k3", "lines", "4", "0.2", check=0)
    t0 = time.monotonic()
    out = node.docker("logs", "-f", "slow", check=0).stdout
    assert time.monotonic() - t0 >= 0.4
    assert out.splitlines()[-4:] == ["line 0", "line 1", "line 2", "line 3"]


def test_foreground_run_streams_and_returns_the_exit_code(node):
    node.pull()
    r = node.docker("run", "--rm", "lmsysorg/sglang:kimi-k3", "exit", "7")
    assert r.returncode == 7 and "FAKE" in r.stdout
    assert node.docker("ps", "-aq", check=0).stdout == ""


def test_exec_runs_in_the_container_context(node):
    node.pull()
    node.docker("run", "-d", "--name", "c1", "-e", "T_BASE=1", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    r = node.docker("exec", "-e", "T_EXTRA=2", "c1", "exit", "4")
    assert r.returncode == 4
    report = json.loads(r.stdout.split("FAKE ", 1)[1].splitlines()[0])
    assert report["exec"] == "1" and report["argv"] == ["exit", "4"]
    assert json.loads(report["exec_argv"]) == ["exit", "4"]
    assert report["env"] == {"T_BASE": "1", "T_EXTRA": "2"}
    assert report["container"].endswith("/config.json")
    marker = node.tmp / "exec-child"
    node.docker("exec", "-d", "c1", "child", str(marker), check=0)
    assert wait_for(marker.exists)
    exec_child = int(marker.read_text())
    r = node.docker("exec", "nope", "x")
    assert r.returncode == 1 and "No such container: nope" in r.stderr
    node.docker("rm", "-f", "c1", check=0)
    assert wait_for(lambda: not alive(exec_child)), "rm -f must take the exec'd processes along"


def test_rm_force_kills_the_whole_process_group(node):
    node.pull()
    marker = node.tmp / "child"
    node.docker("run", "-d", "--name", "c2", "lmsysorg/sglang:kimi-k3", "child", str(marker), check=0)
    assert wait_for(marker.exists)
    child = int(marker.read_text())
    pid = int(node.docker("inspect", "-f", "{{.State.Pid}}", "c2", check=0).stdout)
    r = node.docker("rm", "c2")
    assert r.returncode == 1 and "container is running" in r.stderr
    assert node.docker("rm", "-f", "c2", check=0).stdout == "c2\n"
    assert wait_for(lambda: not alive(pid) and not alive(child))
    assert node.containers() == []
    r = node.docker("rm", "-f", "c2")
    assert r.returncode == 0 and "No such container: c2" in r.stderr
    assert node.docker("rm", "c2").returncode == 1


def test_stop_sends_term_then_kill(node):
    node.pull()
    node.docker("run", "-d", "--name", "polite", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    node.docker("run", "-d", "--name", "stubborn", "lmsysorg/sglang:kimi-k3", "ignore-term", check=0)
    assert wait_for(lambda: "ignoring SIGTERM" in node.docker("logs", "stubborn").stdout)
    assert node.docker("stop", "polite", check=0).stdout == "polite\n"
    assert node.docker("inspect", "-f", "{{.State.ExitCode}}", "polite", check=0).stdout == "143\n"
    t0 = time.monotonic()
    node.docker("stop", "-t", "1", "stubborn", check=0)
    assert 1.0 <= time.monotonic() - t0 < 5
    assert node.docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", "stubborn",
                       check=0).stdout == "exited 137\n"
    assert node.docker("ps", "-a", "--format", "{{.Status}}", check=0).stdout.startswith("Exited (137)")


def test_stopping_the_daemon_stops_its_containers(node):
    node.pull()
    node.docker("run", "-d", "--name", "c3", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    pid = int(node.docker("inspect", "-f", "{{.State.Pid}}", "c3", check=0).stdout)
    node.systemctl("stop", "docker", "docker.socket", check=0)
    assert not alive(pid)
    node.systemctl("start", "docker", check=0)
    assert node.docker("inspect", "-f", "{{.State.Status}}", "c3", check=0).stdout == "exited\n"


def test_restart_policy_on_failure(node):
    node.pull()
    node.docker("run", "-d", "--name", "flaky", "--restart", "on-failure:2", "lmsysorg/sglang:kimi-k3",
                "exit", "3", check=0)
    assert wait_for(lambda: node.docker("inspect", "-f", "{{.RestartCount}} {{.State.Status}}", "flaky")
                    .stdout == "2 exited\n")
    assert node.docker("logs", "flaky", check=0).stdout.count("FAKE") == 3


# ---------------------------------------------------------------- run failures

def test_unknown_flag_fails_like_docker(node):
    node.pull()
    r = node.docker("run", "-d", "--xyz", "lmsysorg/sglang:kimi-k3", "sleep", "1")
    assert r.returncode == 125 and r.stderr == (   # docker/cli cli/cobra.go@v28.5.1 FlagErrorFunc
        "unknown flag: --xyz\n\nUsage:  docker run [OPTIONS] IMAGE [COMMAND] [ARG...]\n\n"
        "Run 'docker run --help' for more information\n")
    r = node.docker("run", "-dz", "lmsysorg/sglang:kimi-k3")
    assert r.returncode == 125 and "unknown shorthand flag: 'z' in -dz" in r.stderr
    r = node.docker("run", "--shm-size", "32x", "lmsysorg/sglang:kimi-k3")
    assert r.returncode == 125 and "invalid argument \"32x\" for \"--shm-size\" flag" in r.stderr
    r = node.docker("run", "--ulimit", "bogus=1", "lmsysorg/sglang:kimi-k3")
    assert r.returncode == 125 and "invalid ulimit type: bogus" in r.stderr
    r = node.docker("run", "--name")
    assert r.returncode == 125 and "flag needs an argument: --name" in r.stderr
    assert node.docker("ps", "-aq", check=0).stdout == ""
    r = node.docker("frobnicate")
    assert r.returncode == 1 and "'frobnicate' is not a docker command" in r.stderr


def test_missing_image_is_not_pulled_implicitly(node):
    r = node.docker("run", "-d", "--name", "k3", "lmsysorg/sglang:kimi-k3", "sleep", "1")
    assert r.returncode == 125
    assert "Unable to find image 'lmsysorg/sglang:kimi-k3' locally" in r.stderr
    assert "docker pull lmsysorg/sglang:kimi-k3" in r.stderr
    assert node.docker("ps", "-aq", check=0).stdout == ""


def test_name_conflict(node):
    node.pull()
    cid = node.docker("run", "-d", "--name", "sgl", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0).stdout.strip()
    r = node.docker("run", "-d", "--name", "sgl", "lmsysorg/sglang:kimi-k3", "sleep", "30")
    assert r.returncode == 125
    assert (f'Conflict. The container name "/sgl" is already in use by container "{cid}". You have '
            "to remove (or rename) that container to be able to reuse that name.") in r.stderr
    r = node.docker("run", "--name", "bad name!", "lmsysorg/sglang:kimi-k3")
    assert r.returncode == 125 and "Invalid container name" in r.stderr


def test_gpus_without_the_nvidia_toolkit(node):
    node.node_json({"nvidia_toolkit": False})
    node.pull()
    r = node.docker("run", "-d", "--name", "gpu", "--gpus", "all", "lmsysorg/sglang:kimi-k3", "sleep", "1")
    assert r.returncode == 125
    assert 'could not select device driver "" with capabilities: [[gpu]]' in r.stderr
    # like docker, the container was created but never started
    assert node.docker("ps", "-a", "--format", "{{.Names}} {{.Status}}", check=0).stdout == "gpu Created\n"
    node.docker("run", "-d", "--name", "nogpu", "lmsysorg/sglang:kimi-k3", "sleep", "1", check=0)


def test_cuda13_image_on_a_cuda12_driver(node):
    node.node_json({"cuda": "12.8", "driver": "570.133.20"})
    node.pull("lmsysorg/sglang:kimi-k3")
    node.pull("lmsysorg/sglang:kimi-k3-cu12")
    r = node.docker("run", "-d", "--gpus", "all", "lmsysorg/sglang:kimi-k3", "sleep", "1")
    assert r.returncode == 125 and "unsatisfied condition: cuda>=13.0" in r.stderr
    node.docker("run", "-d", "--gpus", "all", "lmsysorg/sglang:kimi-k3-cu12", "sleep", "1", check=0)


def test_non_root_users_need_sudo():
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user")
    base = Path(tempfile.mkdtemp(prefix="k3tb-standins-"))  # pytest's tmp is not traversable by others
    try:
        os.chmod(base, 0o755)
        node = Node(base)
        _check_non_root(node)
    finally:
        shutil.rmtree(base)


def _check_non_root(node):
    node.systemctl("is-active", "docker", check=0)  # root creates calls.jsonl first, as on a node

    def as_nobody():
        os.setgid(65534)
        os.setgroups([])
        os.setuid(65534)
    r = node.docker("ps", preexec_fn=as_nobody)
    assert r.returncode == 1 and "permission denied while trying to connect to the Docker daemon" in r.stderr
    r = node.systemctl("stop", "docker", preexec_fn=as_nobody)
    assert r.returncode == 1 and "Interactive authentication required" in r.stderr
    assert node.sh("nvidia-smi", "-L", preexec_fn=as_nobody, check=0).stdout.count("GPU ") == 8
    assert node.systemctl("is-active", "docker", check=0).stdout == "active\n"
    calls = [json.loads(line)["argv"] for line in (node.run_dir / "calls.jsonl").read_text().splitlines()]
    assert ["docker", "ps"] in calls and ["nvidia-smi", "-L"] in calls


def test_start_kill_rmi_and_restart_always(node):
    node.pull()
    node.docker("run", "-d", "--name", "c4", "lmsysorg/sglang:kimi-k3", "sleep", "30", check=0)
    assert node.docker("kill", "c4", check=0).stdout == "c4\n"
    assert wait_for(lambda: node.docker("inspect", "-f", "{{.State.ExitCode}}", "c4").stdout == "137\n")
    r = node.docker("kill", "c4")
    assert r.returncode == 1 and "is not running" in r.stderr
    assert node.docker("start", "c4", check=0).stdout == "c4\n"
    assert node.docker("inspect", "-f", "{{.State.Running}}", "c4", check=0).stdout == "true\n"
    assert node.docker("logs", "c4", check=0).stdout.count("FAKE") == 2
    r = node.docker("rmi", "lmsysorg/sglang:kimi-k3")
    assert r.returncode == 1 and "must force" in r.stderr
    node.docker("rm", "-f", "c4", check=0)
    assert "Untagged: lmsysorg/sglang:kimi-k3" in node.docker("rmi", "lmsysorg/sglang:kimi-k3", check=0).stdout
    assert node.docker("images", "-q", check=0).stdout == ""
    assert not list((node.rootfs / "var/lib/docker/overlay2").iterdir())
    node.pull()
    node.docker("run", "-d", "--name", "always", "--restart", "always", "lmsysorg/sglang:kimi-k3",
                "sleep", "30", check=0)
    node.systemctl("restart", "docker", check=0)
    assert node.docker("inspect", "-f", "{{.State.Status}}", "always", check=0).stdout == "running\n"
    r = node.docker("run", "-d", "--gpus", "device=9", "lmsysorg/sglang:kimi-k3", "sleep", "1")
    assert r.returncode == 125 and "device error: 9: unknown device" in r.stderr
    assert node.docker("version", "--format", "{{.Server.Version}}", check=0).stdout.strip()


def test_nvidia_smi_with_a_lost_gpu_answers_only_the_handle_error(node):
    """Profile lost-gpu: every query form that reaches the lost GPU prints the driver's
    "Unable to determine the device handle" line and exits 255; -i on healthy GPUs answers."""
    node.node_json({"lost_gpu": 3})
    line = "Unable to determine the device handle for GPU0000:48:00.0: Unknown Error\n"
    for argv in (["-q"], [], ["-L"], ["--query-gpu=name,memory.total", "--format=csv"],
                 ["--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                 ["-q", "-i", "3"]):
        r = node.sh("nvidia-smi", *argv)
        assert (r.returncode, r.stdout) == (255, line), argv
    healthy = node.sh("nvidia-smi", "--query-gpu=index", "--format=csv,noheader", "-i", "5",
                      check=0)
    assert (healthy.returncode, healthy.stdout) == (0, "5\n")


def test_a_bar_redrawn_with_cr_reaches_docker_logs_only_at_its_newline(node, tmp_path):
    """dockerd's log copier logs a message per "\\n" (moby daemon/logger/copier.go): tqdm's
    "\\r" redraws stay in its buffer until the bar's closing "\\n"."""
    node.pull()
    drawn, close = tmp_path / "drawn", tmp_path / "close"
    node.docker("run", "-d", "--name", "bar", "lmsysorg/sglang:kimi-k3", "bar", "3", str(drawn),
                str(close), check=0)
    assert wait_for(drawn.exists)
    time.sleep(0.5)  # the copier had time to read the redraws
    assert "bar 0/3" not in node.docker("logs", "bar", check=0).stdout
    close.touch()
    assert wait_for(lambda: node.docker("inspect", "-f", "{{.State.Status}}", "bar").stdout == "exited\n")
    raw = subprocess.run([str(STANDINS / "docker"), "logs", "bar"], capture_output=True,
                         env=node.env, timeout=30).stdout  # bytes: text mode would turn CR into LF
    assert raw.endswith(b"}\n\rbar 0/3\rbar 1/3\rbar 2/3\n")


def test_16_kib_without_a_newline_is_logged_as_a_partial(node, tmp_path):
    node.pull()
    written = tmp_path / "written"
    node.docker("run", "-d", "--name", "long", "lmsysorg/sglang:kimi-k3", "no-newline",
                str(16 * 1024 + 100), str(written), check=0)
    assert wait_for(written.exists)

    def partial():
        out = node.docker("logs", "long", check=0).stdout
        return out[out.index("}\n") + 2:] if "}\n" in out else ""
    assert wait_for(lambda: len(partial()) >= 16 * 1024)
    time.sleep(0.5)
    assert partial() == "x" * (16 * 1024)   # the full buffer, no newline; the rest still held
    node.docker("rm", "-f", "long", check=0)
