"""The download step with fan-out on, and the download-start contract (issue 12, item 10):
facts in, actions out."""

import hashlib
import json

from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.remote import protocol
from k3deploy.steps.weights.download import DownloadWeights
from k3deploy.steps.weights.download_report import Detail, hub_summary
from k3deploy.steps.weights.peer_server_stop import StopPeerFacts, StopPeerServer
from tests.unit.download_facts import facts as download_facts
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes

SECRET = "peer-secret-0123456789abcdef"
FILES = tuple(RepoFile(f"model-0000{i}.safetensors", 100 + i, f"{i:064x}", "c" * 40) for i in range(4))
MANIFEST = Manifest("moonshotai/Kimi-K3", "main", "a" * 40, "http://hub", FILES)


def ctx(tmp_path, rank=1, doc=None):
    inv = inventory.parse(doc or four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    run.inputs = RunInputs(manifest=MANIFEST, manifest_json=json.dumps(MANIFEST.to_json()),
                           token="hf_tok", settled=frozenset({"token"}), peer_secret=SECRET)
    return NodeContext(run, inv.ranked()[rank][1], rank)


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def serving(node):
    """The peer fact of a node whose server runs with this run's manifest and secret."""
    return {"running": True, "manifest_sha256": sha(DownloadWeights()._manifest_json(node)),
            "secret_sha256": sha(SECRET)}


def test_each_node_manifest_carries_the_same_split_and_its_own_name(tmp_path):
    docs = [json.loads(DownloadWeights()._manifest_json(ctx(tmp_path, rank=r))) for r in range(4)]
    assert [d["peers"]["self"] for d in docs] == ["node0", "node1", "node2", "node3"]
    assert len({json.dumps(d["peers"]["owner"], sort_keys=True) for d in docs}) == 1
    assert sorted(docs[0]["peers"]["owner"].values()) == ["node0", "node1", "node2", "node3"]
    assert docs[1]["peers"]["nodes"] == {"node0": "10.0.0.10", "node2": "10.0.0.12",
                                         "node3": "10.0.0.13"}
    assert SECRET not in json.dumps(docs)  # the manifest names the 0600 file, not the secret


def test_start_runs_the_peer_server_first_with_the_secret_in_a_0600_file(tmp_path):
    node = ctx(tmp_path)
    actions = DownloadWeights({"wait": False}).plan(download_facts(), node)
    names = [a.description for a in actions]
    assert names.index("(re)start the peer server, detached") < names.index("start the downloader, detached")
    assert names.count("upload fetch_weights.py") == 1 and names.count("upload fetch_hub.py") == 1
    secret = next(a for a in actions if a.upload_to == "/mnt/nvme/.k3deploy/peer.secret")
    assert secret.content == SECRET and secret.mode == 0o600
    start = next(a for a in actions if a.description.startswith("(re)start the peer"))
    assert "--listen 10.0.0.11:8951" in start.argv[2] and "--secret-file" in start.argv[2]
    shown = " ".join(a.shown() for a in actions)
    assert SECRET not in shown and "hf_tok" not in shown
    assert any(a.upload_to == "/mnt/nvme/.k3deploy/peer_fetch.py" for a in actions)


def test_peer_server_restarted_when_secret_or_manifest_differ_and_left_alone_otherwise(tmp_path):
    node = ctx(tmp_path)
    done = download_facts(missing_count=0, peer=serving(node))
    assert DownloadWeights({"wait": False}).plan(done, node) == []
    for stale in ({"secret_sha256": sha("old")}, {"manifest_sha256": sha("{}")}, {"running": False}):
        facts = download_facts(missing_count=0, peer={**serving(node), **stale})
        names = [a.description for a in DownloadWeights({"wait": False}).plan(facts, node)]
        assert names[-1] == "(re)start the peer server, detached", stale


def test_download_start_promises_nothing_about_what_the_downloader_finishes(tmp_path):
    # The detached downloader finished between apply and the re-check and left its token file:
    # removing it belongs to the waiting step, so download-start's re-check plans nothing.
    for doc in (four_nodes(download={"peers": False}), four_nodes()):
        node = ctx(tmp_path, doc=doc)
        facts = download_facts(missing_count=0, token_file=True, peer=serving(node))
        assert DownloadWeights({"wait": False}).plan(facts, node) == []
        (remove,) = DownloadWeights().plan(facts, node)
        assert remove.argv == ("rm", "-f", "/mnt/nvme/.k3deploy/hf.env")


def test_single_node_cluster_is_unchanged(tmp_path):
    doc = four_nodes(nodes=[{"name": "solo", "address": "10.0.0.9"}])
    node = ctx(tmp_path, rank=0, doc=doc)
    assert "peers" not in json.loads(DownloadWeights()._manifest_json(node))
    actions = DownloadWeights({"wait": False}).plan(download_facts(), node)
    # the peer_*.py modules are among the downloader's files; without a peers block they are
    # never imported, and no peer server is started
    shipped = {f"upload {name}" for name in protocol.DOWNLOADER_FILES}
    assert not any("peer" in a.description for a in actions if a.description not in shipped)


def test_stop_peer_server_only_when_running(tmp_path):
    node = ctx(tmp_path)
    assert StopPeerServer().plan(StopPeerFacts(running=False), node) == []
    (stop,) = StopPeerServer().plan(StopPeerFacts(running=True), node)
    assert "grep -q peer_server /proc/$p/cmdline" in stop.argv[2] and "kill -TERM $p" in stop.argv[2]


def test_hub_summary_states_hub_bytes_against_the_repo():
    line = hub_summary([Detail.from_state(d) for d in ({"hub_bytes": 30e9, "peer_bytes": 90e9},
                                                        {"hub_bytes": 0.5e9}, {})], 30e9)
    assert line.startswith("weights: the Hub served 30.50 GB for a 30.00 GB repo (1.02x), "
                           "peers 90.00 GB")
    assert "served 28.8 MB for a 28.8 MB repo (1.00x), peers 0.0 MB" in hub_summary(
        [Detail.from_state({"hub_bytes": 28.8e6, "peer_bytes": None})], 28.8e6)


def test_preflight_opens_the_peer_port_on_every_node_only_with_fan_out():
    import random

    from k3deploy.steps.checks.reachability import _ports_for
    for doc, want in ((four_nodes(), True), (four_nodes(download={"peers": False}), False)):
        run = RunContext(inv=inventory.parse(doc), session=None)
        for name in ("node0", "node2"):
            assert (8951 in _ports_for(run, name, "node0", random.Random(1), set())) is want, \
                (name, want)
    # A peer server (or an engine) already listening: its port gets no stray connection.
    run = RunContext(inv=inventory.parse(four_nodes()), session=None)
    ports = _ports_for(run, "node0", "node0", random.Random(1), {8951, 20000})
    assert 8951 not in ports and 20000 not in ports and len(ports) == 2
    assert 20000 in _ports_for(run, "node0", "node0", random.Random(1), {8951})


def test_the_state_file_keeps_the_same_detail_and_the_closing_line_reads_it_back(tmp_path):
    node = ctx(tmp_path)
    facts = download_facts(missing_count=0, verified_bytes=406, progress={
        "hub_bytes": 100, "peer_bytes": 306, "bad_peers": ["node2"]})
    kept = DownloadWeights().detail(facts, node)
    assert kept == {"sha": "a" * 40, "files": 4, "verified": 4, "verified_bytes": 406,
                    "hub_bytes": 100, "peer_bytes": 306, "bad_peers": ["node2"]}
    assert Detail.from_state(json.loads(json.dumps(kept))) == Detail.of(facts.status, "a" * 40)
    fresh = DownloadWeights().detail(download_facts(), node)
    assert (fresh["hub_bytes"], fresh["peer_bytes"], fresh["bad_peers"]) == (None, None, [])


def test_the_progress_bar_reads_the_typed_progress(tmp_path):
    import io

    from rich.console import Console

    from k3deploy.run.ui import Ui
    out = io.StringIO()
    ui = Ui(Console(file=out, width=160, force_terminal=False))
    node = ctx(tmp_path)
    node.run.ui = ui
    facts = download_facts(progress={"bytes_total": 4000, "bytes_done": 1000, "shards_total": 4,
                                     "shards_done": 1, "hub_bytes": 400, "peer_bytes": 600})
    DownloadWeights().show_progress(facts, node)
    DownloadWeights().show_progress(download_facts(), node)   # no progress yet: nothing to show
    ui.stop_progress()
    assert "1/4 shards, hub 0.0 MB, peers 0.0 MB" in out.getvalue()


def test_the_closing_lines_read_every_nodes_kept_detail(tmp_path):
    node = ctx(tmp_path)
    step = DownloadWeights()
    for rank, bad in enumerate(([], ["node3"], ["node3"], [])):
        facts = download_facts(missing_count=0, progress={"hub_bytes": 100, "peer_bytes": 300,
                                                          "bad_peers": bad})
        kept = step.detail(facts, ctx(tmp_path, rank=rank))
        node.run.session.states[f"node{rank}"].step("download")["detail"] = kept
    summary, bad = step.closing_lines(node.run, {})
    assert summary.startswith("weights: the Hub served 0.0 MB") and "peers 0.0 MB" in summary
    assert bad.startswith("peer node3 served bytes failing their checksum (seen by node1, node2)")
