"""nvidia-smi stand-in: the node's GPUs from node.json, memory in use from a live engine's gpu.json.

A lost GPU (node.json `lost_gpu`: its index; profile lost-gpu): every query that reaches it
prints only "Unable to determine the device handle for GPU<bus id>: Unknown Error" and exits
255, as published transcripts show for a GPU that fell off the bus (NVIDIA/open-gpu-kernel-
modules#387, driver 520; meta-llama/llama-models#200, driver 560; cihlab/fics-cluster-guide#53,
2026). The format string is in the driver's nvidia-smi ("Unable to determine the device handle
for GPU%s: %s", Debian nvidia-smi 535.261.03); 255 is the man page's "Other error" return code
(an NVML "Unknown Error" is not one of its specific codes; 15 is "GPU is lost"). `-i` naming
only healthy GPUs still answers (the man page's changelog: "nvidia-smi -i can now query
information from healthy GPU when there is a problem with other GPU in the system").

`topo -m` prints a real transcript, verbatim, of a node shaped like this one (GPU count, HCA
count: node.json `ib_hcas`), from tests/fixtures/real/nvidia-smi (the .source beside each says
where it comes from; the testbed copies them to <standins>/real/). A shape no transcript has
fails with a message naming the testbed, rather than a made-up matrix.
"""
import os
import sys
import time

from . import runtime

COMPUTE_CAP = {"h100": "9.0", "h200": "9.0", "b200": "10.0", "b300": "10.3"}
POWER_LIMIT_W = {"h100": 700, "h200": 700, "b200": 1000, "b300": 1100}
BAD_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NAMESPACE_DNS = bytes.fromhex("6ba7b8109dad11d180b400c04fd430c8")  # uuid.NAMESPACE_DNS.bytes


def uuid5(name):
    """str(uuid.uuid5(uuid.NAMESPACE_DNS, name)): importing uuid costs more than the query."""
    value = int.from_bytes(runtime.digest("sha1", NAMESPACE_DNS + name.encode()).digest()[:16], "big")
    value = value & ~(0xc000 << 48) | 0x8000 << 48  # RFC 4122 variant
    value = value & ~(0xf000 << 64) | 5 << 76  # version 5: name-based, SHA-1
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Gpu:
    def __init__(self, node, index, used_mib, pid):
        self.node, self.index, self.used, self.pid = node, index, used_mib, pid
        self.total = int(node["gpu_mem_mib"])
        self.uuid = "GPU-" + uuid5(f"k3tb.{node['name']}.{index}")
        self.bus_id = f"00000000:{0x18 + 0x10 * index:02X}:00.0"
        self.power_limit = POWER_LIMIT_W.get(node.get("gpu"), 700)
        self.power = 69 + (300 if used_mib > 1024 else 0)


def engine_memory(node):
    """Per-GPU MiB in use: gpu.json counts only while the engine pid that wrote it lives."""
    report = runtime.read_json(os.path.join(runtime.run_dir(), "gpu.json"), {}) or {}
    count = int(node["gpu_count"])
    pid = report.get("pid")
    if not runtime.process_alive(pid):
        return [0] * count, None
    used = [int(x) for x in report.get("used_mib", [])][:count]
    return used + [0] * (count - len(used)), pid


def gpus(node):
    used, pid = engine_memory(node)
    return [Gpu(node, i, used[i], pid) for i in range(int(node["gpu_count"]))]


def _gpu_fields(node, count):
    """field name -> (header unit or None, value function)."""
    mib = "MiB"
    fields = {
        "index": (None, lambda g: str(g.index)),
        "name": (None, lambda g: node["gpu_name"]),
        "uuid": (None, lambda g: g.uuid),
        "count": (None, lambda g: str(count)),
        "driver_version": (None, lambda g: node["driver"]),
        "memory.total": (mib, lambda g: str(g.total)),
        "memory.used": (mib, lambda g: str(g.used)),
        "memory.free": (mib, lambda g: str(g.total - g.used)),
        "memory.reserved": (mib, lambda g: "0"),
        "pci.bus_id": (None, lambda g: g.bus_id),
        "compute_cap": (None, lambda g: COMPUTE_CAP.get(node.get("gpu"), "9.0")),
        "utilization.gpu": ("%", lambda g: "0"),
        "utilization.memory": ("%", lambda g: "0"),
        "temperature.gpu": (None, lambda g: "34"),
        "power.draw": ("W", lambda g: f"{g.power:.2f}"),
        "power.limit": ("W", lambda g: f"{g.power_limit:.2f}"),
        "pstate": (None, lambda g: "P0"),
        "persistence_mode": (None, lambda g: "Enabled"),
        "mig.mode.current": (None, lambda g: "Disabled"),
        "serial": (None, lambda g: f"{1650000000000 + g.index}"),
        "vbios_version": (None, lambda g: "96.00.99.00.01"),
        "timestamp": (None, lambda g: time.strftime("%Y/%m/%d %H:%M:%S.000")),
    }
    aliases = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
               "driver_version": "driver_version", "pci.bus": "pci.bus_id"}
    for alias, real in aliases.items():
        fields.setdefault(alias, fields[real])
    return fields


def _app_fields(node):
    return {
        "pid": (None, lambda g: str(g.pid)),
        "process_name": (None, lambda g: _process_name(g.pid)),
        "name": (None, lambda g: _process_name(g.pid)),
        "used_memory": ("MiB", lambda g: str(g.used)),
        "used_gpu_memory": ("MiB", lambda g: str(g.used)),
        "gpu_uuid": (None, lambda g: g.uuid),
        "gpu_bus_id": (None, lambda g: g.bus_id),
    }


def _process_name(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode() or "python3"
    except OSError:
        return "python3"


def render_csv(rows, names, table, fmt):
    """Print `rows` (Gpu objects) as nvidia-smi's csv for the requested field names."""
    opts = [o.strip() for o in fmt.split(",")]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        print(f'"{fmt}" is not a valid format.', file=sys.stdout)
        return 2
    for name in names:
        if name not in table:
            print(f'Field "{name}" is not a valid field to query.\n')
            return 2
    if "noheader" not in opts:
        print(", ".join(n + (f" [{table[n][0]}]" if table[n][0] else "") for n in names))
    for g in rows:
        values = []
        for n in names:
            unit, value = table[n]
            text = value(g)
            values.append(text if unit is None or "nounits" in opts else f"{text} {unit}")
        print(", ".join(values))
    return 0


def render_query(node, rows):
    """`nvidia-smi -q`: the driver's full report, abridged to the sections a real one starts
    with (same labels, same 42-column alignment)."""
    def row(label, value, indent=0):
        return f"{' ' * indent}{label:<{42 - indent}}: {value}"
    lines = ["", "==============NVSMI LOG==============", "",
             row("Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
             row("Driver Version", node["driver"]), row("CUDA Version", node["cuda"]), "",
             row("Attached GPUs", len(rows))]
    for g in rows:
        lines += [f"GPU {g.bus_id}", row("Product Name", node["gpu_name"], 4),
                  row("Product Brand", "NVIDIA", 4), row("Persistence Mode", "Enabled", 4),
                  row("GPU UUID", g.uuid, 4), row("Minor Number", g.index, 4),
                  "    FB Memory Usage", row("Total", f"{g.total} MiB", 8),
                  row("Reserved", "0 MiB", 8), row("Used", f"{g.used} MiB", 8),
                  row("Free", f"{g.total - g.used} MiB", 8), "    BAR1 Memory Usage",
                  row("Total", "131072 MiB", 8), row("Used", "1 MiB", 8),
                  row("Free", "131071 MiB", 8)]
    print("\n".join(lines))
    return 0


def render_table(node, rows):
    bar = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    head = (f"| NVIDIA-SMI {node['driver']:<23}Driver Version: {node['driver']:<15}"
            f"CUDA Version: {node['cuda']:<9}|")
    lines = [time.strftime("%a %b %d %H:%M:%S %Y") + "       ", "+" + "-" * 89 + "+", head,
             "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for g in rows:
        lines.append(f"|{g.index:>4}  {node['gpu_name'][:29]:<29}  On  |{g.bus_id:>19} Off |{'0':>21} |")
        lines.append(f"| N/A   34C    P0{str(g.power) + 'W':>16} / {str(g.power_limit) + 'W':>5} |"
                     f"{str(g.used) + 'MiB':>11} / {str(g.total) + 'MiB':>9} |{'0':>7}%{'Default':>13} |")
        lines.append(f"|{'':41}|{'':24}|{'Disabled':>21} |")
        lines.append(bar)
    lines += ["", "+" + "-" * 89 + "+", "| Processes:".ljust(90) + "|",
              "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|" + "=" * 89 + "|"]
    procs = [g for g in rows if g.pid and g.used]
    for g in procs:
        name = _process_name(g.pid)[-34:]
        lines.append(f"|  {g.index:>3}   N/A  N/A  {g.pid:>14}      C   {name:<34}"
                     f"{str(g.used) + 'MiB':>11} |")
    if not procs:
        lines.append("|  No running processes found".ljust(90) + "|")
    lines.append("+" + "-" * 89 + "+")
    print("\n".join(lines))
    return 0


# (GPUs, HCAs) -> the transcript of such a node (path under tests/fixtures/real/nvidia-smi)
TOPO = {(8, 8): "570.133.20/topo-m-h100-8x-8hca.txt",        # 8x H100, mlx5_0..7 one PIX each
        (8, 0): "unknown/topo-m-h100-8x-p5-no-hca.txt",      # 8x H100 (AWS p5), no HCA
        (8, 12): "unknown/topo-m-h100-8x-12nic.txt"}         # 8x H100, 8 IB + 4 Ethernet
_HERE = os.path.dirname(os.path.abspath(__file__))
_REAL = [os.path.join(_HERE, "..", "real", "nvidia-smi"),     # the testbed's copy
         os.path.join(_HERE, "..", "..", "..", "..", "tests", "fixtures", "real", "nvidia-smi")]


def render_topo(node):
    shape = (int(node["gpu_count"]), int(node.get("ib_hcas") or 0))
    name = TOPO.get(shape)
    for root in _REAL if name else ():
        if os.path.isfile(os.path.join(root, name)):
            with open(os.path.join(root, name)) as f:
                sys.stdout.write(f.read())
            return 0
    print(f"k3tb nvidia-smi: no sourced `topo -m` transcript for {shape[0]} GPUs with "
          f"{shape[1]} HCAs (have: {sorted(TOPO)})", file=sys.stderr)
    return 2


def parse_args(argv):
    """Return a dict of recognised options, "topo" for `topo -m`, or None if the combination is
    not one we answer."""
    if list(argv) == ["topo", "-m"]:
        return "topo"
    opts = {"query_gpu": None, "query_apps": None, "format": None, "ids": None, "list": False,
            "query": False}
    keys = {"--query-gpu": "query_gpu", "--query-compute-apps": "query_apps", "--format": "format",
            "-i": "ids", "--id": "ids"}
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if arg in ("-L", "--list-gpus"):
            opts["list"] = True
        elif arg in ("-q", "--query"):
            opts["query"] = True
        elif name in keys:
            if not eq:
                if not args:
                    return None
                value = args.pop(0)
            opts[keys[name]] = value
        else:
            return None
    return opts


LOST_EXIT = 255


def lost_in(node, rows):
    """The lost GPU among the rows asked about, or None."""
    lost = node.get("lost_gpu")
    return next((g for g in rows if lost is not None and g.index == int(lost)), None)


def handle_error(gpu):
    """The message names the bus id with a 4-digit domain, as in the transcripts."""
    return f"Unable to determine the device handle for GPU{gpu.bus_id[4:]}: Unknown Error"


def select(rows, ids):
    if ids is None:
        return rows
    wanted = [i.strip() for i in ids.split(",")]
    return [g for g in rows if str(g.index) in wanted or g.uuid in wanted]


def main(argv):
    runtime.log_call("nvidia-smi", argv)
    opts = parse_args(argv)
    if opts is None:
        print(BAD_ARGS)
        return 2
    node = runtime.node_config()
    count = int(node["gpu_count"])
    if count == 0:
        print("No devices were found")
        return 6
    rows = select(gpus(node), None if opts == "topo" else opts["ids"])
    lost = lost_in(node, rows)
    if lost is not None:
        print(handle_error(lost))
        return LOST_EXIT
    if opts == "topo":
        return render_topo(node)
    if opts["query"]:
        return render_query(node, rows)
    if opts["list"]:
        for g in rows:
            print(f"GPU {g.index}: {node['gpu_name']} (UUID: {g.uuid})")
        return 0
    query = opts["query_gpu"] or opts["query_apps"]
    if query is not None:
        if opts["format"] is None:
            print("'--format=' switch is missing. Please run 'nvidia-smi -h' for help.")
            return 2
        names = [n.strip() for n in query.split(",")]
        if opts["query_gpu"] is not None:
            return render_csv(rows, names, _gpu_fields(node, count), opts["format"])
        apps = [g for g in rows if g.pid and g.used]
        return render_csv(apps, names, _app_fields(node), opts["format"])
    return render_table(node, rows)
