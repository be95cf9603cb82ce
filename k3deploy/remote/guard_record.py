"""The guard's config (as guard.py reads it) and its records: the engine it watches, and the
incident record: what failed first, who saw it, the failed rank's last log lines and the
kernel's OOM-killer / Xid lines. Standard library only; uploaded beside guard.py.

Secrets never reach the record: the engine's log is masked with every value found in the
node's secrets directory, the guard's own secret, and the patterns k3deploy's redact uses.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from typing import TypeAlias

    # protocol.JSON's: the guard ships without protocol.py (node/guard_config.py SCRIPTS)
    JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None
    Doc: TypeAlias = dict[str, JSON]

MASK = "***"
PATTERNS = [
    re.compile(r"hf_[A-Za-z0-9]{16,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)((?:token|api[_-]?key|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{4,}"),
]
KERNEL = re.compile(r"(?i)out of memory|oom-kill|killed process|NVRM: Xid")
LOG_LINES = 200


class Names(TypedDict):
    """Of the guard's config, what a record names: the cluster, this node."""
    cluster: str
    node: str


class PeerConfig(TypedDict):
    node: str
    rank: int
    address: str


class ProbeConfig(TypedDict):
    port: int
    model: str
    every: float
    key_file: str


class RouterLink(TypedDict):
    """A fleet group's router, as guard_router.py reads it (node/guard_config.py router_section)."""
    base: str
    worker: str
    key_file: str


class _InFleet(TypedDict, total=False):
    router: RouterLink           # only in a fleet's groups: leave the router before stopping


class Config(Names, _InFleet):
    """The guard's CONFIG.json as the laptop writes it (node/guard_config.py config, with_digest)."""
    rank: int
    container: str
    bind: str
    port: int
    peers: list[PeerConfig]
    peer_timeout: float
    poll: float
    stop_grace: int
    wedge_seconds: float
    serve_port: int | None
    metrics_port: int | None
    probe: ProbeConfig | None
    dir: str
    secret_file: str
    secrets_dir: str
    digest: str


class _Engine(TypedDict):
    running: bool
    exit_code: int | None
    id: str | None               # the container's, once the guard found it running


class Engine(_Engine, total=False):
    """The watched container as the guard last saw it (published in its state)."""
    finished: str | None         # docker's FinishedAt, once it has stopped


def engine_doc(engine: Engine) -> Doc:
    """The engine record as JSON, as it is published (the key `finished` only once known)."""
    doc: Doc = {"running": engine["running"], "exit_code": engine["exit_code"], "id": engine["id"]}
    if "finished" in engine:
        doc["finished"] = engine["finished"]
    return doc


def now_iso() -> str:
    # timezone.utc, not datetime.UTC: a node may run a python3 older than 3.11
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")  # noqa: UP017


def atomic_write_json(path: str, data: JSON) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def secret_values(secret: str, secrets_dir: str | None) -> list[str]:
    """The guard secret plus every `key: value` / `KEY=value` value in the secrets dir."""
    found = [secret]
    folder = secrets_dir if secrets_dir and os.path.isdir(secrets_dir) else ""
    for name in sorted(os.listdir(folder)) if folder else []:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            value = re.split(r"[:=]", line, maxsplit=1)[-1].strip().strip("'\"")
            found.append(value)
    return sorted({v for v in found if len(v) >= 6}, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    for value in secrets:
        text = text.replace(value, MASK)
    for pattern in PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + MASK, text)
    return text


def _run(argv: list[str], timeout: float = 20) -> tuple[int, str]:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 255, str(err)
    return res.returncode, res.stdout + res.stderr


def log_tail(container: str, secrets: list[str]) -> list[JSON] | None:
    """The engine's last lines, redacted, as the record holds them (JSON strings)."""
    code, out = _run(["docker", "logs", "--tail", str(LOG_LINES), container])
    if code != 0:
        return None
    return [redact(line, secrets) for line in out.splitlines()[-LOG_LINES:]]


def kernel_lines(secrets: list[str]) -> list[JSON] | str:
    """OOM-killer and Xid lines, or why the kernel log could not be read."""
    code, out = _run(["dmesg", "--ctime"])
    if code != 0:
        return f"kernel log not readable: {out.strip()[:200]}"
    found: list[JSON] = [redact(line, secrets) for line in out.splitlines() if KERNEL.search(line)]
    return found[-40:]


def failure(node: str, rank: int, kind: str, *, exit_code: int | None = None, detail: str = "",
            at: str | None = None) -> Doc:
    """kind: exited | unreachable | not serving | wedged; at: when it happened (docker's FinishedAt),
    else now (when it was noticed)."""
    what = {"exited": f"engine exited with code {exit_code}",
            "unreachable": "unreachable", "not serving": "serving port refused",
            "wedged": "no progress"}
    return {"node": node, "rank": rank, "kind": kind, "exit_code": exit_code,
            "cause": f"rank {rank} ({node}): {what.get(kind, kind)}" + (f"; {detail}" if detail else ""),
            "at": at or now_iso()}


def incident(cfg: Names, first: Doc, seen_by: str, evidence: Doc | None = None) -> Doc:
    """This node's record of the cluster's first failure."""
    evidence = evidence or {}
    return {"cluster": cfg["cluster"], "failure": first, "seen_by": seen_by,
            "recorded_by": cfg["node"], "recorded_at": now_iso(),
            "log_tail": evidence.get("log_tail"), "kernel": evidence.get("kernel"),
            "local_engine": None}


def adopt(cfg: Names, theirs: Doc, learned_from: str) -> Doc:
    """A peer's record of the first failure, kept as this node's own (the evidence included)."""
    return {**theirs, "recorded_by": cfg["node"], "recorded_at": now_iso(),
            "learned_from": learned_from, "local_engine": None}
