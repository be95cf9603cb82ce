"""Two bring-ups that differ in one engine.args flag: `certificate diff` names that flag.
Needs root (the testbed)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tbfixture import testbed
from test_endpoint_use import certificates, k3deploy

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root")]


def test_certificate_diff_names_the_changed_engine_flag(tmp_path):
    with testbed(tmp_path, nodes=1, gpu="b300", gpus_per_node=8, engine="sglang") as tb:
        inv = str(tb.inventory)
        first = k3deploy("up", "-i", inv)
        assert first.returncode == 0, first.output
        assert "set price: {per_gpu_hour" in first.stderr          # no price: says how
        doc = yaml.safe_load(tb.inventory.read_text())
        doc["engine"]["args"] = {"log-level": "debug"}
        tb.inventory.write_text(yaml.safe_dump(doc))
        refused = k3deploy("up", "-i", inv)   # a running engine is replaced only on request
        assert refused.returncode == 1, refused.output
        assert 'engine.args.log-level: unset -> "debug"' in refused.output, refused.output
        second = k3deploy("up", "-i", inv, "--replace")
        assert second.returncode == 0, second.output
        a, b = certificates(tb)
        diff = k3deploy("certificate", "diff", str(a), str(b))
        assert diff.returncode == 0, diff.output
        assert "flag --log-level added: debug" in diff.stdout
        assert "config launch config digest:" in diff.stdout
        assert "version" not in diff.stdout.replace(str(a), "").replace(str(b), "")
        changes = json.loads(k3deploy("certificate", "diff", str(a), str(b), "--json").stdout)
        assert {c["name"] for c in changes["changes"] if c["kind"] == "flag"} == {"--log-level"}
        same = k3deploy("certificate", "diff", str(b), str(b))
        assert "no change in flags, versions or latency" in same.stdout
