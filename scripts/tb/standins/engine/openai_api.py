"""The HTTP side of an engine: health, /v1/models and /v1/chat/completions in the shapes
SGLang and vLLM answer with. Stdlib ThreadingHTTPServer; access lines in uvicorn's format.

SGLang: the HTTP server starts only after every scheduler reported ready (weights loaded; the
port refuses connections before); /health and /health_generate answer 503 while the server
status is Starting (the warm-up request); then each asks the scheduler for one token and
answers 200 after its next step that sends tokens, however long that takes up to
SGLANG_HEALTH_CHECK_TIMEOUT, then 503 (http_server.py health_generate).
A hung engine (a peer rank died, the scheduler sits in a collective) accepts every request:
chat completions are never answered; SGLang's health check waits for the scheduler for
SGLANG_HEALTH_CHECK_TIMEOUT (20 s) and then answers 503.
vLLM starts its API server only once loaded (the port refuses connections before).
With an api key set, vLLM requires `Authorization: Bearer KEY` on /v1/*, SGLang on every route
but /health* and /metrics*. SGLang's metadata and load routes the router reads: sglang_routes.py.
"""
import json
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import os

import chat
import sglang_routes
import sse
import vision
from common import EngineExit, say
from pacing import Pacer

VERSION = "0.0.0+k3tb.standin"  # what /version (vLLM) and /get_server_info (SGLang) report

HEALTH_CHECK_TIMEOUT = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
# SGLang's EnvBool SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION (default true, environ.py):
# false makes /health answer 200 without asking the scheduler (/health_generate still asks).
HEALTH_GENERATES = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() \
    not in ("false", "0", "no", "n")
# uvicorn.Config(backlog=2048) (uvicorn 0.55.0 config.py; server.py passes it to
# loop.create_server): both engines' API servers run under uvicorn, so a stopped process's
# port still completes handshakes into a deep queue; the stdlib's default would be 5.
BACKLOG = 2048


class Serving:
    """What the server needs to know about the engine behind it."""

    def __init__(self, flavor, served_names, model_root, max_len, api_key=None,
                 reasoning_parser=None, tool_parser=None, auto_tool_choice=True, decode_tok_s=0,
                 version=VERSION, info_paths=("/get_server_info",), vision_off=None):
        self.flavor, self.served_names, self.model_root = flavor, served_names, model_root
        # SGLang's server-info route(s): "/server_info" is the name newer releases answer
        # on, "/get_server_info" then a deprecated alias (http_server.py; #21463).
        self.version, self.info_paths = version, tuple(info_paths)
        self.max_len, self.api_key = max_len, api_key
        self.reasoning_parser, self.tool_parser = reasoning_parser, tool_parser
        self.auto_tool_choice = auto_tool_choice
        # The flag that left the vision path off (None: on); see vision.py for each engine.
        self.vision_off = vision_off
        self.ready = threading.Event()
        self.hung = threading.Event()
        self.created = int(time.time())
        self.pacer = Pacer(decode_tok_s)
        self.progress = None  # progress.Progress when the engine exposes /metrics
        self.forward = None   # collective.Forward once the group formed


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = BACKLOG


def _serve(host, port, handler):
    """Bind (uvicorn's own words when the port is taken) and serve in a thread."""
    try:
        server = _Server((host, port), handler)
    except OSError as e:
        raise EngineExit(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                         f"('{host}', {port}): {e.strerror.lower()}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start(serving, host, port):
    class Handler(_Handler):
        state = serving
    return _serve(host, port, Handler)


class _Handler(BaseHTTPRequestHandler):
    state = None
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # replaced by uvicorn-style access lines
        pass

    # ---- plumbing -------------------------------------------------------------------------
    def _reply(self, status, payload=None, content_type="application/json"):
        body = b"" if payload is None else (
            payload if isinstance(payload, bytes) else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        say(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} '
            f'{self.path} HTTP/1.1" {status}')

    def _error(self, status, message, kind="BadRequestError", param=None):
        if self.state.flavor == "vllm":
            payload = {"error": {"message": message, "type": kind, "param": param,
                                 "code": status}}
        else:
            payload = {"object": "error", "message": message, "type": kind, "param": param,
                       "code": status}
        self._reply(status, payload)

    def _authorized(self):
        key = self.state.api_key
        # vLLM guards /v1 only; SGLang every route but /health* and /metrics* (sglang_routes)
        guarded = (not sglang_routes.open_path(self._path()) if self.state.flavor == "sglang"
                   else self.path.startswith("/v1"))
        if not key or not guarded:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._reply(401, {"error": "Unauthorized"})
        return False

    def _path(self):
        return self.path.split("?", 1)[0]

    def _query(self):
        return dict(urllib.parse.parse_qsl(self.path.partition("?")[2]))

    # ---- routes ---------------------------------------------------------------------------
    def do_GET(self):
        path, sglang = self._path(), self.state.flavor == "sglang"
        if not self._authorized():
            return
        if path == "/health" or (path == "/health_generate" and sglang):
            return self._reply(self._health(path))
        if path == "/v1/models":
            return self._reply(200, self._models())
        if path == "/metrics" and self.state.progress is not None:
            return self._reply(200, self.state.progress.render().encode(),
                               "text/plain; version=0.0.4; charset=utf-8")
        if path == "/version" and not sglang:
            return self._reply(200, {"version": self.state.version})
        if path in self.state.info_paths and sglang:
            if path == "/get_server_info" and "/server_info" in self.state.info_paths:
                say("WARNING: Endpoint '/get_server_info' is deprecated and will be removed in a "
                    "future version. Please use '/server_info' instead.")
            return self._reply(200, self._server_info())
        answer = sglang_routes.route(self.state, path, self._query()) if sglang else None
        if answer is not None:
            return self._reply(*answer)
        self._reply(404, {"detail": "Not Found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self._path() != "/v1/chat/completions":
            return self._reply(404, {"detail": "Not Found"})
        if not self._authorized():
            return
        if self.state.hung.is_set():
            threading.Event().wait()  # accepted, never answered
        if not self.state.ready.is_set():
            return self._error(503, "The server is not ready yet (loading weights)",
                               "ServiceUnavailableError")
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
        except ValueError as e:
            return self._error(400, f"JSON decode error: {e}")
        try:
            self._check_request(body)
            gen = chat.Generation(body, self.state.reasoning_parser, self.state.tool_parser,
                                  self.state.max_len, sees_images=not self.state.vision_off)
        except chat.BadRequest as e:
            return self._error(e.status, e.message, e.kind, e.param)
        completion = self._completion(body, gen)
        if self.state.forward is not None:  # every rank's share of every step (collective.py)
            self.state.forward.generate(gen.prompt_tokens,
                                        gen.completion_tokens + gen.reasoning_tokens)
        if body.get("stream"):
            return self._stream(body, completion)
        with self.state.pacer as pacer:
            pacer.wait(gen.completion_tokens)
        self._reply(200, completion)

    def _check_request(self, body):
        state = self.state
        vision.check(state.flavor, state.vision_off, body.get("messages"))
        if state.flavor != "vllm":
            return
        model = body.get("model")
        if model is not None and model not in state.served_names:
            raise chat.BadRequest(f"The model `{model}` does not exist.", 404, "NotFoundError",
                                  "model")
        if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not (
                state.auto_tool_choice and state.tool_parser):
            raise chat.BadRequest('"auto" tool choice requires --enable-auto-tool-choice and '
                                  '--tool-call-parser to be set')

    def _health(self, path):
        """vLLM: the engine's liveness, no generation. SGLang 0.5.16 (http_server.py
        health_generate): 503 while Starting; else a 1-token request into the scheduler, then
        every second: 200 once any output reached the tokenizer manager after the request
        came in (another request's tokens count), 503 after SGLANG_HEALTH_CHECK_TIMEOUT. So a
        busy server answers late: after its next step that sends tokens."""
        state = self.state
        if state.hung.is_set():
            time.sleep(HEALTH_CHECK_TIMEOUT)
            return 503
        if not state.ready.is_set():
            return 503
        forward = state.forward
        if state.flavor != "sglang" or forward is None or (
                path == "/health" and not HEALTH_GENERATES):
            return 200
        tic = time.time()
        threading.Thread(target=forward.generate, args=(1, 1), daemon=True).start()
        while time.time() < tic + HEALTH_CHECK_TIMEOUT:
            time.sleep(1)
            if forward.last_output > tic:
                return 200
        return 503

    # ---- response shapes ------------------------------------------------------------------
    def _models(self):
        state, vllm = self.state, self.state.flavor == "vllm"
        data = []
        for name in state.served_names:
            item = {"id": name, "object": "model", "created": state.created,
                    "owned_by": "vllm" if vllm else "sglang", "root": state.model_root,
                    "max_model_len": state.max_len}
            if vllm:
                item.update(parent=None, permission=[])
            data.append(item)
        return {"object": "list", "data": data}

    def _message(self, gen):
        message = {"role": "assistant", "content": gen.content,
                   "reasoning_content": gen.reasoning, "tool_calls": gen.tool_calls}
        if self.state.flavor == "vllm":
            # vLLM renamed the field to `reasoning` and kept `reasoning_content` alongside.
            message.update(reasoning=gen.reasoning, tool_calls=gen.tool_calls or [],
                           refusal=None, annotations=None, audio=None, function_call=None)
        return message

    def _completion(self, body, gen):
        vllm = self.state.flavor == "vllm"
        choice = {"index": 0, "message": self._message(gen), "logprobs": None,
                  "finish_reason": gen.finish}
        choice.update({"stop_reason": None} if vllm else {"matched_stop": None})
        return {"id": ("chatcmpl-" if vllm else "") + uuid.uuid4().hex,
                "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or self.state.served_names[0],
                "choices": [choice], "usage": gen.usage()}

    def _stream(self, body, completion):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        sse.write_stream(self.wfile, body, completion, self.state.pacer,
                         self.state.flavor == "vllm")
        self.close_connection = True
        say(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "POST {self.path} '
            'HTTP/1.1" 200')

    def _server_info(self):
        """SGLang's /get_server_info: its server args flattened, plus `version`."""
        state = self.state
        return {"model_path": state.model_root, "served_model_name": state.served_names[0],
                "context_length": state.max_len, "reasoning_parser": state.reasoning_parser,
                "tool_call_parser": state.tool_parser, "version": state.version}
