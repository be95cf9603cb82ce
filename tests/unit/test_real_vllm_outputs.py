"""vLLM's start-up log as the real engine prints it (tests/fixtures/real/vllm/, each file with
its source beside it) through the start-up log reader the wait step asks (engines/startup_log.py,
the one home of both engines' loading bars)."""

from __future__ import annotations

import pytest

from k3deploy.engines import startup_log
from tests.realfix import real as real_file, vllm_shape as _shape


def real(name: str) -> str:
    return real_file(f"vllm/{name}")


def test_a_whole_0_33_start_up():
    log = real("0.33.x/serve-dp8-single-node.txt")
    assert startup_log.formed(log) and startup_log.ready(log)
    assert startup_log.loading(log) == (96, 96)
    lines = log.splitlines()
    shown = [startup_log.progress_marker("\n".join(lines[:n])) for n in range(1, len(lines) + 1)]
    assert next(filter(None, shown)).startswith("Loading safetensors checkpoint shards:   0%")
    assert shown[-1].endswith("Application startup complete.")


def test_loading_started_is_the_group_formed_before_any_bar():
    log = real("0.33.x/serve-dp8-single-node.txt")
    head = "\n".join(ln for ln in log.splitlines() if "Loading safetensors" not in ln
                     and "Model loading took" not in ln and "APIServer" not in ln)
    assert startup_log.formed(head) and startup_log.loading(head) is None
    before = "\n".join(log.splitlines()[:7])          # logo and args: engine not up yet
    assert not startup_log.formed(before) and not startup_log.ready(before)


@pytest.mark.parametrize("name, done", [
    ("main-2026-07/loading-worker.txt", (1, 1)),
    ("0.5.x/loading-86-shards.txt", (59, 86)),
])
def test_progress_from_published_logs(name, done):
    log = real(name)
    assert startup_log.loading(log) == done and startup_log.formed(log)
    assert not startup_log.ready(log)


def test_uvicorn_lines_under_the_api_server_prefix_are_not_start_up():
    log = real("main-2025-12/routes-health.txt")
    assert not startup_log.ready(log) and not startup_log.formed(log)


def test_the_older_bar_without_completed():
    # vllm-project/vllm#22587 (2025-08): "Loading safetensors checkpoint shards:   0% 0/1 [...]"
    assert startup_log.loading("Loading safetensors checkpoint shards: 100% 1/1 [00:05<00:00,"
                                "  5.34s/it]") == (1, 1)


def test_the_0_33_reconstruction_has_the_published_0_23_start_up_shape():
    published = [_shape(ln) for ln in real("0.23.0/startup-logo.txt").splitlines()[:6]]
    rebuilt = [_shape(ln) for ln in real("0.33.x/serve-dp8-single-node.txt").splitlines()[:6]]
    assert [ln.replace("0.23.0", "V").replace("Qwen/Qwen3.5-2B", "M") for ln in published] == \
        [ln.replace("0.33.0", "V").replace("moonshotai/Kimi-K3", "M") for ln in rebuilt]
    assert not startup_log.formed(real("0.23.0/startup-logo.txt"))
