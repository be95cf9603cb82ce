"""`ray start --head|--address ...`, `ray status`, `ray stop` (click-style errors, exit 2).

`ray start` without --block daemonizes and returns 0, as real Ray does. As a container's main
command that is not useful: the container stops when its main process exits and takes Ray
with it, so there it starts, prints the banner, and exits 0 leaving nothing running (use
--block). In `docker exec` or outside a container the daemon keeps running until `ray stop`.
"""
import datetime
import os
import signal
import sys
import time

import clitable
import ray_net
from clitable import ClickStyleParser
from common import EngineExit, say
from ray_head import Head
from ray_worker import Worker

BLOCK_NOTE = """--block
  This command will now block forever until terminated by a signal.
  Running subprocesses are monitored and a message will be printed if any of them terminate unexpectedly. Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported.
  Process exit logs will be saved to: {exit_log}"""


def exit_log_path():
    """ray 2.60.0 python/ray/_private/node.py: the session dir /tmp/ray/session_<date>_<pid>
    (date "%Y-%m-%d_%H-%M-%S_%f"); a real worker takes the head's session name from the GCS,
    this one names its own."""
    stamp = datetime.datetime.today().strftime("%Y-%m-%d_%H-%M-%S_%f")
    return f"/tmp/ray/session_{stamp}_{os.getpid()}/logs/ray_process_exit.log"


def start_parser():
    # The real `ray start` options (clitable.py), with click's errors; Ray's own default port.
    parser = clitable.build("ray", parser_class=ClickStyleParser)
    parser.set_defaults(port=6379)
    return parser


def banner(head, ip, port, block):
    lines = ["", f"Local node IP: {ip}", "", "--------------------", "Ray runtime started.",
             "--------------------", ""]
    if head:
        lines += ["Next steps", "  To add another node to this Ray cluster, run",
                  f"    ray start --address='{ip}:{port}'", "",
                  "  To connect to this Ray cluster:", "    import ray", "    ray.init()", "",
                  "  To terminate the Ray runtime, run", "    ray stop", "",
                  "  To view the status of the cluster, use", "    ray status"]
    else:
        lines += ["To terminate the Ray runtime, run", "  ray stop"]
    return "\n".join(lines + ([BLOCK_NOTE.format(exit_log=exit_log_path())] if block else []))


def start(ctx, argv):
    args = start_parser().parse_args(argv)
    if args.head == bool(args.address):
        raise EngineExit("ValueError: pass either --head or --address=HEAD:PORT to `ray start`")
    ip = args.node_ip_address or ray_net.local_ip(args.address)
    resources = ray_net.node_resources(ctx, ip, args.num_gpus, args.num_cpus)
    if args.head:
        service = Head(resources, args.port, ctx.node.get("ray_status_lag"))
        address = f"{ip}:{args.port}"
        prepare = service.listen
    else:
        service = Worker(ctx, args.address.strip("'\""), resources)
        address, prepare = service.address, service.join
    text = banner(args.head, ip, args.port, args.block)
    if args.block:
        return run_in_foreground(ctx, prepare, service, address, text)
    if ctx.container.present and not ctx.exec_mode:
        prepare()      # errors still show; the runtime then dies with the container
        say(text)
        return 0
    return daemonize(ctx, prepare, service, address, text)


def _graceful_stop(*_):
    """`ray stop` / `docker stop` send SIGTERM: exit 0 after the monitor loop's next tick, which
    gives a `docker exec ... ray stop` time to print before the container goes."""
    time.sleep(0.5)
    sys.exit(0)


def run_in_foreground(ctx, prepare, service, address, text):
    signal.signal(signal.SIGTERM, _graceful_stop)
    prepare()
    ray_net.register_process(ctx, address)
    say(text)
    try:
        service.serve_forever()
    finally:
        ray_net.unregister_process(ctx)
    return 0


def daemonize(ctx, prepare, service, address, text):
    read_end, write_end = os.pipe()
    if os.fork():
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            outcome = pipe.read()
        if outcome.startswith("ok"):
            say(text)
            return 0
        raise EngineExit(outcome or "ray start: the Ray runtime failed to start")
    os.close(read_end)
    os.setsid()
    log = os.open(os.path.join(ray_net.ray_dir(ctx), "ray.log"), os.O_WRONLY | os.O_CREAT |
                  os.O_APPEND, 0o644)
    for fd in (1, 2):
        os.dup2(log, fd)
    try:
        prepare()
        ray_net.register_process(ctx, address)
        os.write(write_end, b"ok")
    except EngineExit as e:
        os.write(write_end, e.message.encode())
        os._exit(1)
    os.close(write_end)
    try:
        service.serve_forever()
    finally:
        ray_net.unregister_process(ctx)
        os._exit(0)


def status(ctx, argv):
    p = ClickStyleParser(prog="ray status", allow_abbrev=False)
    p.add_argument("--address")
    args = p.parse_args(argv)
    address = ray_net.cluster_address(ctx, args.address)
    reply = ray_net.ask(address, {"op": "status"}) if address else None
    if reply is None:
        raise EngineExit(ray_net.NO_CLUSTER)
    # No report yet: python/ray/autoscaler/_private/commands.py@ray-2.60.0 debug_status,
    # printed by scripts.py `status` with exit 0.
    say(NO_STATUS if reply.get("nodes") is None else
        status_text(reply, ctx.node.get("ray_pg_gpus_claimed", True)))
    return 0


NO_STATUS = ("No cluster status. It may take a few seconds for the Ray internal services to "
             "start up.")


def status_text(reply, claimed=True):
    """claimed=False (profile ray-gpus-reserved): the placement groups reserve the GPUs and no
    Ray task uses them; get_usage_report (ray python/ray/autoscaler/_private/util.py) then
    prints real use, 0.0, before the reservation."""
    nodes = reply["nodes"]
    gpus = float(sum(n["gpus"] for n in nodes))
    cpus = float(sum(n["cpus"] for n in nodes))
    mem = sum(n["memory"] for n in nodes) / 2**30
    reserved = float(reply.get("used_gpus", 0))
    used = reserved if claimed else 0.0
    gpu_line = f" {used}/{gpus} GPU" + (
        f" ({used} used of {reserved} reserved in placement groups)" if reserved else "")
    # format_info_string prints the report's own time (datetime.fromtimestamp), not now.
    stamp = datetime.datetime.fromtimestamp(reply.get("time") or time.time()).strftime(
        "%Y-%m-%d %H:%M:%S.%f")
    rule = "-" * 63
    return "\n".join(
        [f"======== Autoscaler status: {stamp} ========", "Node status", rule, "Active:"]
        + [f" 1 node_{n['id']}" for n in nodes]
        + ["Pending:", " (no pending nodes)", "Recent failures:", " (no failures)", "",
           "Resources", rule, "Usage:", f" 0.0/{cpus} CPU", gpu_line,
           f" 0B/{mem:.2f}GiB memory", f" 0B/{mem * 0.3:.2f}GiB object_store_memory", "",
           "Demands:", " (no resource demands)"])


def stop(ctx, argv):
    p = ClickStyleParser(prog="ray stop", allow_abbrev=False)
    p.add_argument("-f", "--force", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    base = ray_net.ray_dir(ctx)
    pids = [int(n) for n in os.listdir(os.path.join(base, "pids")) if n.isdigit()]
    sig = signal.SIGKILL if args.force else signal.SIGTERM
    stopped = [pid for pid in pids if pid != os.getpid() and _signal(pid, sig)]
    for name in [os.path.join("pids", str(pid)) for pid in pids] + ["current_cluster"]:
        try:
            os.unlink(os.path.join(base, name))
        except OSError:
            pass
    # Printed without waiting: stopping the head of a `--block` container ends the container,
    # and with it this exec.
    say(f"Stopped all {len(stopped)} Ray processes." if stopped
        else "Did not find any active Ray processes.")
    return 0


def _signal(pid, sig):
    """A pid file can outlive its process; never signal a pid that was reused since."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"entry.py" not in f.read():
                return False
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def main(ctx, argv):
    commands = {"start": start, "status": status, "stop": stop}
    if not argv or argv[0] not in commands:
        sys.stderr.write("Usage: ray [OPTIONS] COMMAND [ARGS]...\nTry 'ray --help' for help.\n\n"
                         f"Error: No such command '{argv[0] if argv else ''}'.\n")
        return 2
    return commands[argv[0]](ctx, argv[1:])
