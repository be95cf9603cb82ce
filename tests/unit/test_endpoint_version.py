"""The version the certificate records: vLLM /version, SGLang /server_info, and on releases from
before that name (0.5.4 on the testbed) the deprecated /get_server_info."""

from __future__ import annotations

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


def test_after_one_unanswered_generation_the_others_are_not_sent(monkeypatch):
    """A group stuck in a collective answers no chat request: verify waits one timeout, not
    one per check (chat, tools, vision at 300 s each)."""
    sent = []

    def call(cfg, path, body=None, timeout=60):
        sent.append(path)
        if path == "/v1/chat/completions":
            return {"status": None, "error": "timed out"}
        return {"status": 200, "body": {"data": [{"id": "m"}]}}

    monkeypatch.setattr(endpoint_probe, "call", call)
    out = endpoint_probe.run_checks({"model": "m", "checks": ["models", "chat", "tools",
                                                              "vision"]})
    assert sent == ["/v1/models", "/v1/chat/completions"]
    assert out["tools"] == out["vision"] == {"status": None,
                                             "error": "not sent: chat (timed out) got no answer"}
