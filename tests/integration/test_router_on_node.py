"""The router image on a testbed node: the docker stand-in starts the real SMG (the venv's, run
by the node's python3: the venv's interpreter is under /root, which the node over-mounts) as a
detached container, through k3deploy's launcher with its keys in a 0600 file; the laptop
reaches its admin API over the bridge, and `ps` on the node shows no key (issue 54)."""
import json
import shlex
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tbfixture import testbed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAUNCHER = Path(__file__).resolve().parents[2] / "k3deploy" / "remote" / "router_launch.py"
IMAGE, PORT = "lightseekorg/smg:1.13.0", 30100
CLIENT_KEY, ADMIN_KEY = "sk-node-client-77a0", "sk-node-admin-4f12"


def status_of(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def live(base):
    try:
        return status_of(base + "/liveness") == 200
    except OSError:
        return False


def put(tb, path, text, mode):
    r = tb.ssh("node0", f"umask 077 && cat > {path} && chmod {mode} {path}", input=text)
    assert r.returncode == 0, r.stderr


def test_router_image_runs_smg_on_a_node_with_keys_off_argv(tmp_path):
    argv = ["--host", "0.0.0.0", "--port", str(PORT), "--api-key", CLIENT_KEY,
            "--control-plane-api-keys", f"k3deploy:k3deploy admin:admin:{ADMIN_KEY}"]
    with testbed(tmp_path, nodes=1, no_hub=True) as tb:
        assert tb.ssh("node0", "mkdir -m 700 -p ~/k3router").returncode == 0
        put(tb, "~/k3router/router.json", json.dumps({"argv": argv}), "600")
        put(tb, "~/k3router/router_launch.py", LAUNCHER.read_text(), "644")
        run = ["docker", "run", "-d", "--name", "k3-router", "--network", "host",
               "--entrypoint", "python3", "-v", "$HOME/k3router:/etc/k3deploy/router:ro", IMAGE,
               "/etc/k3deploy/router/router_launch.py", "/etc/k3deploy/router/router.json"]
        r = tb.ssh("node0", f"docker pull -q {IMAGE} && "
                   + " ".join(a if a.startswith("$HOME") else shlex.quote(a) for a in run))
        assert r.returncode == 0, r.stderr
        base = f"http://{tb.address('node0')}:{PORT}"
        deadline = time.monotonic() + 60
        while not live(base):
            if time.monotonic() > deadline:
                pytest.fail("router not live: " + tb.ssh("node0", "docker logs k3-router").stdout)
            time.sleep(0.5)
        assert status_of(base + "/workers") == 401
        assert status_of(base + "/workers", CLIENT_KEY) == 401
        assert status_of(base + "/workers", ADMIN_KEY) == 200
        ps = tb.ssh("node0", "ps -eww -o args").stdout
        logs = tb.ssh("node0", "docker logs k3-router").stdout
        inspect = tb.ssh("node0", "docker inspect k3-router").stdout
        assert "smg" in ps
        for secret in (CLIENT_KEY, ADMIN_KEY):
            assert secret not in ps and secret not in logs and secret not in inspect
        assert tb.ssh("node0", "docker rm -f k3-router").returncode == 0
