"""The router image (`lightseekorg/smg:<version>`): the real SMG, not a stand-in.

The image is a venv at /opt/venv with the `smg` wheel, `USER smg`, and
`ENTRYPOINT ["python3", "-m", "smg.launch_router"]` (smg-project/smg@f8daa883
docker/Dockerfile, router-image stage). Here the container's process becomes the node's
Debian python3 with the testbed venv's site-packages (where `pip install smg==1.13.0`, from
pyproject's test extra, put it) on PYTHONPATH: the venv's own python cannot run on a node,
its interpreter lives under /root, which every node over-mounts (scripts/tb/node.py). The
wheel is abi3 and its dependencies are cp311, as is Debian 12's python3.

Accepted commands, as the image has them: `python3 -m smg.launch_router ARGS`, `python3 -m
smg ...`, `smg launch ARGS`, `python3 SCRIPT ARGS` (SCRIPT through the container's mounts, e.g.
k3deploy's router_launch.py). Absolute paths in ARGS that lie on a mount are given as the
node's paths: the stand-in keeps no container filesystem.
"""
import os

REPO = "lightseekorg/smg"
NODE_PYTHON = "/usr/bin/python3"
NODE_SITE = "/opt/k3tb-router-site"  # scripts/tb/nodefs.py ROUTER_SITE_MOUNT
SITE_FILE = "router_site"  # written by scripts/tb/standins.py build: the venv's site-packages


def is_router_image(image):
    """`lightseekorg/smg:1.13.0`, `lightseekorg/smg@sha256:...`, `lightseekorg/smg`."""
    if not image:
        return False
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return (name.rsplit(":", 1)[0] if ":" in last else name) == REPO


def site_dir():
    """The site-packages holding smg: K3TB_ROUTER_SITE, else the file the testbed's build
    wrote next to this one, else the source tree's venv (tests run the stand-ins in place)."""
    here = os.path.dirname(os.path.realpath(__file__))
    found = os.environ.get("K3TB_ROUTER_SITE")
    if not found and os.path.isdir(os.path.join(NODE_SITE, "smg")):
        found = NODE_SITE   # on a node: scripts/tb/node.py mounts the venv's site-packages here
    if not found and os.path.exists(os.path.join(here, SITE_FILE)):
        with open(os.path.join(here, SITE_FILE)) as f:
            found = f.read().strip()
    if not found:
        found = os.path.join(here, "..", "..", "..", "..", ".venv", "lib", "python3.11",
                             "site-packages")
    return found if os.path.isdir(os.path.join(found, "smg")) else None


def python_argv(ctx, argv):
    """The python argv for the image's command, or None when the image has no such program."""
    program = os.path.basename(argv[0]) if argv else ""
    if program == "smg":
        return ["-m", "smg", *argv[1:]]
    if program not in ("python", "python3"):
        return None
    return [_on_node(ctx, a) for a in argv[1:]]


def _on_node(ctx, arg):
    if not arg.startswith("/"):
        return arg
    return ctx.container.host_path(arg) or arg


def run(ctx, argv, not_found, say):
    """exec the router in this process (the container's pid stays the router's)."""
    args = python_argv(ctx, argv)
    if args is None:
        return not_found(ctx, os.path.basename(argv[0]) if argv else '""')
    site = site_dir()
    if site is None:
        say("[stand-in] the testbed has no smg to run (pip install smg==1.13.0 into the "
            "venv: scripts/setup)")
        return 1
    env = dict(ctx.env, PYTHONPATH=site)
    os.execve(NODE_PYTHON, [NODE_PYTHON, *args], env)
