"""Stand-in for `sglang serve` / `python3 -m sglang.launch_server`.

Parses with the real `sglang serve` option table (clitable.py; unknown flag: argparse usage +
error, exit 2), checks
the launch shape against the node, finds the snapshot, forms the process group over TCP, emulates
the weight load, reports GPU memory, and on node rank 0 serves the OpenAI API.
"""
import sys
import time

import clitable
import configfile
import kernels
import nccl_init
import openai_api
import rankwork
import rendezvous
import startfaults
import vision
import weights
from common import EngineExit, arm_crash_fault, block_forever, now_stamp, say

# Multi-thread loading on by default from 0.5.10 (sgl-project/sglang#20289, 2026-03-10).
MULTI_THREAD_SINCE = (0, 5, 10)
# The loaders' tqdm BAR_FORMAT has no trailing "\n" since 0.5.10 (issue 31 cites
# python/sglang/srt/utils/common.py, 0.5.10 line 125, 0.5.16 line 1215): a stored common.py of
# SGLang main reads `BAR_FORMAT = "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt}
# [{elapsed}<{remaining}, {rate_fmt}]"` under a comment that still says "with a newline at the
# end"; the older weight_utils.py _BAR_FORMAT ended in "\n", which ended every redraw.
BAR_NEWLINE_UNTIL = (0, 5, 9)
# The last release modelled with /get_server_info only. /server_info was the canonical name by
# 2025-12 (sgl-project/sglang#14533 reverts a change that had moved callers to it); 0.5.4
# (2025-10) predates that evidence. The exact release it appeared in is not pinned down.
OLD_INFO_PATH_UNTIL = (0, 5, 4)
DEFAULT_MEM_FRACTION = 0.9
DEFAULT_DIST_TIMEOUT = 600   # torch's process-group default
CUDA_CONTEXT_MIB = 1638      # CUDA context + NCCL buffers outside the static pool
K3_MAX_CONTEXT = 1048576


def build_parser(prog):
    # The real `sglang serve` option table: unknown flags, bad choices and missing values fail
    # with argparse's own usage + error, exit 2; prefixes of a single option are accepted.
    return clitable.build("sglang", prog=prog)


def dp_attention(args):
    return args.enable_dp_attention or args.attn_dp_size > 1


def attn_dp_size(args):
    """`--attn-dp-size N`, or the deprecated `--enable-dp-attention --dp-size N`."""
    if args.attn_dp_size > 1:
        return args.attn_dp_size
    return args.dp_size if args.enable_dp_attention else 1


def gpus_needed(args):
    return args.tp_size * (1 if dp_attention(args) else args.dp_size)


def validate(args, ctx):
    if ctx.gpus == 0:
        raise EngineExit("RuntimeError: Found no NVIDIA driver on your system. Please check that "
                         "you have an NVIDIA GPU and installed a driver from "
                         "http://www.nvidia.com/Download/index.aspx")
    if not 0 <= args.node_rank < args.nnodes:
        raise EngineExit(f"ValueError: --node-rank {args.node_rank} is out of range for "
                         f"--nnodes {args.nnodes}")
    need, have = gpus_needed(args), args.nnodes * ctx.gpus
    if need != have:
        shape = (f"--tp-size {args.tp_size}" if dp_attention(args) or args.dp_size == 1
                 else f"--tp-size {args.tp_size} x --dp-size {args.dp_size}")
        raise EngineExit(f"ValueError: {shape} needs {need} GPUs, but --nnodes {args.nnodes} x "
                         f"{ctx.gpus} GPUs per node gives {have}. Each GPU runs one rank: the "
                         f"parallel sizes must use exactly the GPUs of all nodes.")
    if dp_attention(args) and args.tp_size % attn_dp_size(args):
        raise EngineExit("AssertionError: tp_size must be divisible by dp_size when "
                         "--enable-dp-attention is set")
    if args.ep_size not in (1, args.tp_size):
        raise EngineExit(f"AssertionError: --ep-size ({args.ep_size}) must be 1 or equal to "
                         f"--tp-size ({args.tp_size})")
    validate_distributed(args)


def validate_distributed(args):
    frac = args.mem_fraction_static
    if frac is not None and not 0 < frac < 1:
        raise EngineExit(f"ValueError: --mem-fraction-static must be in (0, 1), got {frac}")
    if args.nnodes > 1 and not args.dist_init_addr:
        raise EngineExit("ValueError: --dist-init-addr is required when --nnodes > 1")
    if args.dist_init_addr:
        try:
            rendezvous.parse_addr(args.dist_init_addr)
        except ValueError:
            raise EngineExit(f"ValueError: invalid --dist-init-addr {args.dist_init_addr!r}, "
                             "expected HOST:PORT")


class Rank:
    """One node's share of the SGLang server."""

    def __init__(self, args, ctx):
        self.args, self.ctx = args, ctx
        first = args.node_rank * ctx.gpus
        self.tag = f"TP{first}" + (f" EP{first}" if args.ep_size > 1 else "")
        self.frac = args.mem_fraction_static or DEFAULT_MEM_FRACTION
        self.dummy = args.load_format == "dummy"

    def log(self, text):
        # SGLang's configure_logger: logging.basicConfig(format="[%(asctime)s{prefix}]
        # %(message)s", force=True), whose handler writes to stderr, where tqdm's bar goes too.
        say(f"[{now_stamp()} {self.tag}] {text}", sys.stderr)

    def run(self):
        args, ctx = self.args, self.ctx
        say(f"[{now_stamp()}] server_args=ServerArgs(model_path={args.model_path!r}, "
            f"tp_size={args.tp_size}, dp_size={args.dp_size}, ep_size={args.ep_size}, "
            f"nnodes={args.nnodes}, node_rank={args.node_rank}, "
            f"dist_init_addr={args.dist_init_addr!r}, mem_fraction_static={self.frac}, "
            f"reasoning_parser={args.reasoning_parser!r}, "
            f"tool_call_parser={args.tool_call_parser!r}, host={args.host!r}, port={args.port})")
        snap = weights.resolve(ctx, args.model_path, args.revision, dummy=self.dummy)
        max_len = self.context_length(snap)
        arm_crash_fault(ctx, self.crash_text)
        self.serving = None
        group = self.form_group()
        self.load(snap)
        kernels.warm_or_compile(ctx, "sglang", self.kernel_shape(), self.log)
        # As in SGLang, every rank holds its weights and KV pool before rank 0 serves (the
        # pool's size is agreed across ranks): memory first, then "loaded" to rank 0.
        self.allocate_memory()
        if args.node_rank != 0:   # its schedulers' side of each step, and the dummy health server
            self.attach_collective(group, None)
        group.report_loaded()
        if args.node_rank == 0:
            group.wait_all_loaded()
            self.serve(snap, max_len, group)
        block_forever()

    def attach_collective(self, group, serving):
        """Every forward step needs every rank (rankwork.py); a node rank >= 1 also serves
        SGLang's dummy health server (rankhttp.py), with /metrics under --enable-metrics."""
        args, ctx = self.args, self.ctx
        rankwork.attach_sglang(args, ctx, group, serving, args.node_rank * ctx.gpus,
                               args.dist_timeout or DEFAULT_DIST_TIMEOUT)

    def context_length(self, snap):
        derived = snap.max_context() or K3_MAX_CONTEXT
        wanted = self.args.context_length or derived
        if wanted > derived:
            raise EngineExit(f"ValueError: User-specified context_length ({wanted}) is greater "
                             f"than the derived context_length ({derived}). This may lead to "
                             "incorrect model outputs or CUDA errors.")
        return wanted

    def start_http(self, snap, max_len):
        args, version = self.args, self.ctx.sglang_version
        serving = openai_api.Serving(
            "sglang", [args.served_model_name or args.model_path], args.model_path, max_len,
            api_key=args.api_key, reasoning_parser=args.reasoning_parser,
            tool_parser=args.tool_call_parser, decode_tok_s=self.ctx.decode_tok_s,
            version=".".join(map(str, version)),
            info_paths=(("/server_info", "/get_server_info") if version > OLD_INFO_PATH_UNTIL
                        else ("/get_server_info",)),
            vision_off=vision.off_flag("sglang", args))
        openai_api.start(serving, args.host, args.port)
        return serving

    def form_group(self):
        args = self.args
        self.log("Init torch distributed begin.")
        self.log("Init nccl begin.")
        group = None
        if args.nnodes > 1:
            group = rendezvous.Group(self.log, args.node_rank, args.nnodes, args.dist_init_addr,
                                     args.dist_timeout or DEFAULT_DIST_TIMEOUT,
                                     self.ctx.env.get("SGLANG_HOST_IP"), self.ctx.gpus,
                                     self.ctx.faults().get("on_peer_loss", "hang"), self.hang)
            group.form()
            group.watch()
        env = self.ctx.env
        nccl_init.init(self.ctx.container, env, env.get("NCCL_SOCKET_IFNAME", "eth0"),
                       env.get("SGLANG_HOST_IP", "127.0.0.1"), args.nnodes)
        startfaults.nccl_init(self.ctx, self.tag, (args.dist_init_addr or "").rsplit(":", 1)[0])
        self.log("Init torch distributed ends. mem usage=0.55 GB")
        return group or _SingleNode()

    def load(self, snap):
        ctx = self.ctx
        need_gb, phys_gb, oom_at = weights.memory_fit(snap, gpus_needed(self.args),
                                                      ctx.gpu_mem_mib)
        self.log(f"Load weight begin. avail mem={phys_gb * 0.96:.2f} GB")
        self._snap = snap
        try:
            if oom_at is not None:   # the model is built on the GPU first: that allocation fails
                raise weights.LoadError("oom")
            self.fill_gpu_memory()
            if self.dummy:
                weights.load_dummy()
            else:
                weights.load(snap, ctx.load_seconds, self.progress)
        except weights.LoadError as e:
            detail = weights.oom_text(ctx.gpu_mem_mib, need_gb, phys_gb) if str(e) == "oom" \
                else f"Traceback (most recent call last):\n{e}"
            raise EngineExit(f"[{now_stamp()} {self.tag}] Scheduler hit an exception: {detail}")
        if need_gb > self.frac * phys_gb:
            raise EngineExit(f"RuntimeError: Not enough memory. Please try to increase "
                             f"--mem-fraction-static. Current value: {self.frac}")
        self.log(f"Load weight end. type=KimiK3ForConditionalGeneration, dtype=torch.bfloat16, "
                 f"avail mem={phys_gb - need_gb:.2f} GB, mem usage={need_gb:.2f} GB.")

    def progress(self, done, total, elapsed):
        """The loader's tqdm bar: on global rank 0 only (weight_utils.py: enable_tqdm is
        `torch.distributed.get_rank() == 0`), to stderr as tqdm writes, without a log prefix;
        its description by version (weights.py). tqdm redraws with "\r" + bar
        (tqdm/std.py@v4.67.3 status_printer) and, at close(), redraws once more and writes its
        one "\n"; the bar's own "\n" (BAR_FORMAT before 0.5.10) ends every redraw."""
        if self.args.node_rank != 0:
            return
        version = self.ctx.sglang_version
        desc = weights.MULTI_THREAD_DESC if version >= MULTI_THREAD_SINCE else weights.SAFETENSORS_DESC
        bar = "\r" + weights.progress_line(done, total, elapsed, desc)
        bar += "\n" if version <= BAR_NEWLINE_UNTIL else ""
        text = bar + (bar + "\n" if done == total else "")   # close(): a last redraw, then "\n"
        sys.stderr.write(text)
        sys.stderr.flush()

    def fill_gpu_memory(self):
        """The weights' memory, all of it, at `Load weight begin.`: DefaultModelLoader.load_model
        builds the model on the GPU (`with target_device:`, srt/model_loader/loader.py@0.5.16
        line 789, @0.5.23 line 1013) before it opens a shard, and load_weights_and_postprocess
        copies into those tensors. So nvidia-smi's used memory jumps at the start of the load
        and stands still through it (sgl-project/sglang#39568); the reads show only in the
        ranks' CPU time and bytes read (diskread.py)."""
        need_gb, _, _ = weights.memory_fit(self._snap, gpus_needed(self.args), self.ctx.gpu_mem_mib)
        weights_mib = min(need_gb * 1000 / 1.048576, self.frac * self.ctx.gpu_mem_mib)
        self.ctx.report_gpu_memory([CUDA_CONTEXT_MIB + int(weights_mib)] * self.ctx.gpus)

    def kernel_shape(self):
        """The flags that change which kernels get compiled (parallel sizes, backends)."""
        a = self.args
        return {"tp": a.tp_size, "ep": a.ep_size, "dp": a.dp_size, "dp_attention": dp_attention(a),
                "moe_runner_backend": a.moe_runner_backend,
                "decode_attention_backend": a.decode_attention_backend,
                "kv_cache_dtype": a.kv_cache_dtype, "quantization": a.quantization}

    def memory_per_gpu(self):
        mem = self.ctx.gpu_mem_mib
        used = min(mem, int(self.frac * mem) + CUDA_CONTEXT_MIB)
        if self.ctx.faults().get("load_short"):
            used = int(used * 0.4)
            self.log("WARNING: Loaded 38/96 checkpoint shards' expert weights for this rank; "
                     "the remaining experts were left uninitialized (short read from the cache).")
        return used

    def allocate_memory(self):
        startfaults.kv_pool(self.ctx, self.tag, self.frac)
        used = self.memory_per_gpu()
        self.ctx.report_gpu_memory([used] * self.ctx.gpus)
        avail = (self.ctx.gpu_mem_mib - used) / 1024
        self.log(f"KV Cache is allocated. #tokens: {int(avail * 4096)}, KV size: "
                 f"{avail * 0.5:.2f} GB")
        self.log(f"Memory pool end. avail mem={avail:.2f} GB")

    def serve(self, snap, max_len, group):
        """engine.py: the HTTP server starts once every scheduler is ready; http_server.py
        _wait_and_warmup sends one request (health answers 503 while the status is Starting),
        then logs the ready line."""
        self.serving = self.start_http(snap, max_len)
        self.attach_collective(group, self.serving)
        say(f"INFO:     Uvicorn running on http://{self.args.host}:{self.args.port} "
            "(Press CTRL+C to quit)")
        time.sleep(self.ctx.warmup_seconds)
        self.serving.ready.set()
        say(f"[{now_stamp()}] The server is fired up and ready to roll!")

    def hang(self):
        """A peer is gone: the scheduler sits in a collective, the HTTP side stays up."""
        if getattr(self, "serving", None) is not None:
            self.serving.hung.set()

    def crash_text(self):
        return (f"[{now_stamp()} {self.tag}] Scheduler hit an exception: Traceback (most recent "
                "call last):\n  File \"/sgl-workspace/sglang/python/sglang/srt/managers/"
                "scheduler.py\", line 2988, in run_scheduler_process\n    "
                "scheduler.event_loop_overlap()\n  File \"/sgl-workspace/sglang/python/sglang/"
                "srt/managers/scheduler.py\", line 1024, in event_loop_overlap\n    "
                "batch_result = self.run_batch(batch)\nRuntimeError: CUDA error: an illegal "
                "memory access was encountered\nCUDA kernel errors might be asynchronously "
                "reported at some other API call, so the stacktrace below might be incorrect.")


class _SingleNode:
    def report_loaded(self):
        pass

    def wait_all_loaded(self):
        pass


# engine.py _launch_subprocesses calls server_args.check_server_args() before any scheduler
# starts; its assertions, in server_args.py's words (sgl-project/sglang main).
CHECKS = (
    (lambda a: a.tp_size % a.nnodes == 0, "tp_size must be divisible by number of nodes"),
    (lambda a: not (a.dp_size > 1 and a.nnodes != 1 and not a.enable_dp_attention),
     "multi-node data parallel is not supported unless dp attention!"),
)


def check_server_args(args):
    for holds, message in CHECKS:
        if not holds(args):
            # Frames as the call chain runs (line numbers are not upstream's).
            raise EngineExit(
                "Traceback (most recent call last):\n"
                '  File "/sgl-workspace/sglang/python/sglang/launch_server.py", in <module>\n'
                "    run_server(server_args)\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/entrypoints/engine.py", in '
                "_launch_subprocesses\n    server_args.check_server_args()\n"
                '  File "/sgl-workspace/sglang/python/sglang/srt/server_args.py", in '
                f"check_server_args\n    assert not (\nAssertionError: {message}")


def main(ctx, argv, prog):
    # SGLang's config merger writes each key as `--KEY` verbatim (no `_` -> `-`).
    parser = build_parser(prog)
    startfaults.drop_model_parsers(ctx, parser)
    argv, _ = clitable.strip_wrapper(parser.table, argv)
    args = parser.parse_args(configfile.expand_config(ctx, argv, verbatim=True))
    check_server_args(args)
    validate(args, ctx)
    Rank(args, ctx).run()
