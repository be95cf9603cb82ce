"""remote/protocol.py: the laptop<->node documents carry one schema version, checked on read."""

import json
import re
import sys
from pathlib import Path

import pytest

from k3deploy.cluster import inventory
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.remote import bundled, downloader_files, protocol
from tests.unit.invdata import four_nodes

MANIFEST = Manifest("moonshotai/Kimi-K3", "main", "a" * 40, "http://hub",
                    (RepoFile("config.json", 10, None, "b" * 40),))


def test_the_manifest_round_trips_with_the_schema_version():
    doc = json.loads(json.dumps(MANIFEST.to_json(4)))
    assert doc["schema"] == protocol.SCHEMA_VERSION
    assert protocol.check_schema(doc, "manifest") == doc
    assert (doc["repo"], doc["sha"], doc["max_workers"]) == ("moonshotai/Kimi-K3", "a" * 40, 4)
    assert doc["files"] == [{"path": "config.json", "size": 10, "sha256": None, "oid": "b" * 40}]


def test_a_progress_document_round_trips():
    doc = protocol.with_schema({"pid": 7, "state": "running", "bytes_done": 3})
    assert protocol.check_schema(json.loads(json.dumps(doc)), "progress") == doc


@pytest.mark.parametrize("found", [protocol.SCHEMA_VERSION + 1, 0, None])
def test_another_version_is_an_error_naming_both(found):
    doc = {"repo": "o/m"} if found is None else {"schema": found, "repo": "o/m"}
    with pytest.raises(protocol.SchemaMismatch) as err:
        protocol.check_schema(doc, "manifest")
    assert f"manifest has schema version {found} but this node program speaks version " \
           f"{protocol.SCHEMA_VERSION}" in str(err.value)


def test_the_cache_folder_and_work_paths_come_from_the_protocol():
    inv = inventory.parse(four_nodes())
    assert protocol.cache_folder("moonshotai/Kimi-K3") == "models--moonshotai--Kimi-K3"
    assert inv.model_cache == protocol.cache_storage(inv.paths.hf, inv.model.repo)
    work = protocol.WorkPaths(inv.paths.work)
    assert work.manifest == f"{inv.paths.work}/manifest.json"
    assert work.progress == f"{inv.paths.work}/download-progress.json"
    assert work.fetcher == f"{inv.paths.work}/fetch_weights.py"


def test_every_node_path_default_is_the_protocols():
    inv = inventory.parse(four_nodes())
    assert inv.paths.work == protocol.work_dir("/mnt/nvme/") == "/mnt/nvme/.k3deploy"
    assert inv.paths.hf == protocol.default_hf_home("/mnt/nvme") == "/mnt/nvme/hf"
    assert inv.paths.docker == protocol.default_docker_root("/mnt/nvme") == "/mnt/nvme/docker"
    storage = protocol.cache_storage("/h", "o/m")
    assert storage == "/h/hub/models--o--m"
    assert protocol.partial_path(storage, "e") == "/h/hub/models--o--m/blobs/e.k3deploy-partial"
    assert protocol.ranges_path(storage, "e") == "/h/hub/models--o--m/blobs/e.k3deploy-partial.ranges.json"
    assert protocol.cache_locks("/h", "o/m") == "/h/hub/.locks/models--o--m"
    assert protocol.snapshot_path(storage, "s", "a/b") == "/h/hub/models--o--m/snapshots/s/a/b"


def test_the_downloader_ships_with_every_module_it_imports():
    # Each node-side module's plain-name imports of its siblings must be in the upload list.
    remote = Path(protocol.__file__).parent
    shipped = {name.removesuffix(".py") for name in protocol.DOWNLOADER_FILES}
    for name in (*protocol.DOWNLOADER_FILES, "peer_server.py"):
        source = (remote / name).read_text()
        imported = set(re.findall(r"^\s*(?:from|import) (\w+)", source, re.M))
        local = {m for m in imported if (remote / f"{m}.py").exists()}
        assert local <= shipped, (name, local - shipped)
    assert [path for path, _ in downloader_files("/w")][0] == "/w/fetch_weights.py"


def test_a_bundled_program_gets_the_protocol_as_its_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "protocol", None)   # the bundle registers it; undone after
    namespace = {"__name__": "bundle_check"}
    source = bundled("weights_status.py")
    assert source.index("SCHEMA_VERSION") < source.index("def verified_files")
    exec(compile(source, "bundle", "exec"), namespace)
    assert namespace["protocol"].SCHEMA_VERSION == protocol.SCHEMA_VERSION


def test_the_ledger_vouches_only_for_the_blob_it_recorded():
    entry = json.loads(json.dumps(protocol.ledger_entry(10, 123, 1.5)))
    assert protocol.ledger_vouches(entry, 10, 123)
    assert not protocol.ledger_vouches(entry, 11, 123)      # grew since
    assert not protocol.ledger_vouches(entry, 10, 124)      # rewritten since
    assert not protocol.ledger_vouches(None, 10, 123)       # never verified


def test_a_snapshot_link_counts_when_it_leads_to_the_blob_however_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "protocol", protocol)
    sys.path.insert(0, str(Path(protocol.__file__).parent))
    try:
        import weights_status
    finally:
        sys.path.pop(0)
    blobs, snap = tmp_path / "real" / "blobs", tmp_path / "real" / "snapshots" / "s"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / "e1").write_text("x")
    (blobs / "e2").write_text("y")
    (tmp_path / "alias").symlink_to(tmp_path / "real")  # HF_HOME reached through a symlink
    blob = str(tmp_path / "alias" / "blobs" / "e1")
    (snap / "rel").symlink_to("../../blobs/e1")           # as huggingface_hub writes it
    (snap / "abs").symlink_to(blobs / "e1")              # absolute, to the real path
    (snap / "other").symlink_to("../../blobs/e2")
    (snap / "copy").write_text("x")                      # not a link at all
    alias_snap = tmp_path / "alias" / "snapshots" / "s"
    points = {name: weights_status._points_at(str(alias_snap / name), blob)
              for name in ("rel", "abs", "other", "copy", "absent")}
    assert points == {"rel": True, "abs": True, "other": False, "copy": False, "absent": False}
