"""Reusable pytest helper: run a testbed (scripts/testbed) for a test and always take it down.

    from tbfixture import testbed

    def test_x(tmp_path):
        with testbed(tmp_path, nodes=2, overrides={"node1": {"user": "ubuntu"}}) as tb:
            assert tb.ssh("node0", "nvidia-smi -L").returncode == 0
            tb.fault("kill-node", "node1")
            print(tb.stats()["hub"])

Options become `scripts/testbed up` flags: gpu="b200" -> --gpu b200, no_hub=True -> --no-hub,
node=["node1:cuda=12.8"] (raw --node values) and overrides={"node1": {"cuda": "12.8"}}.
After `down` the helper asserts nothing of the testbed is left (check_clean=False to skip).
Needs root.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TESTBED = REPO / "scripts" / "testbed"
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from tb import stats as tb_stats  # noqa: E402
from tb.sshcmd import ssh_argv  # noqa: E402


class TestbedCommandError(AssertionError):
    __test__ = False  # not a pytest test class despite the name


def run_testbed(*args: str, check: bool = True, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run scripts/testbed with args; on failure (check) raise with its stdout/stderr. The bound
    is below pytest's per-test ceiling (300 s), so a hang is reported here with the output."""
    try:
        proc = subprocess.run([sys.executable, str(TESTBED), *args], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        said = [(o.decode(errors="replace") if isinstance(o, bytes) else o or "")
                for o in (err.stdout, err.stderr)]
        raise TestbedCommandError(f"testbed {shlex.join(args)} did not end within {timeout:g}s\n"
                                  f"stdout:\n{said[0]}\nstderr:\n{said[1]}") from None
    if check and proc.returncode != 0:
        raise TestbedCommandError(f"testbed {shlex.join(args)} exited {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@dataclass
class Testbed:
    __test__ = False
    dir: Path
    inventory: Path
    nodes: list[str]
    idx: int
    records: dict = field(repr=False, default_factory=dict)

    @property
    def endpoint(self) -> str:
        """The mock Hub's URL (the inventory's model.endpoint)."""
        match = re.search(r'endpoint: "?(http://[0-9.:]+)', self.inventory.read_text())
        return match.group(1)

    def address(self, name: str) -> str:
        return self.records[name]["address"]

    def user(self, name: str) -> str:
        return self.records[name]["user"]

    def ssh(self, name: str, cmd, user: str | None = None, timeout: float = 60,
            connect_timeout: float = 5, input: str | None = None) -> subprocess.CompletedProcess:
        """Run cmd (a string, or an argv list that gets shlex-joined) on node `name`."""
        command = cmd if isinstance(cmd, str) else shlex.join(cmd)
        argv = ssh_argv(self.dir, user or self.user(name), self.address(name), command,
                        connect_timeout=connect_timeout)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)

    def fault(self, action: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_testbed("fault", "--dir", str(self.dir), action, *map(str, args), check=check)

    def stats(self) -> dict:
        """`testbed stats --json`'s document, read in this process: tests read it hundreds of
        times a run, and an interpreter per read cost ~0.1 CPU-s (a tenth of the suite's
        testbed CLI time). test_testbed_stats_cli checks the command says the same."""
        return tb_stats.collect(self.dir)

    def down(self) -> subprocess.CompletedProcess:
        return run_testbed("down", "--dir", str(self.dir))


def up_args(tb_dir: Path, nodes: int, options: dict) -> list[str]:
    args = ["up", "--dir", str(tb_dir), "--nodes", str(nodes)]
    for key, value in options.items():
        if key == "overrides":
            args += [a for name, kv in value.items() for k, v in kv.items()
                     for a in ("--node", f"{name}:{k}={_flag_value(v)}")]
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [a for item in value for a in (flag, str(item))]
        elif value not in (None, False):
            args += [flag, str(value)]
    return args


def _flag_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_state(tb_dir: Path) -> dict:
    return json.loads((Path(tb_dir) / "testbed.json").read_text())


@contextlib.contextmanager
def testbed(tmp_path: Path, nodes: int = 4, check_clean: bool = True, **options):
    """Yield a running Testbed in tmp_path/testbed; `down` (and the leftover check) always runs."""
    tb_dir = Path(tmp_path) / "testbed"
    proc = run_testbed(*up_args(tb_dir, nodes, options), check=False)
    state = read_state(tb_dir) if (tb_dir / "testbed.json").exists() else {}
    idx = state.get("idx", state.get("last_idx"))
    try:
        if proc.returncode != 0:
            raise TestbedCommandError(f"testbed up failed ({proc.returncode}):\n{proc.stderr}")
        records = state["nodes"]
        yield Testbed(dir=tb_dir, inventory=tb_dir / "inventory.yaml",
                      nodes=sorted(records, key=lambda n: records[n]["index"]), idx=idx,
                      records=records)
    finally:
        run_testbed("down", "--dir", str(tb_dir), check=False)
        if check_clean and idx is not None:
            assert_nothing_left(tb_dir, idx)


testbed.__test__ = False  # test modules import it by name; pytest must not collect it


def inventory_copy(tb: Testbed, where: Path, **ssh) -> Path:
    """A copy of tb's inventory in the directory `where` (a run's state files, lock and secrets
    go next to its inventory), key and known_hosts made absolute, `ssh` settings changed."""
    doc = yaml.safe_load(Path(tb.inventory).read_text())
    for key in ("key", "known_hosts"):
        doc["ssh"][key] = str((Path(tb.inventory).parent / doc["ssh"][key]).resolve())
    doc["ssh"].update(ssh)
    taken = len(list(Path(where).glob("inventory*.yaml")))
    path = Path(where) / (f"inventory-{taken}.yaml" if taken else "inventory.yaml")
    path.write_text(yaml.safe_dump(doc))
    return path


# --- leftovers ---------------------------------------------------------------------------------

def leftovers(tb_dir: Path, idx: int) -> list[str]:
    """What testbed `idx` in tb_dir still has: namespaces, links, iptables rules, processes that
    reference the dir (cwd, command line or mounts), host mounts under it."""
    tb_dir = str(Path(tb_dir).resolve())
    found = [] if _claimed_since(idx, tb_dir) else _named_by_idx(idx)
    found += [f"mount {line.split()[4]}" for line in _read("/proc/self/mountinfo").splitlines()
              if line.split()[4].startswith(tb_dir)]
    found += [f"process {pid}: {why}" for pid, why in _processes_referencing(tb_dir)]
    return found


def _named_by_idx(idx: int) -> list[str]:
    """Namespaces, links and iptables rules named after testbed `idx`."""
    found = [f"netns {n}" for n in _listdir("/run/netns") if n.startswith(f"k3tb{idx}-")]
    found += [f"link {n}" for n in _listdir("/sys/class/net") if re.fullmatch(rf"k3tb{idx}(v\d+|gw)?", n)]
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    return found + [f"iptables {r}" for r in rules.splitlines() if f"--comment k3tb{idx} " in r + " "]


def _claimed_since(idx: int, tb_dir: str) -> bool:
    """Another testbed (a test running beside this one) has taken the idx this one gave back:
    its bridge's alias names another directory. The bridge name exists only once, so this
    one's was gone; what is named after the idx now is the other's. The alias is set just
    after the bridge is made: an empty one is waited for."""
    alias = Path(f"/sys/class/net/k3tb{idx}/ifalias")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            owner = alias.read_text().strip()
        except OSError:
            return False
        if owner:
            return owner != tb_dir
        time.sleep(0.05)
    return False


def assert_nothing_left(tb_dir: Path, idx: int) -> None:
    left = leftovers(tb_dir, idx)
    assert not left, f"testbed k3tb{idx} left behind:\n" + "\n".join(left)


def _processes_referencing(tb_dir: str):
    me = os.getpid()
    for pid in _listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        cmdline = _read(f"/proc/{pid}/cmdline").replace("\0", " ")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if tb_dir in cmdline or cwd.startswith(tb_dir):
            yield int(pid), cmdline.strip() or cwd
        elif tb_dir in _read(f"/proc/{pid}/mountinfo"):
            yield int(pid), f"mounts from {tb_dir}: {cmdline.strip()}"


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def set_engine(tb: Testbed, **fields) -> None:
    """Set engine.<field> in tb's inventory (e.g. executor="ray" for vLLM over Ray)."""
    doc = yaml.safe_load(Path(tb.inventory).read_text())
    doc["engine"].update(fields)
    Path(tb.inventory).write_text(yaml.safe_dump(doc, sort_keys=False))
