"""The docker stand-in runs the router image (`lightseekorg/smg:<version>`) as the real SMG,
one more detached container: through k3deploy's launcher with the keys in a 0600 file on a
read-only mount, never in the container's argv (scripts/tb/standins/engine/router.py)."""
import json
import os
import time
import urllib.error
import urllib.request

import pytest
from router_procs import ADMIN_KEY, CLIENT_KEY, router_argv, status_of
from standin_procs import ENTRY, free_port
from test_standins import Node

REMOTE = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", "k3deploy",
                                       "remote"))
IMAGE = "lightseekorg/smg:1.13.0"

pytestmark = pytest.mark.slow


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    n.env["K3TB_ENGINE_ENTRY"] = ENTRY   # the real engines' entry, not test_standins' fake
    yield n
    n.kill_everything()


def wait_live(node, port, name, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    pytest.fail(f"router not live:\n{node.docker('logs', name).stdout[-3000:]}")


def test_the_router_image_runs_the_real_smg_with_its_keys_off_argv(node, tmp_path):
    node.pull(IMAGE)
    conf = tmp_path / "router-conf"
    conf.mkdir(mode=0o700)
    port = free_port()
    keys = conf / "router.json"
    fd = os.open(keys, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"argv": router_argv(port)}, f)
    node.docker("run", "-d", "--name", "k3-router", "--network", "host", "--restart",
                "unless-stopped", "--entrypoint", "python3",
                "-v", f"{REMOTE}:/opt/k3deploy:ro", "-v", f"{conf}:/etc/k3deploy/router:ro",
                IMAGE, "/opt/k3deploy/router_launch.py", "/etc/k3deploy/router/router.json",
                check=0)
    wait_live(node, port, "k3-router")
    inspect = json.loads(node.docker("inspect", "k3-router", check=0).stdout)[0]
    assert inspect["State"]["Running"] and inspect["Config"]["Image"] == IMAGE
    pid = inspect["State"]["Pid"]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    for secret in (CLIENT_KEY, ADMIN_KEY):
        assert secret.encode() not in cmdline
        assert secret not in json.dumps(inspect)            # nor in the container's config
        assert secret not in node.docker("logs", "k3-router", check=0).stdout
    assert status_of(port, "/workers") == 401
    assert status_of(port, "/workers", key=ADMIN_KEY) == 200
    node.docker("stop", "k3-router", check=0)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=2)


def test_the_router_image_entrypoint_is_smgs_launcher(node):
    node.pull(IMAGE)
    out = node.docker("run", "--rm", IMAGE, "--help", check=0).stdout
    assert "SMG Router" in out and "--control-plane-api-keys" in out


def test_a_program_the_router_image_lacks_is_not_found(node):
    node.pull(IMAGE)
    r = node.docker("run", "--rm", "--entrypoint", "sglang", IMAGE, "serve")
    assert r.returncode == 127 and "executable file not found" in r.stderr + r.stdout
