"""The Hub's gate checked on the laptop before any node is touched, and every node's way to the
Hub and to the CDN its /resolve redirects to, against the testbed's real-behaving mock Hub
(--hub-cdn --hub-gated: API and tree public, /resolve 401/403; LFS files through a CDN)."""

from __future__ import annotations

import json
import subprocess

import pytest
from tbfixture import testbed

pytestmark = pytest.mark.integration

GRANTED = "hf_granted_testbed_token"
FINE_GRAINED = "hf_fine_grained_without_gated_read"


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """Two nodes behind a gated Hub with a CDN, shared by the module (every test only reads;
    the one that blocks a port heals it)."""
    where = tmp_path_factory.mktemp("gated")
    tokens = where / "granted-tokens"
    tokens.write_text(f"{GRANTED}\n{FINE_GRAINED} fine-grained-no-gated\n")
    with testbed(where, nodes=2, gpu="b300", hub_cdn=True, hub_gated=True,
                 hub_token_file=str(tokens), shard_bytes=20_000) as tb:
        yield tb


def _logins(tb, sshd_log) -> dict[str, int]:
    return {n: len(sshd_log(tb, n)) for n in tb.nodes}


@pytest.mark.parametrize("token, said", [
    (None, ["without a token", "$HF_TOKEN is not set", "accept the model's terms"]),
    ("hf_not_on_the_list", ["the token in $HF_TOKEN has no access", "not in the authorized list",
                            "accept the model's terms", "fine-grained token"]),
    (FINE_GRAINED, ["plain 403 (Authorization error.), not a GatedRepo one", "fine-grained token",
                    "Read access to contents of all public gated repos you can access"]),
])
def test_a_refused_gate_is_exit_2_before_any_ssh(gated, k3, sshd_log, token, said):
    before = _logins(gated, sshd_log)
    env = {"HF_TOKEN": token} if token else {"HF_TOKEN": ""}
    for command in ("check", "up"):
        proc = k3(command, "-i", gated.inventory, env=env)
        assert proc.returncode == 2, proc.output
        for words in said + ["moonshotai/Kimi-K3"]:
            assert words in proc.output, proc.output
    # sshd runs with -e: every connection, authenticated or not, leaves a line
    assert {n: sshd_log(gated, n)[before[n]:] for n in gated.nodes} == {n: [] for n in gated.nodes}


def test_preflight_names_the_node_that_cannot_reach_the_cdn(gated, k3):
    cdn = (gated.dir / "hub" / "cdn").read_text().strip()
    port = cdn.rsplit(":", 1)[1]
    netns = json.loads((gated.dir / "testbed.json").read_text())["nodes"]["node1"]["netns"]
    subprocess.run(["ip", "netns", "exec", netns, "iptables", "-w", "-A", "OUTPUT", "-p", "tcp",
                    "--dport", port, "-j", "REJECT"], check=True)
    try:
        proc = k3("check", "-i", gated.inventory, env={"HF_TOKEN": GRANTED})
    finally:
        gated.fault("heal", "node1")
    assert proc.returncode == 1, proc.output
    rows = [line for line in proc.output.splitlines() if "cannot reach" in line]
    assert len(rows) == 1 and "node1" in rows[0], proc.output
    assert f"the Hub's CDN at {cdn.split('://', 1)[1]}" in " ".join(proc.output.split()), proc.output
    healed = k3("check", "-i", gated.inventory, env={"HF_TOKEN": GRANTED})
    assert "cannot reach" not in healed.output, healed.output


def test_real_client_on_a_node_downloads_through_the_cdn_without_the_token(gated):
    env = (f"HF_ENDPOINT={gated.endpoint} HF_HOME=/mnt/nvme/hf HF_HUB_DISABLE_TELEMETRY=1 "
           f"HF_HUB_DISABLE_UPDATE_CHECK=1 HF_TOKEN={GRANTED}")
    done = gated.ssh("node0", f"{env} python3 -c \"from huggingface_hub import snapshot_download; "
                     "print(snapshot_download('moonshotai/Kimi-K3', max_workers=8))\"", timeout=180)
    assert done.returncode == 0, done.stderr
    stats = gated.stats()
    hub, cdn = stats["hub"], stats["cdn"]
    assert cdn["authorized_requests"] == 0 and cdn["requests"] == 96
    assert cdn["by_node"]["node0"]["bytes"] + hub["by_node"]["node0"]["bytes"] == hub["repo_bytes"]
    assert len(cdn["by_node"]["node0"]["files"]) == 96


def test_hub_faults_from_the_command_line(gated):
    """`testbed fault` sets the faults the mock Hub and its CDN answer with, arguments checked."""
    probe = ("import sys, urllib.error, urllib.request\n"
             "try:\n    print(urllib.request.urlopen(sys.argv[1], timeout=5).status)\n"
             "except urllib.error.HTTPError as err:\n    print(err.code, err.headers.get('RateLimit'))\n")
    api = f"{gated.endpoint}/api/models/moonshotai/Kimi-K3"
    resolve = f"{gated.endpoint}/moonshotai/Kimi-K3/resolve/main/config.json"

    def ask(url):
        return gated.ssh("node0", ["python3", "-c", probe, url]).stdout.strip()

    try:
        gated.fault("hub-outage", "30", "--status", "500")
        assert ask(api) == "500 None"
        gated.fault("hub-heal")
        gated.fault("hub-rate-limit", "0", "300")
        assert ask(resolve).startswith('429 "resolvers";r=0;t=')
        assert ask(api) == "200"
        gated.fault("cdn-forbid", "1")
        assert json.loads((gated.dir / "hub" / "faults.json").read_text())["cdn_forbid"]["count"] == 1
    finally:
        gated.fault("hub-heal")
    for bad in (["hub-outage", "soon"], ["hub-rate-limit", "10"], ["hub-rate-limit", "10", "0"],
                ["cdn-forbid", "-1"], ["hub-drop-after", "1", "--status", "500"]):
        assert gated.fault(*bad, check=False).returncode == 2, bad
