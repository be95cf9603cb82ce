"""Tests of the testbed itself (scripts/testbed): they need root, namespaces and sshd."""
import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # for `import tbfixture`

from standin_procs import Cluster  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs root and builds network namespaces")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="testbed tests need root (namespaces, mounts, iptables)")
    here = Path(__file__).resolve().parent
    for item in items:
        if "integration" in item.keywords and Path(str(item.fspath)).resolve().is_relative_to(here):
            item.add_marker(skip)


@pytest.fixture
def cluster(tmp_path):
    """Stand-in engine processes on loopback (test_standin_*.py), all killed afterwards."""
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def hf(monkeypatch):
    """The real client, kept on loopback: no agent-registry probe to huggingface.co, no ambient token."""
    import huggingface_hub
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return huggingface_hub
