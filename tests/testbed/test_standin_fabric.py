"""The docker stand-in's --device / --cap-add as docker's CLI and daemon take them, and the
engine stand-ins' NCCL transport for what the container was given."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

STANDINS = Path(__file__).resolve().parents[2] / "scripts" / "tb" / "standins"
sys.path[:0] = [str(STANDINS), str(STANDINS / "engine")]

from tbstand import runflags  # noqa: E402
import nccl_init  # noqa: E402
from common import Container  # noqa: E402


def test_device_values_as_docker_cli_validates_them():
    assert runflags.device("/dev/infiniband") == {
        "host": "/dev/infiniband", "container": "/dev/infiniband", "permissions": "rwm"}
    assert runflags.device("/dev/sda:/dev/xvda:r")["container"] == "/dev/xvda"
    assert runflags.device("/dev/sda:rw")["permissions"] == "rw"
    for bad, message in (("", "bad format for path: "), ("a:b:c:d", "bad format for path: a:b:c:d"),
                         ("/dev/a:/dev/b:rx", "bad mode specified: rx"),
                         ("/dev/a:rel", "rel is not an absolute path")):
        with pytest.raises(runflags.FlagError, match=message):
            runflags.device(bad)


def test_cap_add_names():
    assert runflags.capability("IPC_LOCK") == "CAP_IPC_LOCK"
    assert runflags.capability("cap_ipc_lock") == "CAP_IPC_LOCK"
    assert runflags.capability("ALL") == "ALL"
    assert runflags.capability("IPC_LOCKED") is None


def test_socket_without_devices_or_with_ib_disabled():
    passed = Container({"devices": [{"host": "/dev/infiniband"}]})
    # this machine has no /dev/infiniband: sockets whatever the container was given
    assert nccl_init.transport(Container({}), {})[0] == "Socket"
    assert nccl_init.transport(passed, {"NCCL_IB_DISABLE": "1"})[0] == "Socket"
    assert nccl_init.lines(Container({}), {"NCCL_DEBUG": "WARN"}, "eth0", "10.0.0.1") == []
    lines = nccl_init.lines(Container({}), {"NCCL_DEBUG": "INFO"}, "eth0", "10.0.0.1")
    assert lines[0].endswith("[0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>")
    assert lines[1].endswith("[0] NCCL INFO Using network Socket")
