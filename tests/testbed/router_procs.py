"""The real SGLang router (SMG, PyPI `smg`) on loopback, started through k3deploy's launcher
(k3deploy/remote/router_launch.py) with its keys in a 0600 file, for the router tests. No root.
Every router a Routers starts is killed by close(), pass or fail."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from standin_procs import free_port

LAUNCHER = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "..", "k3deploy",
                                         "remote", "router_launch.py"))
CLIENT_KEY, ADMIN_KEY = "sk-fleet-client-5b1d", "sk-fleet-admin-93ce"


def router_argv(port, *extra):
    # health every second so a test sees ready within seconds (the default is 60 s)
    return ["--host", "127.0.0.1", "--port", str(port), "--api-key", CLIENT_KEY,
            "--control-plane-api-keys", f"k3deploy:k3deploy admin:admin:{ADMIN_KEY}",
            "--prometheus-port", str(free_port()), "--health-check-interval-secs", "1",
            "--policy", "round_robin", *extra]


class Routers:
    def __init__(self, tmp_path):
        self.tmp, self.procs = tmp_path, []

    def args_file(self, argv, mode=0o600):
        path = self.tmp / f"router-{len(self.procs)}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            json.dump({"argv": argv}, f)
        os.chmod(path, mode)
        return path

    def start(self, args_file):
        log = open(self.tmp / f"router-log-{len(self.procs)}.txt", "w+")
        proc = subprocess.Popen([sys.executable, LAUNCHER, str(args_file)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        proc.log_file = log
        self.procs.append(proc)
        return proc

    def close(self):
        for proc in self.procs:
            kill(proc)
            proc.log_file.close()


def kill(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def log_of(proc):
    proc.log_file.flush()
    with open(proc.log_file.name) as f:
        return f.read()


def wait_live(port, proc, timeout=30):
    """SMG's /liveness (server.rs public routes) answers once the HTTP server runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"router exited {proc.returncode}:\n{log_of(proc)[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/liveness", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"router not live on {port}:\n{log_of(proc)[-3000:]}")


def wait_for(what, check, timeout=30, every=0.3):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            break
        time.sleep(every)
    assert value, f"{what}: not within {timeout}s"
    return value


def status_of(port, path, body=None, key=None):
    """The HTTP status alone: SMG's auth refusals are plain text, not JSON."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
