"""No secret anywhere, on a 4-node testbed of its own with a Hub that wants a token: the HF
token, the endpoint's api key and the fan-out peer secret are in no output, state or log file,
argv seen on the nodes, or node file other than their own 0600 ones."""

from __future__ import annotations

import json
import secrets
import string
import subprocess
import time

import pytest
from failure_report import k3_argv, k3_env, run, said
from tbfixture import testbed

from k3run import REPO

pytestmark = pytest.mark.integration


# -- 10. no secret anywhere ------------------------------------------------------------------

def test_no_token_or_api_key_anywhere(tmp_path):
    token = "hf_" + "".join(secrets.choice(string.ascii_letters) for _ in range(34))
    token_file = tmp_path / "hub-token"
    token_file.write_text(token)
    with testbed(tmp_path, nodes=4, hub_token_file=str(token_file)) as tb:
        inv = str(tb.inventory)
        output_file = tmp_path / "up.out"
        with output_file.open("w") as sink:
            proc = subprocess.Popen(k3_argv("up", "-i", inv), stdout=sink,
                                    stderr=subprocess.STDOUT, cwd=REPO,
                                    env=k3_env({"HF_TOKEN": token}))
            seen, deadline = [], time.monotonic() + 200
            try:
                while proc.poll() is None and time.monotonic() < deadline:
                    seen += [tb.ssh(n, "ps -eo args").stdout for n in tb.nodes]
                    time.sleep(0.2)  # a sampling interval: argv is looked at all along the run
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        output = output_file.read_text()
        assert proc.returncode == 0, output
        assert any("fetch_weights" in s for s in seen) and any("sglang serve" in s for s in seen)
        assert any("peer_server.py" in s for s in seen)  # fan-out ran: its secret is checked too

        state = tb.inventory.parent / ".k3deploy"
        key_file = next(state.glob("*/secrets/api-key"))
        key = key_file.read_text().strip()
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        peer_file = key_file.with_name("peer-secret")
        peer = peer_file.read_text().strip()
        assert oct(peer_file.stat().st_mode & 0o777) == "0o600" and len(peer) >= 32
        node_key = "/mnt/nvme/.k3deploy/secrets/sglang-secret.yaml"
        for node in tb.nodes:
            assert tb.ssh(node, ["stat", "-c", "%a", node_key]).stdout.strip() == "600"
            assert key in tb.ssh(node, ["cat", node_key]).stdout  # we grep for the real key
            assert tb.ssh(node, "ls /mnt/nvme/.k3deploy/hf.env").returncode != 0
            node_peer = "/mnt/nvme/.k3deploy/peer.secret"
            assert tb.ssh(node, ["stat", "-c", "%a", node_peer]).stdout.strip() == "600"
            assert tb.ssh(node, ["cat", node_peer]).stdout.strip() == peer
        hub = tb.stats()["hub"]["by_node"]
        assert all(hub[n]["authorized_requests"] > 0 for n in tb.nodes)  # the token was used

        logs = run("logs", "-i", inv, "--out", str(tmp_path / "logs"), env={"HF_TOKEN": token})
        assert logs.returncode == 0, said(logs)
        places = {"k3deploy up output": output, "k3deploy logs output": said(logs),
                  "stand-in argv": json.dumps(tb.stats()["nodes"]), "ps on nodes": "\n".join(seen)}
        files = [p for p in [*state.rglob("*"), *(tmp_path / "logs").rglob("*")]
                 if p.is_file() and p not in (key_file, peer_file)]
        assert any(p.name == "node0-rank0-engine.log" for p in files)
        places |= {str(p): p.read_text(errors="replace") for p in files}
        for node in tb.nodes:
            # Every file, the engines' binary compile caches too: bytes outside printable ASCII
            # become '?', which keeps any ASCII secret in them visible and the output text.
            places[f"{node}:/mnt/nvme/.k3deploy"] = tb.ssh(
                node, "find /mnt/nvme/.k3deploy -path '*/secrets' -prune -o -type f ! -name "
                "peer.secret -exec cat {} + | LC_ALL=C tr -c '[:print:]\\n' '?'").stdout
        leaks = [where for where, text in places.items()
                 if token in text or key in text or peer in text]
        assert leaks == []
