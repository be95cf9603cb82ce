"""verify's image probe on the testbed (single B300 node, vLLM): the reference launch passes it
and the certificate records it; a launch whose engine.args turn the vision path off fails verify
naming the flag, with vLLM's own refusal of the image. Needs root (the testbed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from k3deploy.cluster import inventory
from k3deploy.core.state import state_dir_for
from k3deploy.serving import certificate
from k3run import CLI_TIMEOUT, bounded_run
from tbfixture import testbed

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]

REPO = Path(__file__).resolve().parents[2]


def k3deploy(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return bounded_run([sys.executable, "-m", "k3deploy", *args], CLI_TIMEOUT, cwd=REPO, env=env)


def test_vision_probe_passes_on_the_reference_launch_and_names_the_flag_that_turns_it_off(
        tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="vllm",
                 load_seconds=0.5) as tb:
        inv = inventory.load(tb.inventory)
        up = k3deploy("up", "-i", str(tb.inventory))
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}"
        state = state_dir_for(inv.source, inv.cluster, None)
        doc = json.loads(certificate.latest(state).read_text())
        assert doc["vision"] == {"status": 200, "answered": True, "error": None}

        raw = yaml.safe_load(tb.inventory.read_text())
        raw["engine"]["args"] = {"language-model-only": True}
        tb.inventory.write_text(yaml.safe_dump(raw))
        off = k3deploy("up", "-i", str(tb.inventory), "--replace")
        text = off.stdout + off.stderr
        assert off.returncode != 0, text
        assert "verify" in text and "--language-model-only" in text, text
        assert "engine.args.language-model-only" in text, text
        # The stand-in engine refused the image as vLLM does (not only k3deploy's flag rule).
        assert "At most 0 image(s) may be provided in one prompt." in text, text
