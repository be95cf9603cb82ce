"""`--node NAME:engine_fault=oom|nccl|parser`: one rank that fails at start as SGLang does
(vLLM: oom, at its KV cache, on a single node or on a Ray worker's ranks).

The fault is read from the node (node.json `engine_fault`, set by `testbed up --node`), and
`testbed fault engine-fault NODE KIND|none` overrides it in faults.json (`none` lifts it), so a
test can fix the cause without a new testbed.

- parser: the image's SGLang predates the model's parsers. `--reasoning-parser` and
  `--tool-call-parser` take `choices=list(ReasoningParser.DetectorMap.keys())` /
  the function-call parser's keys (python/sglang/srt/server_args.py add_cli_args; the option
  table in k3deploy/engines/cli_tables/sglang.json), so an older image rejects `kimi_k3` with
  argparse's own `error: argument --reasoning-parser: invalid choice: ...`, exit 2, before
  anything starts.
- nccl: the communicator cannot be set up while the group initialises (between "Init torch
  distributed begin." and "ends."). NCCL's own warning line, `HOST:PID:TID [DEV]
  misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to ADDR<PORT> failed : Software
  caused connection abort` (NVIDIA/nccl src/misc/socket.cc socketStartConnect's WARN, the
  prefix from src/debug.cc; the line as published in user logs), then torch's
  `torch.distributed.DistBackendError: NCCL error in: .../ProcessGroupNCCL.cpp:LINE, unhandled
  system error (run with NCCL_DEBUG=INFO for details), NCCL version X` and the detail
  `ncclSystemError: System call (e.g. socket, malloc) or external library call failed or
  device error.` + "\\nLast error:\\n" + ncclGetLastError() (pytorch
  torch/csrc/distributed/c10d/NCCLUtils.cpp getNcclErrorDetailStr; nccl's
  ncclGetErrorString for ncclSystemError).
- oom: the weights fit, the KV pool does not: SGLang's `RuntimeError: Not enough memory.
  Please try to increase --mem-fraction-static. Current value: mem_fraction_static=F`
  (python/sglang/srt/model_executor/pool_configurator.py MemoryPoolConfig.__post_init__ on
  main; model_runner.py init_memory_pool in older releases, without the value), raised in
  the scheduler process after "Load weight end.".

For nccl and oom the scheduler subprocess dies; the launcher's SIGQUIT handler logs
"Received sigquit from a child process. It usually means the child failed." and
kill_process_tree(os.getpid()) SIGKILLs the process itself (python/sglang/srt/entrypoints/
engine.py _set_envs_and_config; utils kill_process_tree `itself.kill()`; published logs end
in the shell's "Killed"): the container's exit code is 137 (128 + SIGKILL).
"""
import os
import socket
import threading

from common import EngineExit, now_stamp

KINDS = ("oom", "nccl", "parser")
KILLED = 137
PARSER_DESTS = ("reasoning_parser", "tool_call_parser")
NCCL_VERSION = "2.27.3"
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


def active(ctx):
    """The node's start-up fault, or None (faults.json wins over node.json; "none" lifts it)."""
    kind = ctx.faults().get("engine_fault", ctx.node.get("engine_fault"))
    return kind if kind in KINDS else None


def drop_model_parsers(ctx, parser, model_parsers=("kimi_k3",)):
    """fault parser: the option table of an image built before the model's parsers existed."""
    if active(ctx) != "parser":
        return
    for action in parser._actions:
        if action.dest in PARSER_DESTS and action.choices:
            action.choices = [c for c in action.choices if c not in model_parsers]


def _scheduler_died(tag, frames, last):
    trace = "".join(f'  File "/sgl-workspace/sglang/python/sglang/srt/{path}", in {func}\n'
                    for path, func in frames)
    return (f"[{now_stamp()} {tag}] Scheduler hit an exception: Traceback (most recent call "
            f"last):\n{trace}{last}\n[{now_stamp()}] {SIGQUIT_LINE}")


def nccl_init(ctx, tag, head_addr):
    """fault nccl: raise as a rank whose NCCL communicator could not connect."""
    if active(ctx) != "nccl":
        return
    host = socket.gethostname()
    pid, tid = os.getpid(), threading.get_ident() % 100000
    warn = (f"{host}:{pid}:{tid} [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect "
            f"to {head_addr}<43211> failed : Software caused connection abort")
    last = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            "c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO "
            f"for details), NCCL version {NCCL_VERSION}\nncclSystemError: System call (e.g. "
            "socket, malloc) or external library call failed or device error. \nLast error:\n"
            f"socketStartConnect: Connect to {head_addr}<43211> failed : Software caused "
            "connection abort")
    raise EngineExit(warn + "\n" + _scheduler_died(
        tag, [("managers/scheduler.py", "run_scheduler_process"),
              ("model_executor/model_runner.py", "init_torch_distributed"),
              ("distributed/parallel_state.py", "initialize_model_parallel")], last), KILLED)


def kv_pool(ctx, tag, frac):
    """fault oom: no room left for the KV pool once the weights are on the GPU."""
    if active(ctx) != "oom":
        return
    last = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={frac}")
    raise EngineExit(_scheduler_died(
        tag, [("managers/scheduler.py", "run_scheduler_process"),
              ("model_executor/model_runner.py", "init_memory_pool"),
              ("model_executor/pool_configurator.py", "__post_init__")], last), KILLED)


# vLLM's EngineCore once the weights are in and profiled, when nothing is left for the KV cache:
# vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (the line as published in
# vllm-project/vllm#2248's title and in users' logs of v1 engines).
VLLM_NO_KV_CACHE = ("ValueError: No available memory for the cache blocks. Try increasing "
                    "`gpu_memory_utilization` when initializing the engine.")


def vllm_kv_cache(ctx):
    """fault oom, vLLM: the weights fit, the KV cache does not."""
    if active(ctx) == "oom":
        raise EngineExit(VLLM_NO_KV_CACHE)
