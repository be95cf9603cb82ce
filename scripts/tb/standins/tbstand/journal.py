"""journald as `journalctl -u docker` shows it: what systemd and dockerd wrote for each start.

Kept in the daemon state (`journal`: [[unix time, ident, pid, message], ...], the last
MAX_LINES). Printed in journalctl's default short format, "mostly identical to the formatting of
classic syslog files" (journalctl(1) --output=short): `MMM DD HH:MM:SS HOST IDENT[PID]: MESSAGE`.

What is written, and where it comes from:
- dockerd: its logrus text lines (`time="RFC3339Nano" level=info msg="..."`; "Starting up",
  moby cmd/dockerd/daemon.go@v28.5.1) and, when it exits 1, its error as one bare stderr line
  (cmd/dockerd/docker.go@v28.5.1 onError, cmd/dockerd/main.go@docker-v29.1.2);
  "API listen on /run/docker.sock" once it serves (cmd/dockerd/daemon.go, the fd:// listener).
- systemd[1]: the lines of the published journals of a docker.service that fails and is
  restarted to its start limit (docker/for-linux#820 and #162, linuxmint/mintupgrade#47,
  systemd 249): "Starting/Started/Failed to start Docker Application Container Engine.",
  "docker.service: Main process exited, code=exited, status=1/FAILURE", "docker.service: Failed
  with result 'exit-code'.", "docker.service: Scheduled restart job, restart counter is at N.",
  "Stopped Docker Application Container Engine.", "docker.service: Start request repeated too
  quickly.", "docker.service: Failed with result 'start-limit-hit'.".
"""
import sys
import time

from . import dockerunit, runtime

DESCRIPTION = "Docker Application Container Engine"
MAX_LINES = 400
UNIT_NAMES = ("docker", "docker.service")


def _add(state, ident, pid, message, t):
    state.setdefault("journal", []).append([t, ident, pid, message])
    del state["journal"][:-MAX_LINES]


def _logrus(t, message):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e9):09d}Z"
    return f'time="{stamp}" level=info msg="{message}"'


def _attempt(state, t, pid, error):
    _add(state, "systemd", 1, f"Starting {DESCRIPTION}...", t)
    _add(state, "dockerd", pid, _logrus(t, "Starting up"), t)
    if error is None:
        _add(state, "dockerd", pid, _logrus(t, "API listen on /run/docker.sock"), t)
        _add(state, "systemd", 1, f"Started {DESCRIPTION}.", t)
        return
    _add(state, "dockerd", pid, error, t)
    _add(state, "systemd", 1, "docker.service: Main process exited, code=exited, "
                              "status=1/FAILURE", t)
    _add(state, "systemd", 1, "docker.service: Failed with result 'exit-code'.", t)
    _add(state, "systemd", 1, f"Failed to start {DESCRIPTION}.", t)


def record_start(state, starts_before):
    """One `systemctl start` that ran dockerd; when it failed, also the restarts systemd made
    on its own (Restart=always), each `starts` entry after the first one."""
    times = state.get("starts", [])[starts_before:] or [time.time()]
    error = state.get("error") if state.get("service") != "active" else None
    for n, t in enumerate(times):
        if n:
            _add(state, "systemd", 1, f"docker.service: Scheduled restart job, restart counter "
                                      f"is at {n}.", t)
            _add(state, "systemd", 1, f"Stopped {DESCRIPTION}.", t)
        _attempt(state, t, state.get("pid", 4000) if error is None else 4000 + int(t * 7) % 5000,
                 error)
    if error is not None and len(state.get("starts", [])) >= dockerunit.BURST:
        t = times[-1]
        _add(state, "systemd", 1, f"docker.service: Scheduled restart job, restart counter is at "
                                  f"{len(times)}.", t)
        record_limit_hit(state, t)


def record_limit_hit(state, t=None):
    t = time.time() if t is None else t
    _add(state, "systemd", 1, "docker.service: Start request repeated too quickly.", t)
    _add(state, "systemd", 1, "docker.service: Failed with result 'start-limit-hit'.", t)
    _add(state, "systemd", 1, f"Failed to start {DESCRIPTION}.", t)


def short_lines(entries):
    host = runtime.node_config().get("name", "node")
    return [f"{time.strftime('%b %d %H:%M:%S', time.gmtime(t))} {host} {ident}[{pid}]: {msg}"
            for t, ident, pid, msg in entries]


def parse_args(argv):
    """(unit, lines) from journalctl's options this stand-in knows; ValueError otherwise."""
    unit, lines, args = None, None, list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-u", "--unit", "-n", "--lines"):
            if not args:
                raise ValueError(f"option '{arg}' requires an argument")
            value = args.pop(0)
            unit, lines = (value, lines) if arg in ("-u", "--unit") else (unit, int(value))
        elif arg.startswith("--unit="):
            unit = arg.split("=", 1)[1]
        elif arg.startswith("--lines="):
            lines = int(arg.split("=", 1)[1])
        elif arg not in ("--no-pager", "-x", "-e", "-xe", "-q", "--quiet"):
            raise ValueError(f"unrecognized option '{arg}'")
    return unit, lines


def main(argv):
    runtime.log_call("journalctl", argv)
    try:
        unit, lines = parse_args(argv)
    except ValueError as err:
        print(f"journalctl: {err}", file=sys.stderr)
        return 1
    from . import daemon  # daemon writes the journal through this module
    entries = daemon.status().get("journal", []) if unit in UNIT_NAMES else []
    if lines is not None:
        entries = entries[-lines:] if lines > 0 else []
    out = short_lines(entries)
    print("\n".join(out) if out else "-- No entries --")
    return 0
