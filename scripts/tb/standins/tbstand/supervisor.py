"""The per-container supervisor: a detached process (own session) that runs the container's
process, copies its output into container.log as dockerd's log copier does, and records how and when it ended.

Run as: /usr/bin/python3 supervisor.py <container dir> <entry.py>
"""
import os
import signal
import subprocess
import sys
import time

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

from tbstand import logcopier, runtime  # noqa: E402
from tbstand.containers import Container  # noqa: E402


def container_env(config, extra=None):
    """The process env: the container's env plus the stand-in contract variables."""
    env = dict(config["env"])
    env.update(extra or {})
    host = runtime.node_config()["name"] if config.get("network") == "host" else config["id"][:12]
    env.setdefault("HOSTNAME", host)
    env.setdefault("HOME", "/root" if config.get("user") in (None, "", "root", "0") else "/")
    env["K3TB_RUN"] = runtime.run_dir()
    env["K3TB_CONTAINER"] = os.path.join(runtime.run_dir(), "docker", "containers",
                                         config["id"], "config.json")
    return env


def kill_group(pid, sig=signal.SIGKILL):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exit_code(returncode):
    return returncode if returncode >= 0 else 128 - returncode


def _launch(container, entry):
    """The container's process, its stdout and stderr copied into the log store as dockerd's
    log copier does (logcopier.py); returns (process, copier threads)."""
    os.close(os.open(container.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640))
    (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
    try:
        proc = subprocess.Popen([runtime.PYTHON, entry] + container.config["cmd"], cwd="/",
                                env=container_env(container.config), stdin=subprocess.DEVNULL,
                                stdout=out_w, stderr=err_w, start_new_session=True)
    except OSError:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    return proc, logcopier.start((out_r, err_r), container.log_path)


def _should_restart(config, state, code):
    policy = config.get("restart") or {"Name": "no", "MaximumRetryCount": 0}
    if state.get("stop_requested") or state.get("removing"):
        return False
    name = policy["Name"]
    if name in ("always", "unless-stopped"):
        return True
    if name == "on-failure" and code != 0:
        limit = policy.get("MaximumRetryCount", 0)
        return not limit or state.get("restart_count", 0) < limit
    return False


def _run_once(container, entry):
    """Start the process, record it, wait, clean up its leftovers; returns its exit code."""
    try:
        proc, copiers = _launch(container, entry)
    except OSError as e:
        with container.update() as state:
            state.update(status="exited", exit_code=127, error=str(e), starting=False,
                         finished_at=time.time())
        return None
    with container.update() as state:
        state.update(status="running", pid=proc.pid, pid_start=runtime.proc_start_time(proc.pid),
                     started_at=time.time(), finished_at=0, exit_code=0, starting=False,
                     supervisor_pid=os.getpid(), supervisor_start=runtime.proc_start_time(os.getpid()))
    if not container.exists():  # removed while starting
        kill_group(proc.pid)
    code = exit_code(proc.wait())
    kill_group(proc.pid)  # the container's pid 1 is gone: so is everything else in it
    for pid, _start in container.reload().state.get("execs", []):
        kill_group(pid)
    for copier in copiers:  # its streams end with it: the last partial is in the store
        copier.join(timeout=10)
    return code


def supervise(cdir, entry):
    container = Container(cdir)
    backoff = 0.1
    while True:
        code = _run_once(container, entry)
        if code is None:
            return
        with container.update() as state:
            restart = _should_restart(container.config, state, code)
            state.update(status="restarting" if restart else "exited", exit_code=code, pid=0,
                         finished_at=time.time(), execs=[])
            if restart:
                state["restart_count"] = state.get("restart_count", 0) + 1
        if not restart:
            break
        time.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
        if not container.exists() or container.reload().state.get("stop_requested"):
            return
    detached_rm = container.config.get("rm") and container.config.get("detach")
    if detached_rm and container.exists() and not container.state.get("removing"):
        from tbstand.containers import delete
        delete(container)


def spawn(container):
    """Start a detached supervisor for `container`; it outlives this client and its SSH session."""
    with container.update() as state:
        state.update(starting=True, stop_requested=False, stopped_by=None)
    here = os.path.realpath(__file__)
    # its own errors (never the container's output) go beside the record, for debugging
    with open(os.path.join(container.dir, "supervisor.log"), "ab") as errors:
        subprocess.Popen([runtime.PYTHON, here, container.dir, runtime.engine_entry()], cwd="/",
                         env={"PATH": "/usr/bin:/bin",
                              **{k: v for k, v in os.environ.items() if k.startswith("K3TB_")},
                              "K3TB_RUN": runtime.run_dir()},
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                         start_new_session=True, close_fds=True)


if __name__ == "__main__":
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    supervise(sys.argv[1], sys.argv[2])
