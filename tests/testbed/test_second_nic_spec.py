"""`--node NAME:second_nic=ADDRESS/PREFIX`: a private IPv4 interface on a subnet of its own,
checked before anything starts (exit 2 from `testbed up`). The interface itself is exercised
by tests/integration/test_init.py."""
from __future__ import annotations

from pathlib import Path

import pytest

import tbfixture  # noqa: F401  (puts scripts/ on sys.path)
from tb import node
from tb.nodespec import SpecError, build_specs


def test_second_nic_is_parsed_into_the_spec_and_the_init_script():
    specs = build_specs(2, {}, ["node1:second_nic=192.168.77.11/24"])
    assert specs[0].second_nic is None and specs[1].second_nic == "192.168.77.11/24"
    script = node.init_script(Path("/n"), Path("/s"), specs[1], "10.213.0.11")
    assert "ip link add eth1 type veth peer name eth1peer" in script
    assert "ip addr add 192.168.77.11/24 dev eth1" in script
    assert "eth1" not in node.init_script(Path("/n"), Path("/s"), specs[0], "10.213.0.10")


@pytest.mark.parametrize("value", ["8.8.8.8/24", "192.168.77.11", "10.213.5.20/24",
                                   "192.168.77.11/31", "eth1"])
def test_second_nic_refuses_what_is_not_a_private_subnet_of_its_own(value):
    with pytest.raises(SpecError):
        build_specs(2, {}, [f"node1:second_nic={value}"])
