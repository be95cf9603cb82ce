"""The version the certificate records: vLLM /version, SGLang /server_info, and on releases from
before that name (0.5.4 on the testbed) the deprecated /get_server_info."""

from __future__ import annotations

import threading

from k3deploy.remote import endpoint_probe


def answering(routes: dict):
    asked = []

    def call(cfg, path, body=None, timeout=60):
        asked.append(path)
        return routes.get(path, {"status": 404, "body": {"detail": "Not Found"}})
    return call, asked


def test_new_sglang_answers_on_server_info_and_the_old_alias_is_never_asked(monkeypatch):
    call, asked = answering({"/server_info": {"status": 200, "body": {"version": "0.5.16"}},
                             "/get_server_info": {"status": 200, "body": {"version": "0.5.16"}}})
    monkeypatch.setattr(endpoint_probe, "call", call)
    assert endpoint_probe.version({}) == {"status": 200,
                                          "body": {"version": "0.5.16", "path": "/server_info"}}
    assert "/get_server_info" not in asked   # it logs a deprecation warning on every call


def test_old_sglang_falls_back_to_get_server_info(monkeypatch):
    call, _ = answering({"/get_server_info": {"status": 200, "body": {"version": "0.5.4"}}})
    monkeypatch.setattr(endpoint_probe, "call", call)
    assert endpoint_probe.version({})["body"] == {"version": "0.5.4", "path": "/get_server_info"}


def test_the_generating_checks_are_in_flight_together(monkeypatch):
    """An engine batches concurrent requests: chat, tools and vision take about one answer's
    time, not three (a barrier of three only opens when all three are in flight at once)."""
    barrier, sent = threading.Barrier(3, timeout=5), []

    def call(cfg, path, body=None, timeout=60):
        sent.append(path)
        if path == "/v1/chat/completions":
            barrier.wait()
            return {"status": 200, "body": {"choices": []}}
        return {"status": 200, "body": {"data": [{"id": "m"}]}}

    monkeypatch.setattr(endpoint_probe, "call", call)
    out = endpoint_probe.run_checks({"model": "m", "checks": ["models", "chat", "tools", "vision"]})
    assert list(out) == ["models", "chat", "tools", "vision"]
    assert all(r["status"] == 200 for r in out.values())
    assert sent[0] == "/v1/models" and sent.count("/v1/chat/completions") == 3


def test_a_stuck_group_costs_one_timeout_not_one_per_check(monkeypatch):
    """A group stuck in a collective answers no generating request: verify waits one timeout,
    not one per check (chat, tools, vision at 300 s each). Each stuck request here waits until
    all three are waiting at once, so the checks can only end if their timeouts overlap; run one
    after another, the first would wait alone until the 30 s guard and the test fails."""
    lock, stuck, all_stuck = threading.Lock(), [0], threading.Event()

    def call(cfg, path, body=None, timeout=60):
        if path == "/v1/chat/completions":
            with lock:
                stuck[0] += 1
                if stuck[0] == 3:
                    all_stuck.set()
            if not all_stuck.wait(30):
                return {"status": None, "error": "waited alone"}
            return {"status": None, "error": "timed out"}
        return {"status": 200, "body": {"data": [{"id": "m"}]}}

    monkeypatch.setattr(endpoint_probe, "call", call)
    out = endpoint_probe.run_checks({"model": "m", "checks": ["models", "chat", "tools", "vision"]})
    assert out["chat"] == out["tools"] == out["vision"] == {"status": None, "error": "timed out"}


def test_asked_within_a_bound_a_stuck_generation_reads_as_timed_out_by_then():
    """Asked ahead (http_probe.AHEAD_WITHIN), every request ends by the bound: a generation a
    stuck group never answers is cut off there, not at its own 300 s timeout."""
    import json
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Stuck(BaseHTTPRequestHandler):
        def do_GET(self):
            self._send({"data": [{"id": "m"}]})

        def do_POST(self):
            release.wait(120)   # a forward step over a group that lost a rank
            self._send({"choices": []})

        def _send(self, doc):
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Stuck)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        out = endpoint_probe.run_checks({"base": f"http://127.0.0.1:{server.server_port}",
                                         "model": "m", "checks": ["models", "chat"],
                                         "within": 1.0})
        took = time.monotonic() - started
    finally:
        release.set()
        server.shutdown()
        server.server_close()
    assert out["models"]["status"] == 200
    assert out["chat"]["status"] is None and "timed out" in out["chat"]["error"], out["chat"]
    assert 1.0 <= took < 60, took
