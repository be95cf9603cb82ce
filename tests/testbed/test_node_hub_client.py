"""The real huggingface_hub client, run ON a simulated node, against the mock Hub."""

import pytest
from tbfixture import testbed

pytestmark = pytest.mark.integration


def test_snapshot_download_on_a_node_then_hf_cache_verify(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300") as tb:
        env = (f"HF_ENDPOINT={tb.endpoint} HF_HOME=/mnt/nvme/hf HF_HUB_DISABLE_TELEMETRY=1 "
               "HF_HUB_DISABLE_UPDATE_CHECK=1")
        download = tb.ssh("node0", f"{env} python3 -c \"from huggingface_hub import "
                          "snapshot_download; print(snapshot_download('moonshotai/Kimi-K3', "
                          "max_workers=8))\"", timeout=180)
        assert download.returncode == 0, download.stderr
        assert "/mnt/nvme/hf/hub/models--moonshotai--Kimi-K3/snapshots/" in download.stdout
        verify = tb.ssh("node0", f"{env} hf cache verify moonshotai/Kimi-K3 "
                        "--fail-on-missing-files", timeout=180)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        shards = tb.ssh("node0", "ls /mnt/nvme/hf/hub/models--moonshotai--Kimi-K3/snapshots/*/"
                        " | grep -c safetensors$").stdout.strip()
        assert shards == "96"
        stats = tb.stats()["hub"]
        assert stats["by_node"]["node0"]["bytes"] == stats["repo_bytes"]
