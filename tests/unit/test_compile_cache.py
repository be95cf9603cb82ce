"""The engines' compile caches: the key (what invalidates compiled kernels), the launch's mount
and variables, and the node-side check / seal / prepare on a real directory."""

import json
from types import SimpleNamespace

from k3deploy import engines
from k3deploy.engines import compile_cache_key as cc
from k3deploy.facts.docker import Image
from k3deploy.facts.nvidia_smi import Gpu
from k3deploy.remote import compile_cache_dir as node_cache
from k3deploy.steps.engine import compile_cache_prepare as prepare
from tests.unit.looked import looked
from tests.unit.test_engines import h100_spec

ARGV = ["sglang", "serve", "--model-path", "m", "--tp-size", "32", "--ep-size", "32",
        "--moe-runner-backend", "marlin", "--enable-dp-attention", "--host", "0.0.0.0"]


def inputs(**changes):
    base = dict(engine="sglang", image_id="sha256:aa", gpu="NVIDIA H100 80GB HBM3",
                driver="580.65.06", cuda="13.0", serve_argv=ARGV)
    return cc.cache_inputs(**{**base, **changes})


def test_kernel_args_are_the_shaping_flags_only():
    assert cc.kernel_args(ARGV) == [["--tp-size", "32"], ["--ep-size", "32"],
                                    ["--moe-runner-backend", "marlin"], ["--enable-dp-attention"]]


def test_image_gpu_driver_cuda_or_a_kernel_flag_change_the_key_a_port_does_not():
    key = cc.cache_key(inputs())
    assert key == cc.cache_key(inputs()) and len(key) == 16
    for changed in (dict(image_id="sha256:bb"), dict(gpu="NVIDIA H200"), dict(driver="590.1"),
                    dict(cuda="12.8"), dict(serve_argv=[*ARGV, "--kv-cache-dtype", "fp8_e5m2"])):
        assert cc.cache_key(inputs(**changed)) != key, changed
    assert cc.cache_key(inputs(serve_argv=[*ARGV, "--port", "9000"])) == key


def test_the_launch_mounts_the_dir_and_points_every_engine_variable_into_it():
    spec = h100_spec(compile_cache_host_dir="/mnt/nvme/.k3deploy/compile-cache/0123456789abcdef")
    argv = engines.sglang_launch_argv(spec)
    assert "/mnt/nvme/.k3deploy/compile-cache/0123456789abcdef:/k3deploy/compile-cache" in argv
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    for var in ("SGLANG_DG_CACHE_DIR", "SGLANG_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                "TORCHINDUCTOR_CACHE_DIR"):
        assert any(e.startswith(f"{var}=/k3deploy/compile-cache/") for e in env), var
    assert "/k3deploy/compile-cache" not in " ".join(engines.sglang_launch_argv(h100_spec()))


def filled(tmp_path):
    root = tmp_path / "compile-cache" / "0123456789abcdef"
    (root / "triton" / "x").mkdir(parents=True)
    (root / "triton" / "x" / "k.bin").write_bytes(b"kernel" * 100)
    (root / "deep_gemm").mkdir()
    (root / "deep_gemm" / "g.cubin").write_bytes(b"gemm" * 50)
    return root


def test_an_unsealed_dir_is_incomplete_and_removed_before_a_launch(tmp_path):
    root = filled(tmp_path)
    assert node_cache.check(str(root))["state"] == "incomplete"
    out = node_cache.prepare(str(root), [], 0, None)
    assert out["removed"] and out["state"] == "missed" and not root.exists()
    assert node_cache.check(str(root))["state"] == "missed"  # no peer had one: the engine compiles


def test_sealed_then_a_flipped_byte_is_corrupt_and_removed_never_kept(tmp_path):
    root = filled(tmp_path)
    sealed = node_cache.seal(str(root), {"engine": "sglang"})
    assert sealed["state"] == "complete" and sealed["files"] == 2
    assert json.loads((root / node_cache.COMPLETE).read_text())["inputs"] == {"engine": "sglang"}
    assert node_cache.check(str(root))["state"] == "complete"
    kernel = root / "triton" / "x" / "k.bin"
    data = bytearray(kernel.read_bytes())
    data[10] ^= 0xFF
    kernel.write_bytes(bytes(data))
    found = node_cache.check(str(root))
    assert found["state"] == "corrupt" and found["bad"] == ["triton/x/k.bin"]
    assert node_cache.prepare(str(root), [], 0, None)["removed"] and not root.exists()


def test_files_written_after_the_seal_are_not_vouched_for_and_pruned(tmp_path):
    root = filled(tmp_path)
    node_cache.seal(str(root), {})
    (root / "triton" / "torn.tmp").write_bytes(b"half")
    out = node_cache.prepare(str(root), [], 0, None)
    assert out["state"] == "complete" and out["pruned"] == 1
    assert not (root / "triton" / "torn.tmp").exists()


def test_the_peer_server_serves_only_what_a_sealed_dir_lists(tmp_path):
    from k3deploy.remote import peer_cache
    root = filled(tmp_path)
    base = str(root.parent)
    url = "/compile-cache/0123456789abcdef/"
    assert peer_cache.resolve(base, url + "f/triton/x/k.bin") is None  # not sealed yet
    node_cache.seal(str(root), {})
    assert peer_cache.resolve(base, url + "f/triton/x/k.bin") == str(root / "triton/x/k.bin")
    assert peer_cache.resolve(base, url + node_cache.SUMS) == str(root / node_cache.SUMS)
    for bad in ("f/../../etc/passwd", "f/triton/x/other.bin", "triton/x/k.bin"):
        assert peer_cache.resolve(base, url + bad) is None, bad
    assert peer_cache.resolve(base, "/compile-cache/../x/f/y") is None
    assert peer_cache.resolve(None, url + node_cache.SUMS) is None


def test_seal_only_an_open_dir_of_this_launchs_key(tmp_path):
    from k3deploy.steps.engine.compile_cache_seal import SealCompileCache
    from tests.unit.test_step_plans import manifest, node_ctx
    ctx = node_ctx(tmp_path, manifest=manifest(), api_key="k3-testkey-0123456789")
    step = SealCompileCache()

    def facts(caches):
        return looked(step, ctx, cuda="13.0", driver="580.65.06", compile_caches=caches)
    spec = facts({}).spec
    key = spec.compile_cache_host_dir.rsplit("/", 1)[-1]
    for caches in ({}, {key: "sealed"}, {"0000000000000000": "open"}):
        assert step.plan(facts(caches), ctx) == [], caches
    found = facts({key: "open"})
    actions = step.plan(found, ctx)
    assert [a.description for a in actions] == ["upload compile_cache_dir.py",
                                                 "seal the compile cache"]
    # sealed with what its key is made of
    assert list(actions[-1].argv[-2:]) == [spec.compile_cache_host_dir,
                                           json.dumps(found.key_inputs, sort_keys=True)]
    assert found.key_inputs["driver"] == "580.65.06"


def test_the_key_is_made_of_the_nodes_image_gpu_driver_and_cuda(tmp_path):
    from k3deploy.steps.engine.launch import LaunchEngine
    from tests.unit.test_step_plans import manifest, node_ctx
    ctx = node_ctx(tmp_path, manifest=manifest(), api_key="k3-testkey-0123456789")
    spec = looked(LaunchEngine(), ctx, cuda="13.0").spec
    gpu = Gpu("NVIDIA H100 80GB HBM3", 81559, 0)
    found = SimpleNamespace(cuda="13.0", driver="580.65.06", gpus=(gpu, gpu),
                            images={spec.image: Image("sha256:aa")}, node_files=None)
    keyed, inputs = prepare.keyed(spec, found, ctx.inv)
    assert inputs == cc.cache_inputs("sglang", "sha256:aa", gpu.name, "580.65.06", "13.0",
                                     engines.node_launch_argvs(spec)[0])
    assert keyed.compile_cache_host_dir == cc.cache_dir(ctx.inv, cc.cache_key(inputs))
    # nvidia-smi failed and the image is missing: a key all the same (the engine compiles)
    none = SimpleNamespace(cuda=None, driver=None, gpus=None, images={}, node_files=None)
    assert prepare.keyed(spec, none, ctx.inv)[1]["gpu"] is None
