"""A shared HF cache on the testbed (issue 22): `testbed up --shared-hf` mounts one host
directory at /mnt/k3tb-shared on all 4 nodes and the inventory says download.shared. The head
downloads once, the others wait and verify; a second `up` changes nothing; `down
--wipe-weights` deletes the one copy once; the download step from nothing has the others wait
for the head; a node whose mount dropped is named by `check`."""

import pytest
from tbfixture import testbed

from k3run import k3, out, state

pytestmark = pytest.mark.integration
SHARED = "/mnt/k3tb-shared/hf"
CACHE = f"{SHARED}/hub/models--moonshotai--Kimi-K3"
HF = f"HF_HOME={SHARED} HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_UPDATE_CHECK=1"
DOWNLOAD_LOG = "/mnt/nvme/.k3deploy/download.log"


def served(tb) -> dict[str, int]:
    """node -> bytes the mock Hub and its CDN (when on) sent it (nodes it sent bytes to)."""
    stats, total = tb.stats(), {}
    for section in (stats["hub"]["by_node"], stats["cdn"]["by_node"]):
        for name, counts in section.items():
            total[name] = total.get(name, 0) + counts["bytes"]
    return {name: n for name, n in total.items() if n}


def test_shared_cache_downloaded_once_verified_everywhere_wiped_once(tmp_path):
    with testbed(tmp_path, nodes=4, shared_hf=True) as tb:
        inv = str(tb.inventory)
        first = k3("up", "-i", inv)
        assert first.returncode == 0, out(first)
        assert f"weights: one copy on the shared volume {SHARED}, downloaded by the head " \
               "node0" in out(first)
        repo, sent = tb.stats()["hub"]["repo_bytes"], served(tb)
        assert sum(sent.values()) <= 1.05 * repo, (sent, repo)
        assert list(sent) == ["node0"], sent   # one downloader
        for node in tb.nodes:
            ran = tb.ssh(node, f"test -e {DOWNLOAD_LOG}").returncode == 0
            assert ran == (node == "node0"), f"{node}: a downloader ran there: {ran}"
            detail = state(tb.inventory, node)["steps"]["download"]["detail"]
            assert detail["verified"] == detail["files"] > 0, (node, detail)
        # huggingface_hub's own verify on a follower: what it sees of the volume is complete
        # (k3deploy's status, checked above, is the same on every node; one run saves time).
        check = tb.ssh("node3", f"{HF} HF_ENDPOINT={tb.endpoint} hf cache verify "
                       "moonshotai/Kimi-K3 --fail-on-missing-files", timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr

        again = k3("up", "-i", inv)
        assert again.returncode == 0, out(again)
        for node in tb.nodes:
            statuses = {s["status"] for s in state(tb.inventory, node)["steps"].values()}
            assert statuses == {"ok"}, (node, statuses)
        assert served(tb) == sent

        down = k3("down", "--wipe-weights", "-i", inv, env={"COLUMNS": "400"})
        assert down.returncode == 0, out(down)
        said = " ".join(out(down).split())
        assert f"removed the shared copy {CACHE} once, on the head node0" in said, said
        assert tb.ssh("node1", f"test -e {CACHE}").returncode == 1

        # From nothing, the download step alone: the head fetches while the others wait for it.
        refill = k3("run", "resume-download", "-i", inv)
        assert refill.returncode == 0, out(refill)
        for node in tb.nodes:
            step = state(tb.inventory, node)["steps"]["download"]
            assert step["status"] == "changed", (node, step)   # the head fetched, the rest waited
            assert step["detail"]["verified"] == step["detail"]["files"], (node, step)
        assert list(served(tb)) == ["node0"] and sum(served(tb).values()) <= 2.1 * repo

        # node3's mount drops: it sees its own empty directory, and `check` names it alone.
        assert tb.ssh("node3", "umount /mnt/k3tb-shared").returncode == 0
        checked = k3("check", "-i", inv, env={"COLUMNS": "400"})
        assert checked.returncode != 0, out(checked)
        text = " ".join(out(checked).split())
        assert "node3 │ shared-hf" in text, text
        assert "mount the shared volume at /mnt/k3tb-shared/hf on node3" in text, text
        assert "on node1" not in text and "on node2" not in text, text


def test_up_names_the_node_the_shared_volume_is_not_mounted_on(tmp_path):
    # `--node node3:shared_hf=false`: node3 has an empty directory of its own at the path. The
    # head's nvme step marks the volume; node3 does not see the mark and is named before any
    # byte is downloaded for it, and no second copy is written on its own disk.
    with testbed(tmp_path, nodes=4, shared_hf=True,
                 overrides={"node3": {"shared_hf": False}}) as tb:
        up = k3("up", "-i", str(tb.inventory), env={"COLUMNS": "400"})
        assert up.returncode != 0, out(up)
        text = " ".join(out(up).split())
        assert "mount the shared volume at /mnt/k3tb-shared/hf on node3" in text, text
        assert state(tb.inventory, "node3")["steps"]["download-start"]["status"] == "failed"
        assert tb.ssh("node3", f"ls -A {SHARED}").stdout.strip() == ""
        assert tb.ssh("node0", f"test -e {SHARED}/.k3deploy-shared-volume").returncode == 0
