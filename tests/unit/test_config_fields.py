"""A refused relaunch names the settings that differ, from the running container's labels."""

import dataclasses
import json

from test_engines import CANARY_KEY, h100_spec

from k3deploy import engines
from k3deploy.engines import CONFIG_LABEL, FIELDS_LABEL


def labelled(key=CANARY_KEY, **changes):
    return engines.with_config_label(h100_spec(**changes), key)


def test_a_new_engine_arg_is_named_with_both_values():
    running, wanted = labelled(), labelled(extra_args={"max-running-requests": 48})
    assert running.labels[CONFIG_LABEL] != wanted.labels[CONFIG_LABEL]
    assert engines.config_changes(running.labels, wanted) == [
        "engine.args.max-running-requests: unset -> 48"]


def test_each_changed_setting_is_one_line_in_inventory_words():
    running = labelled(extra_args={"--chunked-prefill-size": 8192}, extra_env={"NCCL_IB_HCA": "mlx5"})
    wanted = labelled(extra_args={"chunked-prefill-size": 4096}, image="lmsysorg/sglang:kimi-k3-cu12",
                      context_length=262144)
    assert engines.config_changes(running.labels, wanted) == [
        "engine.args.chunked-prefill-size: 8192 -> 4096", "engine.context_length: unset -> 262144",
        'engine.env.NCCL_IB_HCA: "mlx5" -> unset',
        'engine.image: "lmsysorg/sglang:kimi-k3" -> "lmsysorg/sglang:kimi-k3-cu12"']


def test_a_new_key_is_named_without_the_key_in_any_label():
    running, wanted = labelled(), labelled(key="sk-another-key-0123456789abcdef")
    assert running.labels[CONFIG_LABEL] != wanted.labels[CONFIG_LABEL]
    assert running.labels[FIELDS_LABEL] == wanted.labels[FIELDS_LABEL]
    assert engines.config_changes(running.labels, wanted) == ["the endpoint API key"]
    assert CANARY_KEY not in json.dumps(running.labels)


def test_the_same_settings_built_into_another_command_say_so():
    running, wanted = labelled(), labelled()
    fields = json.loads(running.labels[FIELDS_LABEL])
    fields["launch command"] = "0" * 12
    old = {**running.labels, FIELDS_LABEL: json.dumps(fields)}
    assert engines.config_changes(old, wanted) == [
        "the engine command k3deploy builds from these same settings (k3deploy changed)"]


def test_a_container_without_the_fields_label_is_said_so():
    wanted = labelled()
    for labels in ({CONFIG_LABEL: "16d2d88b0a1b2c3d"}, {FIELDS_LABEL: "not json"}):
        [line] = engines.config_changes(labels, wanted)
        assert "do not list its settings" in line


def test_the_fields_label_leaves_the_digest_alone():
    spec = h100_spec()
    assert labelled().labels[CONFIG_LABEL] == engines.config_digest(spec, CANARY_KEY)
    again = engines.with_config_label(dataclasses.replace(labelled(), labels={}), CANARY_KEY)
    assert again.labels == labelled().labels
