"""systemctl stand-in for the two units a GPU node's docker setup touches."""
import os
import sys
import time

from . import daemon, dockerunit, runtime

UNITS = ("docker.service", "docker.socket", "containerd.service")
PRIVILEGED = {"start", "stop", "restart", "reload", "try-restart", "enable", "disable",
              "daemon-reload", "reset-failed"}
QUIET_OPTS = {"-q", "--quiet"}
IGNORED_OPTS = {"--no-pager", "--now", "--no-block", "--system", "-l", "--full", "--no-ask-password"}
DESCRIPTIONS = {"docker.service": "Docker Application Container Engine",
                "docker.socket": "Docker Socket for the API",
                "containerd.service": "containerd container runtime"}


def unit_name(name):
    return name if "." in name else name + ".service"


def unit_state(state, unit):
    key = {"docker.service": "service", "docker.socket": "socket"}.get(unit, "containerd")
    return state.get(key, "active")


def job_failed(unit):
    print(f"Job for {unit} failed because the control process exited with error code.\n"
          f"See \"systemctl status {unit}\" and \"journalctl -xeu {unit}\" for details.",
          file=sys.stderr)


def do_start(units):
    if "containerd.service" in units and not daemon.start_containerd_unit():
        job_failed("containerd.service")
        return 1
    units = [u for u in units if u != "containerd.service"]
    if units and not daemon.start(units):
        if daemon.status().get("result") == "start-limit-hit":
            print(dockerunit.LIMIT_HIT, file=sys.stderr)
        else:
            job_failed("docker.service")
        return 1
    return 0


def do_stop(units):
    state = daemon.status()
    if units == ["docker.service"] and state["socket"] == "active":
        print("Warning: Stopping docker.service, but it can still be activated by:\n"
              "  docker.socket", file=sys.stderr)
    if "containerd.service" in units:
        daemon.stop_containerd_unit()
    daemon.stop([u for u in units if u != "containerd.service"])
    return 0


def do_restart(units):
    if "containerd.service" in units:
        daemon.stop_containerd_unit()
    daemon.stop([u for u in units if u != "containerd.service"])
    return do_start(units)


def do_reload(units):
    state = daemon.status()
    for unit in units:
        if unit_state(state, unit) != "active":
            print(f"Failed to reload {unit}: Job type reload is not applicable for unit {unit}.",
                  file=sys.stderr)
            return 1
    return 0  # dockerd reloads a few live options on SIGHUP, never data-root


def do_is_active(units, quiet):
    state = daemon.status()
    results = [unit_state(state, u) if u in UNITS else "inactive" for u in units]
    if not quiet:
        print("\n".join(results))
    return 0 if all(r == "active" for r in results) else 3


def _since(state):
    return time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(state.get("since") or time.time()))


def do_status(units, quiet):
    state = daemon.status()
    code = 0
    for unit in units:
        if unit not in UNITS:
            print(f"Unit {unit} could not be found.", file=sys.stderr)
            code = max(code, 4)
            continue
        active = unit_state(state, unit)
        detail = {"active": "active (running)" if unit == "docker.service" else "active (listening)",
                  "inactive": "inactive (dead)", "failed": "failed (Result: exit-code)"}[active]
        lines = [f"● {unit} - {DESCRIPTIONS[unit]}",
                 f"     Loaded: loaded (/lib/systemd/system/{unit}; enabled; preset: enabled)",
                 f"     Active: {detail} since {_since(state)}"]
        if unit == "docker.service":
            lines.append("TriggeredBy: ● docker.socket")
            if active == "active":
                lines.append(f"   Main PID: {state.get('pid', 1)} (dockerd)")
            if state.get("error"):
                lines.append(f"\n dockerd[{state.get('pid', 1)}]: {state['error']}")
        if not quiet:
            print("\n".join(lines) + "\n")
        code = max(code, 0 if active == "active" else 3)
    return code


def main(argv):
    runtime.log_call("systemctl", argv)
    quiet = False
    args = []
    for arg in argv:
        if arg in QUIET_OPTS:
            quiet = True
        elif arg in IGNORED_OPTS:
            continue
        elif arg.startswith("-"):
            print(f"systemctl: unrecognized option '{arg}'", file=sys.stderr)
            return 1
        else:
            args.append(arg)
    if not args:
        print("systemctl stand-in: a verb is required", file=sys.stderr)
        return 1
    verb, units = args[0], [unit_name(u) for u in args[1:]]
    return run_verb(verb, units, quiet)


def do_cat(units, quiet):
    for unit in units:
        if unit != "docker.service":
            print(f"No files found for {unit}.", file=sys.stderr)
            return 1
    print(dockerunit.cat_text(), end="")
    return 0


def do_reset_failed(units):
    if "docker.service" in units:
        daemon.reset_failed()
    return 0


HANDLERS = {"start": do_start, "stop": do_stop, "restart": do_restart,
            "try-restart": do_restart, "reload": do_reload, "reset-failed": do_reset_failed}


def do_is_enabled(units, quiet):
    results = ["enabled" if u in UNITS else "not-found" for u in units]
    if not quiet:
        print("\n".join(results))
    return 0 if all(u in UNITS for u in units) else 1


def run_verb(verb, units, quiet):
    readers = {"is-active": do_is_active, "status": do_status, "is-enabled": do_is_enabled,
               "cat": do_cat}
    if verb not in readers and verb not in HANDLERS and verb not in ("daemon-reload", "enable"):
        print(f"Unknown command verb {verb}.", file=sys.stderr)
        return 1
    if not units and verb != "daemon-reload":
        print("Too few arguments.", file=sys.stderr)
        return 1
    if verb in readers:
        return readers[verb](units, quiet)
    denied = _privileged_check(verb, units)
    if denied or verb == "daemon-reload":
        return denied  # unit files never change on a testbed node: reloading them is a no-op
    for unit in units:
        if unit not in UNITS:
            what = "not found" if verb in ("start", "enable") else "not loaded"
            print(f"Failed to {verb} {unit}: Unit {unit} {what}.", file=sys.stderr)
            return 5
    if verb == "enable":
        return 0  # docker is enabled at boot on these images already
    return HANDLERS[verb](units)


def _privileged_check(verb, units):
    if verb not in PRIVILEGED or os.geteuid() == 0:
        return 0
    target = units[0] if units else "units"
    print(f"Failed to {verb} {target}: Interactive authentication required.\n"
          f"See system logs and 'systemctl status {target}' for details.", file=sys.stderr)
    return 1
