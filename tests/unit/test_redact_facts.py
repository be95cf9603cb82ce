"""Redaction of known and unknown secrets; fact scripts composed into one round trip."""

from k3deploy.node import facts as F
from k3deploy.core.redact import redact, redact_obj, register


def test_registered_and_pattern_secrets_are_masked():
    register("k3-abcdefghijklmnopqrstuvwxyz")
    text = ("key k3-abcdefghijklmnopqrstuvwxyz token hf_AAAAAAAAAAAAAAAAAAAAAAAA "
            "Authorization: Bearer sk-live-123456789 api_key='zzzzzzzzzz'")
    out = redact(text)
    for secret in ("k3-abcdefghijklmnopqrstuvwxyz", "hf_AAAA", "sk-live-123456789", "zzzzzzzzzz"):
        assert secret not in out
    assert out.startswith("key *** token ***")


def test_short_values_are_not_registered():
    register("ab")
    assert redact("a b ab cab") == "a b ab cab"


def test_redact_obj_walks_structures():
    register("supersecretvalue")
    doc = {"a": ["x supersecretvalue"], "b": {"c": "supersecretvalue"}, "n": 3}
    assert redact_obj(doc) == {"a": ["x ***"], "b": {"c": "***"}, "n": 3}


def test_compose_and_parse_sections():
    facts = [F.command("one", ["echo", "hi there"]), F.Fact("two", "exit 3", F.exit_ok),
             F.Fact("three", "echo 42", F.integer, sudo=True)]
    script = F.compose(facts)
    assert "echo 'hi there'" in script and "sudo -n sh -c 'echo 42'" in script
    output = (f"{F.MARK}begin one\nhi there\n{F.MARK}end 0\n"
              f"{F.MARK}begin two\n{F.MARK}end 3\n"
              f"{F.MARK}begin three\n42\n{F.MARK}end 0\n")
    assert F.parse_output(facts, output) == {"one": "hi there", "two": False, "three": 42}


def test_missing_section_parses_as_failure():
    facts = [F.command("gone", ["true"])]
    assert F.parse_output(facts, "") == {"gone": None}
