"""How fast the stand-in "decodes": node.json `decode_tok_s` tokens per second for one stream
(0: no pacing, answers at once). Concurrent streams share the engine the way a batched decoder
does: the aggregate grows sub-linearly, per stream each one slows down (n streams: each gets
rate * n**-0.4, so four streams give ~2.3x one; the guide measured 5.8 tok/s single and 14.0
aggregate over four streams on 4x8 H100).
"""
import threading
import time

BATCH_EXPONENT = -0.4


class Pacer:
    def __init__(self, tok_s):
        self.tok_s = float(tok_s or 0)
        self.active = 0
        self._lock = threading.Lock()

    def __enter__(self):
        with self._lock:
            self.active += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self.active -= 1

    def per_stream(self):
        return self.tok_s * max(1, self.active) ** BATCH_EXPONENT

    def wait(self, tokens=1):
        """Sleep for `tokens` decode steps at the current per-stream rate."""
        if self.tok_s > 0 and tokens > 0:
            time.sleep(tokens / self.per_stream())
