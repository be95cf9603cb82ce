"""Run k3deploy as the user does and read what it printed, for the test_failure_modes*.py
modules: the problems table, the run summary, the stand-in engines' fault hooks, the calls the
node stand-ins saw."""

from __future__ import annotations

import json
import os
import shlex
import sys

from k3run import CLI_TIMEOUT, REPO, bounded_run, changing_calls

WIDE = {"COLUMNS": "400"}  # tables wide enough that no message is folded across lines


def k3_env(extra: dict | None = None) -> dict:
    """The test's environment without a state-dir override or a developer's HF token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3DEPLOY_") and k != "HF_TOKEN"}
    return {**env, **WIDE, **(extra or {})}


def k3_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "k3deploy", *args]


def run(*args: str, env: dict | None = None, timeout: float = CLI_TIMEOUT):
    return bounded_run(k3_argv(*args), timeout, cwd=REPO, env=k3_env(env))


def said(proc) -> str:
    """What the user sees: stdout and stderr."""
    return proc.stdout + proc.stderr


def problem_rows(text: str) -> list[tuple[str, str, str]]:
    """(node, check, problem) rows of the problems table."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) == 5 and cells[1].startswith("node"):
            rows.append((cells[1], cells[2], cells[3]))
    return rows


def problem_tables(text: str) -> list[list[tuple[str, str, str]]]:
    """The rows of each problems table the output holds, table by table."""
    tables, rows = [], None
    for line in text.splitlines():
        if line.startswith("┃ node") and "┃ problem" in line:
            rows = []
            tables.append(rows)
        elif rows is not None and line.startswith("└"):
            rows = None
        elif rows is not None:
            rows += problem_rows(line)
    return tables


def summary(text: str) -> dict[str, dict[str, str]]:
    """node -> step -> status, from the run's summary table."""
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("┃ node") and "preflight" in ln)
    steps = [c.strip() for c in header.split("┃")[2:-1]]
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines[lines.index(header):]
            if ln.startswith("│ node")]
    return {r[0]: dict(zip(steps, r[1:])) for r in rows}


def set_fault(tb, node: str, fault: dict | None) -> None:
    """The stand-in engine's fault hooks, read when a container starts."""
    cmd = "rm -f /run/k3tb/faults.json" if fault is None else \
        f"echo {shlex.quote(json.dumps(fault))} > /run/k3tb/faults.json"
    assert tb.ssh(node, cmd).returncode == 0


def node_calls(tb) -> dict[str, list[list[str]]]:
    return {n: [c["argv"] for c in v["calls"]] for n, v in tb.stats()["nodes"].items()}


def daemon_json(tb, node: str) -> str:
    return tb.ssh(node, "cat /etc/docker/daemon.json 2>/dev/null || echo ABSENT").stdout


def assert_nothing_changed(tb, before: dict) -> None:
    assert changing_calls(tb.stats()) == []
    for node in tb.nodes:
        assert daemon_json(tb, node) == before[node], node
        assert tb.ssh(node, "ls -A /mnt/nvme").stdout.strip() == "", node
