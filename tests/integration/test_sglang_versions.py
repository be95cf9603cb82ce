"""SGLang start-up as the real releases print and do it, on one 2-node testbed (profiles
sglang-0.5.16, sglang-0.5.4, slow-engine-start; scripts/tb/standins/README.md "Profiles"):

- 0.5.16: the multi-thread loader's bar on global rank 0 only, the HTTP port closed while the
  weights load; a load longer than the wait's form timeout and its stall limit passes while
  rank 0's progress advances. `up` again changes nothing; verify; down.
- 0.5.4: the old safetensors bar; up, up again, verify, down.
- slow-engine-start: the engine imports for 20 s, then rejects a value its parser accepted
  (server_args.py check_server_args); `up` fails naming the rank and quoting that line.

The phases share the testbed: each engine start reads the node's node.json afresh.
"""

from __future__ import annotations

import json
import re
import time

import pytest
import yaml
from failure_report import run, said
from tbfixture import testbed

from k3run import REPO, changing_calls

pytestmark = pytest.mark.integration

LOAD, FORM, STALL = 8.0, 2.5, 2.5   # the load lasts 3.2x each limit; GPU memory grows every ~0.8 s


def set_node(tb, **values) -> None:
    """Settings every engine start on every node reads (node.json top-level keys)."""
    script = ("import json, sys; p='/run/k3tb/node.json'; d=json.load(open(p)); "
              "d.update(json.loads(sys.argv[1])); json.dump(d, open(p, 'w'))")
    for node in tb.nodes:
        assert tb.ssh(node, ["python3", "-c", script, json.dumps(values)]).returncode == 0


def playbook(tmp_path, **wait):
    """bringup.yaml with the wait step's limits set (the step's `with:`)."""
    doc = yaml.safe_load((REPO / "k3deploy" / "playbooks" / "bringup.yaml").read_text())
    doc["steps"] = [{"step": "wait", "with": wait} if s == "wait" else s for s in doc["steps"]]
    path = tmp_path / "bringup-limits.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def starts(tb) -> int:
    return sum(1 for call in changing_calls(tb.stats()) if call[:2] == ["docker", "run"])


def engine_log(tb, node: str) -> str:
    proc = tb.ssh(node, "docker logs k3 2>&1")
    return proc.stdout


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    with testbed(tmp_path_factory.mktemp("sglang"), nodes=2, gpu="b300",
                 load_seconds=LOAD) as bed:
        yield bed


def up_again_verify_down(tb):
    before = starts(tb)
    again = run("up", "-i", str(tb.inventory))
    assert again.returncode == 0, said(again)
    assert starts(tb) == before, "a second up started an engine"
    verify = run("verify", "-i", str(tb.inventory))
    assert verify.returncode == 0, said(verify)
    down = run("down", "-i", str(tb.inventory))
    assert down.returncode == 0, said(down)


def test_0516_long_load_passes_on_rank0_progress(tb, tmp_path):
    started = time.monotonic()
    proc = run("run", str(playbook(tmp_path, form_timeout=FORM, stall_seconds=STALL,
                                   poll_seconds=0.5)),
               "-i", str(tb.inventory))
    assert proc.returncode == 0, said(proc)
    assert time.monotonic() - started > LOAD + FORM   # the load outlived the form timeout
    head, worker = engine_log(tb, "node0"), engine_log(tb, "node1")
    assert "Multi-thread loading shards: 100% Completed | 96/96" in head
    assert "loading shards" not in worker and "checkpoint shards" not in worker
    # The bar reaches docker logs only at its close: the wait showed the load by GPU memory,
    # every rank's of its total, a new line as it grew.
    views = [line.strip() for line in said(proc).splitlines() if "GPU memory in use: " in line]
    assert len(set(views)) >= 3, said(proc)
    assert all(re.search(r"rank 0 [\d.]+/\d+ GiB \(\d+%\), rank 1 [\d.]+/\d+ GiB", v)
               for v in views), views
    up_again_verify_down(tb)


def test_054_old_loader_line_up_again_verify_down(tb):
    set_node(tb, sglang_version="0.5.4", engine_load_seconds=1.0)
    proc = run("up", "-i", str(tb.inventory))
    assert proc.returncode == 0, said(proc)
    assert "Loading safetensors checkpoint shards: 100% Completed | 96/96" in \
        engine_log(tb, "node0")
    up_again_verify_down(tb)


def test_slow_start_engine_error_names_the_rank_and_its_line(tb):
    set_node(tb, sglang_version="0.5.16", engine_import_seconds=20.0)
    text = tb.inventory.read_text().replace("  args: {}", "  args: {dp-size: 2}")
    assert text != tb.inventory.read_text()
    tb.inventory.write_text(text)
    started = time.monotonic()
    proc = run("up", "-i", str(tb.inventory))
    took = time.monotonic() - started
    assert proc.returncode == 1, said(proc)
    assert took > 20, took   # the engine said it only after its imports
    assert "[node0/launch] rank 0 engine exited (1) during start-up: AssertionError: " \
           "multi-node data parallel is not supported unless dp attention!" in said(proc)
