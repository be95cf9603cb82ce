"""docker ps / inspect / logs / rm / stop / kill / start."""
import os
import re
import sys
import time

from . import containers, images, views
from .dockercli import Exit, connect, err, inspect_objects, parse, print_rows

NO_SUCH = "Error response from daemon: No such container: {}"


def _lifecycle():
    """Processes and signals (subprocess, the supervisor): only commands that change a
    container import them, so ps/inspect/logs stay cheap to start."""
    from . import lifecycle
    return lifecycle


def _matches(c, key, value):
    if key == "name":  # the daemon tries the name with and without its leading "/"
        return any(re.search(value, n) for n in (c.name, "/" + c.name))
    if key == "exited":
        return c.state.get("status") == "exited" and str(c.state.get("exit_code")) == value
    if key == "id":
        return c.id.startswith(value)
    if key == "status":
        return c.state.get("status") == value
    if key == "label":
        k, eq, v = value.partition("=")
        labels = c.config.get("labels", {})
        return k in labels and (not eq or labels[k] == v)
    if key == "ancestor":
        return value in (c.config["image"], c.config.get("image_id", "")[7:19])
    raise Exit(1, f"Error response from daemon: invalid filter '{key}'")


def _filter(found, filters):
    by_key = {}
    for f in filters:
        key, eq, value = f.partition("=")
        if not eq:
            raise Exit(1, f"Error response from daemon: bad format of filter (expected name=value)")
        by_key.setdefault(key, []).append(value)
    # docker: values of one key are OR-ed, different keys AND-ed
    return [c for c in found if all(any(_matches(c, k, v) for v in vs) for k, vs in by_key.items())]


def cmd_ps(argv):
    flags = {"all": ("bool", "all"), "quiet": ("bool", "quiet"), "filter": ("list", "filter"),
             "format": ("str", "format"), "no-trunc": ("bool", "no_trunc"),
             "latest": ("bool", "latest"), "last": ("str", "last"), "size": ("bool", "size")}
    opts, args = parse(argv, "ps", flags, {"a": "all", "q": "quiet", "f": "filter", "l": "latest",
                                            "n": "last", "s": "size"})
    if args:
        raise Exit(1, "\"docker ps\" accepts no arguments.\nSee 'docker ps --help'.")
    state = connect()
    found = containers.all_containers(state["data_root"])
    show_all = opts["all"] or opts["latest"] or opts["last"]
    if not show_all:
        found = [c for c in found if c.running]
    found = _filter(found, opts["filter"])[::-1]  # newest first
    if opts["latest"]:
        found = found[:1]
    elif opts["last"]:
        found = found[:int(opts["last"])]
    rows = [views.ps_row(c, trunc=not opts["no_trunc"]) for c in found]
    if opts["quiet"]:
        for r in rows:
            print(r["ID"])
        return 0
    print_rows(opts["format"] or views.PS_DEFAULT, rows, views.PS_HEADERS)
    return 0


def cmd_inspect(argv):
    flags = {"format": ("str", "format"), "type": ("str", "type"), "size": ("bool", "size")}
    opts, args = parse(argv, "inspect", flags, {"f": "format", "s": "size"})
    state = connect()
    kind = opts["type"] or "object"

    def lookup(ref):
        c = containers.find(state["data_root"], ref) if kind in ("object", "container") else None
        if c:
            return views.inspect_doc(c)
        image = images.lookup(state, ref) if kind in ("object", "image") else None
        return images.inspect_object(image, state) if image else None
    if not args:
        raise Exit(1, "\"docker inspect\" requires at least 1 argument.\nSee 'docker inspect --help'.")
    return inspect_objects(args, opts["format"], lookup, kind)


def _one(state, ref):
    c = containers.find(state["data_root"], ref)
    if c is None:
        raise Exit(1, NO_SUCH.format(ref))
    return c


def _tail(data, count):
    if count in (None, "all") or int(count) < 0:
        return data
    n = int(count)
    if n == 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:])


def cmd_logs(argv):
    flags = {"follow": ("bool", "follow"), "tail": ("str", "tail"), "timestamps": ("bool", "ts"),
             "since": ("str", "since"), "details": ("bool", "details")}
    opts, args = parse(argv, "logs", flags, {"f": "follow", "n": "tail", "t": "ts"})
    if len(args) != 1:
        raise Exit(1, "\"docker logs\" requires exactly 1 argument.\nSee 'docker logs --help'.")
    if opts["tail"] not in (None, "all") and not re.fullmatch(r"-?\d+", opts["tail"]):
        raise Exit(1, f"Error response from daemon: invalid value for \"tail\": \"{opts['tail']}\"")
    c = _one(connect(), args[0])
    stream_log(c, opts["tail"], opts["follow"])
    return 0


def stream_log(c, tail=None, follow=False):
    """Print the container's output; with follow, keep printing until it stops or is removed."""
    out = sys.stdout.buffer
    try:
        with open(c.log_path, "rb") as f:
            out.write(_tail(f.read(), tail))
            out.flush()
            while follow:
                chunk = f.read()
                if chunk:
                    out.write(chunk)
                    out.flush()
                    continue
                if not c.exists() or not c.reload().reconcile().running:
                    out.write(f.read())
                    break
                time.sleep(0.1)
    except FileNotFoundError:
        pass
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    out.flush()


def cmd_rm(argv):
    flags = {"force": ("bool", "force"), "volumes": ("bool", "volumes"), "link": ("bool", "link")}
    opts, args = parse(argv, "rm", flags, {"f": "force", "v": "volumes", "l": "link"})
    if not args:
        raise Exit(1, "\"docker rm\" requires at least 1 argument.\nSee 'docker rm --help'.")
    state = connect()
    code = 0
    for ref in args:
        c = containers.find(state["data_root"], ref)
        if c is None:
            err(NO_SUCH.format(ref))
            code = code if opts["force"] else 1  # rm -f of a missing container is not an error
            continue
        if c.running and not opts["force"]:
            err(f'Error response from daemon: cannot remove container "/{c.name}": container is '
                "running: stop the container before removing or force remove")
            code = 1
            continue
        _lifecycle().remove(c)
        print(ref)
    return code


def _for_each(args, command, action):
    if not args:
        raise Exit(1, f"\"docker {command}\" requires at least 1 argument.\nSee 'docker {command} --help'.")
    state = connect()
    code = 0
    for ref in args:
        c = containers.find(state["data_root"], ref)
        if c is None:
            err(NO_SUCH.format(ref))
            code = 1
            continue
        problem = action(c)
        if problem:
            err(problem)
            code = 1
        else:
            print(ref)
    return code


def cmd_stop(argv):
    flags = {"time": ("str", "time"), "timeout": ("str", "time"), "signal": ("str", "signal")}
    opts, args = parse(argv, "stop", flags, {"t": "time", "s": "signal"})
    timeout = float(opts["time"]) if opts["time"] is not None else 10.0
    return _for_each(args, "stop", lambda c: _lifecycle().stop(c, timeout))


def cmd_wait(argv):
    """docker wait: block until each container stops, print its exit code (the daemon pushes
    the event; here the record is polled, slowly, to stay cheap while a guard waits for days)."""
    _opts, args = parse(argv, "wait", {})
    if not args:
        raise Exit(1, "\"docker wait\" requires at least 1 argument.\nSee 'docker wait --help'.")
    state, code = connect(), 0
    for ref in args:
        c = containers.find(state["data_root"], ref)
        while c is not None and c.exists() and c.reload().reconcile().running:
            time.sleep(0.5)
        if c is None or not c.exists():
            err(NO_SUCH.format(ref))
            code = 1
            continue
        print(c.state.get("exit_code"))
    return code


def cmd_kill(argv):
    import signal  # not at the top: read-only calls must not pay for it
    opts, args = parse(argv, "kill", {"signal": ("str", "signal")}, {"s": "signal"})
    name = (opts["signal"] or "KILL").upper()
    sig = int(name) if name.isdigit() else getattr(signal, name if name.startswith("SIG") else "SIG" + name, None)
    if sig is None:
        raise Exit(1, f"invalid signal: {opts['signal']}")

    def kill(c):
        if not c.running or not c.state.get("pid"):
            return (f"Error response from daemon: cannot kill container: {c.name}: "
                    f"container {c.id} is not running")
        os.kill(c.state["pid"], sig)
        return None
    return _for_each(args, "kill", kill)


def cmd_start(argv):
    opts, args = parse(argv, "start", {"attach": ("bool", "attach"), "interactive": ("bool", "i")},
                       {"a": "attach", "i": "interactive"})

    def start(c):
        if c.running:
            return None
        from .dockerrun import start_checks
        problem = start_checks(c.config) or _lifecycle().start(c)
        return f"Error response from daemon: {problem}" if problem else None
    return _for_each(args, "start", start)

