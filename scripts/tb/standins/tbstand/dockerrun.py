"""docker run and docker exec."""
import os
import re

from . import containers, daemon, images, lifecycle, runflags, runtime
from .dockercli import Exit, connect, flag_error, parse
from .dockerctr import NO_SUCH, stream_log

NAME_RE = re.compile(r"^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
NETWORKS = {"host", "bridge", "none", "default"}
IPC_MODES = {"", "host", "private", "shareable", "none"}
# What `docker run` adds to an error from parsing, create or start (docker/cli
# cli/command/container/run.go@v28.5.1 withHelp/toStatusError, exit 125); flag errors are
# framed by cobra's FlagErrorFunc instead (dockercli.flag_error).
SEE_RUN = "\n\nRun 'docker run --help' for more information"


def _daemon_fail(message):
    return Exit(125, f"docker: Error response from daemon: {message}{SEE_RUN}")


def _validated(opts, client_env):
    """Check every value the CLI checks before contacting the daemon; return derived values."""
    try:
        derived = {
            "shm_size": runflags.size_bytes(opts["shm_size"], "shm-size") if opts["shm_size"] else 67108864,
            "ulimits": [runflags.ulimit(u) for u in opts["ulimits"]],
            "gpus": runflags.gpu_request(opts["gpus"]) if opts["gpus"] else None,
            "mounts": [runflags.volume(v) for v in opts["volumes"]],
            "restart": runflags.restart_policy(opts["restart"]),
            "env_pairs": runflags.env_from_files(opts["env_files"], client_env)
            + runflags.env_pairs(opts["env"], client_env),
        }
    except runflags.FlagError as e:
        message = str(e)
        if message.startswith(("invalid volume", "invalid mode")):
            raise _daemon_fail(message) from None
        if message.startswith("open "):
            raise Exit(125, f"docker: {message}{SEE_RUN}") from None
        if message.startswith("invalid restart policy"):   # parse(), not a flag's Set
            raise Exit(125, f"docker: {message}{SEE_RUN}") from None
        raise flag_error("run", message) from None
    if opts["rm"] and derived["restart"]["Name"] != "no":
        raise Exit(125, "docker: conflicting options: cannot specify both --restart and --rm" + SEE_RUN)
    return derived


def _check_daemon_side(opts):
    name = opts["name"]
    if name is not None and not NAME_RE.match(name):
        raise _daemon_fail(f"Invalid container name ({name}), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed")
    network = opts["network"] or "bridge"
    if network not in NETWORKS and not network.startswith("container:"):
        raise _daemon_fail(f"network {network} not found")
    ipc = opts["ipc"] or ""
    if ipc not in IPC_MODES and not ipc.startswith("container:"):
        raise _daemon_fail(f"invalid IPC mode: {ipc}")


def _command(image, opts, user_cmd):
    """Effective entrypoint + cmd: --entrypoint resets the image's Cmd, as docker does."""
    defaults = image["config"]
    if opts["entrypoint"] is not None:
        entrypoint = [opts["entrypoint"]] if opts["entrypoint"] else None
        cmd = user_cmd or None
    else:
        entrypoint = defaults.get("Entrypoint")
        cmd = user_cmd or defaults.get("Cmd")
    return entrypoint, cmd, (entrypoint or []) + (cmd or [])


def _container_config(image, opts, derived, user_cmd):
    entrypoint, cmd, full = _command(image, opts, user_cmd)
    if not full:
        raise _daemon_fail("no command specified")
    env = {}
    for item in image["config"].get("Env", []):
        key, _, value = item.partition("=")
        env[key] = value
    env.update(derived["env_pairs"])
    gpus = derived["gpus"]
    node = runtime.node_config()
    indices = list(range(int(node["gpu_count"]))) if gpus and gpus[0] == -1 else (
        list(range(min(gpus[0], int(node["gpu_count"])))) if gpus and gpus[0] is not None else
        [int(i) if i.isdigit() else i for i in gpus[1]] if gpus else [])
    labels = dict((l.partition("=")[0], l.partition("=")[2]) for l in opts["labels"])
    return {
        "name": opts["name"].lstrip("/") if opts["name"] else None, "image": opts["image"],
        "image_id": image["id"], "cmd": full, "config_entrypoint": entrypoint, "config_cmd": cmd,
        "env": env, "mounts": derived["mounts"], "gpus": opts["gpus"], "gpu_indices": indices,
        "gpu_request": {"count": gpus[0], "ids": gpus[1]} if gpus else None,
        "network": opts["network"] or "bridge", "ipc": opts["ipc"], "shm_size": derived["shm_size"],
        "ulimits": derived["ulimits"], "labels": labels, "restart": derived["restart"],
        "rm": opts["rm"], "privileged": opts["privileged"], "init": opts["init"],
        "publish": opts["publish"], "workdir": opts["workdir"] or image["config"].get("WorkingDir"),
        "user": opts["user"], "tty": opts["tty"], "detach": opts["detach"],
    }


def _cuda_tuple(text):
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def start_checks(config):
    """What dockerd and the NVIDIA container toolkit refuse at container start; None when it
    may start. `--gpus` needs the device driver dockerd registered at its start when it found
    nvidia-container-runtime-hook on its PATH (daemon.py gpu_hook); the hook gone since then
    fails LookPath again in setNvidiaGPUs (moby daemon/devices_nvidia_linux.go@docker-v29.1.2;
    the error: daemon/errors.go incompatibleDeviceRequest). An `nvidia` runtime entry is not
    needed."""
    node = runtime.node_config()
    if not config.get("gpu_request"):
        return None
    hook = daemon.status().get("gpu_hook")
    if not hook:
        return 'could not select device driver "" with capabilities: [[gpu]]'
    if daemon.gpu_hook() is None:
        return f'exec: "{daemon.NVIDIA_HOOK}": executable file not found in $PATH'
    hook = ("failed to create task for container: failed to create shim task: OCI runtime create "
            "failed: runc create failed: unable to start container process: error during container "
            "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected "
            "mode as 'legacy'\nnvidia-container-cli: ")
    for i in config["gpu_indices"]:
        if not isinstance(i, int) or i >= int(node["gpu_count"]):
            return hook + f"device error: {i}: unknown device: unknown"
    need = config["env"].get("NVIDIA_REQUIRE_CUDA", "")
    if need and _cuda_tuple(node["cuda"]) < _cuda_tuple(need):
        return hook + (f"requirement error: unsatisfied condition: {need}, please update your "
                       "driver to a newer version, or use an earlier cuda container: unknown")
    return None


def _make_bind_sources(config):
    """The daemon creates a missing bind-mount source directory (for -v, not --mount)."""
    for m in config["mounts"]:
        if m["host"] and m["host"].startswith("/"):
            try:
                os.makedirs(m["host"], exist_ok=True)
            except OSError:
                pass


def cmd_run(argv):
    opts, args = parse(argv, "run", runflags.RUN_FLAGS, runflags.RUN_SHORT)
    if not args:
        raise Exit(1, "\"docker run\" requires at least 1 argument.\nSee 'docker run --help'.\n\n"
                      "Usage:  docker run [OPTIONS] IMAGE [COMMAND] [ARG...]\n\n"
                      "Create and run a new container from an image")
    opts["image"], user_cmd = args[0], args[1:]
    derived = _validated(opts, dict(os.environ))
    try:
        repo, tag = images.parse_ref(opts["image"])
    except images.RefError as e:
        raise Exit(125, f"docker: {e}{SEE_RUN}") from None
    state = connect(run_style=True)
    _check_daemon_side(opts)
    image = images.lookup(state, opts["image"])
    if image is None:
        ref = images.ref_string(repo, tag)
        raise Exit(125, f"Unable to find image '{ref}' locally\ndocker: Error response from daemon: "
                        f"pull access denied for {repo}: the k3tb testbed has no registry behind "
                        f"`docker run`; pull it first with `docker pull {ref}`{SEE_RUN}")
    config = _container_config(image, opts, derived, user_cmd)
    try:
        c = containers.create(state["data_root"], config)
    except containers.NameConflict as e:
        raise _daemon_fail(str(e)) from None
    problem = start_checks(c.config)
    if problem is None:
        _make_bind_sources(c.config)
        problem = lifecycle.start(c)
    if problem:
        if opts["rm"]:
            containers.delete(c)
        raise _daemon_fail(problem)
    if opts["detach"]:
        print(c.id)
        return 0
    stream_log(c, follow=True)
    code = c.reload().state.get("exit_code", 0)
    if opts["rm"]:
        containers.delete(c)  # attached --rm: the client removes it once it has the exit code
    return code


def cmd_exec(argv):
    opts, args = parse(argv, "exec", runflags.EXEC_FLAGS, runflags.EXEC_SHORT)
    if len(args) < 2:
        raise Exit(1, "\"docker exec\" requires at least 2 arguments.\nSee 'docker exec --help'.")
    try:
        pairs = runflags.env_from_files(opts["env_files"], os.environ) + runflags.env_pairs(opts["env"], os.environ)
    except runflags.FlagError as e:
        raise flag_error("exec", e) from None
    state = connect()
    c = containers.find(state["data_root"], args[0])
    if c is None:
        raise Exit(1, NO_SUCH.format(args[0]))
    if c.state.get("status") != "running":
        raise Exit(1, f"Error response from daemon: container {c.id} is not running")
    return lifecycle.exec_in(c, args[1:], pairs, opts["detach"])
