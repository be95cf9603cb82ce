"""Where `chat` and `bench` send requests (cli/fleet_cmd.endpoint_of): a one-group inventory's
head, a fleet's router with the fleet's one serving key, or one group of the fleet (--group)."""

from __future__ import annotations

import pytest
import yaml

from k3deploy.cli.fleet_cmd import endpoint_of
from k3deploy.core.errors import BadInputError, EndpointError
from tests.unit.fleetdata import two_groups
from tests.unit.invdata import four_nodes


def write(tmp_path, doc: dict, name: str = "inv.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def keys(tmp_path, cluster: str, **files: str) -> None:
    secrets = tmp_path / ".k3deploy" / cluster / "secrets"
    secrets.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (secrets / name).write_text(text)
        (secrets / name).chmod(0o600)


def test_a_fleet_is_served_by_its_router_with_the_fleets_key(tmp_path):
    path = write(tmp_path, two_groups())
    keys(tmp_path, "fl", **{"api-key": "k3-fleet", "router-admin-key": "k3-admin"})
    target, inv, router = endpoint_of(path, None)
    assert router and target.base_url == "http://10.0.0.10:30000/v1"
    assert target.api_key == "k3-fleet" and target.cluster == "fl" and inv.cluster == "fl-a"


def test_a_group_of_a_fleet_is_its_own_head(tmp_path):
    path = write(tmp_path, two_groups())
    keys(tmp_path, "fl-b", **{"api-key": "k3-fleet"})
    target, inv, router = endpoint_of(path, None, group="b")
    assert not router and target.base_url == "http://10.0.0.12:8000/v1"
    assert target.api_key == "k3-fleet" and inv.cluster == "fl-b"


def test_a_fleet_never_brought_up_has_no_keys_and_says_how(tmp_path):
    path = write(tmp_path, two_groups())
    with pytest.raises(EndpointError, match="no keys for fleet fl") as err:
        endpoint_of(path, None)
    assert "k3deploy up -i" in (err.value.hint or "")


def test_group_names_a_group_of_a_fleet(tmp_path):
    fleet = write(tmp_path, two_groups(), "fleet.yaml")
    with pytest.raises(BadInputError, match="has no group 'c'") as err:
        endpoint_of(fleet, None, group="c")
    assert "a, b" in (err.value.hint or "")
    one = write(tmp_path, four_nodes())
    with pytest.raises(BadInputError, match="is a one-group inventory"):
        endpoint_of(one, None, group="a")
