"""The HTTP server SGLang runs on a node of rank >= 1 (no OpenAI API there): upstream's
launch_dummy_health_check_server(host, port, enable_metrics)
(python/sglang/srt/utils/common.py@4e75f4684b6b67cbb5a02b4106cf1b629d616dba): `/ping`,
`/health` and `/health_generate` answer 200 whatever the scheduler does (they never ask it),
and with `--enable-metrics` the Prometheus middleware serves `/metrics` for this node's
schedulers. Access lines are not logged (log_level="warning").
"""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import EngineExit, say
from openai_api import BACKLOG  # upstream builds this server with uvicorn.Config's default too


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = BACKLOG


def start(host, port, progress):
    """progress: progress.Progress, or None without --enable-metrics."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in ("/ping", "/health", "/health_generate"):
                return self._send(200, b"", "text/plain")
            if path == "/metrics" and progress is not None:
                return self._send(200, progress.render().encode(),
                                  "text/plain; version=0.0.4; charset=utf-8")
            self._send(404, b'{"detail":"Not Found"}', "application/json")

        def _send(self, status, body, kind):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    try:
        server = _Server((host, port), Handler)
    except OSError as e:
        raise EngineExit(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                         f"('{host}', {port}): {e.strerror.lower()}")
    say(f"[INFO] Starting dummy health check server at {host}:{port}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
