"""SGLang's scheduler watchdog, and the kimi-k3 cookbook image's first multi-node decode that
outlives it (profile sglang-kimi-k3-cookbook, node.json `first_decode_hang`).

sgl-project/sglang#39568 (open, 2026-09-15): `lmsysorg/sglang:kimi-k3` (SGLang 0.5.16), TP16
over 4 nodes. The server comes up and a short completion (a few dozen prompt tokens, 16
output tokens) answers; then 32 concurrent requests of 8192 prompt tokens prefill normally,
their first decode step never completes (py-spy: the scheduler in `torch.cuda.Event.
synchronize` inside `process_batch_result_decode`), the scheduler watchdog fires on every TP
rank after 300 s, and the ranks exit 137. Not reproduced with a launch that carries
`--disable-flashinfer-autotune --watchdog-timeout 3600` (and a loader option, which has no
part in a decode step): the stand-in holds that decode unless both are there. Which of the
two is the cure the issue does not say; the stand-in asks for both, as the working launch had.

The watchdog as SGLang 0.5.16 runs it (wheel: srt/utils/watchdog.py WatchdogRaw,
srt/managers/scheduler_components/invariant_checker.py create_scheduler_watchdog): one thread
per scheduler polls the forward counter every timeout/2 and fires once it stood still longer
than `--watchdog-timeout` (so between 1x and 1.5x of it); it logs `Scheduler debug info:` with
the batch, the py-spy dump (srt/utils/cudacore_pyspy_dump_utils.py pyspy_dump_schedulers: the
`--native` try, then the plain one; py-spy in the 0.5.16 image cannot read Python 3.12 and a
container has no SYS_PTRACE: sgl-project/sglang#33549), `Scheduler watchdog timeout
(self.watchdog_timeout=..., self.soft=False)`, sleeps 5 s and sends SIGQUIT to its parent. On
node rank 0 the parent is past start-up (tokenizer_manager.py running_phase_sigquit_handler:
`SIGQUIT received. signum=None, frame=None. It usually means one child failed.`), elsewhere
it still has the launch handler (entrypoints/engine.py launch_phase_sigquit_handler: `Received
sigquit from a child process. It usually means the child failed.`); both kill_process_tree
(utils/common.py: logs `kill_process_tree called: ...`, then SIGKILLs itself: exit 137).

node.json `watchdog_time_scale` (default 1) scales the watchdog's clock, its 5 s grace
included, so a test runs SGLang's 300 s in a few seconds.
"""
import os
import sys
import threading
import time

from common import now_stamp, say

ISSUE_BATCH = 32          # concurrent requests in the decode batch that hung (#39568)
ISSUE_PROMPT = 8192       # prompt tokens of each
WORKING_WATCHDOG = 3600   # the reporter's working launch
SIGQUIT_GRACE = 5         # WatchdogRaw: "Wait for some time so that the parent process can print"


def hangs(args, ctx, shape):
    """The step this rank is asked for never completes: a decode batch of the issue's shape on
    a multi-node group of the image the profile names, without the working launch's flags."""
    image = ctx.node.get("first_decode_hang")
    if not image or args.nnodes < 2 or shape.get("mode") != "decode":
        return False
    if ctx.container.present and ctx.container.image.split("@")[0] != image:
        return False
    fixed = args.disable_flashinfer_autotune and args.watchdog_timeout >= WORKING_WATCHDOG
    long_ones = sum(1 for p in shape.get("prompts", ()) if p >= ISSUE_PROMPT)
    return not fixed and long_ones >= ISSUE_BATCH


class SchedulerWatchdog:
    """Every scheduler on this node (one per GPU): the watchdog fires when a step holds."""

    def __init__(self, args, ctx, first_rank):
        self.args, self.ctx, self.first_rank = args, ctx, first_rank
        self.scale = float(ctx.node.get("watchdog_time_scale", 1.0) or 1.0)
        self.fired = threading.Event()

    def during_step(self, shape):
        """Called with each step's shape before this rank's share of it: a step that hangs
        holds the caller until the watchdog has ended the process."""
        if not hangs(self.args, self.ctx, shape):
            return
        timeout = self.args.watchdog_timeout
        # Polled every timeout/2: fires at the first poll past the timeout.
        time.sleep(timeout * 1.5 * self.scale)
        self.fire(shape)

    def fire(self, shape):
        if self.fired.is_set():
            return
        self.fired.set()
        for rank in range(self.first_rank, self.first_rank + max(1, self.ctx.gpus)):
            self._lines(f"TP{rank}", shape)
        sys.stderr.write("\n")
        sys.stdout.write("\n")
        sys.stdout.flush()
        time.sleep(SIGQUIT_GRACE * self.scale)
        self._parent_quits()

    def _lines(self, tag, shape):
        pid = os.getpid()
        stamp = f"[{now_stamp()} {tag}]"
        # The reqs list abbreviated: a real one is every Req's repr (ids, sampling params).
        say(f"{stamp} Scheduler debug info:\n"
            f"scheduler.cur_batch_for_debug.batch_size()={len(shape.get('prompts', ()))}\n"
            f"scheduler.cur_batch_for_debug.reqs=[Req(rid=..., <{len(shape.get('prompts', ()))} "
            "requests>)]", sys.stderr)
        for cmd in (f"py-spy dump --native --pid {pid}", f"py-spy dump --pid {pid}"):
            say(f"{stamp} Pyspy failed ({cmd}). Error: Error: Failed to copy Py_Version "
                "symbol", sys.stderr)
        say(f"{stamp} All pyspy dump attempts failed for PID {pid}.", sys.stderr)
        # As Python prints the value: the field's default 300 (an int), a CLI value a float.
        say(f"{stamp} Scheduler watchdog timeout (self.watchdog_timeout="
            f"{self.args.watchdog_timeout!r}, self.soft=False)", sys.stderr)

    def _parent_quits(self):
        pid = os.getpid()
        if self.args.node_rank == 0:
            say(f"[{now_stamp()}] SIGQUIT received. signum=None, frame=None. It usually means "
                "one child failed.", sys.stderr)
        else:
            say(f"[{now_stamp()}] Received sigquit from a child process. It usually means the "
                "child failed.", sys.stderr)
        say(f"[{now_stamp()}] kill_process_tree called: parent_pid={pid}, include_parent=True, "
            f"pid={pid}", sys.stderr)
        self.ctx.clear_gpu_memory()
        os._exit(137)   # kill_process_tree ends with itself.kill(): SIGKILL, 128 + 9
