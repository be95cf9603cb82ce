"""`testbed fault wedge-engine | unwedge-engine | slow-prefill NODE`: an engine that hangs with
its process alive, and one that is slow but gets there.

wedge-engine sends SIGSTOP to the node's engine process (the container's main process, as
`docker kill -s STOP` would, without going through the node's docker): every thread stops,
its listening sockets still complete TCP handshakes into the kernel's backlog, and since
every forward step needs every rank (standins/engine/collective.py) the whole group hangs.
unwedge-engine sends SIGCONT. slow-prefill writes the engine fault hook
`{"slow_prefill_seconds": S}` into the node's faults.json (default 3 s per prefill chunk;
0 lifts it), read by the engine at every step.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tb import node
from tb.nodefs import node_dir

DEFAULT_PREFILL_SECONDS = 3.0
ENGINE_WORDS = ("serve", "sglang.launch_server")


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def engine_pids(tb_dir: Path, name: str) -> list[int]:
    """Main processes of the node's running engine containers (not Ray's own containers)."""
    pids = []
    for cdir in sorted((node_dir(tb_dir, name) / "run" / "docker" / "containers").glob("*")):
        config, state = _read(cdir / "config.json"), _read(cdir / "state.json")
        cmd = " ".join(str(a) for a in config.get("cmd") or [])
        if state.get("status") == "running" and state.get("pid") and \
                any(word in cmd.split() for word in ENGINE_WORDS):
            pids.append(int(state["pid"]))
    return pids


def host_pids(record: dict, node_pids: list[int]) -> list[int]:
    """The node runs in its own pid namespace: its pids are the last field of NSpid."""
    found = []
    for pid in node.node_pids([record]):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines()
                      if line.startswith("NSpid:")), [])
        if nspid and int(nspid[-1]) in node_pids:
            found.append(pid)
    return found


def _signal_engine(state, name: str, sig: int, what: str) -> str:
    pids = host_pids(state.node(name), engine_pids(state.dir, name))
    if not pids:
        raise RuntimeError(f"{name}: no running engine container")
    for pid in pids:
        os.kill(pid, sig)
    return f"{name}: engine process {', '.join(map(str, pids))} {what}"


def wedge(state, name: str) -> str:
    return _signal_engine(state, name, signal.SIGSTOP, "stopped (SIGSTOP): alive, no progress")


def unwedge(state, name: str) -> str:
    return _signal_engine(state, name, signal.SIGCONT, "continued (SIGCONT)")


def slow_prefill(state, name: str, seconds: str | None = None) -> str:
    tb_dir = state.dir
    value = DEFAULT_PREFILL_SECONDS if seconds is None else float(seconds)
    path = node_dir(tb_dir, name) / "run" / "faults.json"
    faults = _read(path)
    if value > 0:
        faults["slow_prefill_seconds"] = value
    else:
        faults.pop("slow_prefill_seconds", None)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    os.replace(tmp, path)
    return f"{name}: every prefill chunk takes {value:g}s on its engine" if value > 0 else \
        f"{name}: prefill at full speed again"


ENGINE_FAULTS = ("oom", "nccl", "parser", "none")


def engine_fault(state, name: str, kind: str | None = None) -> str:
    """`engine-fault NODE oom|nccl|parser|none`: the start-up fault of that node's next engine
    (faults.json `engine_fault`, over `up --node NAME:engine_fault=`; `none` lifts it)."""
    if kind not in ENGINE_FAULTS:
        raise ValueError(f"engine-fault wants a node and one of {', '.join(ENGINE_FAULTS)}")
    path = node_dir(state.dir, name) / "run" / "faults.json"
    faults = _read(path)
    faults["engine_fault"] = kind
    path.write_text(json.dumps(faults))
    return f"{name}: engine start-up fault {kind} (read when its next engine starts)"
