"""`k3deploy init` with nothing but the four SSH addresses (plus where the key, known_hosts
and the testbed's Hub are): the inventory it writes passes check, up, verify and down
unedited; the node with a second private NIC gets the one the others share, with a message;
nothing on the hosts changed; status reads in 100 columns; a second `up` has nothing to do.
Needs root (the testbed)."""

from __future__ import annotations

import os

import pytest
import yaml
from k3run import k3, out
from tbfixture import testbed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]

SECOND = "192.168.77.12/24"
# What a node looks like on disk where init could have written: the NVMe, docker, home, /tmp
# (its entries: /tmp's own mtime moves with the fact batch's temporary directory, removed after).
SNAPSHOT = ("{ find /mnt/nvme /etc/docker /var/lib/docker /root -xdev; find /tmp -mindepth 1; } "
            "2>/dev/null | sort | while read -r p; do stat -c '%n %s %a %Y' \"$p\"; done")


def calls(tb) -> dict[str, int]:
    return {n: len(d["calls"]) for n, d in tb.stats()["nodes"].items()}


def test_init_then_check_up_verify_down_unedited(tmp_path):
    # 40G of tmpfs costs nothing until written: the inventory keeps the defaults, a 13 GB
    # image (24 GB unpacked) and 7 GB kept free.
    with testbed(tmp_path, nodes=4, disk="40G", overrides={"node2": {"second_nic": SECOND}}) as tb:
        addresses = [tb.address(n) for n in tb.nodes]
        before_calls, before_files = calls(tb), {n: tb.ssh(n, SNAPSHOT).stdout for n in tb.nodes}
        inv = tmp_path / "cluster.yaml"
        init = k3("init", *addresses, "-o", str(inv), "--key", str(tb.dir / "id_ed25519"),
                  "--known-hosts", str(tb.dir / "known_hosts"), "--hub-endpoint", tb.endpoint)
        assert init.returncode == 0, out(init)
        assert (f"node2: eth0 {tb.address('node2')}/24, not eth1 {SECOND}: not every node has an "
                "address in 192.168.77.0/24") in init.stdout, out(init)
        # read-only: the stand-ins were asked nvidia-smi only; no file changed
        stats = tb.stats()["nodes"]
        for node in tb.nodes:
            new = stats[node]["calls"][before_calls[node]:]
            assert new and {c["tool"] for c in new} == {"nvidia-smi"}, (node, new)
            assert tb.ssh(node, SNAPSHOT).stdout == before_files[node], node
        doc = yaml.safe_load(inv.read_text())
        assert [(n["name"], n["address"], n["private_address"], n["nic"]) for n in doc["nodes"]] \
            == [(n, tb.address(n), tb.address(n), "eth0") for n in tb.nodes]
        assert (doc["gpu"], doc["engine"]["kind"], doc["paths"]["nvme"]) == \
            ({"model": "h100", "count": 8}, "sglang", "/mnt/nvme")

        for command in ("check", "up", "verify"):
            proc = k3(command, "-i", str(inv))
            assert proc.returncode == 0, (command, out(proc))
        status = k3("status", "-i", str(inv), env={"COLUMNS": "100"})
        print(status.stdout)
        assert status.returncode == 0, out(status)
        lines = status.stdout.splitlines()
        assert lines[0] == "cluster k3-h100-4x8: serving" and all(len(ln) <= 100 for ln in lines)
        rows = [ln for ln in lines if ln.split()[:2] in ([str(i), n] for i, n in enumerate(tb.nodes))]
        assert len(rows) == 4 and all("running" in r and "watching" in r for r in rows), lines
        assert "ray-cluster" not in k3("status", "-i", str(inv), "--steps").stdout

        certs = sorted((tmp_path / ".k3deploy" / "k3-h100-4x8" / "certificates").glob("*.json"))
        again = k3("up", "-i", str(inv))
        assert again.returncode == 0, out(again)
        assert f"nothing to do: every step was already done on every node; the certificate " \
            f"stays {certs[-1]}" in again.stderr and "bring-up took" not in again.stderr
        assert sorted(certs[0].parent.glob("*.json")) == certs

        down = k3("down", "-i", str(inv))
        assert down.returncode == 0, out(down)
