"""`roll` on a fleet (issue 54): two groups of two nodes behind the real SMG. Under a steady load
through the router (four clients, streaming and not, the fleet's key; scripts/fleetload.py)
`roll` relaunches both groups one at a time with 0 failed requests, requests answered while
each group was out, and a sample of the router's worker list every second never shows both
groups out of ready. A one-group fleet is refused (exit 2) before any SSH. Needs root."""

from __future__ import annotations

import os
import re
import time

import pytest
import yaml

from fleetload import Load, Sampler
from k3run import k3, out
from tbfixture import testbed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600),
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]

MODEL = "moonshotai/Kimi-K3"
DECODE_TOK_S = 4


def secret(tb, name: str) -> str:
    cluster = yaml.safe_load(tb.inventory.read_text())["cluster"]
    return (tb.inventory.parent / ".k3deploy" / cluster / "secrets" / name).read_text().strip()


def docker_runs(tb) -> dict[str, int]:
    """Per node: `docker run` calls so far (the engines' and, on node0, the router's)."""
    nodes = tb.stats()["nodes"]
    return {n: sum(1 for c in nodes[n]["calls"] if c["tool"] == "docker" and "run" in c["argv"][1:2])
            for n in nodes}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    # The heads decode at 4 tok/s (one stream; slower per stream with several): a request of
    # the load (32 tokens) lasts longer than SMG's drain settle (5 s), so a group taken out
    # still has requests in flight that must finish (SMG's cache-aware policy may send every
    # request to one group, so only one of the two is sure to have some).
    with testbed(tmp_path_factory.mktemp("roll"), nodes=4, groups=2, gpu="h200",
                 shard_bytes=100_000, overrides={n: {"decode_tok_s": DECODE_TOK_S}
                                                 for n in ("node0", "node2")}) as tb:
        up = k3("up", "-i", str(tb.inventory), "--no-dry-fire")
        assert up.returncode == 0, out(up)
        yield tb


def test_a_one_group_fleet_is_refused_before_any_ssh(fleet):
    doc = yaml.safe_load(fleet.inventory.read_text())
    doc["groups"] = doc["groups"][:1]
    one = fleet.inventory.parent / "one-group.yaml"   # beside it: its key paths stay right
    one.write_text(yaml.safe_dump(doc))
    refused = k3("roll", "-i", str(one), timeout=60)
    assert refused.returncode == 2, out(refused)
    assert "a fleet of one group cannot roll without an outage" in out(refused)
    assert "--allow-outage" in out(refused) and "Traceback" not in out(refused)


def test_roll_relaunches_both_groups_under_load_without_a_failed_request(fleet):
    tb, inv = fleet, str(fleet.inventory)
    key, admin = secret(tb, "api-key"), secret(tb, "router-admin-key")
    base = f"http://{tb.address('node0')}:30000"
    urls = {g: f"http://{tb.address(n)}:8000" for g, n in (("g0", "node0"), ("g1", "node2"))}
    runs_before = docker_runs(tb)
    load = Load(base=base, key=key, model=MODEL, clients=4, max_tokens=32)
    sampler = Sampler(base=base, admin_key=admin)
    with sampler, load:
        time.sleep(3)                       # the load is flowing before the roll begins
        started = time.time()
        roll = k3("roll", "-i", inv, "--drain-timeout", "120", timeout=540)
        ended = time.time()
        time.sleep(2)
    said = out(roll)
    print(said)   # shown by -rP, and with a failure
    print(f"{len(load.done())} requests, {len(load.failed())} failed, "
          f"{len(sampler.samples)} samples of the router's workers")
    assert roll.returncode == 0, said
    assert key not in said and admin not in said
    for g in ("g0", "g1"):
        assert f"router: removed group {g}" in said and f"relaunch of group {g}" in said
        assert re.search(rf"group {g}: drained \(", said), said
        assert f"group {g}: relaunched, verified and ready in the router again" in said
    # a stream outlives the router's settle: the drain on the engine's own count mattered
    assert re.search(r"drained \([1-9]\d* request\(s\) in flight finished", said), said
    assert said.index("ready in the router again") < said.index("router: removed group g1")
    assert "a chat completion through it answered, with reasoning_content" in said

    done, failed = load.done(), load.failed()
    assert not failed, [f"{r.client} stream={r.stream}: {r.error}" for r in failed[:5]]
    during = [r for r in done if started <= r.started and r.ended <= ended]
    assert {r.stream for r in during} == {True, False}, len(during)

    # every sample of the worker list holds a group ready; each group was out once, and
    # requests were answered (by the other group) while it was out
    assert sampler.samples and all(s.error is None for s in sampler.samples)
    both_out = [s for s in sampler.samples if not any(v == "ready" for v in s.status.values())]
    assert not both_out, both_out[:3]
    for g, url in urls.items():
        windows = [w for w in sampler.out_windows(url) if w[0] >= started - 1]
        assert len(windows) == 1, (g, windows)
        assert load.served_between(*windows[0]) > 0, (g, windows[0])

    # every node's engine really was relaunched (a `docker run` on each)
    runs_after = docker_runs(tb)
    assert all(runs_after[n] > runs_before[n] for n in tb.nodes), (runs_before, runs_after)
