"""Ctrl-C / SIGTERM: poll loops end at once, the runner records `interrupted`, and the message
names what keeps running on the nodes."""

import os
import signal
import threading
import time

import pytest

from k3deploy.core import interrupt
from k3deploy.cluster import inventory
from k3deploy.node.context import RunContext
from k3deploy.core.errors import Interrupted
from k3deploy.run.interrupt_notes import notes
from k3deploy.run.report import RunReport, StepResult
from k3deploy.run.runner import Runner
from k3deploy.steps.base import Step, cmd
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes


class Poll(Step):
    """Waits for something that never happens, as the download wait does."""

    name = "download"

    def plan(self, facts, node):
        return [cmd("wait", "true")]

    def apply(self, node, actions):
        while True:
            interrupt.sleep(0.5)


class After(Poll):
    name = "launch"


def signal_soon(signum, delay=0.3):
    threading.Timer(delay, os.kill, (os.getpid(), signum)).start()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_every_poll_loop_and_is_recorded(tmp_path, signum):
    inv = inventory.parse(four_nodes())
    session = FakeSession(inv, tmp_path)
    run = RunContext(inv=inv, session=session)
    with interrupt.handling():
        signal_soon(signum)
        started = time.monotonic()
        report = Runner(run, [Poll(), After()]).execute()
        took = time.monotonic() - started
        assert interrupt.signum() == signum
    assert took < 5, took  # the bound; the loops wait 0.5 s at a time
    assert {n: per["download"].status for n, per in report.results.items()} == \
        {f"node{i}": "interrupted" for i in range(4)}
    assert all("launch" not in per for per in report.results.values())  # no step after it
    for state in session.states.values():
        assert state.step("download")["status"] == "interrupted"
    assert not interrupt.requested()  # cleared for the next run in this process
    assert signal.getsignal(signum) is not interrupt._handler


class HeadFirstPoll(Poll):
    name = "launch"
    head_first = True


def test_a_signal_while_the_head_runs_keeps_the_others_from_starting(tmp_path):
    inv = inventory.parse(four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path))
    with interrupt.handling():
        signal_soon(signal.SIGINT)
        report = Runner(run, [HeadFirstPoll()]).execute()
    assert {n: list(per.values())[0].status for n, per in report.results.items() if per} == \
        {"node0": "interrupted"}


def test_interrupted_exit_codes():
    assert Interrupted(signal.SIGINT).exit_code == 130
    assert Interrupted(signal.SIGTERM).exit_code == 143


def _report(statuses: dict[str, str]) -> RunReport:
    report = RunReport(steps=["preflight", "download-start", "image", "download", "launch",
                              "wait"])
    for node in ("node0", "node1"):
        for step, status in statuses.items():
            report.set(node, step, StepResult(status))
    return report


def test_notes_during_the_download_name_the_downloader_and_the_ways_out():
    lines = notes(_report({"preflight": "ok", "download-start": "changed", "image": "ok",
                           "download": "interrupted"}), "inv.yaml")
    assert lines[0] == "stopped during download; the state files record it as interrupted"
    assert lines[1].startswith("still running on node0, node1: the detached weight downloader")
    assert "`k3deploy up -i inv.yaml` or `k3deploy run resume-download -i inv.yaml`" in lines[2]
    assert lines[3].startswith("stop it: `k3deploy down -i inv.yaml` (stops the downloader")


def test_notes_during_the_image_pull_still_name_the_downloader():
    lines = notes(_report({"preflight": "ok", "download-start": "changed",
                           "image": "interrupted"}), "inv.yaml")
    assert lines[0].startswith("stopped during image")
    assert lines[1].startswith("may still be running on node0, node1: the detached weight "
                               "downloader")
    assert any("docker pull" in ln for ln in lines)


def test_notes_while_waiting_for_the_engine():
    lines = notes(_report({"preflight": "ok", "download-start": "ok", "image": "ok",
                           "download": "ok", "launch": "changed", "wait": "interrupted"}),
                  "inv.yaml")
    assert lines[0].startswith("stopped during wait")
    assert not any("downloader" in ln for ln in lines)
    assert "the engine containers keep running" in lines[1]


# -- watch: its pauses are interrupt.sleep ----------------------------------------------------
def serving_watch(monkeypatch, interval=60.0, restart=None, state="serving"):
    from k3deploy.cli import watch_cmd
    monkeypatch.setattr(watch_cmd, "say", lambda text: None)
    monkeypatch.setattr(watch_cmd.Watch, "observe", lambda self: {
        "name": "c", "state": state, "incident": {"failure": {"node": "n1", "at": "t"}}})
    return watch_cmd.Watch("inv.yaml", restart, interval)


def test_ctrl_c_ends_a_watch_pause_at_once(monkeypatch):
    # run_watch installs Python's KeyboardInterrupt handler itself (SIGINT may have been
    # ignored since this process started, as in a shell's background job): it ends the 60 s
    # pause, and watch exits 130.
    from k3deploy.cli import watch_cmd
    serving_watch(monkeypatch)

    def exit_now(code):
        raise SystemExit(code)
    monkeypatch.setattr(watch_cmd.interrupt, "exit_process", exit_now)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        signal_soon(signal.SIGINT)
        started = time.monotonic()
        with pytest.raises(SystemExit) as exited:
            watch_cmd.run_watch("inv.yaml", restart=None, interval=60.0)
        took = time.monotonic() - started
    finally:
        signal.signal(signal.SIGINT, previous)
    assert exited.value.code == 130 and took < 5, took


def test_a_stop_request_ends_a_watch_pause_at_once(monkeypatch):
    # With the run's handlers installed a signal only sets the stop event: time.sleep would
    # sleep on through it (PEP 475); interrupt.sleep ends and raises. The grace timer's exit
    # is this test's own, so a pause that does not end fails the test instead of exiting pytest.
    watch = serving_watch(monkeypatch, interval=8.0)
    looks = iter(range(2))
    observe = watch.observe
    watch.observe = lambda: (next(looks), observe())[1]  # a third look: StopIteration
    forced = []
    with interrupt.handling(force_exit=forced.append):
        signal_soon(signal.SIGTERM)
        started = time.monotonic()
        with pytest.raises(Interrupted):
            watch.run()
        assert time.monotonic() - started < 5
    assert forced == []


def test_ctrl_c_during_a_restart_ends_watch_with_the_run_exit_code(monkeypatch):
    from k3deploy.cli import watch_cmd
    from k3deploy.run import run_steps

    def interrupted_run(*args, **kwargs):
        raise Interrupted(signal.SIGINT)
    monkeypatch.setattr(run_steps, "run_steps", interrupted_run)
    monkeypatch.setattr(watch_cmd.interrupt, "sleep", lambda s: None)
    serving_watch(monkeypatch, state="stopped-by-guard")

    def exit_now(code):
        raise SystemExit(code)
    monkeypatch.setattr(watch_cmd.interrupt, "exit_process", exit_now)
    with pytest.raises(SystemExit) as exited:  # not "bring-up failed", then the next restart
        watch_cmd.run_watch("inv.yaml", restart=3, interval=1.0)
    assert exited.value.code == 130


def test_the_grace_timer_calls_the_injected_exit_after_the_finalizers(monkeypatch):
    # a node command that does not stop: after the grace period the process would end; here
    # the injected exit records it (no os._exit path is reachable from a test)
    monkeypatch.setattr(interrupt, "GRACE_SECONDS", 0.05)
    done, exited = [], threading.Event()
    codes = []

    def record(code):
        codes.append(code)
        exited.set()
    with interrupt.handling(force_exit=record):
        interrupt.at_forced_exit(lambda: done.append("state files"))
        os.kill(os.getpid(), signal.SIGTERM)
        assert exited.wait(30)
    assert done == ["state files"] and codes == [128 + signal.SIGTERM]


def test_the_default_exit_is_replaced_for_every_test(process_exits):
    with pytest.raises(SystemExit):
        interrupt.exit_process(3)
    assert process_exits == [3]
    process_exits.clear()   # asked for here: the fixture's own check must not fail this test


def test_the_laptop_side_ends_the_process_in_one_replaceable_place():
    """Issue 21: no os._exit reachable from a test. The laptop side calls it only through
    interrupt.exit_process (tests/conftest.py replaces it); the node programs under remote/
    that call it run as processes of their own."""
    from pathlib import Path

    package = Path(interrupt.__file__).resolve().parents[1]
    calling = {str(p.relative_to(package)) for p in package.rglob("*.py")
               if "os._exit(" in p.read_text() and p.parent.name != "remote"}
    assert calling == {"core/interrupt.py"}
