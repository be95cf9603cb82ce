"""The launch defaults against the cookbook image's first multi-node decode hang
(sgl-project/sglang#39568; engines/sglang_defaults.py): in the command line, per SGLang
release as the wheels' parsers have them, off with `null`, and out of the dry-fire's loader."""
from __future__ import annotations

import re

import pytest
from realfix import real
from test_engines import h100_spec, pairs

from k3deploy.cli import launch_contract
from k3deploy.engines import cli_contract, dry_fire, sglang_defaults
from k3deploy.engines.sglang import sglang_serve_args

FIX = [("--watchdog-timeout", "3600"), ("--disable-flashinfer-autotune", None),
       ("--model-loader-extra-config", '{"enable_multithread_load": true}')]


def test_the_cookbook_image_gets_the_working_launch_and_the_table_accepts_it():
    args = sglang_serve_args(h100_spec())
    assert all(pair in pairs(args) for pair in FIX), args
    assert [f for f in cli_contract.check_argv("sglang", args) if f.level == "error"] == []
    assert launch_contract.spec_findings(h100_spec()) == []


def test_each_default_says_where_it_comes_from():
    for flag in sglang_defaults.DECODE_HANG_FLAGS:
        assert flag.why.startswith("sgl-project/sglang#39568"), flag


@pytest.mark.parametrize("image, dropped", [
    ("lmsysorg/sglang:v0.5.4-cu129", ["--disable-flashinfer-autotune"]),
    ("lmsysorg/sglang:v0.5.10@sha256:" + "a" * 64, []),
    ("me/sglang:built-here", []),            # release not known: the newest table's rule
])
def test_an_older_release_gets_only_what_its_parser_accepts(image, dropped):
    args = sglang_serve_args(h100_spec(image=image))
    assert [flag for flag, _ in FIX if flag not in args] == dropped


def test_the_launch_contract_refuses_a_flag_the_images_release_lacks():
    spec = h100_spec(image="lmsysorg/sglang:v0.5.4-cu129",
                     extra_args={"disable-flashinfer-autotune": True})
    found = launch_contract.spec_findings(spec)
    assert [(f.level, f.option) for f in found] == [("error", "--disable-flashinfer-autotune")]
    assert "SGLang 0.5.4" in found[0].message and "0.5.10 and later" in found[0].message


def test_a_user_turns_them_off_with_null():
    off = {flag[2:]: None for flag, _ in FIX}
    args = sglang_serve_args(h100_spec(extra_args=off))
    assert not any(flag in args for flag, _ in FIX), args


def test_the_dry_fire_keeps_the_decode_flags_but_not_the_loader_option():
    args = sglang_serve_args(dry_fire.dry_fire_spec(h100_spec()))
    assert ("--watchdog-timeout", "3600") in pairs(args)
    assert "--disable-flashinfer-autotune" in args
    assert "--model-loader-extra-config" not in args and ("--load-format", "dummy") in pairs(args)


def _options(text: str) -> set[str]:
    """The options a server_args.py excerpt declares: ServerArgs fields (each an option,
    "_" -> "-") and add_argument strings."""
    fields = re.findall(r"^\d+:\s+(\w+):", text, re.M)
    strings = re.findall(r'^\d+:\s+"--([\w-]+)"', text, re.M)
    return {f.replace("_", "-") for f in fields} | set(strings)


@pytest.mark.parametrize("version", ["0.5.4", "0.5.10", "0.5.16"])
def test_the_since_table_matches_each_wheels_parser(version):
    have = _options(real(f"sglang/{version}/server-args-decode-flags.txt"))
    release = tuple(int(p) for p in version.split("."))
    for flag in sglang_defaults.DECODE_HANG_FLAGS:
        assert (flag.name in have) == sglang_defaults.accepts(release, flag), (version, flag.name)


def test_the_cookbook_images_release_is_0516():
    assert sglang_defaults.image_sglang("lmsysorg/sglang:kimi-k3") == (0, 5, 16)
    assert sglang_defaults.image_sglang("lmsysorg/sglang:kimi-k3@sha256:" + "b" * 64) == (0, 5, 16)
    assert sglang_defaults.image_sglang("vllm/vllm-openai:nightly") is None
