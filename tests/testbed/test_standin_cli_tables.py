"""The stand-in engines parse argv from the real engines' option tables
(k3deploy/engines/cli_tables): their wording on an unknown flag, sglang's config merger, and
agreement with k3deploy's launch checker. No root needed."""
import sys

import pytest
from standin_procs import ENGINE_DIR, VLLM_IMAGE, free_port, make_node, sglang_cmd

from k3deploy.engines import cli_contract

sys.path.insert(0, ENGINE_DIR)
import clitable  # noqa: E402
import sglang as sglang_standin  # noqa: E402


def test_an_unknown_flag_fails_with_the_real_parsers_wording(cluster, tmp_path):
    # The real parsers' lines for these argvs (sglang 0.5.23, vllm 0.33.0; ray: click 8.1).
    run = make_node(tmp_path, "node0")
    sgl = cluster.run(run, ["sglang", "serve", "--model-path", "moonshotai/Kimi-K3",
                            "--tp-szie", "8"])
    assert sgl.returncode == 2 and sgl.stderr.startswith("usage: sglang serve [-h]")
    assert "sglang serve: error: unrecognized arguments: --tp-szie 8" in sgl.stderr
    vllm = cluster.run(run, ["vllm", "serve", "moonshotai/Kimi-K3", "--bogus"], image=VLLM_IMAGE)
    assert vllm.returncode == 2
    assert "vllm serve: error: unrecognized arguments: --bogus" in vllm.stderr
    ray = cluster.run(run, ["ray", "start", "--head", "--blok"], image=VLLM_IMAGE)
    assert ray.returncode == 2 and "Error: No such option: --blok Did you mean --block?" in ray.stderr


def test_an_underscored_sglang_config_key_is_refused_like_its_config_merger(cluster, tmp_path):
    run = make_node(tmp_path, "node0")
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "engine.yaml").write_text("api_key: sk-test-key\n")
    result = cluster.run(run, sglang_cmd(free_port(), "--config", "/etc/k3/engine.yaml"),
                         mounts=[{"host": str(conf), "container": "/etc/k3", "ro": True}])
    assert result.returncode == 2 and "unrecognized arguments: --api_key sk-test-key" in result.stderr


def test_the_deprecated_dp_attention_flag_warns_and_its_replacement_works(capsys):
    parser = sglang_standin.build_parser("sglang serve")
    old = parser.parse_args(["--model-path", "m", "--tp", "8", "--enable-dp-attention",
                             "--dp", "8"])
    assert "Use '--attn-dp-size <dp-size>' instead." in capsys.readouterr().err
    new = parser.parse_args(["--model-path", "m", "--tp-size", "8", "--attn-dp-size", "8"])
    assert capsys.readouterr().err == ""
    for args in (old, new):
        assert sglang_standin.gpus_needed(args) == 8 and sglang_standin.attn_dp_size(args) == 8


@pytest.mark.parametrize("engine,argv", [
    ("sglang", ["--model-path", "m", "--tp-szie", "8"]),
    ("sglang", ["--model-path", "m", "--tp", "8", "--dp", "8", "--enable-metrics"]),
    ("sglang", ["--model-path", "m", "--cuda-graph-max-bs", "8"]),
    ("sglang", ["--model-path", "m", "--moe-runner-backend", "nope"]),
    ("sglang", ["--model-path", "m", "--trust-remote-code=1"]),
    ("vllm", ["m", "--data_parallel_size", "8", "--kv-cache-dtype", "fp8"]),
    ("vllm", ["m", "--data-parallel-si", "8"]),
    ("vllm", ["m", "--served-model-name"]),
    ("vllm", ["m", "--no-enable-expert-parallel", "--max-model-len", "128k"]),
    ("ray", ["--head", "--block", "--port=6379"]),
    ("ray", ["--head", "--num-gpus", "eight"]),
    ("ray", ["--head", "--log-style", "fancy"]),
])
def test_stand_in_parsers_and_the_launch_checker_agree(engine, argv, capsys):
    """Both read the same tables: the stand-in (argparse built from them) fails exactly
    when k3deploy's checker reports an error."""
    kind = clitable.ClickStyleParser if engine == "ray" else None
    parser = clitable.build(engine, **({"parser_class": kind} if kind else {}))
    try:
        parser.parse_args(clitable.normalise(parser.table, argv))
        rejected = False
    except SystemExit as stop:
        rejected = stop.code == 2
    capsys.readouterr()
    checked = [f for f in cli_contract.check_argv(engine, argv) if f.level == "error"]
    assert rejected == bool(checked), checked
