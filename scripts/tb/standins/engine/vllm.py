"""Stand-in for `vllm serve MODEL ...`: strict flags, parser-name validation, GPU accounting,
a Ray cluster when the ranks do not fit on this node, or one `vllm serve` per node with the
multiprocessing executor (vllm_mp.py: the API node and --headless ones), weight load, then the
OpenAI API.

DP x TP ranks, one GPU each. On one node they must use exactly its GPUs. With
--data-parallel-backend ray (or --distributed-executor-backend ray), or when they need more
GPUs than the node has, the placement comes from the Ray head (RAY_ADDRESS, else the cluster
this container started/joined, else localhost:6379 as vLLM runs in the head's container with
host networking). The API server starts only after every rank loaded, like vLLM's.
"""
import os
import sys

import clitable
import configfile
import kernels
import nccl_init
import openai_api
import rankwork
import ray_job
import ready_clock
import startfaults
import vision
import vllm_log as log
import vllm_mp
import weights
from common import EngineExit, arm_crash_fault, block_forever, say

REASONING_PARSERS = ["deepseek_r1", "deepseek_v3", "ernie45", "glm45", "granite",
                     "hunyuan_a13b", "kimi_k2", "kimi_k3", "minimax_m2", "mistral",
                     "openai_gptoss", "qwen3", "seed_oss", "step3"]
TOOL_PARSERS = ["deepseek_v3", "deepseek_v31", "glm45", "granite", "hermes", "hunyuan_a13b",
                "internlm", "jamba", "kimi_k2", "kimi_k3", "llama3_json", "llama4_json",
                "llama4_pythonic", "minimax", "minimax_m2", "mistral", "openai", "pythonic",
                "qwen3_coder", "qwen3_xml", "seed_oss", "step3", "xlam"]
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
K3_MAX_LEN = 1048576


def build_parser():
    # The real `vllm serve` option table (clitable.py): unknown flags exit 2 with argparse's
    # usage + error. The memory model of this stand-in is calibrated on 0.9.
    parser = clitable.build("vllm", usage="vllm serve [model_tag] [options]")
    parser.set_defaults(gpu_memory_utilization=0.9)
    return parser


def parse(ctx, argv):
    # Config-file flags go after the model tag, so a list flag cannot swallow it.
    head = argv[:1] if argv and not argv[0].startswith("-") else []
    parser = build_parser()
    rest = configfile.expand_config(ctx, argv[len(head):])
    return parser.parse_args(head + clitable.normalise(parser.table, rest))


def validate(args):
    if args.reasoning_parser and args.reasoning_parser not in REASONING_PARSERS:
        raise EngineExit(f"KeyError: 'invalid reasoning parser: {args.reasoning_parser} (chose "
                         f"from {{ {','.join(REASONING_PARSERS)} }})'")
    if args.tool_call_parser and args.tool_call_parser not in TOOL_PARSERS:
        raise EngineExit(f"KeyError: 'invalid tool call parser: {args.tool_call_parser} (chose "
                         f"from {{ {','.join(TOOL_PARSERS)} }})'")
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise EngineExit("TypeError: Error: --enable-auto-tool-choice requires "
                         "--tool-call-parser")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise EngineExit("ValueError: GPU memory utilization must be within (0, 1]. Got "
                         f"{args.gpu_memory_utilization}.")


class Server:
    def __init__(self, args, ctx):
        self.args, self.ctx = args, ctx
        self.model = args.model_tag or DEFAULT_MODEL
        self.world = args.data_parallel_size * args.tensor_parallel_size
        self.dummy = args.load_format == "dummy"
        self.mp, self.serving, self.own_ready = None, None, False

    def run(self):
        args, ctx = self.args, self.ctx
        log.banner(self.model)
        log.info(f"non-default args: {self.non_default()}", "args")
        snap = weights.resolve(ctx, self.model, args.revision, dummy=self.dummy)
        max_len = self.max_model_len(snap)
        if ctx.gpus == 0:
            raise EngineExit("RuntimeError: Failed to infer device type")
        arm_crash_fault(ctx, self.crash_text)
        job, local_gpus = self.place()
        if self.args.data_parallel_size > 1 and not self.args.headless:
            # launch_core_engines starts the DP coordinator on DP rank 0 once the engine config
            # was built and checked, before any engine core (v1/engine/utils.py); a published
            # 0.11.0 log: tests/fixtures/real/vllm/0.11.0/dp-coordinator-started.txt.
            log.info(f"Started DP Coordinator process (PID: {os.getpid() + 1})", "coordinator")
        if self.mp is not None:   # every engine core joins the API node before any loads
            self.mp.form()
        clock = None if self.mp is not None and self.mp.headless else self.ready_clock()
        self.load(snap, local_gpus)
        kernels.warm_or_compile(ctx, "vllm", self.kernel_shape(), say)  # the stand-in's own line, no vLLM prefix
        if job is not None:
            job.wait_workers_loaded()
        if self.mp is not None and self.mp.headless:
            self.serve_headless(local_gpus)
            block_forever()
        self.own_ready = True
        if self.mp is not None:
            self.mp.group.wait_all_loaded()
        clock.stop()   # the API node's (a headless node serves no API and never gets here)
        self.serve(snap, max_len, local_gpus)
        if job is not None:
            job.watch()
        block_forever()

    def ready_clock(self):
        """The API server's wait for its engine cores' ready messages (ready_clock.py): this
        node's own, then each headless node's (rendezvous: a node reports once loaded)."""
        self.own_ready = False
        needed = self.mp.group.nnodes if self.mp is not None else 1
        return ready_clock.ReadyClock(self.ctx, self.ready_count, needed)

    def ready_count(self):
        remote = 0
        if self.mp is not None:
            with self.mp.group.lock:
                remote = len(self.mp.group.loaded - {0})
        return int(self.own_ready) + remote

    def kernel_shape(self):
        """The flags that change which kernels get compiled."""
        a = self.args
        return {"tp": a.tensor_parallel_size, "dp": a.data_parallel_size,
                "ep": bool(a.enable_expert_parallel), "kv_cache_dtype": a.kv_cache_dtype,
                "quantization": a.quantization, "max_model_len": a.max_model_len}

    def non_default(self):
        defaults = vars(build_parser().parse_args([]))
        return {k: v for k, v in vars(self.args).items() if v != defaults.get(k)}

    def max_model_len(self, snap):
        derived = snap.max_context() or K3_MAX_LEN
        wanted = self.args.max_model_len or derived
        if wanted > derived:
            raise EngineExit(f"ValueError: User-specified max_model_len ({wanted}) is greater "
                             f"than the derived max_model_len (max_position_embeddings={derived} "
                             "in model's config.json). To allow overriding this maximum, set "
                             "the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
        return wanted

    def place(self):
        """(Ray job or None, GPUs this node's process uses)."""
        args, ctx = self.args, self.ctx
        wants_ray = "ray" in (args.data_parallel_backend, args.distributed_executor_backend)
        if vllm_mp.multi_node(args):
            local = vllm_mp.check(args, ctx.gpus)
            self.mp = vllm_mp.Node(args, ctx, log.info, self.hang)
            return None, local
        if not wants_ray and self.world <= ctx.gpus:
            if self.world != ctx.gpus:
                raise EngineExit(
                    f"ValueError: --data-parallel-size {args.data_parallel_size} x "
                    f"--tensor-parallel-size {args.tensor_parallel_size} = {self.world} ranks, "
                    f"but this node has {ctx.gpus} GPUs; size the ranks to the GPUs.")
            return None, self.world
        local = args.data_parallel_size_local
        if local is not None and local * args.tensor_parallel_size > ctx.gpus:
            # vLLM's create_dp_placement_groups: the DP master node holds exactly `local` ranks.
            raise EngineExit("AssertionError: Not enough resources to allocate DP ranks on DP "
                             f"master node {ctx.env.get('VLLM_HOST_IP', '127.0.0.1')}")
        job = ray_job.Job(ctx, self.model, args.revision, args.data_parallel_size,
                          args.tensor_parallel_size, args.gpu_memory_utilization,
                          args.load_format)
        return job, job.place()

    def load(self, snap, local_gpus):
        ctx = self.ctx
        need, phys, oom_at = weights.memory_fit(snap, self.world, ctx.gpu_mem_mib)
        engine = self.mp.engine_name if self.mp else \
            "EngineCore_DP0" if self.args.data_parallel_size > 1 else "EngineCore"
        # the workers' NCCL communicators come up in init_device, before the model loads
        nccl_init.init(ctx.container, ctx.env, ctx.env.get("NCCL_SOCKET_IFNAME", "eth0"),
                       ctx.env.get("VLLM_HOST_IP", "127.0.0.1"), -(-self.world // max(ctx.gpus, 1)))
        log.info(f"Starting to load model {self.model}...", "start_load", engine)
        try:
            if self.dummy:
                weights.load_dummy(oom_at)
            else:
                # The bar is torch.distributed rank 0's only (weight_utils.py): the API node's.
                bar = (lambda d, t, e: None) if self.mp and self.mp.headless else \
                    (lambda d, t, e: say(weights.progress_line(d, t, e), sys.stderr))
                weights.load(snap, ctx.load_seconds, bar, oom_at)
            startfaults.vllm_kv_cache(ctx)
        except (weights.LoadError, EngineExit) as e:
            detail = weights.oom_text(ctx.gpu_mem_mib, need, phys) if str(e) == "oom" else \
                getattr(e, "message", str(e))
            raise EngineExit(f"(EngineCore_DP0 pid=1) ERROR [core.py:708] EngineCore failed to "
                             f"start.\n{detail}\nRuntimeError: Engine core initialization "
                             "failed. See root cause above.")
        if need > self.args.gpu_memory_utilization * phys:
            raise EngineExit("ValueError: No available memory for the cache blocks. Try "
                             "increasing `gpu_memory_utilization` when initializing the engine.")
        took = weights.DUMMY_LOAD_SECONDS if self.dummy else ctx.load_seconds
        log.info(f"Loading weights took {took:.2f} seconds", "weights", engine)
        log.info(f"Model loading took {need:.2f} GiB memory and {took:.6f} seconds",
                 "loaded", engine)

    def serve(self, snap, max_len, local_gpus):
        args, ctx = self.args, self.ctx
        used = int(args.gpu_memory_utilization * ctx.gpu_mem_mib)
        if ctx.faults().get("load_short"):
            used = int(used * 0.4)
            say("WARNING: loaded only part of this rank's expert weights (short read from the "
                "cache); the rest were left uninitialized.")
        ctx.report_gpu_memory([used] * local_gpus)
        serving = openai_api.Serving(
            "vllm", args.served_model_name or [self.model], self.model, max_len,
            api_key=(args.api_key or [None])[0] or ctx.env.get("VLLM_API_KEY"),
            reasoning_parser=args.reasoning_parser, tool_parser=args.tool_call_parser,
            auto_tool_choice=args.enable_auto_tool_choice, decode_tok_s=ctx.decode_tok_s,
            vision_off=vision.off_flag("vllm", args))
        rankwork.attach_vllm(serving, ctx, serving.served_names[0], 600)
        if self.mp is not None:   # each step needs the headless nodes' ranks too
            self.mp.attach_api(serving, serving.progress)
        self.serving = serving
        host = args.host or "0.0.0.0"
        openai_api.start(serving, host, args.port)
        log.info(f"Starting vLLM server on http://{host}:{args.port}", "serving")
        log.uvicorn(f"Started server process [{os.getpid()}]")
        log.uvicorn("Waiting for application startup.")
        serving.ready.set()
        log.uvicorn("Application startup complete.")

    def serve_headless(self, local_gpus):
        """Engine cores only (run_headless): its GPUs held, its share of every step, no API."""
        ctx = self.ctx
        ctx.report_gpu_memory([int(self.args.gpu_memory_utilization * ctx.gpu_mem_mib)] * local_gpus)
        self.mp.attach_headless((self.args.served_model_name or [self.model])[0])
        self.mp.group.report_loaded()

    def hang(self):
        """A peer node is gone: the local engine cores sit in a collective, the API stays up."""
        if self.serving is not None:
            self.serving.hung.set()

    def crash_text(self):
        return ("(EngineCore_DP0 pid=1) ERROR [core.py:832] EngineCore encountered a fatal "
                "error.\nTraceback (most recent call last):\n  File \"/usr/local/lib/python3.12/"
                "dist-packages/vllm/v1/engine/core.py\", line 823, in run_engine_core\n    "
                "engine_core.run_busy_loop()\nRuntimeError: CUDA error: an illegal memory access "
                "was encountered\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore "
                "encountered an issue. See stack trace (above) for the root cause.")


def main(ctx, argv):
    args = parse(ctx, argv)
    validate(args)
    Server(args, ctx).run()
