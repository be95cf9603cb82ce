"""The command line itself: argument placement, and bad input refused before any SSH."""

import json

import pytest
import yaml

from k3deploy.cli import app
from k3deploy.cluster import inventory
from k3deploy.node.keyfiles import missing_key_files
from tests.unit.invdata import four_nodes


def exit_code(argv) -> int:
    with pytest.raises(SystemExit) as done:
        app.main(argv)
    return done.value.code


@pytest.mark.parametrize("argv", [
    ["plan", "--gpu", "h100", "--nodes", "4", "--json", "--log-json", "-v"],
    ["--log-json", "plan", "--gpu", "h100", "--nodes", "4", "--json", "--verbose"],
    ["-v", "plan", "--gpu", "h100", "--nodes", "4", "--log-json", "--json"],
])
def test_global_options_before_or_after_the_subcommand(argv, capsys):
    app._OUTPUT["log_json"] = False
    assert exit_code(argv) == 0
    assert app._OUTPUT["log_json"] is True
    assert json.loads(capsys.readouterr().out)  # --json output still one document


def test_global_flags_move_only_before_a_double_dash():
    assert app.global_flags_first(["up", "-i", "x", "--log-json", "--", "-v"]) == \
        ["--log-json", "up", "-i", "x", "--", "-v"]


def _inventory(tmp_path, **ssh) -> str:
    # Loopback and a port nothing listens on: should a connection be tried, it goes nowhere.
    doc = four_nodes(ssh={"port": 9, "connect_timeout": 1, **ssh})
    doc["nodes"] = [{"name": "node0", "address": "127.0.0.1"}]
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_missing_key_files_name_the_field_and_the_resolved_path(tmp_path):
    doc = four_nodes(ssh={"key": "keys/id_ed25519"})
    doc["nodes"][2]["key"] = str(tmp_path)  # a directory, not a key file
    inv = inventory.parse(doc, source=str(tmp_path / "inv.yaml"))
    assert missing_key_files(inv) == [
        f"ssh.key: {tmp_path}/keys/id_ed25519 does not exist (the inventory says "
        "'keys/id_ed25519'); fix the path or create the key",
        f"nodes[2].key: {tmp_path} is not a file (the inventory says '{tmp_path}'); fix the "
        "path or create the key"]
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_ed25519").write_text("key\n")
    doc["nodes"][2].pop("key")
    assert missing_key_files(inventory.parse(doc, source=str(tmp_path / "inv.yaml"))) == []


def test_ssh_key_every_node_overrides_is_not_checked(tmp_path):
    (tmp_path / "k").write_text("key\n")
    doc = four_nodes(ssh={"key": "gone"})
    for node in doc["nodes"]:
        node["key"] = "k"
    assert missing_key_files(inventory.parse(doc, source=str(tmp_path / "inv.yaml"))) == []


def test_cli_missing_key_is_bad_input_not_unreachable(tmp_path, capsys):
    path = _inventory(tmp_path, key="nokey")
    assert exit_code(["check", "-i", path]) == 2
    err = capsys.readouterr().err
    assert f"ssh.key: {tmp_path}/nokey does not exist" in err
    assert "reach" not in err
    assert not (tmp_path / ".k3deploy").exists()  # no state, no lock: nothing was started
