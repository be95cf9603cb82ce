"""The engine CLI contract as a user meets it: `k3deploy check` refuses a misspelt
engine.args flag before any SSH (exit 2, field path, did-you-mean), and `k3deploy plan`
lists the deprecated flags the guide's launch still uses. No testbed needed: neither
command reaches a node here."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_check_refuses_a_misspelt_engine_arg_before_any_ssh(k3, tmp_path):
    doc = yaml.safe_load((REPO / "inventories" / "b300-1x8-sglang.yaml").read_text())
    doc["engine"]["args"] = {"tp-szie": 8}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = k3("check", "-i", path)
    assert proc.returncode == 2, proc.output
    assert ("engine.args.tp-szie: not an option of sglang serve 0.5.23; did you mean "
            "'tp-size'?") in proc.output
    assert "cannot reach" not in proc.output


def test_plan_lists_the_deprecated_dp_attention_flag(k3):
    proc = k3("plan", "--gpu", "b300", "--nodes", "1", "--engine", "sglang")
    assert proc.returncode == 0, proc.output
    assert "Engine CLI warnings (launch checked against sglang serve 0.5.23" in proc.output
    assert "Use '--attn-dp-size <dp-size>' instead." in proc.output
