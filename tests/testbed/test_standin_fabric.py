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


import os  # noqa: E402
import select  # noqa: E402
import subprocess  # noqa: E402

import ncclout  # noqa: E402

# A rank process: NCCL's two init lines, then a mark on stderr, then alive until stdin closes.
_RANK = """
import sys
sys.path[:0] = {paths!r}
import ncclout
from common import Container
ncclout.emit(Container({container!r}), {env!r}, ["h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
                                          "h:1:1 [0] NCCL INFO Using network IB"])
sys.stderr.write("inited\\n"); sys.stderr.flush()
sys.stdin.read()
"""


def _rank(env: dict, container=None) -> tuple[str, str]:
    """(stdout while the rank lives, stdout at its exit) through a pipe, as dockerd reads it."""
    code = _RANK.format(paths=[str(STANDINS), str(STANDINS / "engine")], env=env,
                        container=container)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    try:
        assert proc.stderr.readline() == b"inited\n"
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        live = os.read(proc.stdout.fileno(), 65536).decode() if ready else ""
        proc.stdin.close()
        rest = proc.stdout.read().decode()
        assert proc.wait(timeout=30) == 0
        return live, live + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_nccl_stdout_is_block_buffered_unless_unbuffered():
    """C stdio on a pipe: NCCL's lines wait for the 4 KiB block or the exit (NVIDIA/nccl#1841);
    PYTHONUNBUFFERED makes them arrive as they are written."""
    live, at_exit = _rank({"NCCL_DEBUG": "INFO"})
    assert live == "" and at_exit.count("NCCL INFO") == 2
    live, _ = _rank({"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1"})
    assert "Using network IB" in live


def test_nccl_debug_file_expanded_in_the_mounted_dir(tmp_path):
    """NCCL_DEBUG_FILE: %h the host name to its first dot, %p the pid, %% a percent; the file
    is line-buffered and nothing reaches stdout."""
    assert ncclout.expand("/d/%h.%p.%%.%x.log", host="node0.cluster", pid=42) == \
        "/d/node0.42.%.%x.log"
    container = {"mounts": [{"host": str(tmp_path), "container": "/k3deploy/nccl-logs"}]}
    live, at_exit = _rank({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/k3deploy/nccl-logs/%h.%p.log"},
                          container)
    assert at_exit == ""
    files = list(tmp_path.glob("*.log"))
    assert len(files) == 1 and files[0].name.startswith(os.uname().nodename.split(".")[0] + ".")
    assert "Using network IB" in files[0].read_text()


def test_nccl_ib_hca_prefix_exact_and_exclude():
    """src/misc/utils.cc matchIf: a prefix unless the list starts with '=' ('^' first excludes)."""
    assert nccl_init.selects("mlx5_1", "mlx5_10") and nccl_init.selects("mlx5", "mlx5_3")
    assert not nccl_init.selects("=mlx5_1", "mlx5_10") and nccl_init.selects("=mlx5_1", "mlx5_1")
    assert not nccl_init.selects("^=mlx5_0", "mlx5_0") and nccl_init.selects("^=mlx5_0", "mlx5_01")
    assert nccl_init.selects("=mlx5_1:1", "mlx5_1", 1) and not nccl_init.selects("=mlx5_1:2", "mlx5_1", 1)
    assert nccl_init.selects(None, "mlx5_0") and nccl_init.selects("", "mlx5_0")
