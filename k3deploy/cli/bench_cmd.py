"""k3deploy bench: a short, bounded load test from the laptop, checked against the guide.

Single stream first, then a few concurrency levels, each bounded in time. Reports TTFT and
inter-token latency (p50/p99), output and reasoning tokens per second and errors, and compares
single-stream decode with the guide's figure for the config where it gives one.
"""

from __future__ import annotations

import json
from typing import NotRequired, TypedDict, cast

from rich.console import Console
from rich.table import Table

from k3deploy.serving import bench_run, bench_stats
from k3deploy.serving.chat_session import effort_of
from k3deploy.cli import speed_figures
from k3deploy.cli.speed_figures import VsGuide
from k3deploy.cluster.inventory import Inventory
from k3deploy.core.errors import EXIT_OK, EXIT_STEP_FAILED, BadInputError
from k3deploy.core.jsonvalue import JSON
from k3deploy.serving.bench_stats import LevelSummary


class BenchDoc(TypedDict):
    """What `bench --json` prints and the certificate keeps (but its own path)."""
    endpoint: str
    model: str
    effort: str
    max_tokens: int
    seconds_per_level: float
    levels: list[LevelSummary]
    single_stream_decode_tok_s: float | None
    guide: VsGuide | None
    certificate: NotRequired[str | None]


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or any(not 1 <= n <= 256 for n in levels):
        raise BadInputError(f"--concurrency wants a list like 1,4,8 (each 1..256), got {text!r}")
    return ([1] if levels[0] != 1 else []) + levels   # single stream always comes first


def run_bench_cmd(inv_path: str, *, levels: str, seconds: float, effort: str, max_tokens: int,
                  json_out: bool, state_dir: str | None, accept_new_host_keys: bool,
                  group: str | None = None) -> int:
    from k3deploy.cli.fleet_cmd import endpoint_of
    target, inv, router = endpoint_of(inv_path, state_dir, group)
    chosen = parse_levels(levels)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    err.print(f"bench {target.base_url}: concurrency {', '.join(map(str, chosen))}, "
              f"{seconds:g} s each, reasoning_effort {effort}, max_tokens {max_tokens}")
    results = bench_run.run(target, chosen, seconds=seconds, effort=effort_of(effort),
                            max_tokens=max_tokens,
                            on_level=lambda lv: err.print(_level_line(lv), markup=False))
    single = bench_stats.single_stream_decode(results)
    doc: BenchDoc = {"endpoint": target.base_url, "model": target.model, "effort": effort,
           "max_tokens": max_tokens, "seconds_per_level": seconds, "levels": results,
           "single_stream_decode_tok_s": single,
           # through a fleet's router every stream goes to one group, and the concurrent ones
           # to several: the guide's one-group figure compares with the single stream only
           "guide": speed_figures.compare(speed_figures.for_inventory(inv), single,
                                          None if router else results)}
    if router:   # a certificate is one group's bring-up: `--group NAME` benches and certifies it
        err.print("through the router: no certificate (a certificate is one group's; "
                  "--group NAME benches that group alone and certifies it)", style="dim")
        doc["certificate"] = None
    else:
        doc["certificate"] = _certify(inv, doc, state_dir, accept_new_host_keys, err)
    if json_out:
        print(json.dumps(doc, indent=1))
    else:
        _show(doc)
    completed = sum(lv["completed"] for lv in results)
    return EXIT_OK if completed else EXIT_STEP_FAILED


def _certify(inv: Inventory, doc: BenchDoc, state_dir: str | None, accept_new_host_keys: bool,
             err: Console) -> str | None:
    from k3deploy.cli import certificate_cmd
    # The document is JSON, as `--json` prints it: TypedDicts of JSON values, no tuples.
    return certificate_cmd.write_for_bench(inv, cast(dict[str, JSON], doc), state_dir,
                                           accept_new_host_keys, err)


def _level_line(lv: LevelSummary) -> str:
    return (f"  {lv['concurrency']:>3} stream(s): {lv['completed']} done, {lv['errors']} errors, "
            f"TTFT p50 {lv['ttft_s']['p50']} s, {lv['output_tok_s']} tok/s out")


def _show(doc: BenchDoc) -> None:
    table = Table(title=f"bench {doc['endpoint']} (reasoning_effort {doc['effort']})")
    for col in ("streams", "requests", "done", "errors", "TTFT p50/p99 s", "ITL p50/p99 s",
                "out tok/s", "reasoning tok/s", "per-stream tok/s"):
        table.add_column(col, justify="right")
    for lv in doc["levels"]:
        table.add_row(str(lv["concurrency"]), str(lv["requests"]), str(lv["completed"]),
                      str(lv["errors"]), f"{lv['ttft_s']['p50']}/{lv['ttft_s']['p99']}",
                      f"{lv['itl_s']['p50']}/{lv['itl_s']['p99']}", str(lv["output_tok_s"]),
                      str(lv["reasoning_tok_s"]), str(lv["per_stream_decode_tok_s"]))
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    for line in guide_lines(doc):
        console.print(line, markup=False)


def guide_lines(doc: BenchDoc) -> list[str]:
    g = doc["guide"]
    if g is None:
        out = [f"single-stream decode {doc['single_stream_decode_tok_s']} tok/s (the guide "
               "gives no figure for this config)"]
    else:
        verdict = "far below it: check the launch flags and GPUs" if g["far_below"] else "in line"
        out = [f"single-stream decode {g['measured_single_stream_tok_s']} tok/s; the guide: "
               f"{g['guide_single_stream_tok_s']} tok/s ({g['note']}); x{g['ratio']}, {verdict}"]
        out += [f"{a['concurrency']} streams: {a['measured_tok_s']} tok/s in all; the guide: "
                f"{a['guide_tok_s']} tok/s (x{a['ratio']})" for a in g["aggregate"]]
    for lv in doc["levels"]:
        for error in lv["error_samples"]:
            out.append(f"error at {lv['concurrency']} stream(s): {error}")
    certificate = doc.get("certificate")
    return out + ([f"certificate: {certificate}"] if certificate else [])
