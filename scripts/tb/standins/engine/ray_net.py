"""What the Ray stand-in's pieces share: where a container's Ray state lives, how to find the
cluster, this node's address and resources, and the one-shot request to the head.

Per container (real Ray keeps this in the container's /tmp/ray): $K3TB_RUN/ray/<container id>/
holds `current_cluster` (the head address, as /tmp/ray/ray_current_cluster), `pids/<pid>` (the
processes `ray stop` stops) and `ray.log` (output of daemonized starts).
"""
import datetime
import hashlib
import os
import socket
import subprocess

import wire

NO_CLUSTER = ("ConnectionError: Could not find any running Ray instance. Please specify the one "
              "to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.")


def ray_log(text, where):
    """A line of Ray's Python logger: ray 2.60.0 python/ray/_private/ray_constants.py
    LOGGER_FORMAT "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    return f"{stamp}\tINFO {where} -- {text}"


def ray_dir(ctx):
    path = os.path.join(ctx.run_dir, "ray", ctx.container.id)
    os.makedirs(os.path.join(path, "pids"), exist_ok=True)
    return path


def register_process(ctx, head_address):
    base = ray_dir(ctx)
    with open(os.path.join(base, "pids", str(os.getpid())), "w") as f:
        f.write("raylet\n")
    with open(os.path.join(base, "current_cluster"), "w") as f:
        f.write(head_address + "\n")


def unregister_process(ctx):
    try:
        os.unlink(os.path.join(ray_dir(ctx), "pids", str(os.getpid())))
    except OSError:
        pass


def cluster_address(ctx, explicit=None):
    """--address, else RAY_ADDRESS, else the cluster this container started or joined."""
    address = explicit or ctx.env.get("RAY_ADDRESS")
    if address and address != "auto":
        return address.split("://", 1)[-1]
    try:
        with open(os.path.join(ray_dir(ctx), "current_cluster")) as f:
            return f.read().strip() or None
    except OSError:
        return None


def split_address(address, default_port=6379):
    host, sep, port = address.rpartition(":")
    return (host, int(port)) if sep else (address, default_port)


def ask(address, request, timeout=5.0):
    """One request to the head and its single reply, or None when it cannot be reached."""
    try:
        with socket.create_connection(split_address(address), timeout=timeout) as conn:
            wire.send(conn, request)
            for reply in wire.lines(conn):
                return reply
    except OSError:
        return None
    return None


def local_ip(toward=None):
    """The address this node is reached at (as Ray prints "Local node IP")."""
    if toward:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(split_address(toward))
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                             capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            return line.split()[3].split("/")[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    return "127.0.0.1"


def node_id(name, ip, pid):
    return hashlib.sha224(f"{name}/{ip}/{pid}".encode()).hexdigest()


def memory_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def node_resources(ctx, ip, num_gpus=None, num_cpus=None):
    gpus = ctx.gpus if num_gpus is None else num_gpus
    return {"name": ctx.node.get("name", "node"), "ip": ip, "pid": os.getpid(),
            "gpus": int(gpus), "cpus": int(num_cpus or os.cpu_count() or 1),
            "memory": memory_bytes()}
