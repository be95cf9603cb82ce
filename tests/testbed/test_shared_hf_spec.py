"""`up --shared-hf` and `--node NAME:shared_hf=false`: what each node's init mounts at the
shared path and what the inventory says. The mounts themselves are exercised by
tests/integration/test_shared_hf.py."""
from __future__ import annotations

from pathlib import Path

import tbfixture  # noqa: F401  (puts scripts/ on sys.path)
from tb import inventory, node
from tb.nodefs import SHARED_HF_HOME, SHARED_HF_MOUNT
from tb.nodespec import build_specs

from k3deploy.cluster import inventory as k3inventory


def test_every_node_binds_the_one_host_dir_but_the_one_told_not_to():
    specs = build_specs(3, {"shared_hf": True}, ["node2:shared_hf=false"])
    scripts = [node.init_script(Path("/tb/nodes") / s.name, Path("/s"), s, "10.213.0.1")
               for s in specs]
    bind = f"mount --bind /tb/shared-hf {SHARED_HF_MOUNT}"
    assert [bind in s for s in scripts] == [True, True, False]
    # every node has a local directory there first: a node without the bind sees it empty
    assert all(f"k3tb-local {SHARED_HF_MOUNT}" in s for s in scripts)
    assert all(s.index(bind) < s.index("/tmp\n") for s in scripts[:2])  # before /tmp is bound
    plain = node.init_script(Path("/n"), Path("/s"), build_specs(1, {}, [])[0], "10.213.0.1")
    assert SHARED_HF_MOUNT not in plain   # without --shared-hf: no extra mount at all


def test_the_inventory_names_the_shared_cache_and_k3deploy_accepts_it(tmp_path):
    specs = build_specs(2, {}, [])
    nodes = [(s, f"10.213.0.{10 + s.index}") for s in specs]
    text = inventory.render("tb0", "http://10.213.0.1:5000", "h100", 8, "sglang", nodes,
                            shared_hf=True)
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    inv = k3inventory.load(path)
    assert inv.download.shared and inv.paths.hf == SHARED_HF_HOME
    plain = inventory.render("tb0", "http://10.213.0.1:5000", "h100", 8, "sglang", nodes)
    assert "shared" not in plain and "hf_home: /mnt/nvme/hf" in plain
