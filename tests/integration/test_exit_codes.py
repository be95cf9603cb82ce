"""Exit codes with nodes really out of reach: loopback addresses on a port nothing listens on
(refused at once, no testbed needed). Per-node work is partial (3); verify and init, whose goal
is the whole cluster, fail (1). README, "Exit codes"."""

from __future__ import annotations

import pytest
import yaml
from k3run import k3, out

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gone(tmp_path_factory):
    where = tmp_path_factory.mktemp("gone")
    (where / "key").write_text("not a key: never used, the connection is refused first\n")
    (where / "known_hosts").write_text("")
    doc = {"cluster": "gone", "model": {"repo": "moonshotai/Kimi-K3"},
           "gpu": {"model": "h100", "count": 8},
           "ssh": {"user": "root", "port": 9, "key": "key", "known_hosts": "known_hosts",
                   "connect_timeout": 2},
           "nodes": [{"name": f"node{i}", "address": f"127.0.0.{i + 1}",
                      "private_address": f"10.0.0.{i + 1}", "nic": "eth0"} for i in range(2)]}
    path = where / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# logs and run teardown take down's path (tests/unit/test_cli_exit_codes.py covers them all)
@pytest.mark.parametrize("argv,code", [(["status"], 3), (["down"], 3), (["verify"], 1)],
                         ids=["status", "down", "verify"])
def test_unreachable_nodes(gone, argv, code):
    proc = k3(*argv, "-i", str(gone))
    assert proc.returncode == code, out(proc)
    assert "Traceback" not in out(proc)
    said = "not finished: node0, node1 could not be reached" in out(proc)
    assert said == (code == 1), out(proc)   # a partial result is no unfinished goal


def test_init_with_a_host_out_of_reach_names_it_and_writes_nothing(gone):
    target = gone.parent / "init.yaml"
    proc = k3("init", "127.0.0.1", "127.0.0.2", "--port", "9", "-o", str(target),
              "--known-hosts", str(gone.parent / "known_hosts"))
    assert proc.returncode == 1, out(proc)
    assert "127.0.0.1: cannot reach 127.0.0.1:9 after 3 attempts" in proc.stderr
    assert "Traceback" not in out(proc) and not target.exists()
