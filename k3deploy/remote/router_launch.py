"""Start the SGLang router (SMG, the Shepherd Model Gateway) with its keys kept out of argv.

SMG takes its keys only as flags: `--api-key` (the clients' bearer key on the serving
routes), `--control-plane-api-keys id:name:role:key` (the admin API), and router_args.py
reads no environment variable for them (smg 1.13.0 wheel: smg/router_args.py
add_cli_args, from_cli_args). A flag is in /proc/PID/cmdline, which every `ps` on the node
shows. So this program takes one argument, a JSON file the owner alone may read, holding the
router's argv, and hands that argv to SMG's own parser and launcher in this process
(smg/launch_router.py parse_router_args, launch_router; the image's entrypoint is
`python3 -m smg.launch_router`, smg-project/smg@f8daa883 docker/Dockerfile), so the keys
exist only in this process's memory.

    python3 router_launch.py /etc/k3deploy/router/router.json

The file: {"argv": ["--host", "0.0.0.0", "--port", "30000", "--api-key", "...", ...]}.
Runs where SMG is installed (its image, or the testbed's venv); standard library otherwise.
"""
import json
import os
import stat
import sys

# Group or others able to read the file would defeat the point of keeping the keys off argv.
LOOSE_BITS = stat.S_IRWXG | stat.S_IRWXO


def read_argv(path: str) -> list[str]:
    """The router's argv from PATH; refuses a file others may read, or a malformed one."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & LOOSE_BITS:
            raise SystemExit(f"router_launch: {path} is mode {stat.S_IMODE(mode):04o}; "
                             "it holds the router's keys: chmod 600 it")
        try:
            doc = json.load(f)
        except ValueError as e:
            raise SystemExit(f"router_launch: {path} is not JSON: {e}") from None
    argv = doc.get("argv") if isinstance(doc, dict) else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise SystemExit(f'router_launch: {path} must hold {{"argv": [strings]}}')
    return [str(a) for a in argv]


def main(args: list[str]) -> int:
    if len(args) != 1:
        raise SystemExit("usage: router_launch.py ARGS.json")
    argv = read_argv(args[0])
    from smg.launch_router import launch_router, parse_router_args  # type: ignore[import-untyped]
    launch_router(parse_router_args(argv))   # serves until the process is stopped
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
