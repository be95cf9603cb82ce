"""`k3deploy status` for people: the cluster's state first, then one line per node (rank,
engine, weights, guard, GPU memory in use, steps), each line within the terminal's width (100
columns is the design width; 32 nodes are 32 lines). `--steps` adds each step's statuses,
grouped by status, one line per step. Pure: the status document in, lines out."""

from __future__ import annotations

import textwrap

from k3deploy.cli import cluster_state, status_cost, status_docs, status_teardown
from k3deploy.cli.status_doc import Live, StatusDoc
from k3deploy.core import units
from k3deploy.core.state import StepRecord
from k3deploy.remote.protocol import STOPPED

BAD = ("failed", "blocked", "interrupted", "stale", "unreachable")
GIB = 1024


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _clip_middle(name: str, width: int) -> str:
    """Node names differ at their end (worker-07, worker-17): keep both ends."""
    if len(name) <= width:
        return name
    tail = width // 2
    return name[:width - tail - 1] + "…" + name[-tail:]


def engine_cell(live: Live) -> str:
    if not live.get("reachable"):
        return "unreachable"
    container = live.get("container") or {}
    status = container.get("status") or "none"
    if status == "exited" and container.get("exit_code") is not None:
        return f"exited {container['exit_code']}"
    return str(status)


def weights_cell(live: Live) -> str:
    doc = live.get("download") or {}
    if not doc:
        return "-"
    shards = f"{doc.get('shards_done', 0)}/{doc.get('shards_total', 0)}"
    if doc.get("state") == "done":
        return f"done {shards}"
    pct = status_docs.percent(doc)
    if doc.get("state") == STOPPED:   # the when is on its own line (status_docs.stopped_lines)
        return f"{STOPPED} {pct:.0f}%"
    state = "" if doc.get("state") == "running" else f"{doc.get('state')} "
    return f"{state}{pct:.0f}% {shards}"


def download_detail(live: Live) -> str:
    """The whole progress record: state, share, and where this run's bytes came from."""
    doc = live.get("download") or {}
    if not doc:
        return "-"
    pct = status_docs.percent(doc)
    cell = f"{doc.get('state')} {pct:.0f}% {doc.get('shards_done', 0)}/{doc.get('shards_total', 0)}"
    if "hub_bytes" in doc:  # from the Hub and from peers (fan-out), this downloader run
        cell += (f" hub {units.size(status_docs.number(doc['hub_bytes']))} "
                 f"peers {units.size(status_docs.number(doc.get('peer_bytes', 0)))}")
    return cell


def guard_cell(live: Live) -> str:
    guard = live.get("guard")
    if guard is None:
        return "-"
    return guard


def gpu_cell(live: Live) -> str:
    """Memory in use per GPU: one figure when the GPUs agree within 1 GiB, else min-max."""
    gpus = live.get("gpus") or []
    if not gpus:
        return "-"
    used = [status_docs.number(g["used_mib"]) / GIB for g in gpus]
    total = max(status_docs.number(g["total_mib"]) for g in gpus) / GIB
    low, high = min(used), max(used)
    figure = f"{high:.0f}" if high - low < 1 else f"{low:.0f}-{high:.0f}"
    return f"{figure}/{total:.0f} GiB x{len(gpus)}"


def steps_cell(state: dict[str, StepRecord], order: list[str]) -> str:
    """The first step in a bad state, else the last step run and how it ended."""
    records = [(s, state[s].get("status", "-")) for s in order if s in state]
    for step, status in records:
        if status in BAD:
            return f"{status}: {step}"
    if not records:
        return "never run"
    last = max(records, key=lambda sr: state[sr[0]].get("finished") or 0)
    return f"last: {last[0]} {last[1]}"


# (title, width, align); the node column is as wide as the longest name, at most NODE_MAX.
COLUMNS = (("rank", 4, ">"), ("node", 0, "<"), ("engine", 11, "<"), ("weights", 14, "<"),
           ("guard", 11, "<"), ("GPU mem", 14, "<"))
NODE_MAX = 20


def _row(cells: list[str], node_width: int, width: int) -> str:
    parts = []
    for (_title, w, align), cell in zip(COLUMNS, cells):
        cell = _clip_middle(cell, node_width) if not w else _clip(cell, w)
        parts.append(f"{cell:{align}{w or node_width}}")
    return _clip(" ".join(parts + cells[len(COLUMNS):]).rstrip(), width)


def node_lines(doc: StatusDoc, order: list[str], width: int) -> list[str]:
    node_width = min(NODE_MAX, max([4] + [len(n) for n in doc["nodes"]]))
    lines = [_row([t for t, _w, _a in COLUMNS] + ["steps"], node_width, width)]
    for name, info in doc["nodes"].items():
        live = info["live"]
        cells = [str(info["rank"]), name, engine_cell(live), weights_cell(live),
                 guard_cell(live), gpu_cell(live), steps_cell(info["state"], order)]
        lines.append(_row(cells, node_width, width))
    return lines


def cluster_lines(doc: StatusDoc, width: int) -> list[str]:
    cluster, nodes = doc["cluster"], doc["nodes"]
    # An incident's line is long: its parts one under the other.
    first, *rest = cluster_state.parts(cluster["name"], cluster)
    lines = [first] + [ln for part in rest for ln in textwrap.wrap(
        part, width, initial_indent="  ", subsequent_indent="    ", break_long_words=False,
        break_on_hyphens=False)]
    lives = [n["live"] for n in nodes.values()]
    running = sum(1 for lv in lives if (lv.get("container") or {}).get("running"))
    done = sum(1 for lv in lives if (lv.get("download") or {}).get("state") == "done")
    parts = [f"{len(nodes)} nodes", f"engines running {running}/{len(nodes)}",
             f"weights done {done}/{len(nodes)}"]
    downloads = [lv.get("download") or {} for lv in lives]
    hub = [status_docs.number(d["hub_bytes"]) for d in downloads if "hub_bytes" in d]
    repo = max([status_docs.number(d.get("bytes_total")) for d in downloads] + [0])
    if hub and repo:
        parts.append(f"Hub bytes {sum(hub) / repo:.2f}x the repo")
    guards = [lv.get("guard") for lv in lives if lv.get("guard") not in (None, "off")]
    if guards:
        parts.append(f"guards watching {guards.count('watching')}/{len(nodes)}")
    lines.append("  " + ", ".join(parts))
    lines[-1] = _clip(lines[-1], width)
    torn = status_teardown.note(nodes)
    if torn:
        lines.append(f"  {torn}")
    lines += [ln for text in status_docs.stopped_lines(nodes)
              for ln in textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ",
                                      break_long_words=False, break_on_hyphens=False)]
    return lines + [status_cost.line(doc["cost"])]


def step_lines(doc: StatusDoc, order: list[str], width: int) -> list[str]:
    """One line per step: its statuses, each with the nodes that have it."""
    step_width = max([4] + [len(s) for s in order])
    lines = ["steps:"]
    for step in order:
        groups: dict[str, list[str]] = {}
        for name, info in doc["nodes"].items():
            status = info["state"].get(step, {}).get("status", "-")
            groups.setdefault(status, []).append(name)
        text = "; ".join(f"{status} {_names(names)}" for status, names in groups.items())
        lines.append(_clip(f"  {step:<{step_width}} {text}", width))
    lines.append("download:")
    lines += [_clip(f"  {name} {download_detail(info['live'])}", width)
              for name, info in doc["nodes"].items()]
    return lines


def _names(names: list[str]) -> str:
    return " ".join(names) if len(names) <= 6 else f"{len(names)} nodes"


def render(doc: StatusDoc, order: list[str], width: int = 100, steps: bool = False) -> list[str]:
    lines = cluster_lines(doc, width) + node_lines(doc, order, width)
    return lines + (step_lines(doc, order, width) if steps else [])
