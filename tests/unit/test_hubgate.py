"""The laptop's gate check: which file it resolves, what it learns from the redirect, and what a
refusal says (cluster/hubgate.py)."""

import json
from types import SimpleNamespace

import pytest

from k3deploy.cluster import hubgate
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.core.errors import EXIT_BAD_INPUT

SHA = "a" * 40


def manifest(files, endpoint="https://huggingface.co"):
    return Manifest("moonshotai/Kimi-K3", "main", SHA, endpoint, tuple(files))


def test_the_smallest_lfs_file_is_resolved_so_the_redirect_shows_the_cdn():
    files = [RepoFile("config.json", 10, None, "1" * 40), RepoFile("model-2.safetensors", 500, "b" * 64, "2" * 40),
             RepoFile("model-1.safetensors", 400, "c" * 64, "3" * 40)]
    assert hubgate.probe_file(manifest(files)).path == "model-1.safetensors"
    assert hubgate.probe_file(manifest(files[:1])).path == "config.json"
    url = hubgate.resolve_url(manifest(files), "sub dir/model 1.safetensors")
    assert url == f"https://huggingface.co/moonshotai/Kimi-K3/resolve/{SHA}/sub%20dir/model%201.safetensors"


def test_origins_carry_default_ports_and_the_cdn_only_when_it_differs():
    hub = hubgate.Origin.of("https://huggingface.co")
    cdn = hubgate.Origin.of("https://cas-bridge.xethub.hf.co/xet-bridge-us/x?X-Amz-Expires=3600")
    assert (hub.port, cdn.host, cdn.label) == (443, "cas-bridge.xethub.hf.co", "cas-bridge.xethub.hf.co:443")
    assert hubgate.HubReach(hub, cdn).origins() == [hub, cdn]
    assert hubgate.HubReach(hub, None).origins() == [hub]


def test_refusals_name_the_repo_the_variable_and_the_fix():
    m = manifest([], endpoint="http://10.213.0.1:8900")
    no_token = hubgate.refusal(m, 401, {"X-Error-Code": "GatedRepo"}, False, "MY_HF")
    assert no_token.exit_code == EXIT_BAD_INPUT
    text = "\n".join(no_token.lines())
    assert "moonshotai/Kimi-K3" in text and "$MY_HF is not set" in text
    assert "accept the model's terms on http://10.213.0.1:8900/moonshotai/Kimi-K3" in text
    denied = "\n".join(hubgate.refusal(m, 403, {"X-Error-Code": "GatedRepo",
                                                "X-Error-Message": "not in the authorized list"},
                                       True, "MY_HF").lines())
    assert "the token in $MY_HF has no access to moonshotai/Kimi-K3" in denied
    assert "not in the authorized list" in denied and "fine-grained token" in denied
    # a fine-grained token without gated-repo read access: a plain 403, no GatedRepo code
    plain = "\n".join(hubgate.refusal(m, 403, {"X-Error-Message": "Authorization error."}, True,
                                      "MY_HF").lines())
    assert "refuses the token in $MY_HF for moonshotai/Kimi-K3 with a plain 403" in plain
    assert "Read access to contents of all public gated repos you can access" in plain
    assert "has no access" not in plain
    bad = "\n".join(hubgate.refusal(m, 401, {"X-Error-Message": "Invalid credentials in Authorization "
                                             "header"}, True, "MY_HF").lines())
    assert "does not accept the token in $MY_HF" in bad


class _Answer:
    def __init__(self, status, headers=None):
        self.status_code, self.headers = status, headers or {}


def _gate_with(monkeypatch, answers):
    asked = []

    def head(manifest, url, token):
        asked.append(url)
        return answers.pop(0)
    monkeypatch.setattr(hubgate, "_head", head)
    files = [RepoFile("model-1.safetensors", 400, "c" * 64, "3" * 40)]
    return asked, hubgate.check(manifest(files), "hf_x", "HF_TOKEN")


def test_hub_side_redirects_are_followed_and_the_first_one_off_the_hub_is_the_cdn(monkeypatch):
    asked, reach = _gate_with(monkeypatch, [
        _Answer(307, {"Location": "/api/resolve-cache/models/x"}),
        _Answer(302, {"Location": "https://cas-bridge.xethub.hf.co/xet-bridge-us/a/b?X-Amz-Expires=3600"})])
    assert asked[1] == "https://huggingface.co/api/resolve-cache/models/x"
    assert reach.cdn == hubgate.Origin("https", "cas-bridge.xethub.hf.co", 443)
    _, direct = _gate_with(monkeypatch, [_Answer(200)])
    assert direct.cdn is None and direct.origins() == [hubgate.Origin("https", "huggingface.co", 443)]


def test_a_gate_refusal_on_any_hop_is_bad_input(monkeypatch):
    from k3deploy.core.errors import BadInputError
    with pytest.raises(BadInputError, match="has no access"):
        _gate_with(monkeypatch, [_Answer(403, {"X-Error-Code": "GatedRepo"})])


def _node(reach):
    return SimpleNamespace(run=SimpleNamespace(inputs=SimpleNamespace(hub_reach=reach)))


def test_preflight_names_what_a_node_cannot_reach():
    from k3deploy.steps.checks import hubreach
    hub = hubgate.Origin("https", "huggingface.co", 443)
    cdn = hubgate.Origin("https", "cas-bridge.xethub.hf.co", 443)
    node = _node(hubgate.HubReach(hub, cdn))
    (fact,) = hubreach.facts(node)
    assert fact.program[1] == ("https://huggingface.co:443", "https://cas-bridge.xethub.hf.co:443")
    printed = json.dumps({"https://huggingface.co:443": True,
                          "https://cas-bridge.xethub.hf.co:443": "TimeoutError: timed out"})
    found = SimpleNamespace(hub_reach=fact.parse(printed + "\n", 0))
    (problem,) = hubreach.problems(found, node)
    assert problem[0] == "hub" and "the Hub's CDN at cas-bridge.xethub.hf.co:443 (TimeoutError" in problem[1]
    failed = SimpleNamespace(hub_reach=fact.parse("Traceback ...\n", 1))
    assert hubreach.problems(failed, node)[0][1].startswith("could not probe")
    unasked = SimpleNamespace(hub_reach=None)
    assert hubreach.facts(_node(None)) == [] and hubreach.problems(unasked, _node(None)) == []
