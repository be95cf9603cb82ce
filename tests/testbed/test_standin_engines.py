"""The stand-in engines (scripts/tb/standins/engine) refuse a launch as the real ones do: strict
flags, missing GPUs or driver, incomplete or uncached weights, out of memory, a CUDA mismatch;
and their fault hooks (a rank that loads short, one that crashes).

No root needed: each "node" is a temp K3TB_RUN with its own node.json, each "container" a
config.json the way the docker stand-in writes it, the HF cache a tiny generated snapshot
(standin_procs.py; the `cluster` fixture is in conftest.py). Every process a test starts is
killed when the test ends, pass or fail. The other stand-in engine tests: test_standin_*.py.
"""
import sys

import json

import pytest
from standin_procs import (ENGINE_DIR, GPUS, SHARDS, VLLM_IMAGE, free_port, gpu_report, http,
                           log_of, make_node, sglang_cmd, shard_name, wait_exit, wait_for_line,
                           wait_health, write_shard)

sys.path.insert(0, ENGINE_DIR)
import configfile  # noqa: E402
import weights  # noqa: E402


# ---- strict flags, weights, CUDA --------------------------------------------------------------
def test_unknown_flags_exit_2_with_usage(cluster, tmp_path):
    run = make_node(tmp_path, "node0")
    sgl = cluster.run(run, sglang_cmd(free_port(), "--enable-magic"))
    assert sgl.returncode == 2
    assert "usage: sglang serve" in sgl.stderr
    assert "error: unrecognized arguments: --enable-magic" in sgl.stderr
    bad_parser = cluster.run(run, sglang_cmd(free_port(), "--reasoning-parser", "kimi_k9"))
    assert bad_parser.returncode == 2 and "invalid choice: 'kimi_k9'" in bad_parser.stderr
    vllm = cluster.run(run, ["vllm", "serve", "moonshotai/Kimi-K3", "--tp-sizee", "8"],
                       image=VLLM_IMAGE)
    assert vllm.returncode == 2 and "unrecognized arguments: --tp-sizee" in vllm.stderr
    ray = cluster.run(run, ["ray", "start", "--head", "--bogus"], image=VLLM_IMAGE)
    assert ray.returncode == 2 and "Error: No such option: --bogus" in ray.stderr


def test_aliases_of_the_single_node_launch_server_cell_parse(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpus=8)
    port = free_port()
    proc = cluster.start(run, ["python", "-m", "sglang.launch_server", "--model-path",
                               "moonshotai/Kimi-K3", "--tp", "8", "--ep-size", "8",
                               "--enable-dp-attention", "--dp", "8", "--context-length",
                               "1048576", "--host", "127.0.0.1", "--port", str(port)])
    wait_health(port, proc)
    assert http(port, "/v1/models")[1]["data"][0]["max_model_len"] == 1048576


def test_unknown_command_is_127_like_docker(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"), ["nginx", "-g", "daemon off;"])
    assert result.returncode == 127
    assert 'exec: "nginx": executable file not found in $PATH' in result.stderr


def test_a_container_without_gpus_finds_no_driver(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"), sglang_cmd(free_port()), gpus=None)
    assert result.returncode == 1 and "Found no NVIDIA driver" in result.stderr


def test_tp_size_must_cover_every_gpu(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0", gpus=8), sglang_cmd(free_port(), tp=16))
    assert result.returncode == 1
    assert "--tp-size 16 needs 16 GPUs, but --nnodes 1 x 8 GPUs per node gives 8" in result.stderr


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_incomplete_snapshot_fails_the_load_naming_the_shard(cluster, tmp_path, damage):
    shard = cluster.snapshot / shard_name(7)
    if damage == "truncate":
        with open(shard, "r+b") as f:
            f.truncate(shard.stat().st_size - 10)
    else:
        shard.unlink()
    result = cluster.run(make_node(tmp_path, "node0"), sglang_cmd(free_port()))
    assert result.returncode == 1
    assert shard_name(7) in result.stderr
    assert ("is incomplete" if damage == "truncate" else "is missing") in result.stderr
    # tqdm writes to stderr; 0.5.16 (the default) loads with the multi-thread loader.
    assert "Multi-thread loading shards:   0% Completed | 0/12 [00:00<?, ?it/s]" in result.stderr


def test_one_b200_node_runs_out_of_memory_building_the_model(cluster, tmp_path):
    """The model is built on the GPU before a shard is read (loader.py `with target_device:`):
    weights that do not fit fail at that allocation, before any bar."""
    result = cluster.run(make_node(tmp_path, "node0", gpu="b200"), sglang_cmd(free_port()))
    assert result.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in result.stderr
    assert "Load weight begin." in result.stderr and "Completed |" not in result.stderr


@pytest.mark.parametrize("version, desc, end", [
    ("0.5.16", "Multi-thread loading shards", b""),      # BAR_FORMAT without "\n" since 0.5.10
    ("0.5.4", "Loading safetensors checkpoint shards", b"\n"),
])
def test_the_loading_bar_is_framed_as_tqdm_writes_it(cluster, tmp_path, version, desc, end):
    run = make_node(tmp_path, "node0", load=4.0)
    node = json.loads((run / "node.json").read_text())
    (run / "node.json").write_text(json.dumps({**node, "sglang_version": version}))
    proc = cluster.start(run, sglang_cmd(free_port()))
    first = f"\r{desc}:   0% Completed | 0/{SHARDS} [00:00<?, ?it/s]".encode() + end
    wait_for_line(proc, f"{SHARDS // 2}/{SHARDS}", timeout=30)   # half-way: 2 s before close
    err = open(proc.log_file.name, "rb").read()
    assert first + f"\r{desc}:  16% Completed | 2/{SHARDS} [".encode() in err   # every ~10%
    if not end:   # nothing closed the bar yet: not one newline from its first redraw on
        assert b"\n" not in err[err.index(first):] and b"100% Completed" not in err
    wait_for_line(proc, "Load weight end.", timeout=30)
    err = open(proc.log_file.name, "rb").read()
    close = f"{SHARDS}/{SHARDS} [".encode()
    assert err.count(close) == 2   # close(): one more redraw of the full bar, then its "\n"
    assert err.index(b"\n", err.rindex(close)) < err.index(b"Load weight end.")


def test_uncached_model_offline_gives_the_hub_error(cluster, tmp_path):
    result = cluster.run(make_node(tmp_path, "node0"),
                         sglang_cmd(free_port(), "--revision", "f" * 40), env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot" in result.stderr


def test_cuda13_image_on_a_cuda12_driver_fails_but_cu12_tag_passes(cluster, tmp_path):
    run = make_node(tmp_path, "node0", cuda="12.8")
    bad = cluster.run(run, sglang_cmd(free_port()))
    assert bad.returncode == 1
    assert "driver on your system is too old (found version 12080)" in bad.stderr
    assert "CUDA version mismatch" in bad.stderr
    # Past the CUDA check the cu12 image reaches argument parsing (exit 2 on a bad flag).
    ok = cluster.run(run, sglang_cmd(free_port(), "--nope"), image="lmsysorg/sglang:kimi-k3-cu12")
    assert ok.returncode == 2 and "unrecognized arguments: --nope" in ok.stderr


def test_shard_check_reads_the_safetensors_header(tmp_path):
    path = tmp_path / "s.safetensors"
    write_shard(path, 100)
    assert weights.shard_problem(str(path)) is None
    with open(path, "ab") as f:
        f.write(b"x")
    assert weights.shard_problem(str(path)).startswith("incomplete")
    assert weights.shard_problem(str(tmp_path / "absent")) == "missing"


def test_config_file_yaml_subset_and_json():
    text = "api-key: 'sk-1 # not a comment'\nport: 8000  # comment\ntrust_remote_code: true\n"
    assert configfile.mapping_to_argv(configfile.parse_mapping(text, "f.yaml")) == [
        "--api-key", "sk-1 # not a comment", "--port", "8000", "--trust-remote-code"]
    assert configfile.parse_mapping('{"api-key": "k"}', "f.json") == {"api-key": "k"}


# ---- fault hooks ------------------------------------------------------------------------------
def test_load_short_rank_still_serves_but_reports_little_memory(cluster, tmp_path):
    run = make_node(tmp_path, "node0", faults={"load_short": True})
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--mem-fraction-static", "0.85"))
    wait_health(port, proc)
    normal = 0.85 * GPUS["b300"][1]
    used = gpu_report(run)["used_mib"]
    assert gpu_report(run)["pid"] == proc.pid
    assert all(0.3 * normal < u < 0.5 * normal for u in used)
    assert "WARNING" in log_of(proc)


def test_crash_after_seconds_exits_1_with_a_traceback(cluster, tmp_path):
    run = make_node(tmp_path, "node0", faults={"crash_after_seconds": 1})
    proc = cluster.start(run, sglang_cmd(free_port()))
    assert wait_exit(proc, 10) == 1
    log = log_of(proc)
    assert "Traceback (most recent call last)" in log and "illegal memory access" in log


def test_redirect_then_echo_appends_the_exit_status_as_sh_does(cluster, tmp_path):
    """`sh -c '"$@" >FILE 2>&1; echo "TEXT $?" >>FILE' sh CMD...`: CMD runs as the shell's
    child; once it exited, TEXT and its status follow its output in FILE."""
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    wrapped = ["sh", "-c", '"$@" >/k3/logs/out.log 2>&1; echo "serve exited with status $?" '
               '>>/k3/logs/out.log', "sh", "vllm", "serve", "moonshotai/Kimi-K3", "--tp-sizee", "8"]
    result = cluster.run(make_node(tmp_path, "node0"), wrapped, image=VLLM_IMAGE,
                         mounts=[{"host": str(logs), "container": "/k3/logs", "ro": False}])
    assert result.returncode == 2 and result.stdout == result.stderr == ""
    lines = (logs / "out.log").read_text().splitlines()
    assert "unrecognized arguments: --tp-sizee" in lines[-2] and \
        lines[-1] == "serve exited with status 2", lines


def test_exec_redirect_writes_the_output_through_the_mount(cluster, tmp_path):
    """`sh -c 'exec "$@" >FILE 2>&1' sh CMD...` (how launch runs the detached vllm serve):
    CMD's stdout and stderr go to FILE on the node, nothing to the caller's streams."""
    logs = tmp_path / "serve-logs"
    logs.mkdir()
    (logs / "out.log").write_text("a previous serve's output\n")
    wrapped = ["sh", "-c", 'exec "$@" >/k3/logs/out.log 2>&1', "sh",
               "vllm", "serve", "moonshotai/Kimi-K3", "--tp-sizee", "8"]
    result = cluster.run(make_node(tmp_path, "node0"), wrapped, image=VLLM_IMAGE,
                         mounts=[{"host": str(logs), "container": "/k3/logs", "ro": False}])
    assert result.returncode == 2 and result.stdout == result.stderr == ""
    text = (logs / "out.log").read_text()
    assert "unrecognized arguments: --tp-sizee" in text and "a previous serve" not in text
