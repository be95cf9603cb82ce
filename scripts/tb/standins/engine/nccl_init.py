"""NCCL's INFO lines at communicator init, for the transport the container was given.

NCCL 2.30.7 (NVIDIA/nccl@5067397c): prefix "host:pid:tid [dev] NCCL INFO " (src/debug.cc);
"NET/IB : Using [0]mlx5_0:1/IB [1]... [RO]; OOB eth0:ADDR<0>" (src/transport/net_ib/init.cc:513)
or "NET/Socket : Using [0]eth0:ADDR<0>" (src/transport/net_socket.cc:77), then "Using network
IB|Socket" (src/init.cc:486). Printed only with NCCL_DEBUG=INFO, as the real library does.
IB needs the verbs devices inside the container (`--device /dev/infiniband`) and
NCCL_IB_DISABLE unset or 0 (src/transport/net_ib/init.cc NCCL_PARAM IbDisable); NCCL_IB_HCA
picks HCAs by name prefix (docs: NCCL_IB_HCA "mlx5" matches mlx5_0, mlx5_1)."""
import os
import threading

SYS_IB = "/sys/class/infiniband"


def _hcas(env):
    try:
        names = sorted(os.listdir(SYS_IB))
    except OSError:
        return []
    wanted = [w for w in (env.get("NCCL_IB_HCA") or "").split(",") if w]
    return [n for n in names if not wanted or any(n.startswith(w.split(":")[0]) for w in wanted)]


def transport(container, env):
    """("IB", [hca, ...]) or ("Socket", [])."""
    passed = any(os.path.normpath(d.get("host", "")) in ("/dev/infiniband",)
                 or d.get("host", "").startswith("/dev/infiniband/")
                 for d in container.config.get("devices") or [])
    verbs = os.path.isdir("/dev/infiniband") and any(
        n.startswith("uverbs") for n in os.listdir("/dev/infiniband"))
    hcas = _hcas(env)
    if passed and verbs and hcas and env.get("NCCL_IB_DISABLE", "0") != "1":
        return "IB", hcas
    return "Socket", []


def lines(container, env, nic, address):
    if (env.get("NCCL_DEBUG") or "").upper() not in ("INFO", "TRACE"):
        return []
    prefix = f"{os.uname().nodename}:{os.getpid()}:{threading.get_native_id()} [0] NCCL INFO "
    kind, hcas = transport(container, env)
    if kind == "IB":
        used = " ".join(f"[{i}]{h}:1/IB" for i, h in enumerate(hcas))
        net = f"NET/IB : Using {used} [RO]; OOB {nic}:{address}<0>"
    else:
        net = f"NET/Socket : Using [0]{nic}:{address}<0>"
    return [prefix + net, prefix + f"Using network {kind}"]
