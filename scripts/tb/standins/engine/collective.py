"""Forward steps that involve every rank, as a real tensor/expert-parallel step does: each
layer ends in an all-reduce or all-to-all, so no rank finishes a step before every rank did
its share. One rank that stops answering (SIGSTOP, a GPU stuck in a kernel, NCCL stalled)
therefore hangs every request at node rank 0 while every process lives and rank 0's port
still accepts connections (the issue's sglang #3099, #6624; vllm #16259, #11996).

Node rank 0 runs the scheduler loop: one step at a time (`step` message to every other rank
over its rendezvous connection, its own share, then each rank's `step_done`, then `commit`);
a rank counts a step's tokens in its progress (progress.py) only at the commit, when the
collective completed everywhere. A prompt is prefilled in chunks (SGLang's chunked prefill,
`--chunked-prefill-size`; here CHUNK_TOKENS stand-in words), decode in runs of tokens (SGLang
updates its token counters once per log interval).

Fault hook (faults.json on a node): `{"slow_prefill_seconds": S}`: that rank takes S seconds
for its share of every prefill chunk (a straggler: answers come slowly but come).
"""
import threading
import time

from common import fatal
from wire import send

CHUNK_TOKENS = 8
DECODE_STEP_TOKENS = 8


def chunks(total, size):
    full, rest = divmod(max(0, int(total)), size)
    return [size] * full + ([rest] if rest else [])


def own_share(ctx, mode):
    """This rank's compute for one step; the slow-prefill fault makes prefill chunks slow."""
    if mode.startswith("prefill"):
        delay = float(ctx.faults().get("slow_prefill_seconds") or 0)
        if delay > 0:
            time.sleep(delay)


class _Request:
    def __init__(self, prefill, decode):
        self.prefill, self.decode = prefill, decode   # token counts of the steps still to run
        self.prompt, self.total = sum(prefill), sum(prefill) + sum(decode)

    def finished(self):
        return not self.prefill and not self.decode

    def held(self):
        """Tokens whose KV this request holds: every chunk and decode step computed so far."""
        return self.total - sum(self.prefill) - sum(self.decode)


class Forward:
    """Node rank 0's scheduler loop over the group (single node: no other ranks)."""

    def __init__(self, ctx, group, progress, timeout):
        self.ctx, self.group, self.progress, self.timeout = ctx, group, progress, timeout
        self.loop = threading.Lock()
        self.cond = threading.Condition()
        self.replies, self.seq, self.running = set(), 0, 0
        # When a step last sent tokens to the detokenizer (a decode step, or a prefill step
        # that finished a prompt; a middle chunk sends nothing): what SGLang's /health waits
        # on (tokenizer_manager.last_receive_tstamp; http_server.py health_generate).
        self.last_output = 0.0
        self.batch = []   # the requests running, in arrival order
        self.shape = {}   # the next step's batch: each request's prompt tokens
        self.watchdog = None   # SGLang's scheduler watchdog (decode_watchdog.py), if attached
        group.on_step_done = self._replied

    def generate(self, prompt_tokens, output_tokens):
        """One request's steps, batched with every other request running (continuous batching:
        SGLang's python/sglang/srt/managers/scheduler.py@d51c1c21 get_next_batch_to_run runs
        one batch per forward, a new prefill batch first, else the running decode batch):
        whichever request thread holds the loop runs the next step for all of them, so
        concurrent requests share steps instead of queueing behind each other."""
        req = _Request(chunks(prompt_tokens, CHUNK_TOKENS), chunks(output_tokens, DECODE_STEP_TOKENS))
        with self.cond:
            self.running += 1
            self.batch.append(req)
        self.progress.set_running(self.running, kv_tokens=self._held())
        try:
            while not req.finished():
                with self.loop:
                    if not req.finished():
                        self._batch_step()
        finally:
            with self.cond:
                self.running -= 1
                self.batch.remove(req)
                idle = self.running == 0
            self.progress.set_running(self.running, kv_tokens=self._held())
            if idle:  # every scheduler's batch is empty now, not only rank 0's
                with self.loop:  # one writer per connection at a time
                    for _, conn in self._members():
                        send(conn, {"event": "idle", "running": self.running})

    def _batch_step(self):
        """The next step for every request in the batch (the caller holds the loop)."""
        with self.cond:
            batch = [r for r in self.batch if not r.finished()]
            prefilling = [r for r in batch if r.prefill]
            if prefilling:
                mode, tokens = "prefill_compute", sum(r.prefill.pop(0) for r in prefilling)
            else:
                mode, tokens = "decode", sum(r.decode.pop(0) for r in batch)
            prefilled = sum(r.prompt for r in prefilling if not r.prefill)
            self.shape = {"prompts": [r.prompt for r in batch]}
        self.step(mode, tokens, prefilled)

    def _held(self):
        with self.cond:
            return sum(r.held() for r in self.batch)

    def _members(self):
        members = getattr(self.group, "members", {}) or {}
        return [(rank, conns[0]) for rank, conns in list(members.items()) if rank and conns]

    def step(self, mode, tokens, prefilled=0):
        """One collective over every rank (the caller holds the loop). prefilled: the prompt
        tokens of the requests whose last prefill chunk this step computed."""
        members = self._members()
        with self.cond:
            self.seq += 1
            self.replies = set()
        msg = {"event": "step", "seq": self.seq, "mode": mode, "tokens": tokens,
               "running": self.running, **self.shape}
        for _, conn in members:
            send(conn, msg)
        if self.watchdog is not None:
            self.watchdog.during_step(msg)
        own_share(self.ctx, mode)
        self._await({rank for rank, _ in members})
        for _, conn in members:
            send(conn, {"event": "commit", "seq": self.seq})
        self.progress.step(mode, tokens, self.running, prefilled, self._held())
        if mode == "decode" or prefilled:
            self.last_output = time.time()

    def _replied(self, rank, msg):
        with self.cond:
            if msg.get("seq") == self.seq:
                self.replies.add(rank)
                self.cond.notify_all()

    def _await(self, ranks):
        deadline = time.monotonic() + self.timeout
        with self.cond:
            while not ranks <= self.replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    ms = int(self.timeout * 1000)
                    fatal(f"[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
                          f"operation timeout: WorkNCCL(SeqNum={self.seq}, OpType=ALLREDUCE, "
                          f"NumelIn=1, NumelOut=1, Timeout(ms)={ms}) ran for {ms + 1} "
                          "milliseconds before timing out.")
                self.cond.wait(min(left, 1.0))


class Share:
    """A rank > 0: does its share of each step rank 0 sends, counts it at the commit."""

    def __init__(self, ctx, group, progress):
        self.ctx, self.group, self.progress = ctx, group, progress
        self.pending = None
        self.watchdog = None   # as Forward's
        group.on_message = self.handle

    def handle(self, msg):
        event = msg.get("event")
        if event == "step":
            if self.watchdog is not None:
                self.watchdog.during_step(msg)
            own_share(self.ctx, msg.get("mode", ""))
            self.pending = msg
            send(self.group.conn, {"event": "step_done", "seq": msg.get("seq")})
        elif event == "idle":
            self.progress.set_running(int(msg.get("running", 0)))
        elif event == "commit" and self.pending and self.pending.get("seq") == msg.get("seq"):
            done, self.pending = self.pending, None
            self.progress.step(done["mode"], int(done["tokens"]), int(done.get("running", 0)))
