import ipaddress

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


def is_placeholder_address(address: str) -> bool:
    """True for the RFC 5737 documentation addresses a skeleton (and inventories/) puts in place
    of real node IPs: they route nowhere."""
    from k3deploy.cluster.inventory_skeleton import PLACEHOLDER_PRIVATE_NET, PLACEHOLDER_PUBLIC_NET
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip in PLACEHOLDER_PUBLIC_NET or ip in PLACEHOLDER_PRIVATE_NET
