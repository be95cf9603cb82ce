"""Starting, stopping, removing and exec-ing into containers (processes on the node)."""
import json
import os
import signal
import subprocess
import time

from . import containers, daemon, runtime, supervisor


def _wait(predicate, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def start(container, timeout=10.0):
    """Spawn the supervisor and wait until the process runs (or already ended). None or error."""
    supervisor.spawn(container)
    if not _wait(lambda: not container.reload().state.get("starting"), timeout):
        return "the container supervisor did not start (see supervisor.log in its state dir)"
    return container.state.get("error")


def _stopped(container):
    return not container.exists() or not container.reload().reconcile().running


def stop(container, timeout=10.0, by="user"):
    """docker stop: SIGTERM to the container's main process, SIGKILL to its group after timeout."""
    with container.update() as state:
        state.update(stop_requested=True, stopped_by=by)
        pid = state.get("pid") if state.get("status") == "running" else 0
    if pid:
        _signal(pid, signal.SIGTERM)
    if not _wait(lambda: _stopped(container), timeout):
        supervisor.kill_group(container.state.get("pid") or pid)
        _wait(lambda: _stopped(container), 3.0)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def remove(container):
    """docker rm -f: SIGKILL the whole container (and its execs), then delete its record."""
    with container.update() as state:
        state.update(removing=True, stop_requested=True)
        pid = state.get("pid")
        execs = state.get("execs", [])
    if pid:
        supervisor.kill_group(pid)
    for exec_pid, _start in execs:
        supervisor.kill_group(exec_pid)
    sup, sup_start = container.state.get("supervisor_pid"), container.state.get("supervisor_start")
    if not _wait(lambda: not runtime.process_alive(sup, sup_start), 3.0):
        _signal(sup, signal.SIGKILL)
    containers.delete(container)


def stop_all_for_shutdown(timeout=10.0):
    """What dockerd does on stop: SIGTERM every container, SIGKILL the stragglers."""
    everything = [c for c in (containers.load(os.path.join(containers.root(), n))
                              for n in _listdir(containers.root())) if c and c.running]
    for c in everything:
        with c.update() as state:
            state.update(stop_requested=True, stopped_by="daemon")
        if c.state.get("pid"):
            _signal(c.state["pid"], signal.SIGTERM)
    if not _wait(lambda: all(_stopped(c) for c in everything), timeout):
        for c in everything:
            if not _stopped(c):
                supervisor.kill_group(c.state.get("pid"))
        _wait(lambda: all(_stopped(c) for c in everything), 3.0)


def _listdir(path):
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def start_after_daemon_start():
    """Restart policies at daemon start: always, and unless-stopped unless a user stopped it."""
    root = daemon.status()["data_root"]
    for c in containers.all_containers(root):
        policy = (c.config.get("restart") or {}).get("Name", "no")
        if c.running or c.state.get("status") == "created":
            continue
        if policy == "always" or policy == "unless-stopped" and c.state.get("stopped_by") == "daemon":
            start(c)


def exec_in(container, cmd, env_pairs, detach):
    """docker exec: entry.py with the container's env plus K3TB_EXEC=1, argv = the exec command."""
    env = supervisor.container_env(container.config, dict(env_pairs))
    env["K3TB_EXEC"] = "1"
    env["K3TB_EXEC_ARGV"] = json.dumps(cmd)
    argv = [runtime.PYTHON, runtime.engine_entry()] + cmd
    quiet = subprocess.DEVNULL if detach else None
    proc = subprocess.Popen(argv, cwd="/", env=env, stdin=subprocess.DEVNULL, stdout=quiet,
                            stderr=quiet, start_new_session=True)
    with container.update() as state:
        state.setdefault("execs", []).append([proc.pid, runtime.proc_start_time(proc.pid)])
    if detach:
        return 0
    try:
        code = supervisor.exit_code(proc.wait())
    except KeyboardInterrupt:
        supervisor.kill_group(proc.pid, signal.SIGTERM)
        code = supervisor.exit_code(proc.wait())
    with container.update() as state:
        state["execs"] = [e for e in state.get("execs", []) if e[0] != proc.pid]
    return code
