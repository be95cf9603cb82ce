"""The run's inputs: settled once before the first look, frozen from then on; the HF token read
from the environment once; secrets kept out of repr."""

import dataclasses

import pytest

from k3deploy.cluster import inventory
from k3deploy.node import run_settle
from k3deploy.node.context import InputsSettled, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.run.runner import Runner
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes
from tests.unit.test_observe_and_wait import Asks


def run_ctx(tmp_path, **kw) -> RunContext:
    inv = inventory.parse(four_nodes())
    return RunContext(inv=inv, session=FakeSession(inv, tmp_path), **kw)


def test_the_token_is_read_from_the_environment_once(monkeypatch, tmp_path):
    run = run_ctx(tmp_path)
    monkeypatch.setenv(run.inv.hf_token_env, "hf_first")
    assert run_settle.hf_token(run) == "hf_first"
    monkeypatch.setenv(run.inv.hf_token_env, "hf_second")
    assert run_settle.hf_token(run) == "hf_first"
    assert run.inputs.token == "hf_first"


def test_an_unset_token_is_none_and_stays_read(monkeypatch, tmp_path):
    run = run_ctx(tmp_path)
    monkeypatch.delenv(run.inv.hf_token_env, raising=False)
    assert run_settle.hf_token(run) is None
    monkeypatch.setenv(run.inv.hf_token_env, "hf_late")
    assert run_settle.hf_token(run) is None


def test_secrets_are_not_in_repr():
    inputs = RunInputs(api_key="sk-key", peer_secret="peer-s", guard_secret="guard-s",
                       token="hf_tok", settled=frozenset({"token"}), mesh_seed=424242)
    shown = repr(inputs)
    assert "424242" in shown   # what is not secret still shows
    for secret in ("sk-key", "peer-s", "guard-s", "hf_tok"):
        assert secret not in shown


def test_the_inputs_cannot_be_written_in_place(tmp_path):
    run = run_ctx(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.inputs.guard_secret = "x"   # type: ignore[misc]


class SettlesLate(Asks):
    """A step that settles an input from its plan: after the run started."""

    def plan(self, facts, node):
        node.run.settle(api_key="sk-late")
        return []


def test_no_input_is_settled_or_replaced_once_the_run_has_started(tmp_path):
    run = run_ctx(tmp_path)
    run_settle.guard_secret(run)   # before the start: settled
    with pytest.raises(InputsSettled, match=r"\['api_key'\] settled after the run started"):
        Runner(run, [SettlesLate("a")]).execute()   # a programming error: it propagates
    assert run.started and run.inputs.api_key is None and run.inputs.guard_secret
    with pytest.raises(InputsSettled):
        run.inputs = RunInputs()
    with pytest.raises(InputsSettled):
        run_settle.peer_secret(run)
