import pytest


def four_nodes(**overrides):
    doc = {
        "cluster": "h100",
        "model": {"repo": "moonshotai/Kimi-K3", "revision": "main"},
        "gpu": {"model": "h100", "count": 8},
        "nodes": [{"name": f"node{i}", "address": f"10.0.0.{10 + i}", "nic": "eth0"}
                  for i in range(4)],
    }
    doc.update(overrides)
    return doc


@pytest.fixture
def inv_doc():
    return four_nodes()
