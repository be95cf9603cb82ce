"""The real SGLang router (SMG 1.13.0 from PyPI) in front of two stand-in SGLang engines on
loopback: keys never in the router's argv, the admin API's auth, reconcile registering,
removing and re-registering workers (issue 54's foundation). No root needed."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from router_procs import (ADMIN_KEY, CLIENT_KEY, LAUNCHER, Routers, kill, log_of, router_argv,
                          status_of, wait_for, wait_live)
from standin_procs import CHAT, free_port, http, make_node, sglang_cmd, wait_health

from k3deploy.remote.router_admin import RouterAdmin, RouterAdminError, apply
from k3deploy.remote.router_reconcile import Serving, plan

pytestmark = pytest.mark.slow


@pytest.fixture
def routers(tmp_path):
    r = Routers(tmp_path)
    try:
        yield r
    finally:
        r.close()


def started_router(routers, port=None):
    port = port or free_port()
    args = routers.args_file(router_argv(port))
    proc = routers.start(args)
    wait_live(port, proc)
    return port, proc, args


def engine(cluster, tmp_path, name, key):
    """A stand-in SGLang rank 0 whose api key comes from a --config file (not its argv)."""
    conf = tmp_path / f"conf-{name}"
    conf.mkdir()
    (conf / "engine.yaml").write_text(f"api-key: {key}\n")
    port = free_port()
    proc = cluster.start(make_node(tmp_path, name),
                         sglang_cmd(port, "--reasoning-parser", "kimi_k3", "--config",
                                    "/etc/k3/engine.yaml"),
                         mounts=[{"host": str(conf), "container": "/etc/k3", "ro": True}])
    wait_health(port, proc)
    return Serving(f"http://127.0.0.1:{port}", key), proc


def chats_seen(proc):
    return log_of(proc).count('"POST /v1/chat/completions HTTP/1.1" 200')


def statuses(admin):
    return {w["url"]: w["status"] for w in admin.workers()}


def reconcile(admin, serving):
    return apply(admin, plan(admin.workers(), serving))


def test_router_keys_stay_out_of_argv_and_the_admin_api_wants_the_admin_key(routers):
    port, proc, args = started_router(routers)
    assert os.stat(args).st_mode & 0o777 == 0o600
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        cmdline = f.read()
    ps = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(proc.pid)], capture_output=True,
                        text=True).stdout
    with open(f"/proc/{proc.pid}/environ", "rb") as f:
        environ = f.read()
    for secret in (CLIENT_KEY, ADMIN_KEY):
        assert secret.encode() not in cmdline and secret not in ps
        assert secret.encode() not in environ
        assert secret not in log_of(proc)
    # SMG's control plane (crates/auth/src/middleware.rs): no bearer 401, the data-plane key
    # is not an admin key (401), the admin key lists the workers
    assert status_of(port, "/workers") == 401
    assert status_of(port, "/workers", key=CLIENT_KEY) == 401
    status, body = http(port, "/workers", key=ADMIN_KEY)
    assert status == 200 and body["workers"] == []
    with pytest.raises(RouterAdminError) as refused:
        RouterAdmin(f"http://127.0.0.1:{port}", "wrong").workers()
    assert refused.value.status == 401
    # the serving routes want the client key
    assert status_of(port, "/v1/chat/completions", CHAT) == 401


def test_launcher_refuses_a_keys_file_others_can_read(routers):
    args = routers.args_file(router_argv(free_port()), mode=0o644)
    proc = subprocess.run([sys.executable, LAUNCHER, str(args)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode != 0 and "chmod 600" in proc.stderr
    assert ADMIN_KEY not in proc.stderr + proc.stdout


def test_reconcile_registers_routes_removes_and_re_registers_after_a_router_restart(
        routers, cluster, tmp_path):
    # one serving key for the router and every group (see the passthrough test below)
    a, proc_a = engine(cluster, tmp_path, "group0", CLIENT_KEY)
    b, proc_b = engine(cluster, tmp_path, "group1", CLIENT_KEY)
    port, router, args = started_router(routers)
    admin = RouterAdmin(f"http://127.0.0.1:{port}", ADMIN_KEY)

    done = reconcile(admin, [a, b])
    assert sorted(done["added"]) == sorted([a.url, b.url]) and done["removed"] == []
    wait_for("both workers ready", lambda: statuses(admin) == {a.url: "ready", b.url: "ready"})
    assert plan(admin.workers(), [a, b]) == ([], [], [])   # a second reconcile changes nothing
    # the router presented the engines their key: they guard /server_info with it
    # and each route SMG read (sglang_routes.py) answered as SGLang 0.5.16 does
    for proc in (proc_a, proc_b):
        assert '"GET /server_info HTTP/1.1" 200' in log_of(proc)
        assert '"GET /model_info HTTP/1.1" 200' in log_of(proc)
        wait_for("a load poll", lambda p=proc: '"GET /v1/loads?include=core,disagg,queues,memory'
                 ' HTTP/1.1" 200' in log_of(p))

    for _ in range(4):
        status, reply = http(port, "/v1/chat/completions", CHAT, key=CLIENT_KEY)
        assert status == 200, reply
        assert reply["choices"][0]["message"]["reasoning_content"]
    assert chats_seen(proc_a) > 0 and chats_seen(proc_b) > 0   # round_robin used both

    done = reconcile(admin, [a])                    # group1 leaves the fleet
    assert list(done["removed"]) and done["added"] == {}
    wait_for("group1 gone", lambda: statuses(admin) == {a.url: "ready"})
    before_a, before_b = chats_seen(proc_a), chats_seen(proc_b)
    for _ in range(4):
        assert http(port, "/v1/chat/completions", CHAT, key=CLIENT_KEY)[0] == 200
    assert chats_seen(proc_a) == before_a + 4 and chats_seen(proc_b) == before_b

    kill(router)                                    # the router killed by hand
    router = routers.start(args)
    wait_live(port, router)
    assert admin.workers() == []                    # started empty: nothing persisted
    done = reconcile(admin, [a, b])
    assert sorted(done["added"]) == sorted([a.url, b.url])
    wait_for("both ready again", lambda: statuses(admin) == {a.url: "ready", b.url: "ready"})
    assert http(port, "/v1/chat/completions", CHAT, key=CLIENT_KEY)[0] == 200


def test_admin_script_reconciles_with_the_key_on_stdin(routers, cluster, tmp_path):
    """The node-side form (run over SSH on the router's node): config and keys on stdin."""
    a, _ = engine(cluster, tmp_path, "group0", "sk-engine-a")
    port, _, _ = started_router(routers)
    from k3deploy.remote import bundled
    program = bundled("router_admin.py", ("router_reconcile.py",))
    cfg = {"base": f"http://127.0.0.1:{port}", "admin_key": ADMIN_KEY, "op": "reconcile",
           "serving": [{"url": a.url, "api_key": a.api_key}]}
    out = subprocess.run([sys.executable, "-c", program], input=json.dumps(cfg),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert list(json.loads(out.stdout)["added"]) == [a.url]
    cfg = dict(cfg, op="workers", admin_key="wrong")
    out = subprocess.run([sys.executable, "-c", program], input=json.dumps(cfg),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and json.loads(out.stdout)["status"] == 401


def test_the_router_passes_the_clients_key_through_so_a_group_with_its_own_key_refuses(
        routers, cluster, tmp_path):
    """SMG forwards the caller's Authorization header to the worker and uses the worker's
    registered api_key only when the caller sent none (smg-project/smg@f8daa883
    model_gateway/src/routers/common/header_utils.rs extract_auth_header, "Passthrough: User's
    Authorization header takes priority"; routers/http/router.rs). The router's own calls
    (health, /server_info, loads) do use the worker's key. So a fleet whose router wants a
    client key needs that same key on every group's engine."""
    c, proc_c = engine(cluster, tmp_path, "group2", "sk-engine-of-its-own")
    port, _, _ = started_router(routers)
    admin = RouterAdmin(f"http://127.0.0.1:{port}", ADMIN_KEY)
    reconcile(admin, [c])
    wait_for("ready with its own key", lambda: statuses(admin) == {c.url: "ready"})
    status, reply = http(port, "/v1/chat/completions", CHAT, key=CLIENT_KEY)
    assert status == 401 and reply == {"error": "Unauthorized"}   # the engine's refusal
    assert '"POST /v1/chat/completions HTTP/1.1" 401' in log_of(proc_c)


def test_a_worker_the_router_marked_failed_is_registered_again_once_its_group_is_back(
        routers, cluster, tmp_path):
    """`failed` is terminal in SMG: never probed again (crates/protocols/src/worker.rs
    WorkerStatus::Failed; docs/concepts/reliability/health-checks.md: NotReady -> Failed after
    3x the failure threshold). Reconcile deletes it and adds the group anew."""
    a, proc_a = engine(cluster, tmp_path, "group0", CLIENT_KEY)
    port = free_port()
    router = routers.start(routers.args_file(router_argv(port, "--health-failure-threshold",
                                                         "1")))
    wait_live(port, router)
    admin = RouterAdmin(f"http://127.0.0.1:{port}", ADMIN_KEY)
    reconcile(admin, [a])
    wait_for("ready", lambda: statuses(admin) == {a.url: "ready"})
    kill(proc_a)                                    # the group goes down
    wait_for("failed", lambda: statuses(admin) == {a.url: "failed"}, timeout=60)
    engine_port = int(a.url.rsplit(":", 1)[1])
    back = cluster.start(make_node(tmp_path, "group0-again"),
                         sglang_cmd(engine_port, "--reasoning-parser", "kimi_k3", "--api-key",
                                    CLIENT_KEY))
    wait_health(engine_port, back)
    assert statuses(admin) == {a.url: "failed"}     # nothing brings it back by itself
    done = reconcile(admin, [a])
    assert len(done["removed"]) == 1 and list(done["added"]) == [a.url]
    wait_for("ready again", lambda: statuses(admin) == {a.url: "ready"})
    status, reply = http(port, "/v1/chat/completions", CHAT, key=CLIENT_KEY)
    assert status == 200 and reply["choices"][0]["message"]["reasoning_content"]


def test_a_killed_group_is_marked_not_ready_and_its_requests_go_to_the_other(
        routers, cluster, tmp_path):
    """A worker's process gone (connection refused): SMG retries the request on another worker
    (--retry-max-retries, default 5; model_gateway/src/main.rs) and its health checks mark it
    not_ready after --health-failure-threshold failures (default 3, here every second): no
    request fails. Measured here: not_ready 2.0 s after the kill, 0 of 1430 requests failed
    (4 clients, 17 s)."""
    a, _ = engine(cluster, tmp_path, "group0", CLIENT_KEY)
    b, proc_b = engine(cluster, tmp_path, "group1", CLIENT_KEY)
    port, _, _ = started_router(routers)
    admin = RouterAdmin(f"http://127.0.0.1:{port}", ADMIN_KEY)
    reconcile(admin, [a, b])
    wait_for("both ready", lambda: statuses(admin) == {a.url: "ready", b.url: "ready"})
    answers, stop = [], threading.Event()

    def client():
        while not stop.is_set():
            answers.append(http(port, "/v1/chat/completions", dict(CHAT, max_tokens=16),
                                key=CLIENT_KEY)[0])

    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        wait_for("traffic", lambda: len(answers) >= 10)
        kill(proc_b)
        killed_at = time.monotonic()
        wait_for("group1 not ready", lambda: statuses(admin)[b.url] != "ready", timeout=15)
        assert time.monotonic() - killed_at < 10
        after = len(answers)
        wait_for("traffic after", lambda: len(answers) >= after + 10)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert set(answers) == {200}
