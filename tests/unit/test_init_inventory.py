"""The inventory init writes: the planner's config for the GPUs found, the hosts' real values,
comments saying what was found, and hosts that disagree named."""

from __future__ import annotations

from k3deploy.facts.nvidia_smi import Gpu

from k3deploy.cli import init_findings, init_inventory
from k3deploy.cli.init_inventory import Access
from k3deploy.cluster import inventory as inventory_mod
from k3deploy.node.host_facts import Mount
from k3deploy.node.private_net import Choice

H100 = "NVIDIA H100 80GB HBM3"


def found(i: int, *, gpus: int = 8, name: str = H100, driver: str = "580.65.06",
          cuda: str = "13.0", target: str = "/mnt/nvme") -> dict:
    return {"gpus": [Gpu(name, 81559, 0)] * gpus,
            "driver": driver, "cuda": cuda, "user": "ubuntu",
            "mounts": [Mount("/", "/dev/nvme0n1p1", "ext4", 10**11, 10**10),
                       Mount(target, f"/dev/nvme{i + 1}n1", "xfs", 7 * 10**12, 7 * 10**12)]}


def hosts(n: int = 4, **odd) -> list[init_findings.Host]:
    return [init_findings.host_from(f"10.0.0.{10 + i}", f"node{i}",
                                    found(i, **(odd if i == n - 1 else {}))) for i in range(n)]


def test_pick_config_is_the_reference_config_for_the_shape():
    config = init_inventory.pick_config("h100", 4, 8)
    assert (config.label, config.precision, config.engine) == ("4x8 H100", "mxfp4", "sglang")
    b200 = init_inventory.pick_config("b200", 2, 8)
    assert (b200.precision, b200.engine) == ("mxfp4", "vllm")
    odd = init_inventory.pick_config("h200", 3, 8)      # no reference: the first that fits
    assert odd.fits and odd.nodes == 3


def test_written_inventory_loads_and_carries_what_was_found(tmp_path):
    found_hosts = hosts()
    chosen = {h.name: Choice(f"192.168.1.{10 + i}", "ens5", "192.168.1.0/24")
              for i, h in enumerate(found_hosts)}
    config = init_inventory.pick_config("h100", 4, 8)
    (tmp_path / "keys").mkdir()
    access = Access(None, str(tmp_path / "keys" / "id"), str(tmp_path / "kh"),
                    "http://10.0.0.1:8900")
    doc = init_inventory.inventory(config, found_hosts, chosen, access, tmp_path, None)
    head = init_inventory.header(config, found_hosts, ["cluster network 192.168.1.0/24: ..."],
                                 [], ["10.0.0.10", "10.0.0.11"])
    text = init_inventory.render(doc, head)
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    inv = inventory_mod.load(str(path))
    assert [(n.name, n.address, n.private_address, n.nic) for n in inv.nodes] == [
        (f"node{i}", f"10.0.0.{10 + i}", f"192.168.1.{10 + i}", "ens5") for i in range(4)]
    assert [inv.rank_of(f"node{i}") for i in range(4)] == [0, 1, 2, 3]
    assert inv.paths.nvme == "/mnt/nvme" and inv.model.endpoint == "http://10.0.0.1:8900"
    assert inv.ssh.key == "keys/id" and inv.ssh.known_hosts == "kh" and inv.ssh.user == "ubuntu"
    assert (inv.engine.kind, inv.gpu.model, inv.gpu.count) == ("sglang", "h100", 8)
    assert "# rank 0 node0 (10.0.0.10): 8x NVIDIA H100 80GB HBM3, driver 580.65.06, CUDA 13.0; " \
        "/mnt/nvme (/dev/nvme1n1 xfs, 7,000.00 GB, 7,000.00 GB free)" in text
    assert "lmsysorg/sglang:kimi-k3 for the drivers' CUDA 13.0" in text
    assert "# cluster network 192.168.1.0/24" in text and "PROBLEM" not in text


def test_hosts_that_disagree_are_named():
    assert init_findings.problems(hosts()) == []
    count = init_findings.problems(hosts(gpus=4))
    assert count == ["node3: GPU count 4 differs from the other hosts' 8"]
    driver = init_findings.problems(hosts(driver="575.57.08", cuda="12.9"))
    assert len(driver) == 1 and driver[0].startswith(
        "node3: driver 575.57.08, CUDA 12.9 differs from the majority's driver 580.65.06, CUDA 13.0")
    disk = init_findings.problems(hosts(target="/data"))
    assert disk == ["node3: data disk /data differs from the other hosts' /mnt/nvme"]
    unknown = init_findings.problems(hosts(name="NVIDIA A100-SXM4-80GB"))
    assert "node3: 'NVIDIA A100-SXM4-80GB' is no GPU k3deploy knows" in unknown[0]
    none = init_findings.problems(hosts(gpus=0))
    assert none[0] == "node3: no GPU answered nvidia-smi"
