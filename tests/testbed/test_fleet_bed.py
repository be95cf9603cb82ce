"""`scripts/testbed up --nodes 4 --groups 2`: the inventory is a fleet (two groups of two nodes,
the router on the first group's head) that k3deploy validates; each group it splits into opens
with the one-group machinery as it is; the commands that run one group refuse it (exit 2);
`down` leaves nothing behind."""
from __future__ import annotations

import pytest

from k3deploy.cli import app
from k3deploy.cluster import fleet as fleet_mod
from k3deploy.node.session import Session
from tbfixture import run_testbed, testbed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_two_groups_make_a_fleet_inventory_that_validates(tmp_path, capsys):
    with testbed(tmp_path, nodes=4, groups=2, gpu="h200", shard_bytes=100_000) as tb:
        fleet = fleet_mod.load(tb.inventory)
        assert [(g.name, g.inventory.cluster, [n.name for n in g.inventory.nodes])
                for g in fleet.groups] == [("g0", f"tb{tb.idx}-g0", ["node0", "node1"]),
                                           ("g1", f"tb{tb.idx}-g1", ["node2", "node3"])]
        assert fleet.router_node().name == "node0" == fleet.groups[0].inventory.head.name
        assert (fleet.router.port, fleet.router.image) == (30000, "lightseekorg/smg:1.13.0")
        for inv in fleet_mod.split(fleet):
            # one group's Session, as every one-group command opens it: its nodes, no other
            with Session(inv, state_dir=str(tmp_path / "state")) as session:
                said = {n.name: session.conn(n.name).run(["hostname"]).stdout.strip()
                        for n in inv.nodes}
            assert said == {n.name: n.name for n in inv.nodes}
            assert inv.head.self_ip == tb.address(inv.head.name)

        capsys.readouterr()
        assert app.exit_code(["check", "-i", str(tb.inventory)]) == 0
        out = capsys.readouterr().out
        assert "group g0 (cluster" in out and "group g1 (cluster" in out, out
        # Nothing is up yet: status reads the fleet as down (exit 1, as one group's status),
        # verify says it was never brought up; `run` (one group's playbook) still refuses it.
        assert app.exit_code(["status", "-i", str(tb.inventory)]) == 1
        assert f"fleet tb{tb.idx}: down: the router is not running on node0" in \
            capsys.readouterr().out
        assert app.exit_code(["verify", "-i", str(tb.inventory)]) == 1
        assert "was never brought up from this laptop" in capsys.readouterr().err
        assert app.exit_code(["run", "bringup", "-i", str(tb.inventory)]) == 2
        assert "describes a fleet (2 groups: g0, g1" in capsys.readouterr().err


def test_groups_that_do_not_divide_the_nodes_are_refused(tmp_path):
    proc = run_testbed("up", "--dir", str(tmp_path / "tb"), "--nodes", "3", "--groups", "2",
                       check=False)
    assert proc.returncode == 2
    assert "--groups 2 must divide --nodes 3" in proc.stderr
    assert not (tmp_path / "tb" / "testbed.json").exists()
