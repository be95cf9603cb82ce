"""docker client stand-in: dispatch, the daemon connection, and the image/info commands."""
import grp
import importlib
import json
import os
import sys
import time

from . import containers, daemon, gotemplate, images, runflags, runtime
from .dockerinfo import api_versions, info_doc, version

DAEMON_DOWN = ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
               "Is the docker daemon running?")


def permission_denied():
    """The client's error without access to the socket; the URL carries its API version."""
    return ("permission denied while trying to connect to the Docker daemon socket at "
            "unix:///var/run/docker.sock: Get \"http://%2Fvar%2Frun%2Fdocker.sock/"
            f"v{api_versions()[0]}/info\": dial unix /var/run/docker.sock: connect: permission denied")


class Exit(Exception):
    """Print `message` to stderr (when given) and exit with `code`."""

    def __init__(self, code, message=None):
        super().__init__(message)
        self.code, self.message = code, message


def err(message):
    print(message, file=sys.stderr)


def may_use_socket():
    if os.geteuid() == 0:
        return True
    try:
        return grp.getgrnam("docker").gr_gid in os.getgroups()
    except KeyError:
        return False


def connect(run_style=False):
    """The running daemon's state, or Exit like the client when the socket is unreachable."""
    if not may_use_socket():
        raise Exit(1, permission_denied())
    state = daemon.running_daemon()
    if state is None:
        if run_style:
            raise Exit(125, f"docker: {DAEMON_DOWN}\n\nRun 'docker run --help' for more information")
        raise Exit(1, DAEMON_DOWN)
    return state


# Each command's cobra `Use` (docker/cli cli/command/*/*.go@v28.5.1): its UseLine is
# "docker <path> <Use args>" (DisableFlagsInUseLine, cmd/docker/docker.go).
USE_ARGS = {
    "run": "[OPTIONS] IMAGE [COMMAND] [ARG...]", "exec": "[OPTIONS] CONTAINER COMMAND [ARG...]",
    "ps": "[OPTIONS]", "inspect": "[OPTIONS] NAME|ID [NAME|ID...]", "logs": "[OPTIONS] CONTAINER",
    "rm": "[OPTIONS] CONTAINER [CONTAINER...]", "stop": "[OPTIONS] CONTAINER [CONTAINER...]",
    "wait": "CONTAINER [CONTAINER...]", "kill": "[OPTIONS] CONTAINER [CONTAINER...]",
    "start": "[OPTIONS] CONTAINER [CONTAINER...]", "pull": "[OPTIONS] NAME[:TAG|@DIGEST]",
    "images": "[OPTIONS] [REPOSITORY[:TAG]]", "image inspect": "[OPTIONS] IMAGE [IMAGE...]",
    "rmi": "[OPTIONS] IMAGE [IMAGE...]", "save": "[OPTIONS] IMAGE [IMAGE...]",
    "load": "[OPTIONS]", "info": "[OPTIONS]", "version": "[OPTIONS]",
}


def flag_error(command, error):
    """A flag error as docker 28 prints it: cobra's FlagErrorFunc (docker/cli cli/cobra.go
    @v28.5.1: "%s\n\nUsage:  %s\n\nRun '%s --help' for more information", exit 125)."""
    use = f"docker {command} {USE_ARGS[command]}"
    return Exit(125, f"{error}\n\nUsage:  {use}\n\nRun 'docker {command} --help' for more information")


def parse(argv, command, flags, short=None):
    try:
        return runflags.parse(argv, flags, short or {})
    except runflags.FlagError as e:
        raise flag_error(command, e) from None


def render_each(fmt, objects):
    """--format for inspect-like commands: one rendered template per object."""
    _, body = gotemplate.docker_format(fmt)
    try:
        for obj in objects:
            print(gotemplate.render(body, obj))
    except gotemplate.TemplateError as e:
        raise Exit(1, f"template: :1: {e}") from None


def cmd_info(argv):
    opts, _ = parse(argv, "info", {"format": ("str", "format")}, {"f": "format"})
    state = connect()
    doc = info_doc(state)
    if opts["format"]:
        render_each(opts["format"], [doc])
        return 0
    print(f"Client: Docker Engine - Community\n Version:    {version()}\n Context:    default\n"
          f" Debug Mode: false\n\nServer:\n Containers: {doc['Containers']}\n"
          f"  Running: {doc['ContainersRunning']}\n  Paused: 0\n  Stopped: {doc['ContainersStopped']}\n"
          f" Images: {doc['Images']}\n Server Version: {doc['ServerVersion']}\n"
          f" Storage Driver: {doc['Driver']}\n"
          f" Logging Driver: json-file\n Cgroup Driver: systemd\n Cgroup Version: 2\n"
          f" Runtimes: {' '.join(sorted(doc['Runtimes']))}\n Default Runtime: {doc['DefaultRuntime']}\n"
          f" Kernel Version: {doc['KernelVersion']}\n Operating System: {doc['OperatingSystem']}\n"
          f" OSType: linux\n Architecture: x86_64\n CPUs: {doc['NCPU']}\n Name: {doc['Name']}\n"
          f" ID: {doc['ID']}\n Docker Root Dir: {doc['DockerRootDir']}\n Debug Mode: false\n"
          f" Experimental: false\n Live Restore Enabled: false\n")
    return 0


def cmd_version(argv):
    opts, _ = parse(argv, "version", {"format": ("str", "format")}, {"f": "format"})
    (api, min_api), ver = api_versions(), version()
    client = {"Version": ver, "ApiVersion": api, "Os": "linux", "Arch": "amd64"}
    head = f"Client: Docker Engine - Community\n Version:           {ver}\n API version:       {api}"
    if not may_use_socket() or daemon.running_daemon() is None:
        print(head)
        raise Exit(1, DAEMON_DOWN if may_use_socket() else permission_denied())
    doc = {"Client": client, "Server": {"Version": ver, "ApiVersion": api, "Os": "linux"}}
    if opts["format"]:
        render_each(opts["format"], [doc])
    else:
        print(f"{head}\n\nServer: Docker Engine - Community\n Engine:\n  Version:          {ver}\n"
              f"  API version:      {api} (minimum version {min_api})")
    return 0


def cmd_pull(argv):
    opts, args = parse(argv, "pull", {"quiet": ("bool", "quiet"), "platform": ("str", "platform")},
                       {"q": "quiet"})
    if len(args) != 1:
        raise Exit(1, f"\"docker pull\" requires exactly 1 argument.\nSee 'docker pull --help'.")
    try:
        repo, tag = images.parse_ref(args[0])
    except images.RefError as e:
        raise Exit(1, str(e)) from None
    state = connect()
    if opts["quiet"]:
        with open(os.devnull, "w") as devnull:
            saved, sys.stdout = sys.stdout, devnull
            try:
                code = images.pull(state, repo, tag, runtime.node_config())
            finally:
                sys.stdout = saved
        if code == 0:
            print(images.full_name(repo, tag))
        return code
    return images.pull(state, repo, tag, runtime.node_config())


def cmd_images(argv):
    flags = {"quiet": ("bool", "quiet"), "all": ("bool", "all"), "format": ("str", "format"),
             "no-trunc": ("bool", "no_trunc")}
    opts, args = parse(argv, "images", flags, {"q": "quiet", "a": "all"})
    state = connect()
    rows = [_image_row(i, tag, opts["no_trunc"]) for i in images.all_images(state)
            for tag in (i["tags"] or [None])]
    if args:
        want = args[0]
        rows = [r for r in rows if want in (r["Repository"], f"{r['Repository']}:{r['Tag']}")]
    if opts["quiet"]:
        for r in rows:
            print(r["ID"])
        return 0
    fmt = opts["format"] or "table {{.Repository}}\t{{.Tag}}\t{{.ID}}\t{{.CreatedSince}}\t{{.Size}}"
    headers = {"Repository": "REPOSITORY", "Tag": "TAG", "ID": "IMAGE ID", "CreatedSince": "CREATED",
               "CreatedAt": "CREATED AT", "Size": "SIZE", "Digest": "DIGEST"}
    print_rows(fmt, rows, headers)
    return 0


def _image_row(image, tag, no_trunc):
    """One `docker images` row: one per tag; a digest-only image shows TAG <none>."""
    return {"Repository": image["repo"], "Tag": tag.rsplit(":", 1)[1] if tag else "<none>",
            "ID": image["id"] if no_trunc else image["id"][7:19],
            "CreatedSince": runtime.human_duration(time.time() - image["created"]) + " ago",
            "CreatedAt": runtime.rfc3339(image["created"]), "Size": runtime.human_size(image["size"]),
            "Digest": image["digests"][0].split("@", 1)[1] if image["digests"] else "<none>"}


def print_rows(fmt, rows, headers):
    """A list command's --format, including docker's `table` form with a header row."""
    table, body = gotemplate.docker_format(fmt)
    try:
        lines = [gotemplate.render(body, row) for row in rows]
        if table:
            lines = gotemplate.tabwrite([gotemplate.render(body, headers)] + lines)
    except gotemplate.TemplateError as e:
        raise Exit(1, f"template: :1: {e}") from None
    for line in lines:
        print(line)


def cmd_image_inspect(argv):
    opts, args = parse(argv, "image inspect", {"format": ("str", "format")}, {"f": "format"})
    state = connect()
    return inspect_objects(args, opts["format"], lambda ref: _image_doc(state, ref), "image")


def _image_doc(state, ref):
    image = images.lookup(state, ref)
    return images.inspect_object(image, state) if image else None


def inspect_objects(refs, fmt, lookup, kind):
    if not refs:
        raise Exit(1, f"\"docker {kind} inspect\" requires at least 1 argument.")
    docs, missing = [], []
    for ref in refs:
        doc = lookup(ref)
        (docs.append(doc) if doc else missing.append(ref))
    if fmt:
        render_each(fmt, docs)
    else:
        print(json.dumps(docs, indent=4, ensure_ascii=False))
    for ref in missing:
        err(f"Error: No such {kind}: {ref}")
    return 1 if missing else 0


def cmd_rmi(argv):
    opts, args = parse(argv, "rmi", {"force": ("bool", "force"), "no-prune": ("bool", "no_prune")},
                       {"f": "force"})
    state = connect()
    code = 0
    for ref in args:
        image = images.lookup(state, ref)
        if image is None:
            err(f"Error response from daemon: No such image: {ref}")
            code = 1
            continue
        users = [c for c in containers.all_containers(state["data_root"])
                 if c.config.get("image_id") == image["id"]]
        if users and not opts["force"]:
            err(f'Error response from daemon: conflict: unable to remove repository reference "{ref}" '
                f"(must force) - container {users[0].id[:12]} is using its referenced image "
                f"{image['id'][7:19]}")
            code = 1
            continue
        print("\n".join(images.remove(state, image, ref)))
    return code


def cmd_save(argv):
    opts, args = parse(argv, "save", {"output": ("str", "output")}, {"o": "output"})
    if not args:
        raise Exit(1, "\"docker save\" requires at least 1 argument.\nSee 'docker save --help'.")
    state = connect()
    image = images.lookup(state, args[0])
    if image is None:
        raise Exit(1, f"Error response from daemon: reference does not exist")
    from . import imagetar
    if opts["output"]:
        with open(opts["output"], "wb") as out:
            imagetar.save(image, out, imagetar.store_kind(state))
    else:
        imagetar.save(image, sys.stdout.buffer, imagetar.store_kind(state))
        sys.stdout.buffer.flush()
    return 0


def cmd_load(argv):
    opts, _ = parse(argv, "load", {"input": ("str", "input"), "quiet": ("bool", "quiet")},
                    {"i": "input", "q": "quiet"})
    state = connect()
    from . import imagetar
    try:
        if opts["input"]:
            with open(opts["input"], "rb") as stream:
                lines = imagetar.load(state, stream)
        else:
            lines = imagetar.load(state, sys.stdin.buffer)
    except imagetar.LoadError as e:
        raise Exit(1, f"Error response from daemon: {e}") from None
    print("\n".join(lines))
    return 0


def _function(handler):
    """A handler, or "module.function" imported only now: a call loads its own command's
    module, so read-only commands never load run/exec's process machinery."""
    if callable(handler):
        return handler
    module, function = handler.split(".")
    return getattr(importlib.import_module(f".{module}", __package__), function)


def main(argv):
    runtime.log_call("docker", argv)
    commands = {"info": cmd_info, "version": cmd_version, "pull": cmd_pull, "images": cmd_images,
                "run": "dockerrun.cmd_run", "exec": "dockerrun.cmd_exec", "start": "dockerctr.cmd_start",
                "ps": "dockerctr.cmd_ps", "inspect": "dockerctr.cmd_inspect", "logs": "dockerctr.cmd_logs",
                "rm": "dockerctr.cmd_rm", "stop": "dockerctr.cmd_stop", "kill": "dockerctr.cmd_kill",
                "wait": "dockerctr.cmd_wait",
                "rmi": cmd_rmi, "save": cmd_save, "load": cmd_load}
    groups = {("image", "ls"): "images", ("image", "list"): "images", ("image", "pull"): "pull",
              ("image", "inspect"): cmd_image_inspect, ("image", "rm"): "rmi",
              ("image", "save"): "save", ("image", "load"): "load",
              ("container", "ls"): "ps", ("container", "list"): "ps"}
    for verb in ("run", "exec", "start", "inspect", "logs", "rm", "stop", "kill", "wait"):
        groups[("container", verb)] = verb
    try:
        if argv[:1] in (["--version"], ["-v"]):
            print(f"Docker version {version()}, build k3tb")
            return 0
        if argv and argv[0].startswith("-"):
            raise Exit(125, f"unknown flag: {argv[0]}\nSee 'docker --help'.")
        if not argv:
            raise Exit(0, "Usage:  docker [OPTIONS] COMMAND")
        handler = groups.get(tuple(argv[:2])) if len(argv) > 1 else None
        if handler is not None:
            argv = argv[2:] if callable(handler) else [handler] + argv[2:]
        if not callable(handler):
            if argv[0] not in commands:
                raise Exit(1, f"docker: '{argv[0]}' is not a docker command.\nSee 'docker --help'")
            handler, argv = commands[argv[0]], argv[1:]
        return _function(handler)(argv)
    except Exit as e:
        if e.message:
            err(e.message)
        return e.code
