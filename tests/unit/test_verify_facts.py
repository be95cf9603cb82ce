"""verify's family reads typed facts: the endpoint probe's answers (facts/http.py), the Hub's
and the port mesh's reach (facts/reach.py), each from what its node program prints; the
certificate's record of them; a misspelt field in a verify fixture fails."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from k3deploy.facts import http
from k3deploy.facts.docker import Image
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.facts.reach import Listener, Mesh, NotRun, Reach, parse_hub_reach, parse_mesh
from k3deploy.node.ssh_types import Result
from k3deploy.remote import endpoint_probe, hub_reach, portcheck
from k3deploy.steps.engine import certify
from k3deploy.steps.checks import reachability
from k3deploy.steps.engine.verify import VerifyEndpoint, endpoint_problems, reasoning_field
from tests.realfix import real
from tests.unit.docker_facts import IMAGE_ID, container
from tests.unit.typed import facts as typed_facts

ROOT = Path(__file__).resolve().parents[2]
MODEL = "moonshotai/Kimi-K3"
CHAT = {"choices": [{"message": {"role": "assistant", "content": "Experts are spread.",
                                 "reasoning_content": "Two sentences."}}]}
CALL = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                  "arguments": "{\"city\": \"Paris\"}"}}]}}]}


class Engine(BaseHTTPRequestHandler):
    """An OpenAI-compatible server as SGLang answers: /health, /v1/models, chat (with tools
    when asked), /server_info; no /version."""

    def do_GET(self):
        routes = {"/health": (200, None), "/v1/models": (200, {"data": [{"id": MODEL}]}),
                  "/server_info": (200, {"version": "0.5.16"})}
        self._send(*routes.get(self.path, (404, {"detail": "Not Found"})))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._send(200, CALL if body.get("tools") else CHAT)

    def _send(self, status, doc):
        data = b"" if doc is None else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def probe(base: str, checks: list[str]) -> str:
    """remote/endpoint_probe.py's output, run as the node runs it (its config on stdin)."""
    cfg = {"base": base, "key": None, "model": MODEL, "checks": checks, "health_timeout": 5}
    return subprocess.run([sys.executable, endpoint_probe.__file__], input=json.dumps(cfg),
                          capture_output=True, text=True, check=True, timeout=60).stdout


def test_the_endpoint_probes_answers_are_read_into_typed_answers(engine):
    found = http.parse_endpoint(probe(engine, ["health", "models", "chat", "tools", "version"]), 0)
    assert found.health == http.Answer(200)
    assert found.models.models == (MODEL,)
    assert found.chat.message == http.Message("Experts are spread.", "Two sentences.")
    assert reasoning_field(found.chat.message) == "reasoning_content"
    assert found.tools.message.tool_calls == 1
    assert found.version.version == http.Version("0.5.16", "/server_info")
    assert found.vision is None   # not asked
    assert endpoint_problems(found, MODEL) == []


def test_an_engine_that_does_not_listen_answers_no_check():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # closed again before the probe: refused
    found = http.parse_endpoint(probe(f"http://127.0.0.1:{port}", ["health"]), 0)
    assert found.health.status is None and "refused" in found.health.error.lower()


def test_a_refusal_keeps_the_message_the_engine_gave():
    refused = http.answer(json.loads(real("vllm/main-0045689b/image-limit-zero-chat.txt")))
    assert refused.status == 400 and refused.message is None
    assert refused.said == "At most 0 image(s) may be provided in one prompt."
    assert "BadRequestError" in refused.shown()


def test_a_probe_that_printed_nothing_answered_none_of_its_checks():
    from k3deploy.node import http_probe
    from tests.unit.test_vision_flags import _inv
    fact = http_probe.fact("endpoint", _inv("vllm", {}), ["chat", "version"], None)
    assert fact.parse("Traceback (most recent call last):\n", 1) == http.unanswered(
        ["chat", "version"])
    assert not http_probe.healthy(fact.parse("", 255))
    assert http.summary(http.Endpoint(health=http.Answer(503))) == {
        "health": {"status": 503, "error": None}}


def test_hub_reach_is_read_from_what_the_program_prints(capsys):
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))
        urls = [f"http://127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed)]
        hub_reach.main(urls)
    found = {r.target: r for r in parse_hub_reach(capsys.readouterr().out, 0)}   # any order
    assert found[urls[0]] == Reach(urls[0]) and found[urls[0]].reached
    assert not found[urls[1]].reached and "ConnectionRefusedError" in found[urls[1]].why_not
    assert parse_hub_reach("", 1) is None


def test_the_mesh_is_read_from_what_the_program_prints(capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        busy = held.getsockname()[1]
        portcheck.mesh(1.0, "127.0.0.1", [busy], [f"127.0.0.1:{busy}"])
    found = parse_mesh(capsys.readouterr().out)
    assert found.listeners == (Listener(busy, True),)
    (reach,) = found.probes
    assert reach.target == f"127.0.0.1:{busy}" and not reach.reached
    not_run = reachability._mesh_answer(Result("python3 - mesh", 127, "", "python3: not found"))
    assert not_run == NotRun(127, ("python3: not found",))
    assert parse_mesh('{"ports": {}, "probes": {}}') == Mesh((), ())


def test_the_certificate_records_the_image_digest_and_the_gpus():
    engine = container(image="lmsysorg/sglang:kimi-k3")
    gpus = (Gpu("NVIDIA B300", 275040, 250000),)
    pulled = certify.CertifyFacts(engine, {"lmsysorg/sglang:kimi-k3": Image(
        IMAGE_ID, ("lmsysorg/sglang@sha256:" + "a" * 64,))}, gpus, None)
    record = certify.node_record(pulled)
    assert record["image_digest"] == "lmsysorg/sglang@sha256:" + "a" * 64
    assert record["gpus"] == [{"name": "NVIDIA B300", "total_mib": 275040, "used_mib": 250000}]
    assert "engine_version" not in record   # not the head
    loaded = certify.node_record(certify.CertifyFacts(engine, {}, gpus, None))
    assert loaded["image_digest"] == IMAGE_ID
    json.dumps(record)   # what the state file keeps


def test_a_misspelt_field_in_a_verify_fixture_fails():
    case = json.loads((ROOT / "tests/fixtures/steps/verify-vllm-head-passes.json").read_text())
    facts = typed_facts(VerifyEndpoint, case["facts"])
    assert facts.endpoint.chat.message.reasoning == "The user greets me."
    chat = case["facts"]["endpoint"]["chat"]
    misspelt = {**chat, "message": {"contnet": "Hi."}}
    with pytest.raises(TypeError, match="contnet"):
        typed_facts(VerifyEndpoint, {**case["facts"], "endpoint": {"chat": misspelt}})
    with pytest.raises(TypeError, match="gpu"):
        typed_facts(VerifyEndpoint, {**case["facts"], "gpu": []})
