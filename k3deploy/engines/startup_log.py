"""What an engine's start-up log says: weight-loading progress, start-up milestones, the ready
line and the engine's own error line. Pure: text in, values out.

Weight loading is a tqdm bar whose text ends in "\\n" (SGLang/vLLM `_BAR_FORMAT`:
"{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [...]"), printed only where
`torch.distributed.get_rank() == 0` (global rank 0: the head's log, never a worker's). Its
description depends on the loader: SGLang < 0.5.10 and vLLM "Loading safetensors checkpoint
shards"; SGLang >= 0.5.10 (multi-thread loader on by default, sgl-project/sglang#20289)
"Multi-thread loading shards". vLLM adds " (eager)" with that load strategy, and its releases
before vllm-project/vllm#22587 (2025-08) print no "Completed |". tqdm may also glue two updates
into one line (its close() refresh), so every match on a line counts, the last one wins.

vLLM's other start-up lines are 0.33.0's (tests/fixtures/real/vllm/): the engine core logs
"Starting to load model ..." once every rank passed distributed init (v1/worker/
gpu_model_runner.py, global first rank), then "Model loading took ..." and, on the API server,
"Starting vLLM server on URL" and uvicorn's "Application startup complete.". The lines differ
between the engines, so each reader asks all of them of any engine's log.
"""

from __future__ import annotations

import re

LOADING_DESCS = ("Multi-thread loading shards", "Loading safetensors checkpoint shards")
_BAR = re.compile(r"(?:" + "|".join(map(re.escape, LOADING_DESCS)) +
                  r")(?: \(\w+\))?:\s*(\d+)%(?: Completed \|)?\s*(\d+)/(\d+)")
# SGLang http_server.py _wait_and_warmup: logged after the warm-up request succeeded; vLLM's
# API server listening (after its logger's "[file:line] "), and uvicorn's line after it.
READY = ("The server is fired up and ready to roll!", "] Starting vLLM server on ",
         "INFO:     Application startup complete.")
# The ranks formed their group, in newline-ended lines that reach `docker logs` at once (the
# loading bar does not: since 0.5.10 it is redrawn with "\r" and ends in its only "\n" when
# the load is done). SGLang model_runner.py init_torch_distributed logs "Init torch distributed
# ends." after init_distributed_environment and the world group's all-reduce of free memory
# (every rank joined); vLLM: loading started, or is already done.
_FORMED = ("Init torch distributed ends.", "] Starting to load model ", "] Model loading took ")
# Lines an engine prints between loading and ready (no bar there): they count as progress.
# SGLang model_runner.py ("Load weight end.", "Memory pool end.", before 0.5.16 "Capture cuda
# graph end."; since, model_runner_components/cuda_graph_setup.py "Capture target decode CUDA
# graph begin." and "Capture target prefill CUDA graph begin/end.", role draft or target,
# phase decode, verify or prefill) and vLLM gpu_model_runner.py ("Model loading took",
# "Graph capturing finished").
_MILESTONES = re.compile(r"Load weight end\.|KV Cache is allocated|Memory pool end\.|"
                         r"Capture (?:(?:target|draft) (?:decode|verify|prefill) )?"
                         r"(?:cuda|piecewise CUDA|CUDA) graph (?:begin|end)|"
                         r"Model loading took|Graph capturing finished|"
                         r"Capturing (?:batches|num tokens)")
# The scheduler started (SGLang engine.py runs check_server_args before it): flags accepted.
# vLLM across nodes with the mp executor logs no engine line on any node before every node's
# engine cores joined (each DP engine core joins the DP group before EngineCore's "Initializing
# a V1 LLM engine"), so a launch that waits for it on the API node would never start the next
# node: its lines once the engine config was built and checked, before any engine starts, count
# too: the API node's "Started DP Coordinator process" (v1/engine/utils.py launch_core_engines,
# dp_size > 1) and a headless node's "... data parallel engine(s) in headless mode ..."
# (entrypoints/cli/serve.py run_headless).
STARTED = {"sglang": re.compile(r"Init torch distributed begin"),
           "vllm": re.compile(r"Starting to load model|Initializing a V1 LLM engine|"
                              r"\] Started DP Coordinator process|"
                              r"data parallel engine\(s\) in headless mode")}
# A Python exception's last line ("ValueError: ...", "torch.OutOfMemoryError: ...") or
# argparse's "prog: error: ..." (vLLM's subcommand parser's prog has a space: "vllm serve").
# vLLM's "(APIServer pid=N) " and Ray's "(ActorName pid=N, ip=ADDR) " for a remote actor's
# lines (vllm/logger.py _FORMAT; ray python/ray/_private/worker.py print_worker_logs).
_PROCESS = re.compile(r"^(?:\((?:\S+ )?pid=\d+(?:, ip=[^)\s]+)?\)\s*)+")
_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)(?::.*)?|"
                    r"\S+(?: [a-z][\w-]*)?: error: .+|ERROR:\s+.+)$")


def loading(text: str) -> tuple[int, int] | None:
    """(shards done, total) of the last loading bar in the text, or None before loading."""
    found = None
    for match in _BAR.finditer(text):
        found = (int(match.group(2)), int(match.group(3)))
    return found


def ready(text: str) -> bool:
    return any(marker in text for marker in READY)


def formed(text: str) -> bool:
    """Rank 0's log shows the group formed: past torch distributed init (SGLang), loading
    (its bar; vLLM said it started), or ready."""
    return (loading(text) is not None or ready(text)
            or any(marker in text for marker in _FORMED))


def started(engine: str, text: str) -> bool:
    """The engine is past its own argument checks (its workers were started)."""
    pattern = STARTED.get(engine)
    return bool(pattern and pattern.search(text))


def progress_marker(text: str) -> str | None:
    """The last line that shows the start-up advancing (a loading bar, a milestone, the ready
    line); changes as long as the engine gets on. Access-log lines (our own /health polls)
    never count."""
    last = None
    for line in re.split(r"[\r\n]+", text):
        if _BAR.search(line) or _MILESTONES.search(line) or ready(line):
            last = line.strip()
    return last


# A rank's own weight load, in the lines every rank logs (not the bar, global rank 0's only):
# SGLang model_runner.py load_model "Load weight begin." / "Load weight end." (each TP
# rank's scheduler); vLLM gpu_model_runner.py "Starting to load model" / "Model loading took"
# (worker_base "Loading weights took").
_LOAD_BEGIN = ("Load weight begin.", "] Starting to load model ")
_LOAD_END = ("Load weight end.", "] Model loading took ", "Loading weights took")


def in_weight_load(text: str) -> bool | None:
    """Some scheduler of the node is in its load (more loads began than ended: a node's log
    holds one line of each per TP rank it runs), or every one ended (False); None: no load
    line in the text."""
    lines = text.splitlines()
    began = sum(1 for line in lines if any(marker in line for marker in _LOAD_BEGIN))
    ended = sum(1 for line in lines if any(marker in line for marker in _LOAD_END))
    return None if not began and not ended else began > ended


def error_line(text: str) -> str | None:
    """The engine's own error line: the last exception line (or argparse error) in the log,
    past vLLM's and Ray's process prefixes."""
    found = None
    for line in text.splitlines():
        stripped = _PROCESS.sub("", line.strip())
        if _ERROR.match(stripped):
            found = stripped
    return found
