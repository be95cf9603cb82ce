"""`testbed fault`: spot reclaims, partitions, full disks and a misbehaving Hub."""
from __future__ import annotations

import errno
import importlib.util
import os
from pathlib import Path

from tb import enginefaults, hubctl, net, node, nodefs
from tb.nodespec import spec_from_dict
from tb.sshcmd import KEY_FILE
from tb.state import TestbedState
from tb.testbed import start_nodes

FILL_FILE = ".k3tb-fill"
FILL_LEAVE_FREE = 512 * 1024
FILL_PIECE, FILL_TRIES = 256 << 20, 200


def _k3deploy_protocol():
    """k3deploy's node path rules, k3deploy/remote/protocol.py: standard library only, so it
    loads by path without the package (the testbed does not depend on k3deploy's venv)."""
    path = Path(__file__).resolve().parents[2] / "k3deploy" / "remote" / "protocol.py"
    spec = importlib.util.spec_from_file_location("k3deploy_node_protocol", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A test hook of k3deploy's peer server (PeerFiles.corrupt_flag): while this file exists in the
# node's k3deploy work dir (on the testbed's NVMe, /mnt/nvme), it flips every byte it serves.
_PROTOCOL = _k3deploy_protocol()
PEER_CORRUPT_FLAG = _PROTOCOL.WorkPaths(_PROTOCOL.work_dir("/mnt/nvme")).peer.corrupt_flag


class FaultError(RuntimeError):
    pass


def _active_state(tb_dir: Path) -> TestbedState:
    state = TestbedState.load(Path(tb_dir).resolve())
    if state is None or not state.data.get("active"):
        raise FaultError(f"no testbed is up in {tb_dir}")
    return state


def _running_node(state: TestbedState, name: str) -> dict:
    record = state.node(name)
    if record.get("status") != "up" or not node.init_alive(record):
        raise FaultError(f"{name} is not running (status {record.get('status')}); revive-node it first")
    return record


def kill_node(state: TestbedState, name: str) -> str:
    """A spot reclaim: every process gone, the address unreachable (ARP fails, EHOSTUNREACH).
    The network goes first: a machine that vanishes sends no FIN or RST, so its peers' open
    connections (NCCL's, a guard's) see silence, not a close."""
    record = state.node(name)
    state.update_node(name, status="killed")
    try:
        net.partition(record["netns"])
    except Exception:  # noqa: BLE001 - already gone (a revive of a dead node): nothing to cut
        pass
    node.kill_processes([record])
    net.delete_netns([record["netns"]])
    net.delete_link(record["veth"])
    net.forget_neighbor(state.idx, record["address"])
    return f"{name} killed"


def revive_node(state: TestbedState, name: str) -> str:
    """The node comes back as a fresh machine (same name, address and host key)."""
    if state.node(name).get("status") != "killed":
        kill_node(state, name)
    record = state.node(name)
    client_key = (state.dir / f"{KEY_FILE}.pub").read_text()
    nodefs.prepare(state.dir, spec_from_dict(record["spec"]), record["address"], client_key)
    state.update_node(name, status="starting", partitioned=False)
    start_nodes(state, [record])
    return f"{name} revived"


def partition(state: TestbedState, name: str) -> str:
    record = _running_node(state, name)
    net.partition(record["netns"])
    state.update_node(name, partitioned=True)
    return f"{name} partitioned"


def firewall(state: TestbedState, name: str) -> str:
    record = _running_node(state, name)
    net.firewall(record["netns"])
    return f"{name} takes inbound TCP on port 22 only (heal lifts it)"


def heal(state: TestbedState, name: str) -> str:
    record = _running_node(state, name)
    net.heal(record["netns"])
    state.update_node(name, partitioned=False)
    return f"{name} healed"


def fill_disk(state: TestbedState, name: str) -> str:
    """Leave less than 1 MiB free on the node's /mnt/nvme (a real tmpfs: this uses memory)."""
    record = _running_node(state, name)
    nvme = Path(f"/proc/{record['init_pid']}/root/mnt/nvme")  # the node's view of its mounts
    with open(nvme / FILL_FILE, "ab") as filler:
        for _ in range(FILL_TRIES):   # in pieces: a download running meanwhile takes room too
            stat = os.statvfs(nvme)
            free = stat.f_bavail * stat.f_frsize
            if free <= FILL_LEAVE_FREE:
                break
            try:
                os.posix_fallocate(filler.fileno(), filler.seek(0, os.SEEK_END),
                                   min(free - FILL_LEAVE_FREE, FILL_PIECE))
            except OSError as err:
                if err.errno != errno.ENOSPC:   # else the node's writes took it first: look again
                    raise
    stat = os.statvfs(nvme)
    left = stat.f_bavail * stat.f_frsize
    if left >= 1024 * 1024:
        raise FaultError(f"{name}: /mnt/nvme still has {left} bytes free after filling")
    return f"{name}: /mnt/nvme filled ({left} bytes free)"


def free_disk(state: TestbedState, name: str) -> str:
    """Undo fill-disk: the filler goes, the node's /mnt/nvme has its room back."""
    record = _running_node(state, name)
    nvme = Path(f"/proc/{record['init_pid']}/root/mnt/nvme")
    (nvme / FILL_FILE).unlink(missing_ok=True)
    stat = os.statvfs(nvme)
    return f"{name}: /mnt/nvme freed ({stat.f_bavail * stat.f_frsize} bytes free)"


def slow_link(state: TestbedState, name: str, mbit: str) -> str:
    record = _running_node(state, name)
    rate = _number(mbit, "slow-link NODE MBIT")
    net.slow_link(record["netns"], record["veth"], rate)
    return f"{name}: link at {rate or net.LINK_MBIT} Mbit/s each way"


def peer_corrupt(state: TestbedState, name: str) -> str:
    record = _running_node(state, name)
    flag = Path(f"/proc/{record['init_pid']}/root{PEER_CORRUPT_FLAG}")
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()
    return f"{name}: its peer server now flips the bytes it serves"


def peer_heal(state: TestbedState, name: str) -> str:
    record = _running_node(state, name)
    Path(f"/proc/{record['init_pid']}/root{PEER_CORRUPT_FLAG}").unlink(missing_ok=True)
    return f"{name}: its peer server serves true bytes again"


def _number(text: str, what: str, kind=int):
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise FaultError(f"{what} wants a number, got {text!r}") from None
    if value < 0:
        raise FaultError(f"{what} wants a number >= 0, got {text!r}")
    return value


def hub_fault(state: TestbedState, action: str, args: list[str], status: int | None = None) -> str:
    """The Hub faults of hubfaults.py; arguments checked here, before faults.json changes."""
    if action == "drop-after":
        _number(args[0], "hub-drop-after BYTES")
    elif action == "corrupt" and not args[0]:
        raise FaultError("hub-corrupt wants a file name (path inside the repo)")
    elif action == "outage":
        _number(args[0], "hub-outage SECONDS", float)
        if status is not None and not 400 <= status <= 599:
            raise FaultError(f"hub-outage --status wants an HTTP error status, got {status}")
        args = [args[0], status or 503]
    elif action == "rate-limit":
        if _number(args[1], "hub-rate-limit WINDOW") == 0:
            raise FaultError("hub-rate-limit WINDOW must be > 0 seconds")
        _number(args[0], "hub-rate-limit QUOTA")
    elif action == "cdn-forbid":
        _number(args[0], "cdn-forbid N")
    faults = hubctl.set_fault(state.dir, action, *args)
    return f"hub faults now {faults}"


NODE_ACTIONS = {"kill-node": kill_node, "revive-node": revive_node, "partition": partition,
                "firewall": firewall, "heal": heal, "fill-disk": fill_disk,
                "free-disk": free_disk, "peer-corrupt": peer_corrupt, "peer-heal": peer_heal}
ENGINE_ACTIONS = {"wedge-engine": enginefaults.wedge, "unwedge-engine": enginefaults.unwedge,
                  "slow-prefill": enginefaults.slow_prefill,
                  "engine-fault": enginefaults.engine_fault}
# testbed action -> (hubfaults action, how many arguments)
HUB_ACTIONS = {"hub-drop-after": ("drop-after", 1), "hub-corrupt": ("corrupt", 1), "hub-heal": ("heal", 0),
               "hub-outage": ("outage", 1), "hub-rate-limit": ("rate-limit", 2),
               "cdn-forbid": ("cdn-forbid", 1)}
ACTIONS = (*NODE_ACTIONS, *ENGINE_ACTIONS, *HUB_ACTIONS, "slow-link")


def apply(tb_dir: Path, action: str, args: list[str], status: int | None = None) -> str:
    state = _active_state(tb_dir)
    if status is not None and action != "hub-outage":
        raise FaultError("--status is for hub-outage only")
    if action in NODE_ACTIONS:
        if len(args) != 1:
            raise FaultError(f"{action} wants exactly one node name")
        return NODE_ACTIONS[action](state, args[0])
    if action in ENGINE_ACTIONS:
        if not 1 <= len(args) <= (2 if action in ("slow-prefill", "engine-fault") else 1):
            raise FaultError(f"{action} wants a node name" + (" and optionally seconds per "
                             "prefill chunk" if action == "slow-prefill" else ""))
        _running_node(state, args[0])
        try:
            return ENGINE_ACTIONS[action](state, *args)
        except (RuntimeError, ValueError) as err:
            raise FaultError(str(err)) from None
    if action == "slow-link":
        if len(args) != 2:
            raise FaultError("slow-link wants a node name and Mbit/s (0: the testbed's link again)")
        return slow_link(state, *args)
    if action in HUB_ACTIONS:
        hub_action, want = HUB_ACTIONS[action]
        if len(args) != want:
            raise FaultError(f"{action} wants {want} argument(s)")
        return hub_fault(state, hub_action, args, status)
    raise FaultError(f"unknown fault {action!r}; one of {', '.join(ACTIONS)}")
