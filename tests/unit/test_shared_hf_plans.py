"""download.shared (issue 22): one HF cache on a volume every node mounts. The head downloads,
the others wait and verify; no fan-out; the docker data-root stays local; wipe-weights deletes
the copy once; preflight names a node that does not see the head's marker. Facts in, actions
(or findings) out."""

import dataclasses
import json
from pathlib import Path

import pytest

from k3deploy.cluster import inventory
from k3deploy.cluster.fanout import peers_enabled
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.core.errors import InventoryError, StepFailed
from k3deploy.core.status import Status
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.steps.weights import shared_hf
from k3deploy.steps.weights.download import DownloadWeights
from k3deploy.steps.weights.hub_restart import START
from k3deploy.steps.disks.nvme import MoveToNvme
from k3deploy.steps.checks.preflight import Preflight
from k3deploy.steps.teardown import WipeFacts, WipeWeights
from tests.unit.download_facts import facts as download_facts
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes
from tests.unit import typed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "steps"
SHARED = "/mnt/shared/hf"
FILES = tuple(RepoFile(f"model-0000{i}.safetensors", 100 + i, f"{i:064x}", "c" * 40) for i in range(4))
MANIFEST = Manifest("moonshotai/Kimi-K3", "main", "a" * 40, "http://hub", FILES)
MISSING = download_facts()
DONE = download_facts(missing_count=0, verified_bytes=406)


def shared_doc(**paths):
    return four_nodes(paths={"hf_home": SHARED, **paths}, download={"shared": True})


def ctx(tmp_path, rank=0, doc=None):
    inv = inventory.parse(doc or shared_doc())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    run.inputs = RunInputs(manifest=MANIFEST, manifest_json=json.dumps(MANIFEST.to_json()),
                           token="hf_tok", settled=frozenset({"token"}))
    return NodeContext(run, inv.ranked()[rank][1], rank)


def marked(facts, node):
    return dataclasses.replace(facts, shared_marker=shared_hf.marker_text(node.inv))


@dataclasses.dataclass(frozen=True)
class Marker:
    """What shared_hf reads of any step's facts: the marker as the node read it."""
    shared_marker: str | None


def test_inventory_rules_for_a_shared_cache():
    inv = inventory.parse(shared_doc())
    assert inv.download.shared and not peers_enabled(inv)
    for doc, field in ((four_nodes(download={"shared": True}), "paths.hf_home"),
                       (shared_doc(hf_home="/mnt/nvme/hf"), "under paths.nvme"),
                       (four_nodes(paths={"hf_home": SHARED},
                                   download={"shared": True, "peers": True}), "download.peers")):
        with pytest.raises(InventoryError) as err:
            inventory.parse(doc)
        assert field in " ".join(err.value.problems)


def test_head_downloads_as_without_a_shared_cache(tmp_path):
    head = ctx(tmp_path, rank=0)
    names = [a.description for a in DownloadWeights({"wait": False}).plan(MISSING, head)]
    assert "start the downloader, detached" in names
    assert not any("peer server" in n for n in names)   # no fan-out for a shared cache
    assert "peers" not in json.loads(DownloadWeights()._manifest_json(head))
    start = next(a for a in DownloadWeights().plan(MISSING, head) if a.tag == "start-downloader")
    assert f"--hf-home {SHARED}" in start.argv[2]


def test_the_others_never_download_and_wait_for_the_head(tmp_path):
    for rank in (1, 2, 3):
        node = ctx(tmp_path, rank=rank)
        facts = marked(MISSING, node)
        assert DownloadWeights({"wait": False}).plan(facts, node) == []
        [waiting] = DownloadWeights().plan(facts, node)
        assert waiting.wait.cluster and "node0 (the head)" in waiting.description
        assert DownloadWeights().plan(marked(DONE, node), node) == []


def test_a_follower_without_the_marker_is_named(tmp_path):
    node = ctx(tmp_path, rank=2)
    for step in (DownloadWeights({"wait": False}), DownloadWeights()):
        with pytest.raises(StepFailed) as err:
            step.plan(dataclasses.replace(MISSING, shared_marker=""), node)
        assert err.value.node == "node2" and "does not see the shared HF cache" in str(err.value)
    node.run.check = True   # --check on a fresh volume: the head has written no marker yet
    assert len(DownloadWeights().plan(dataclasses.replace(MISSING, shared_marker=""), node)) == 1


def test_a_follower_wait_fails_on_the_head_when_its_downloader_died(tmp_path):
    node = ctx(tmp_path, rank=1)
    step, run = DownloadWeights(), node.run
    dead = download_facts(progress={"error": "disk full"})
    seen = {"node0": dead, "node1": marked(MISSING, node)}
    step.check_cluster(seen, run, 1.0, looked_at=100.0)  # not started yet
    run.ledger.record("node0", "download", START, at=100.5)
    # A look begun before the head's start returned, judged after it: not a death.
    step.check_cluster(seen, run, 1.0, looked_at=100.0)
    with pytest.raises(StepFailed) as err:             # a look begun after it: a death
        step.check_cluster(seen, run, 2.0, looked_at=101.0)
    assert err.value.node == "node0" and "disk full" in str(err.value)
    assert step.progress(marked(download_facts(partial_bytes=7), node), node) == 7


def fixture_facts(step, name: str, **changed):
    """A step's typed facts from tests/fixtures/steps/NAME.json, with `changed` fields."""
    doc = json.loads((FIXTURES / f"{name}.json").read_text())["facts"]
    return dataclasses.replace(typed.facts(step, doc), **changed)


def test_nvme_marks_the_cache_on_the_head_and_leaves_it_alone_elsewhere(tmp_path):
    base = fixture_facts(MoveToNvme, "nvme-fresh", login_user="root", docker_dir=True)
    head, other = ctx(tmp_path, rank=0), ctx(tmp_path, rank=3)
    shown = [a.shown() for a in MoveToNvme().plan(base, head)]
    assert any(SHARED + "/hub" in s and s.startswith("create HF cache") for s in shown)
    mark = next(a for a in MoveToNvme().plan(base, head) if a.upload_to)
    assert mark.upload_to == f"{SHARED}/{shared_hf.MARKER}" and "node0" in mark.content
    actions = MoveToNvme().plan(base, other)
    assert not any(SHARED in a.shown() for a in actions if not a.upload_to)
    assert [a.upload_to for a in actions if a.upload_to] == ["/etc/docker/daemon.json"]
    daemon = next(a for a in actions if a.upload_to == "/etc/docker/daemon.json")
    assert json.loads(daemon.content)["data-root"] == "/mnt/nvme/docker"   # local, not shared
    done = fixture_facts(MoveToNvme, "nvme-done")
    assert MoveToNvme().plan(marked(done, head), head) == []


def test_wipe_weights_deletes_the_shared_copy_once(tmp_path):
    cache = f"{SHARED}/hub/models--moonshotai--Kimi-K3"
    plans = {}
    for rank in range(4):
        node = ctx(tmp_path, rank=rank)
        step = WipeWeights()
        # every node finds both: only the head's plan deletes the shared copy
        facts = WipeFacts(weights=True, work=True)
        plans[node.name] = [a.argv for a in step.plan(facts, node)]
    assert [n for n, argvs in plans.items() if any(cache in a for a in argvs)] == ["node0"]
    assert all(argvs == [("rm", "-rf", "--", "/mnt/nvme/.k3deploy")]
               for n, argvs in plans.items() if n != "node0")
    run = ctx(tmp_path).run
    run.session.states["node0"].step("wipe-weights")["status"] = Status.CHANGED
    [line] = WipeWeights().closing_lines(run, {})
    assert line.startswith(f"removed the shared copy {cache} once, on the head node0")


def test_preflight_names_nodes_that_do_not_see_the_heads_marker(tmp_path):
    run = ctx(tmp_path).run
    text = shared_hf.marker_text(run.inv)
    seen = {"node0": Marker(text), "node1": Marker(text), "node2": Marker(""),
            "node3": Marker("k3deploy shared HF cache of cluster other, written by its head x")}
    found = shared_hf.marker_problems(seen, run)
    assert [(n, c) for n, c, _ in found] == [("node2", "shared-hf"), ("node3", "shared-hf")]
    assert f"mount the shared volume at {SHARED} on node2" in found[0][2]
    # Before the first bring-up the head has no marker either: nothing can be told yet.
    assert shared_hf.marker_problems({n: Marker("") for n in seen}, run) == []
    assert any(f.name == shared_hf.FACT for f in Preflight().probes(ctx(tmp_path, rank=2)))
    plain = ctx(tmp_path, doc=four_nodes())
    assert shared_hf.marker_problems({"node0": Marker(None)}, plain.run) == []
    assert not any(f.name == shared_hf.FACT for f in Preflight().probes(plain))


def test_preflight_disk_check_counts_the_checkpoint_against_the_shared_volume(tmp_path):
    from k3deploy.steps.checks.preflight import _disk_problems
    gb = 10 ** 9
    def disk(**found):
        return fixture_facts(Preflight, "preflight-all-good", have_bytes=0, **found)
    small_nvme = {"free_bytes": 40 * gb}   # > reserve + image (31 GB), < the rest
    for rank in (1, 2):
        assert _disk_problems(disk(**small_nvme), ctx(tmp_path, rank=rank)) == []
    head = ctx(tmp_path, rank=0)
    assert _disk_problems(disk(**small_nvme, volume_free_bytes=10 ** 12), head) == []
    [(check, message)] = _disk_problems(disk(**small_nvme, volume_free_bytes=100), head)
    assert check == "disk" and "shared volume (/mnt/shared/hf)" in message
    [(check, message)] = _disk_problems(disk(free_bytes=gb), ctx(tmp_path, rank=3))
    assert "paths.reserve_gb" in message
    assert any(f.name == "volume_free_bytes" for f in Preflight().probes(head))
    assert not any(f.name == "volume_free_bytes" for f in Preflight().probes(ctx(tmp_path, rank=1)))


def test_followers_wait_out_the_heads_restart_of_a_downloader_the_hub_killed(tmp_path, monkeypatch):
    """A head downloader that died of its retry budget alone is restarted by the head's own
    wait: the followers keep waiting (HEAD_RESTART_GRACE per death), not fail at once; after
    MAX_HUB_RESTARTS, or past the grace, they fail naming the head."""
    from k3deploy.steps.weights import hub_restart as download
    node = ctx(tmp_path, rank=1)
    step, run = DownloadWeights(), node.run
    run.ledger.record("node0", "download", START, at=0.0)   # long before the clock's looks
    hub_dead = download_facts(progress={"error": "no new byte for 900s (retry budget)",
                                        "transient": True})
    seen = {"node0": hub_dead, "node1": marked(MISSING, node)}
    clock = [1000.0]
    monkeypatch.setattr(download.time, "monotonic", lambda: clock[0])
    step.check_cluster(seen, run, 1.0, looked_at=clock[0])
    clock[0] += download.HEAD_RESTART_GRACE          # still inside this death's grace
    step.check_cluster(seen, run, 2.0, looked_at=clock[0])
    clock[0] += 1
    with pytest.raises(StepFailed) as err:           # the head never restarted it
        step.check_cluster(seen, run, 3.0, looked_at=clock[0])
    assert err.value.node == "node0" and "retry budget" in str(err.value)
    run.ledger.record("node0", "download", START, at=0.5)   # restarted, died of the Hub again
    step.check_cluster(seen, run, 4.0, looked_at=clock[0])               # a new death, a new grace
    for _ in range(download.MAX_HUB_RESTARTS - 1):
        run.ledger.record("node0", "download", START, at=0.5)
    with pytest.raises(StepFailed):                  # no restart left: the followers fail too
        step.check_cluster(seen, run, 5.0, looked_at=clock[0])
