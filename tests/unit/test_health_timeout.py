"""The /health probe's timeout outwaits the engine's own (SGLang's health_generate waits up to
SGLANG_HEALTH_CHECK_TIMEOUT, default 20 s, before its 503): every /health probe k3deploy makes
goes through node/http_probe.py's config."""
import json

from k3deploy.cluster import inventory
from k3deploy.node import http_probe


def inv(env=None):
    return inventory.parse({"cluster": "c", "engine": {"kind": "sglang", "env": env or {}},
                            "nodes": [{"name": "node0", "address": "10.0.0.10"}]})


def test_the_probe_waits_longer_than_sglangs_default_and_a_raised_limit():
    assert http_probe.health_timeout(inv()) > http_probe.SGLANG_HEALTH_WAIT == 20
    assert http_probe.health_timeout(inv({"SGLANG_HEALTH_CHECK_TIMEOUT": 45})) > 45


def test_every_health_fact_carries_it_to_the_node():
    fact = http_probe.fact("health", inv({"SGLANG_HEALTH_CHECK_TIMEOUT": 45}), ["health"], None)
    sent = json.loads(fact.stdin)
    assert sent["health_timeout"] > 45 and sent["checks"] == ["health"]
