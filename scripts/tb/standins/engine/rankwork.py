"""What a formed SGLang rank does after loading: its share of every forward step
(collective.py) under SGLang's scheduler watchdog (decode_watchdog.py), its progress counters
(progress.py) on /metrics, and on a node of rank >= 1 the dummy health server (rankhttp.py).
Attached before the rank reports loaded, so no step can reach a rank not yet listening for it."""
import collective
import decode_watchdog
import progress
import rankhttp


def attach_sglang(args, ctx, group, serving, first_rank, timeout):
    metrics = None
    if args.enable_metrics:
        metrics = progress.Progress("sglang", args.served_model_name or args.model_path,
                                    first_rank, ctx.gpus, args.enable_metrics_for_all_schedulers)
    counts = metrics or progress.Progress("sglang", "", first_rank, 0)
    watchdog = decode_watchdog.SchedulerWatchdog(args, ctx, first_rank)
    if args.node_rank == 0:
        serving.progress = metrics
        serving.forward = collective.Forward(ctx, group, counts, timeout)
        serving.forward.watchdog = watchdog
        return
    collective.Share(ctx, group, counts).watchdog = watchdog
    rankhttp.start(args.host, args.port, metrics)


class _OneNode:
    """vLLM here: its ranks' steps are not spread over the stand-in's nodes (Ray's workers
    load, but the collective is not modelled across them)."""


def attach_vllm(serving, ctx, model_name, timeout):
    metrics = progress.Progress("vllm", model_name, 0, 1)
    serving.progress = metrics
    serving.forward = collective.Forward(ctx, _OneNode(), metrics, timeout)
