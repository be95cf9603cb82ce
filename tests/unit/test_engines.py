"""Engine argv builders against the deployment guide's commands, token by token."""

from __future__ import annotations

import dataclasses
import re
import shlex

import pytest
import yaml

from k3deploy import engines
from k3deploy.engines import (CONFIG_LABEL, FIELDS_LABEL, ImageChoiceError, LaunchSpec,
                              config_digest, node_launch_argvs)
from k3deploy.engines.docker import engine_env
from k3deploy.engines.images import choose_image
from k3deploy.engines.sglang import sglang_serve_args
from k3deploy.engines.spec import SpecError
from k3deploy.engines.ray import ray_head_container_argv, ray_worker_container_argv
from k3deploy.engines.vllm import vllm_launch_argv, vllm_serve_args

SHA = "0123456789abcdef0123456789abcdef01234567"
SECRETS = "/mnt/nvme/.k3deploy/secrets"
CANARY_KEY = "sk-K3CANARY-7f3a9b1c2d4e5f60718293a4b5c6d7e8"

# Guide, Step 5 and 6 (4x8 H100), verbatim apart from line continuations.
GUIDE_K3_ARGS = """--model-path moonshotai/Kimi-K3 --trust-remote-code --tp-size 32 --ep-size 32
  --nnodes 4 --node-rank $RANK --dist-init-addr $HEAD_IP:20000 --moe-runner-backend marlin
  --decode-attention-backend flashmla --mem-fraction-static 0.85 --dist-timeout 3600
  --reasoning-parser kimi_k3 --tool-call-parser kimi_k3 --host 0.0.0.0 --port 8000"""
GUIDE_DOCKER_RUN = """docker run -d --name sgl --gpus all --network host --ipc=host --shm-size 32g
  --ulimit memlock=-1 --ulimit stack=67108864 -v /mnt/nvme/hf:/root/.cache/huggingface
  --env "HF_TOKEN=$HF_TOKEN" --env NCCL_CUMEM_ENABLE=1
  --env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  --env SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0 --env SGLANG_K3_ATTN_RES_MODE=jit
  --env SGLANG_MOE_FUSED_GATE_RADIX=1 --env SGLANG_HOST_IP=$SELF_IP
  --env NCCL_SOCKET_IFNAME=$NIC --env GLOO_SOCKET_IFNAME=$NIC --env NCCL_DEBUG=WARN
  lmsysorg/sglang:kimi-k3 sglang serve $K3_ARGS"""
# Guide, "Tensor-Parallel, Expert-Parallel, and Data-Parallel Flags" (8x B300, vLLM).
GUIDE_VLLM_B300 = """vllm serve moonshotai/Kimi-K3 --data-parallel-size 8 --enable-expert-parallel
  --host 0.0.0.0 --port 8000 --tool-call-parser kimi_k3 --reasoning-parser kimi_k3
  --max-model-len 1048576 --trust-remote-code"""
GUIDE_SGLANG_B300 = """python -m sglang.launch_server --model-path moonshotai/Kimi-K3 --tp 8
  --ep-size 8 --enable-dp-attention --dp 8 --context-length 1048576 --port 30000"""


def guide_tokens(text: str, **values: str) -> list[str]:
    for name, value in values.items():
        text = text.replace(f"${name}", value)
    return shlex.split(text)


def h100_spec(rank: int = 2, **changes) -> LaunchSpec:
    base = dict(engine="sglang", image="lmsysorg/sglang:kimi-k3", container_name="sgl",
                model_repo="moonshotai/Kimi-K3", revision_sha=SHA, nnodes=4, node_rank=rank,
                gpus_per_node=8, head_address="10.0.0.10", self_address=f"10.0.0.1{rank}",
                nic="eth0", layout="tp-ep", hf_cache_host_path="/mnt/nvme/hf",
                secrets_host_dir=SECRETS, moe_runner_backend="marlin")
    return LaunchSpec(**{**base, **changes})


def b300_vllm_spec(**changes) -> LaunchSpec:
    base = dict(engine="vllm", image="vllm/vllm-openai:nightly", container_name="k3",
                model_repo="moonshotai/Kimi-K3", revision_sha=SHA, nnodes=1, node_rank=0,
                gpus_per_node=8, head_address="10.0.0.10", self_address="10.0.0.10",
                nic="eth0", layout="dp-ep", hf_cache_host_path="/mnt/nvme/hf",
                secrets_host_dir=SECRETS, context_length=1048576)
    return LaunchSpec(**{**base, **changes})


SERVE_LOGS = "/mnt/nvme/k3deploy/serve-logs"


def b200_ray_spec(rank: int, **changes) -> LaunchSpec:
    logs = {"serve_log_host_dir": SERVE_LOGS} if rank == 0 else {}
    return b300_vllm_spec(nnodes=2, node_rank=rank, self_address=f"10.0.0.1{rank}",
                          executor="ray", **{**logs, **changes})


def pairs(argv: list[str]) -> list[tuple[str, str | None]]:
    """['--a', '1', '--b'] -> [('--a', '1'), ('--b', None)]"""
    out: list[tuple[str, str | None]] = []
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out.append((tok, None if nxt is None or nxt.startswith("--") else nxt))
    return out


# --- SGLang, 4x8 H100 -------------------------------------------------------------------

def test_h100_rank2_docker_argv_is_the_guide_command_with_documented_differences():
    spec = engines.with_config_label(h100_spec(rank=2), CANARY_KEY)
    digest = spec.labels[CONFIG_LABEL]
    values = dict(RANK="2", SELF_IP="10.0.0.12", HEAD_IP="10.0.0.10", NIC="eth0")
    k3_args = guide_tokens(GUIDE_K3_ARGS, **values)
    expected = guide_tokens(GUIDE_DOCKER_RUN.replace("$K3_ARGS", ""), **values) + k3_args

    # 1. no HF token for the engine: weights are local and HF_HUB_OFFLINE=1 is set
    i = expected.index("HF_TOKEN=$HF_TOKEN")
    del expected[i - 1:i + 1]
    # 2. the 0600 secrets dir, read-only, for SGLang's --config file
    i = expected.index("/mnt/nvme/hf:/root/.cache/huggingface") + 1
    expected[i:i] = ["-v", f"{SECRETS}:/k3deploy/secrets:ro"]
    # 5. NCCL's INFO lines of its init and network (the transport status reports)
    i = expected.index("NCCL_DEBUG=WARN")
    expected[i:i + 1] = ["NCCL_DEBUG=INFO", "--env", "NCCL_DEBUG_SUBSYS=INIT,NET"]
    i = expected.index("NCCL_DEBUG_SUBSYS=INIT,NET") + 1
    # 6. C stdio's stdout unbuffered, so NCCL's lines reach `docker logs` as it writes them
    expected[i:i] = ["--env", "PYTHONUNBUFFERED=1", "--env", "HF_HUB_OFFLINE=1"]
    # 3. the configuration digest label and the settings it covers, before the image
    i = expected.index("lmsysorg/sglang:kimi-k3")
    expected[i:i] = ["--label", f"{CONFIG_LABEL}={digest}",
                     "--label", f"{FIELDS_LABEL}={spec.labels[FIELDS_LABEL]}"]
    # 4. engine args: pinned revision, explicit served name, every rank's metrics for the
    # guard's progress check, key from the config file
    i = expected.index("moonshotai/Kimi-K3") + 1
    expected[i:i] = ["--revision", SHA]
    expected += ["--served-model-name", "moonshotai/Kimi-K3", "--enable-metrics",
                 "--enable-metrics-for-all-schedulers"]
    # 7. the working launch of sgl-project/sglang#39568 (engines/sglang_defaults.py): the
    # cookbook image's first multi-node decode outlived the scheduler watchdog
    expected += ["--watchdog-timeout", "3600", "--disable-flashinfer-autotune",
                 "--model-loader-extra-config", '{"enable_multithread_load": true}',
                 "--config", "/k3deploy/secrets/sglang-secret.yaml"]

    assert engines.sglang_launch_argv(spec) == expected


def test_h100_k3_args_match_guide_for_every_rank():
    for rank in range(4):
        args = sglang_serve_args(h100_spec(rank=rank))
        guide = guide_tokens(GUIDE_K3_ARGS, RANK=str(rank), HEAD_IP="10.0.0.10")
        ours = [t for t in args if t not in ("--revision", SHA)]
        assert ours[:len(guide)] == guide


def test_no_backend_decided_leaves_the_moe_backend_to_extra_args():
    args = sglang_serve_args(h100_spec(moe_runner_backend=None))
    assert "--moe-runner-backend" not in args
    args = sglang_serve_args(h100_spec(moe_runner_backend=None,
                                               extra_args={"moe-runner-backend": "flashinfer"}))
    assert ("--moe-runner-backend", "flashinfer") in pairs(args)
    assert ("--moe-runner-backend", "marlin") in pairs(sglang_serve_args(h100_spec()))


def test_context_length_is_emitted_only_when_set():
    assert "--context-length" not in sglang_serve_args(h100_spec())
    args = sglang_serve_args(h100_spec(context_length=131072))
    assert ("--context-length", "131072") in pairs(args)


# --- SGLang, single 8x B300 -------------------------------------------------------------

def test_b300_sglang_dp_attention_matches_the_guide_cell():
    spec = h100_spec(rank=0, nnodes=1, self_address="10.0.0.10", layout="dp-attention",
                     moe_runner_backend=None, context_length=1048576, container_name="k3")
    args = sglang_serve_args(spec)
    assert args == [
        "--model-path", "moonshotai/Kimi-K3", "--revision", SHA, "--trust-remote-code",
        "--tp", "8", "--ep-size", "8", "--enable-dp-attention", "--dp", "8",
        "--mem-fraction-static", "0.85", "--dist-timeout", "3600",
        "--reasoning-parser", "kimi_k3", "--tool-call-parser", "kimi_k3",
        "--host", "0.0.0.0", "--port", "8000", "--context-length", "1048576",
        "--served-model-name", "moonshotai/Kimi-K3",
        "--enable-metrics", "--enable-metrics-for-all-schedulers",
        "--watchdog-timeout", "3600", "--disable-flashinfer-autotune",
        "--model-loader-extra-config", '{"enable_multithread_load": true}',
        "--config", "/k3deploy/secrets/sglang-secret.yaml"]
    guide = pairs(guide_tokens(GUIDE_SGLANG_B300))
    for flag, value in guide:
        if flag != "--port":  # the guide's 30000; k3deploy serves on ports.serve
            assert (flag, value) in pairs(args)
    assert "--nnodes" not in args and "--moe-runner-backend" not in args


# --- vLLM -------------------------------------------------------------------------------

def test_b300_vllm_serve_args_are_the_guide_cell_plus_pins():
    args = vllm_serve_args(b300_vllm_spec())
    guide = guide_tokens(GUIDE_VLLM_B300)[2:]
    ours = [t for t in args if t not in ("--revision", SHA)]
    # Beyond the guide: --enable-auto-tool-choice (vLLM rejects tool requests without it)
    # right after the tool parser it needs, and the served name.
    i = guide.index("--tool-call-parser") + 2
    assert ours == guide[:i] + ["--enable-auto-tool-choice"] + guide[i:] + \
        ["--served-model-name", "moonshotai/Kimi-K3"]
    assert args[:3] == ["moonshotai/Kimi-K3", "--revision", SHA]


def test_b300_vllm_chunked_prefill_and_mm_encoder_variants():
    chunked = vllm_serve_args(b300_vllm_spec(chunked_prefill_tokens=8192))
    i = chunked.index("--enable-expert-parallel")
    assert chunked[i + 1:i + 4] == ["--enable-chunked-prefill", "--max-num-batched-tokens",
                                    "8192"]
    mm = vllm_serve_args(b300_vllm_spec(mm_encoder_tp_mode="data"))
    i = mm.index("--enable-expert-parallel")
    assert mm[i + 1:i + 3] == ["--mm-encoder-tp-mode", "data"]
    plain = vllm_serve_args(b300_vllm_spec())
    assert "--enable-chunked-prefill" not in plain and "--mm-encoder-tp-mode" not in plain


def test_b300_vllm_container_replaces_the_image_entrypoint_and_uses_env_file():
    argv = vllm_launch_argv(b300_vllm_spec())
    i = argv.index("vllm/vllm-openai:nightly")
    assert argv[i - 2:i] == ["--entrypoint", "vllm"]
    assert argv[i + 1:i + 3] == ["serve", "moonshotai/Kimi-K3"]
    assert ("--env-file", f"{SECRETS}/vllm.env") in pairs(argv)
    envs = [argv[j + 1] for j, t in enumerate(argv) if t == "--env"]
    assert envs == ["VLLM_ENGINE_READY_TIMEOUT_S=3600", "VLLM_HOST_IP=10.0.0.10",
                    "NCCL_SOCKET_IFNAME=eth0",
                    "GLOO_SOCKET_IFNAME=eth0", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET",
                    "PYTHONUNBUFFERED=1", "HF_HUB_OFFLINE=1"]
    assert not any(t.endswith(":/k3deploy/secrets:ro") for t in argv)


def test_b200_ray_head_worker_and_serve():
    head, worker = b200_ray_spec(0), b200_ray_spec(1)
    head_argv = ray_head_container_argv(head)
    i = head_argv.index("vllm/vllm-openai:nightly")
    assert head_argv[i - 2:i] == ["--entrypoint", "ray"]
    assert head_argv[i + 1:] == ["start", "--block", "--head", "--port=6379",
                                 "--node-ip-address=10.0.0.10"]
    assert ("--env-file", f"{SECRETS}/vllm.env") in pairs(head_argv)

    worker_argv = ray_worker_container_argv(worker)
    i = worker_argv.index("vllm/vllm-openai:nightly")
    assert worker_argv[i + 1:] == ["start", "--block", "--address=10.0.0.10:6379",
                                   "--node-ip-address=10.0.0.11"]
    assert "--env-file" not in worker_argv  # the key stays on the head

    # The head mounts the node's serve-logs dir; the detached serve writes its output there.
    mount = head_argv.index(f"{SERVE_LOGS}:/k3deploy/serve-logs")
    assert head_argv[mount - 1] == "-v"
    assert not any("serve-logs" in t for t in worker_argv)
    serve = engines.vllm_exec_serve_argv(head)
    log = "/k3deploy/serve-logs/vllm-serve.log"
    assert serve[:10] == ["docker", "exec", "-d", "k3", "sh", "-c",
                          f'"$@" >{log} 2>&1; echo "k3deploy: vllm serve exited with status $?" '
                          f'>>{log}', "sh", "vllm", "serve"]
    assert engines.serve_log_host_path(SERVE_LOGS) == f"{SERVE_LOGS}/vllm-serve.log"
    p = pairs(serve)
    assert ("--data-parallel-size", "16") in p and ("--enable-expert-parallel", None) in p
    assert ("--data-parallel-size-local", "8") in p
    assert ("--data-parallel-backend", "ray") in p
    assert ("--enable-auto-tool-choice", None) in p
    assert [a[:2] for a in node_launch_argvs(head)] == [["docker", "run"], ["docker", "exec"]]
    assert node_launch_argvs(worker) == [worker_argv]


def test_ray_builders_refuse_the_wrong_rank_or_shape():
    with pytest.raises(SpecError):
        ray_head_container_argv(b200_ray_spec(1))
    with pytest.raises(SpecError):
        ray_worker_container_argv(b200_ray_spec(0))
    with pytest.raises(SpecError):
        engines.vllm_exec_serve_argv(b200_ray_spec(1))
    with pytest.raises(SpecError):   # a detached serve with nowhere to write its output
        engines.vllm_exec_serve_argv(b200_ray_spec(0, serve_log_host_dir=None))
    with pytest.raises(SpecError):
        vllm_launch_argv(b200_ray_spec(0))
    with pytest.raises(SpecError):
        ray_head_container_argv(b300_vllm_spec())


# --- images -----------------------------------------------------------------------------

@pytest.mark.parametrize("cuda,image", [("13.0", "lmsysorg/sglang:kimi-k3"),
                                        ("13.1", "lmsysorg/sglang:kimi-k3"),
                                        ("12.8", "lmsysorg/sglang:kimi-k3-cu12"),
                                        ("12", "lmsysorg/sglang:kimi-k3-cu12")])
def test_sglang_image_follows_driver_cuda(cuda, image):
    assert choose_image("sglang", cuda) == image


def test_image_errors_below_cuda_12_and_pinned_always_wins():
    with pytest.raises(ImageChoiceError, match="CUDA 11.8"):
        choose_image("sglang", "11.8")
    with pytest.raises(ImageChoiceError):
        choose_image("vllm", "11.8")
    with pytest.raises(ImageChoiceError):
        choose_image("sglang", "garbage")
    assert choose_image("sglang", "11.8", pinned="me/sglang:old") == "me/sglang:old"
    assert choose_image("vllm", None, pinned="vllm/vllm-openai@sha256:ab") == \
        "vllm/vllm-openai@sha256:ab"
    assert choose_image("vllm", "13.0") == "vllm/vllm-openai:nightly"


# --- extra args / env -------------------------------------------------------------------

def test_extra_args_override_in_place_remove_and_append_sorted():
    spec = h100_spec(extra_args={"mem-fraction-static": 0.8, "--decode-attention-backend": None,
                                 "zeta-flag": True, "alpha-flag": "x"})
    args = sglang_serve_args(spec)
    i = args.index("--mem-fraction-static")
    assert args[i - 2:i + 2] == ["--moe-runner-backend", "marlin", "--mem-fraction-static", "0.8"]
    assert "--decode-attention-backend" not in args and "flashmla" not in args
    tail = args[args.index("--served-model-name") + 2:]
    assert tail == ["--enable-metrics", "--enable-metrics-for-all-schedulers",
                    "--watchdog-timeout", "3600", "--disable-flashinfer-autotune",
                    "--model-loader-extra-config", '{"enable_multithread_load": true}',
                    "--alpha-flag", "x", "--zeta-flag", "--config",
                    "/k3deploy/secrets/sglang-secret.yaml"]
    # dict order does not change the argv
    flipped = h100_spec(extra_args=dict(reversed(list(spec.extra_args.items()))))
    assert sglang_serve_args(flipped) == args


def test_extra_args_override_vllm_flags_too():
    args = vllm_serve_args(b300_vllm_spec(extra_args={"max-model-len": 131072,
                                                              "trust-remote-code": None}))
    assert ("--max-model-len", "131072") in pairs(args) and "--trust-remote-code" not in args


def test_extra_env_overrides_removes_and_appends():
    spec = h100_spec(extra_env={"NCCL_DEBUG": "INFO", "SGLANG_K3_ATTN_RES_MODE": None,
                                "NCCL_IB_HCA": "mlx5"})
    env = engine_env(spec)
    assert ("NCCL_DEBUG", "INFO") in env and env[-1] == ("NCCL_IB_HCA", "mlx5")
    assert all(k != "SGLANG_K3_ATTN_RES_MODE" for k, _ in env)


@pytest.mark.parametrize("changes", [
    {"extra_args": {"api-key": "x"}}, {"extra_args": {"--hf-token": "x"}},
    {"extra_args": {"enable-foo": False}}, {"extra_env": {"HF_TOKEN": "x"}},
    {"extra_env": {"MY_SERVICE_API_KEY": "x"}}, {"extra_env": {"BAD NAME": "x"}},
    {"head_address": "fd00::1"}, {"self_address": "node0"}, {"node_rank": 4},
    {"layout": "dp-ep"}, {"revision_sha": "main"}, {"container_name": "-bad"},
    {"mem_fraction_static": 1.5}, {"secrets_host_dir": "relative/dir"},
    {"node_rank": 0},  # rank 0 whose own address is not the head's
])
def test_spec_rejects_what_would_launch_wrongly_or_leak(changes):
    with pytest.raises(SpecError):
        h100_spec(**changes)


# --- secrets ----------------------------------------------------------------------------

def all_argvs() -> list[list[str]]:
    sgl = [h100_spec(rank=r) for r in range(4)]
    vllm = [b300_vllm_spec(), b200_ray_spec(0), b200_ray_spec(1)]
    out = [engines.sglang_launch_argv(engines.with_config_label(s, CANARY_KEY)) for s in sgl]
    for spec in vllm:
        out += node_launch_argvs(engines.with_config_label(spec, CANARY_KEY))
    out += [engines.vllm_exec_serve_argv(b200_ray_spec(0)), engines.docker_rm_argv("k3")]
    return out


def test_no_secret_in_any_argv_and_secret_files_carry_it():
    argvs = all_argvs()
    assert len(argvs) == 10  # 4 SGLang ranks, B300 vLLM, Ray head (2), worker, 2 helpers
    for argv in argvs:
        joined = shlex.join(argv)
        assert CANARY_KEY not in joined and "K3CANARY" not in joined
        assert "HF_TOKEN" not in joined and "VLLM_API_KEY" not in joined
    assert yaml.safe_load(engines.sglang_secret_config(CANARY_KEY)) == {"api-key": CANARY_KEY}
    assert engines.vllm_secret_env(CANARY_KEY) == f"VLLM_API_KEY={CANARY_KEY}\n"


def test_secret_config_quotes_keys_yaml_would_misread():
    for key in ("123456", "true", "null", "a:b#c", "'quoted'"):
        assert yaml.safe_load(engines.sglang_secret_config(key)) == {"api-key": key}
    for bad in ("", "has space", "new\nline", "tab\t"):
        with pytest.raises(SpecError):
            engines.sglang_secret_config(bad)
        with pytest.raises(SpecError):
            engines.vllm_secret_env(bad)


def test_no_secrets_dir_means_no_key_plumbing():
    args = engines.sglang_launch_argv(h100_spec(secrets_host_dir=None))
    assert "--config" not in args and not any("/k3deploy/secrets" in a for a in args)
    argv = vllm_launch_argv(b300_vllm_spec(secrets_host_dir=None))
    assert "--env-file" not in argv


def test_every_argv_round_trips_through_shlex():
    for argv in all_argvs():
        assert shlex.split(shlex.join(argv)) == argv


# --- config digest ----------------------------------------------------------------------

def test_digest_is_stable_and_ignores_labels_and_dict_order():
    a = h100_spec(extra_args={"a": "1", "b": True}, extra_env={"X": "1", "Y": "2"})
    b = h100_spec(extra_args={"b": True, "a": "1"}, extra_env={"Y": "2", "X": "1"},
                  labels={"other": "label"})
    assert config_digest(a, CANARY_KEY) == config_digest(b, CANARY_KEY)
    assert re.fullmatch(r"[0-9a-f]{16}", config_digest(a))
    labelled = engines.with_config_label(a, CANARY_KEY)
    assert config_digest(labelled, CANARY_KEY) == labelled.labels[CONFIG_LABEL]


@pytest.mark.parametrize("changes", [
    {"image": "lmsysorg/sglang:kimi-k3-cu12"}, {"node_rank": 1, "self_address": "10.0.0.11"},
    {"revision_sha": "f" * 40}, {"context_length": 131072}, {"extra_args": {"x": "1"}},
    {"extra_env": {"NCCL_DEBUG": "INFO"}}, {"mem_fraction_static": 0.8}, {"nic": "ens5"},
    {"serve_port": 8001},
])
def test_digest_changes_with_any_configuration_change(changes):
    base = h100_spec()
    assert config_digest(base, CANARY_KEY) != config_digest(
        dataclasses.replace(base, **changes), CANARY_KEY)


def test_digest_changes_when_the_key_rotates_but_never_contains_it():
    spec = h100_spec()
    d1, d2, d0 = config_digest(spec, CANARY_KEY), config_digest(spec, CANARY_KEY + "x"), \
        config_digest(spec)
    assert len({d1, d2, d0}) == 3
    assert CANARY_KEY not in d1
