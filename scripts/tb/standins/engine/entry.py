#!/usr/bin/python3
"""The process a stand-in container runs: SGLang, vLLM or Ray, chosen by the container's command.

Started by the docker stand-in as `/usr/bin/python3 .../engine/entry.py` with the container's
env plus K3TB_RUN and K3TB_CONTAINER (config.json with "cmd", "image", "mounts", "gpus", ...);
`docker exec` adds K3TB_EXEC=1 and K3TB_EXEC_ARGV (a JSON list). A command given on this
script's own command line wins over the config's "cmd" (handy by hand).

Exit codes: what the engine exits with; 2 for bad flags; 127 when the image has no such command.
"""
import json
import os
import re
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from common import Context, EngineExit, say  # noqa: E402

MISMATCH = ("RuntimeError: The NVIDIA driver on your system is too old (found version {found}). "
            "Please update your GPU driver by downloading and installing a new version from the "
            "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
            "https://pytorch.org to install a PyTorch version that has been compiled with your "
            "version of the CUDA driver.\nCUDA version mismatch: the image {image} is built for "
            "CUDA {need}, the driver supports CUDA {have}.")


def command_argv(ctx):
    if ctx.exec_mode:
        return json.loads(os.environ.get("K3TB_EXEC_ARGV") or "[]")
    if len(sys.argv) > 1:
        return sys.argv[1:]
    return list(ctx.container.config.get("cmd") or [])


# `sh -c 'exec "$@" >FILE 2>&1' NAME ARG...`: POSIX sh (XCU 2.7.2 redirection, 2.14 exec)
# opens FILE for writing (truncating; >> appends), points stdout then stderr at it and
# replaces itself with ARG...; NAME becomes $0. Without `exec`, and followed by
# `; echo "TEXT $?" >>FILE2`, sh runs ARG... as its child, waits, and appends TEXT and the
# child's exit status (XCU 2.9.3 lists, 2.5.2 `$?`: 128 + the signal for a killed child). The
# only shell scripts the stand-in runs.
_EXEC_REDIRECT = re.compile(r'^(exec )?"\$@" (>>?)(\S+) 2>&1(?:; echo "([^"$]*) \$\?" >>(\S+))?$')


def unwrap_shell(ctx, argv):
    """`sh -c "ray status"`: a single simple command is run as if given directly. Returns the
    command and, for the `; echo` form, (FILE2, TEXT) to append once it exited."""
    redirect = _EXEC_REDIRECT.match(argv[2]) if len(argv) > 4 and argv[1] == "-c" else None
    if redirect and os.path.basename(argv[0]) in ("sh", "bash"):
        redirect_output(ctx, redirect.group(3), append=redirect.group(2) == ">>")
        exec_, text, path = redirect.group(1), redirect.group(4), redirect.group(5)
        # after `exec`, the shell is gone: its `echo` never runs
        return argv[4:], ((path, text) if text is not None and not exec_ else None)
    if len(argv) == 3 and os.path.basename(argv[0]) in ("sh", "bash") and argv[1] == "-c":
        if not any(ch in argv[2] for ch in ";|&<>`$()"):
            return shlex.split(argv[2]), None
    return argv, None


def then_echo(ctx, argv, path, text):
    """The `; echo` form: the command in a child process, then TEXT and its status appended."""
    pid = os.fork()
    if pid == 0:
        code = run(ctx, argv)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    redirect_output(ctx, path, append=True)
    say(f"{text} {code}")
    return code


def redirect_output(ctx, path, append):
    """The file through the container's mounts; off a mount it is in the container's own
    filesystem, which the stand-in does not keep (nothing on the node sees it)."""
    host = ctx.container.host_path(path)
    mode = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(host or os.devnull, mode, 0o644)
    for target in (1, 2):   # sys.stdout and sys.stderr write to these descriptors
        os.dup2(fd, target)
    os.close(fd)


def image_repo(image):
    """('lmsysorg/sglang', 'kimi-k3') from 'lmsysorg/sglang:kimi-k3' (a registry port kept)."""
    image = image.split("@", 1)[0]
    if ":" in image.rsplit("/", 1)[-1]:
        repo, tag = image.rsplit(":", 1)
        return repo, tag
    return image, "latest"


def required_cuda(image):
    repo, tag = image_repo(image)
    if "cu12" in tag:
        return (12, 0)
    if repo.endswith("sglang") or "vllm" in repo:
        return (13, 0)
    return None


def check_cuda(ctx):
    image = ctx.container.image
    need = required_cuda(image) if image else None
    have = tuple(int(x) for x in str(ctx.node.get("cuda", "13.0")).split(".")[:2])
    if need and have < need:
        raise EngineExit(MISMATCH.format(found=have[0] * 1000 + have[1] * 10, image=image,
                                         need=f"{need[0]}.{need[1]}", have=f"{have[0]}.{have[1]}"))


def image_has(ctx, program):
    """Which programs an image ships: SGLang images sglang, vLLM images vllm and ray."""
    if not ctx.container.image:
        return True
    repo, _ = image_repo(ctx.container.image)
    provided = {"sglang": "sglang" in repo, "vllm": "vllm" in repo,
                "ray": "vllm" in repo or repo.endswith("ray")}
    return provided.get(program, False)


def not_found(ctx, program):
    where = "exec failed" if ctx.exec_mode else "runc create failed"
    say(f"OCI runtime {'exec' if ctx.exec_mode else 'create'} failed: {where}: unable to start "
        f"container process: exec: \"{program}\": executable file not found in $PATH: unknown",
        sys.stderr)
    return 127


def dispatch(ctx, argv):
    import router
    if router.is_router_image(ctx.container.image):   # the real SMG (router.py)
        return router.run(ctx, argv, not_found, say)
    program = os.path.basename(argv[0]) if argv else ""
    rest = argv[1:]
    if program in ("python", "python3") and rest[:2] == ["-m", "sglang.launch_server"] \
            and image_has(ctx, "sglang"):
        return run_engine(ctx, "sglang", rest[2:], "launch_server.py")
    if program in ("python", "python3"):
        module = rest[1] if rest[:1] == ["-m"] and len(rest) > 1 else " ".join(rest)
        say(f"/usr/bin/python3: No module named {module}", sys.stderr)
        return 1
    if not program or not image_has(ctx, program):
        return not_found(ctx, program or '""')
    if program == "ray":
        import ray_cli
        return ray_cli.main(ctx, rest)
    if rest[:1] != ["serve"]:
        say(f"usage: {program} serve ...\n{program}: error: argument subcommand: invalid choice: "
            f"{(rest[:1] or [''])[0]!r} (choose from 'serve')", sys.stderr)
        return 2
    return run_engine(ctx, program, rest[1:], f"{program} serve")


def run_engine(ctx, program, argv, prog):
    # `import torch` and the engine's package come before anything else: 10-30 s on a real
    # node before the first flag is even parsed (profile slow-engine-start).
    time.sleep(ctx.import_seconds)
    check_cuda(ctx)
    if program == "sglang":
        import sglang
        sglang.main(ctx, argv, prog)
    else:
        import vllm
        vllm.main(ctx, argv)
    return 0


def run(ctx, argv):
    try:
        return dispatch(ctx, argv)
    except EngineExit as e:
        say(e.message, sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


def main():
    try:
        ctx = Context()
        argv, then = unwrap_shell(ctx, command_argv(ctx))
    except EngineExit as e:
        say(e.message, sys.stderr)
        return e.code
    return then_echo(ctx, argv, *then) if then else run(ctx, argv)


if __name__ == "__main__":
    sys.exit(main())
