"""Start and stop the testbed's mock Hub process (scripts/tb/hub.py, owned elsewhere)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tb import hubfaults, hubtls
from tb.state import TestbedState, process_start_time, same_process

HUB_SCRIPT = Path(__file__).resolve().parent / "hub.py"
HUB_REPO = "moonshotai/Kimi-K3"
HUB_SHARDS = 96
PREFERRED_PORT = 8900
PREFERRED_CDN_PORT = 8901


class HubError(RuntimeError):
    pass


def hub_dir(tb_dir: Path) -> Path:
    return Path(tb_dir) / "hub"


def write_nodes_map(tb_dir: Path, addresses: dict[str, str]) -> None:
    """DIR/hub/nodes.json: client address -> node name, so the hub can attribute requests."""
    path = hub_dir(tb_dir) / "nodes.json"
    tmp = path.with_name(".nodes.json.tmp")
    tmp.write_text(json.dumps({addr: name for name, addr in addresses.items()}, indent=1))
    os.replace(tmp, path)


def _pick_port(address: str, preferred: int = PREFERRED_PORT) -> int:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the hub's server does
        try:
            probe.bind((address, preferred))
            return preferred
        except OSError:
            return 0  # the hub picks one; the endpoint is read back from its `ready` file


def _hub_argv(hdir: Path, address: str, opts) -> list[str]:
    """hub.py serve's argv from the testbed's UpOptions. The CDN listens on the same bridge
    address, another port: another origin for the client, traffic still on the bridge."""
    argv = [sys.executable, str(HUB_SCRIPT), "serve", "--dir", str(hdir),
            "--listen", f"{address}:{_pick_port(address)}", "--repo", HUB_REPO,
            "--shards", str(opts.shards), "--rate", str(opts.hub_rate), "--node-rate", str(opts.hub_node_rate)]
    if opts.shard_bytes is not None:
        argv += ["--shard-bytes", str(opts.shard_bytes)]
    if opts.hub_token_file:
        argv += ["--token-file", str(Path(opts.hub_token_file).resolve())]
    if opts.hub_gated:
        argv += ["--gated"]
    if opts.hub_cdn:
        argv += ["--cdn-listen", f"{address}:{_pick_port(address, PREFERRED_CDN_PORT)}",
                 "--url-ttl", str(opts.hub_url_ttl), "--conn-seed", str(opts.hub_conn_seed)]
        if opts.hub_conn_rates:
            argv += ["--conn-rates", opts.hub_conn_rates]
        if opts.hub_cdn_tls:
            argv += ["--cdn-cert", str(hdir / hubtls.CERT), "--cdn-key", str(hdir / hubtls.KEY)]
        if opts.hub_first_byte_ms:
            argv += ["--first-byte-ms", str(opts.hub_first_byte_ms)]
    return argv


def start(state: TestbedState, address: str, opts) -> None:
    """Start hub.py for the testbed's UpOptions `opts` (hub_* fields, shard_bytes)."""
    if not HUB_SCRIPT.exists():
        raise HubError(f"mock hub not found at {HUB_SCRIPT}")
    hdir = hub_dir(state.dir)
    (hdir / "ready").unlink(missing_ok=True)
    argv = _hub_argv(hdir, address, opts)
    with open(hdir / "hub.log", "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                cwd=str(hdir), start_new_session=True)
    state.update(hub={"pid": proc.pid, "start": process_start_time(proc.pid)})


def wait_ready(state: TestbedState, timeout: float = 120) -> str:
    """The hub's URL once it listens; raises with the hub's log tail if it dies or stalls."""
    hdir, record = hub_dir(state.dir), state.data.get("hub") or {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = hdir / "ready"
        if ready.exists() and ready.read_text().strip():
            return ready.read_text().strip()
        if not same_process(record.get("pid"), record.get("start")):
            raise HubError(f"mock hub exited before it was ready:\n{_log_tail(hdir)}")
        time.sleep(0.1)
    raise HubError(f"mock hub not ready after {timeout:.0f} s:\n{_log_tail(hdir)}")


def _log_tail(hdir: Path, lines: int = 20) -> str:
    log = hdir / "hub.log"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def _unrecorded_hubs(hdir: Path) -> list[int]:
    """Hub processes of this dir that a crash kept out of the record (started, pid not saved)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if str(HUB_SCRIPT).encode() in argv and str(hdir).encode() in argv:
            found.append(int(entry.name))
    return found


def stop(state: TestbedState) -> None:
    record = state.data.get("hub") or {}
    targets = [(record["pid"], record.get("start"))] if record.get("pid") else []
    targets += [(pid, process_start_time(pid)) for pid in _unrecorded_hubs(hub_dir(state.dir))
                if pid != record.get("pid")]
    for pid, start_time in targets:
        _terminate(pid, start_time)
    state.update(hub=None)


def _terminate(pid: int, start_time: int | None) -> None:
    """SIGTERM (the hub flushes stats.json), SIGKILL after 5 s."""
    if not same_process(pid, start_time):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while same_process(pid, start_time) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)
    if same_process(pid, start_time):
        os.kill(pid, signal.SIGKILL)
    while same_process(pid, start_time):
        _reap(pid)
        time.sleep(0.05)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def set_fault(tb_dir: Path, action: str, *args) -> dict:
    """action: one of hubfaults.ACTIONS (the hub re-reads faults.json on every request)."""
    return hubfaults.write_fault(hub_dir(tb_dir), action, *args)
