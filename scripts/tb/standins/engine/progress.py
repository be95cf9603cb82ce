"""One node's engine progress, exposed on /metrics in the Prometheus text format with the
metric names the real engines use.

SGLang (python/sglang/srt/metrics/collector.py@00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538,
SchedulerMetricsCollector): gauges `sglang:num_running_reqs`, `sglang:num_queue_reqs`,
`sglang:gen_throughput`, and the counter `sglang:realtime_tokens_total{mode=prefill_compute|
prefill_cache|decode}` ("Total number of tokens processed (updated on each log interval)"),
one series per scheduler. A scheduler on a TP rank other than 0 records only with
`--enable-metrics-for-all-schedulers`; with `--enable-metrics` a node of rank >= 1 serves them
from its dummy health server (python/sglang/srt/utils/common.py@4e75f4684b6b67cbb5a02b4106cf1b629d616dba,
launch_dummy_health_check_server(host, port, enable_metrics)).
vLLM (vllm/v1/metrics/loggers.py@a6f0308cfe806b7731ad4979c9bea6e470c35efd): gauges
`vllm:num_requests_running`, `vllm:num_requests_waiting`, counters `vllm:prompt_tokens` and
`vllm:generation_tokens` (prometheus_client adds `_total` to a counter's sample name), on the
API server only (the head). When they move, as vLLM 0.33.0 does (wheel, vllm/v1/core/sched/
scheduler.py update_from_output, vllm/v1/engine/async_llm.py output_handler, vllm/v1/metrics/
stats.py IterationStats, loggers.py PrometheusStatLogger.record): a request's prompt tokens are
counted once, in the step that computes its last prefill chunk (its first output; a middle
chunk emits no EngineCoreOutput, so that step has no IterationStats at all); the scheduler's
stats go out with every step, so `vllm:num_requests_running`, `vllm:num_requests_waiting` and
the gauge `vllm:kv_cache_usage_perc` (SchedulerStats.kv_cache_usage = BlockPool.get_usage(),
the share of KV blocks held) are set after every step, a middle prefill chunk included (its
blocks are allocated when it is scheduled). The stand-in counts KV in tokens of KV_TOKENS.
"""
import threading
import time

SGLANG_MODES = ("prefill_compute", "prefill_cache", "decode")
KV_TOKENS = 1 << 20  # the stand-in vLLM's KV cache, in tokens (its max-model-len for K3)


class Progress:
    """What this node's schedulers did; updated when a forward step completes on every rank."""

    def __init__(self, flavor, model_name, first_rank, ranks, all_schedulers=True):
        self.flavor, self.model_name = flavor, model_name
        # Without --enable-metrics-for-all-schedulers only TP rank 0 records (SGLang).
        self.ranks = list(range(first_rank, first_rank + ranks)) if all_schedulers else (
            [0] if first_rank == 0 else [])
        self.lock = threading.Lock()
        self.tokens = dict.fromkeys(SGLANG_MODES, 0)
        self.running = 0
        self.queued = 0
        self.prefilled = 0   # vLLM's prompt tokens: whole prompts, at their last chunk
        self.kv_tokens = 0
        self.recent = []  # (time, decode tokens) for gen_throughput

    def step(self, mode, tokens, running, prefilled=0, kv_tokens=None):
        with self.lock:
            self.tokens[mode] += tokens
            self.running = running
            self.prefilled += prefilled
            if kv_tokens is not None:
                self.kv_tokens = kv_tokens
            if mode == "decode":
                now = time.monotonic()
                self.recent = [(t, n) for t, n in self.recent if now - t < 10] + [(now, tokens)]

    def set_running(self, running, queued=0, kv_tokens=None):
        with self.lock:
            self.running, self.queued = running, queued
            if kv_tokens is not None:
                self.kv_tokens = kv_tokens

    def throughput(self):
        if len(self.recent) < 2:
            return 0.0
        span = self.recent[-1][0] - self.recent[0][0]
        return sum(n for _, n in self.recent[1:]) / span if span > 0 else 0.0

    def render(self):
        with self.lock:
            return self._sglang() if self.flavor == "sglang" else self._vllm()

    def _sglang(self):
        out = []
        gauges = [("sglang:num_running_reqs", "The number of running requests.", self.running),
                  ("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                   self.queued),
                  ("sglang:gen_throughput", "The generation throughput (token/s).",
                   self.throughput())]
        for name, doc, value in gauges:
            out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
            out += [f"{name}{{{self._labels(r)}}} {float(value)}" for r in self.ranks]
        name = "sglang:realtime_tokens_total"
        out += [f"# HELP {name} Total number of tokens processed (updated on each log "
                "interval). mode: prefill_compute, prefill_cache, decode.",
                f"# TYPE {name} counter"]
        out += [f'{name}{{{self._labels(r)},mode="{m}"}} {float(self.tokens[m])}'
                for r in self.ranks for m in SGLANG_MODES]
        return "\n".join(out) + "\n"

    def _labels(self, rank):
        return (f'model_name="{self.model_name}",engine_type="unified",tp_rank="{rank}",'
                f'pp_rank="0",moe_ep_rank="{rank}"')

    def _vllm(self):
        labels = f'engine="0",model_name="{self.model_name}"'
        rows = [("vllm:num_requests_running", "gauge", "Number of requests in model execution "
                 "batches.", self.running),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be "
                 "processed.", self.queued),
                ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent "
                 "usage.", min(1.0, self.kv_tokens / KV_TOKENS)),
                ("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.",
                 self.prefilled),
                ("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
                 self.tokens["decode"])]
        out = []
        for name, kind, doc, value in rows:
            sample = f"{name}_total" if kind == "counter" else name
            out += [f"# HELP {sample} {doc}", f"# TYPE {sample} {kind}",
                    f"{sample}{{{labels}}} {float(value)}"]
        return "\n".join(out) + "\n"
