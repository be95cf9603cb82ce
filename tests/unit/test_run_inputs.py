"""RunInputs: the HF token is read from the environment once; secrets stay out of repr."""

from k3deploy.node.run_inputs import RunInputs


def test_the_token_is_read_from_the_environment_once(monkeypatch):
    monkeypatch.setenv("K3_TEST_TOKEN", "hf_first")
    inputs = RunInputs()
    assert inputs.hf_token("K3_TEST_TOKEN") == "hf_first"
    monkeypatch.setenv("K3_TEST_TOKEN", "hf_second")
    assert inputs.hf_token("K3_TEST_TOKEN") == "hf_first"


def test_an_unset_token_is_none_and_stays_read(monkeypatch):
    monkeypatch.delenv("K3_TEST_TOKEN", raising=False)
    inputs = RunInputs()
    assert inputs.hf_token("K3_TEST_TOKEN") is None
    monkeypatch.setenv("K3_TEST_TOKEN", "hf_late")
    assert inputs.hf_token("K3_TEST_TOKEN") is None


def test_secrets_are_not_in_repr():
    inputs = RunInputs(api_key="sk-key", peer_secret="peer-s", guard_secret="guard-s",
                       token="hf_tok", token_read=True, download_started={"node7": 1.0})
    shown = repr(inputs)
    assert "node7" in shown   # what is not secret still shows
    for secret in ("sk-key", "peer-s", "guard-s", "hf_tok"):
        assert secret not in shown
