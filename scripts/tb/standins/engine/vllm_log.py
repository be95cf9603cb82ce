"""What `vllm serve` 0.33.0 prints, line for line where the stand-in has the same moment.

From the vllm 0.33.0 wheel (PyPI, vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl):
- vllm/logger.py _FORMAT "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
  [%(fileinfo)s:%(lineno)d] %(message)s", _DATE_FORMAT "%m-%d %H:%M:%S"; without a TTY the
  NewLineFormatter (logging_utils/formatter.py) repeats the prefix after every newline of a
  message, joined with "\\r\\n". The process names: "APIServer" (entrypoints/launchers/
  api_server/entry.py decorate_logs), "EngineCore_DP<i>" / "EngineCore" (v1/engine/core.py).
- entrypoints/launchers/launcher.py:367 log_version_and_model: the logo with "version" and
  "model" (entrypoints/common/startup.py; monochrome without a TTY), startup.py:96
  "non-default args: %s".
- v1/worker/gpu_model_runner.py:4978 "Starting to load model %s...",
  model_executor/model_loader/default_loader.py:506 "Loading weights took %.2f seconds",
  gpu_model_runner.py:5088 "Model loading took %s GiB memory and %.6f seconds".
- model_executor/model_loader/weight_utils.py: tqdm "Loading safetensors checkpoint shards"
  with _BAR_FORMAT "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<
  {remaining}, {rate_fmt}]", on torch.distributed rank 0 only, written raw (no prefix).
- v1/engine/utils.py launch_core_engines "Started DP Coordinator process (PID: %d)" (its line
  number as a published 0.11.0 log shows it, tests/fixtures/real/vllm/0.11.0/).
- entrypoints/launchers/api_server/entry.py:139 "Starting vLLM server on %s", then uvicorn's
  lines; a published log shows them with the APIServer prefix too (vllm-project/vllm#29830:
  '(APIServer pid=3413524) INFO:     127.0.0.1:39606 - "GET /health HTTP/1.1" 200 OK').
"""
import os
import time

from common import say

VERSION = "0.33.0"
LOGO = ("\n       █     █     █▄   ▄█\n ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}\n"
        "  █▄█▀ █     █     █     █  model   {model}\n   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n")
WHERE = {"logo": "launcher.py:367", "args": "startup.py:96", "start_load": "gpu_model_runner.py:4978",
         "weights": "default_loader.py:506", "loaded": "gpu_model_runner.py:5088",
         "serving": "entry.py:139", "coordinator": "utils.py:651"}


def prefix(process):
    return f"({process} pid={os.getpid()})"


def info(text, where, process="APIServer"):
    head = f"{prefix(process)} INFO {time.strftime('%m-%d %H:%M:%S')} [{WHERE.get(where, where)}] "
    say(head + text.replace("\n", "\r\n" + head))


def uvicorn(text):
    say(f"{prefix('APIServer')} INFO:     {text}")


def banner(model):
    info(LOGO.format(version=VERSION, model=model), "logo")
