"""A node program's failure keeps the part that says why: a traceback's frames (not only its
last line), and for the port check, python3's exit code and stderr instead of a guess."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from k3deploy.core.errors import StepFailed
from k3deploy.node.output_tail import failure_tail
from k3deploy.node.ssh_types import Result
from k3deploy.steps.weights.download import DownloadWeights
from tests.unit.download_facts import facts as download_facts
from tests.unit.test_reachability_serving import MeshConn, facts, reachability_problems, run_ctx

TRACEBACK = (Path(__file__).resolve().parents[1] / "fixtures" / "real" / "python" / "3.11"
             / "traceback.txt").read_text()
LAST = ("json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)")


def test_a_traceback_keeps_its_header_frames_and_exception():
    log = "verified model-00001.safetensors\nverified config.json\n" + TRACEBACK
    tail = failure_tail(log)
    assert tail[0] == "Traceback (most recent call last):" and tail[-1] == LAST
    assert '  File "/tmp/rh_tb.py", line 5, in read_manifest' in tail
    assert "verified config.json" not in tail
    short = failure_tail(log, 6)
    assert len(short) == 6 and short[0].startswith("Traceback") and short[-1] == LAST


def test_other_output_keeps_its_error_lines_or_its_last_lines():
    assert failure_tail("a\nerror: disk full\nb\n") == ["error: disk full"]
    assert failure_tail("\n".join(str(i) for i in range(9))) == ["4", "5", "6", "7", "8"]


class FailingMesh(MeshConn):
    def __init__(self, name, code, stderr):
        super().__init__(name)
        self.code, self.stderr = code, stderr

    def run(self, argv, **kwargs):
        if "mesh" not in " ".join(map(str, argv)):
            return super().run(argv, **kwargs)
        return Result("python3 - mesh", self.code, "", self.stderr)


def _problems(tmp_path, code, stderr):
    run, conns = run_ctx(tmp_path)
    conns["node1"] = FailingMesh("node1", code, stderr)
    run.session.connections["node1"] = conns["node1"]
    return [p for p in reachability_problems(run, facts(run, health=None)) if p[0] == "node1"]


def test_a_port_check_that_did_not_run_shows_the_exit_code_and_the_traceback(tmp_path):
    ((node, check, message),) = _problems(tmp_path, 1, TRACEBACK)
    assert (node, check) == ("node1", "ports")
    assert message.startswith("the port check did not run: python3 exited 1: Traceback")
    assert LAST in message and "python3 missing?" not in message


def test_a_missing_python3_is_shown_as_the_shell_said_it(tmp_path):
    # the real shell's words for a missing command, from this machine's sh
    missing = subprocess.run(["sh", "-c", "k3deploy-no-such-python3 -"], capture_output=True,
                             text=True)
    ((_, _, message),) = _problems(tmp_path, missing.returncode, missing.stderr)
    assert f"python3 exited {missing.returncode}:" in message and missing.returncode == 127
    assert "not found" in message


def test_a_downloader_that_died_with_a_traceback_keeps_it_in_the_error():
    node = SimpleNamespace(name="node2", inv=SimpleNamespace(source="inv.yaml"))
    found = download_facts(log="verified config.json\n" + TRACEBACK, progress={"error": None},
                           missing_count=96, total=100)
    with pytest.raises(StepFailed) as err:
        DownloadWeights()._failed(node, found)
    text = str(err.value)
    assert "Traceback (most recent call last):" in text and LAST in text
    assert 'line 9, in main' in text and text.count("\n") > 5
