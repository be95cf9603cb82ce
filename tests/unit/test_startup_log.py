"""The engine start-up log readers (k3deploy/engines/startup_log.py) on real transcripts:
tests/fixtures/real/sglang/<version>/*.txt, each with a .source saying where it comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from k3deploy.engines import startup_log

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang"


def real(version: str, name: str) -> str:
    assert (REAL / version / f"{name}.source").is_file(), f"{version}/{name} has no source"
    with open(REAL / version / f"{name}.txt", newline="") as f:   # keep each "\r" as logged
        return f.read()


@pytest.mark.parametrize("version, name, expected", [
    ("0.5.16", "rank0-loading", (4, 4)),        # the glued close() refresh is the last bar
    ("0.5.16", "kimi-k25-loading", (3, 64)),
    ("0.5.4", "rank0-loading", (14, 26)),
    ("0.5.4", "dsv3-multinode-rank0-error", (41, 163)),
    ("0.5.8.post1", "worker-rank1-startup-error", None),   # workers print no bar
    ("0.5.16", "ready", None),
])
def test_loading_reads_the_last_bar_of_either_loader(version, name, expected):
    assert startup_log.loading(real(version, name)) == expected


def test_the_first_bar_counts_as_loading_before_any_shard_is_read():
    first = real("0.5.16", "kimi-k25-loading").splitlines()[0]
    assert startup_log.loading(first) == (0, 64)


def test_ready_line():
    assert startup_log.ready(real("0.5.16", "ready"))
    assert not startup_log.ready(real("0.5.16", "rank0-loading"))


def test_rank_0_loading_as_docker_logs_shows_it_is_one_line_of_redraws():
    text = real("0.5.16", "rank0-loading")
    bars = [line for line in text.split("\n") if "Multi-thread loading shards" in line]
    assert len(bars) == 1 and bars[0].count("\r") == 6
    assert startup_log.loading(text) == (4, 4)


def test_progress_marker_is_the_last_progress_line_never_an_access_line():
    assert startup_log.progress_marker(real("0.5.16", "ready")) == \
        "[2026-05-28 05:58:29] The server is fired up and ready to roll!"
    marker = startup_log.progress_marker(real("0.5.16", "rank0-loading"))
    assert marker.startswith("Multi-thread loading shards: 100% Completed | 4/4")
    # A log whose tail holds only our own /health polls shows no progress.
    access = real("0.5.16", "ready").splitlines()[1]
    assert startup_log.progress_marker(access) is None


def test_progress_marker_changes_as_the_bar_advances():
    lines = real("0.5.4", "rank0-loading").splitlines()
    seen = [startup_log.progress_marker("\n".join(lines[:n])) for n in range(2, len(lines) + 1)]
    assert len(set(seen)) == len(seen)


def test_started_is_the_scheduler_past_the_argument_checks():
    assert startup_log.started("sglang", real("0.5.8.post1", "worker-rank1-startup-error"))
    assert not startup_log.started("sglang", real("0.5.16", "check-server-args-error"))


@pytest.mark.parametrize("version, name, line", [
    ("0.5.8.post1", "worker-rank1-startup-error", "torch.AcceleratorError: CUDA error: out of memory"),
    ("0.5.16", "check-server-args-error",
     "AssertionError: multi-node data parallel is not supported unless dp attention!"),
    ("0.5.4", "dsv3-multinode-rank0-error", None),    # the excerpt ends before the exception
    ("0.5.16", "ready", None),
])
def test_error_line_is_the_engines_own(version, name, line):
    assert startup_log.error_line(real(version, name)) == line


def test_error_line_reads_argparse_and_uvicorn_errors():
    # argparse's error as published in devopsrustem/slurmv4 3/4.sh (a 2026 SGLang launch).
    argparse = ("launch_server.py: error: unrecognized arguments: --disaggregation-decode-url "
                "http://10.99.91.49:30001,http://10.99.91.33:30001\n")
    assert startup_log.error_line(argparse) == argparse.strip()
    # vLLM's: the serve subcommand's prog is "vllm serve" (vllm-project/vllm#13150, its title);
    # an unknown flag is reported by the top-level parser as "vllm" (vllm-project/vllm-omni#1364).
    for line in ("vllm serve: error: the following arguments are required: model_tag",
                 "vllm: error: unrecognized arguments: --omni"):
        assert startup_log.error_line(f"usage: vllm ...\n{line}\n") == line
    # uvicorn/server.py startup(): "[Errno %d] error while attempting to bind on address %s: %s"
    # under uvicorn's "ERROR:    " level prefix.
    bind = "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): " \
           "address already in use\n"
    assert startup_log.error_line(bind) == bind.strip()


def test_each_cuda_graph_capture_line_of_0_5_16_is_progress():
    lines = real("0.5.16", "graph-capture").splitlines()
    seen = [startup_log.progress_marker("\n".join(lines[:n])) for n in range(1, len(lines) + 1)]
    assert seen == [line.strip() for line in lines]


def test_the_group_formed_once_rank_0_is_past_torch_distributed_init():
    """What reaches `docker logs` before a bar can (its "\\r" redraws end in a "\\n" only when
    the load is done)."""
    text = real("0.5.16", "group-formed")
    assert startup_log.formed(text) and startup_log.loading(text) is None
    assert not startup_log.formed(text.splitlines()[0])    # "begin": a rank may still be missing


def test_in_weight_load_is_the_last_load_line_of_a_rank():
    """SGLang's every-rank `Load weight begin.`; vLLM's load lines (0.33 transcript)."""
    assert startup_log.in_weight_load(real("0.5.16", "group-formed")) is True
    vllm = (REAL.parent / "vllm" / "0.33.x" / "serve-dp8-single-node.txt").read_text()
    lines = vllm.splitlines()
    began = next(i for i, line in enumerate(lines) if "Starting to load model" in line)
    assert startup_log.in_weight_load("\n".join(lines[:began + 1])) is True
    assert startup_log.in_weight_load(vllm) is False
    assert startup_log.in_weight_load(real("0.5.16", "check-server-args-error")) is None


def test_a_node_is_in_its_load_until_every_scheduler_of_it_ended_its_own():
    """Each TP rank's scheduler on the node logs its own pair (model_runner.py load_model)."""
    line = real("0.5.16", "group-formed").splitlines()[2]
    begins = "\n".join(line.replace("TP0", f"TP{r}") for r in (8, 9))
    end = ("[2026-05-28 06:26:09 TP8] Load weight end. type=KimiK3ForConditionalGeneration, "
           "dtype=torch.bfloat16, avail mem=18.61 GB, mem usage=59.60 GB.")
    assert startup_log.in_weight_load(begins + "\n" + end) is True
    assert startup_log.in_weight_load(begins + "\n" + end + "\n" + end.replace("TP8", "TP9")) \
        is False
