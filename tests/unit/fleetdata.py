"""Fleet inventory documents for the unit tests: two groups of two H200 nodes by default."""

from __future__ import annotations

import copy


def group(name: str, first: int, count: int = 2, **overrides) -> dict:
    nodes = [{"name": f"node{i}", "address": f"10.0.0.{10 + i}", "nic": "eth0"}
             for i in range(first, first + count)]
    return {"name": name, "nodes": nodes, **overrides}


def two_groups(**overrides) -> dict:
    doc = {
        "cluster": "fl",
        "model": {"repo": "moonshotai/Kimi-K3", "revision": "main"},
        "gpu": {"model": "h200", "count": 8},
        "router": {"node": "node0"},
        "groups": [group("a", 0), group("b", 2)],
    }
    doc.update(copy.deepcopy(overrides))
    return doc


def fleet_on_disk(tmp_path, **overrides):
    """two_groups() written to tmp_path/fleet.yaml, with the fleet's keys in their 0600 files as
    a first `up` leaves them (.k3deploy/fl/secrets/): the file's path."""
    import yaml
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(two_groups(**overrides)))
    secrets = tmp_path / ".k3deploy" / "fl" / "secrets"
    secrets.mkdir(parents=True, exist_ok=True)
    for name in ("api-key", "router-admin-key"):
        (secrets / name).write_text("k3-" + name)
        (secrets / name).chmod(0o600)
    return path
