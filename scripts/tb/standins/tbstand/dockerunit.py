"""docker.service as the node's systemd has it: the unit moby ships, an optional drop-in
with dockerd flags (node.json `dockerd_flags`), and systemd's start rate limit.

The unit is moby contrib/init/systemd/docker.service@docker-v29.1.2 (de45c2ae), comments left out, its
[Unit] StartLimitBurst=3 / StartLimitIntervalSec=60 and [Service] Restart=always /
RestartSec=2 included. A drop-in replaces ExecStart by first clearing it (`ExecStart=`,
systemd.service(5)). `systemctl cat` prints each file after a `# <path>` line, files separated
by a blank line (systemd src/systemctl/systemctl-cat.c).

Start limit as systemd counts it (systemd.unit(5) StartLimitIntervalSec=, StartLimitBurst=):
every start, the manager's own Restart= restarts included, is counted; a start when Burst
starts already happened within Interval is refused (result start-limit-hit) until the interval
passes or `systemctl reset-failed` clears the counter (systemctl(1)). A failed dockerd is
restarted by systemd RestartSec=2 later, again and again, so one failed start by hand uses the
whole burst within 2*(Burst-1) s.
"""
import shlex
import time

from . import runtime

UNIT_PATH = "/lib/systemd/system/docker.service"
DROPIN_PATH = "/etc/systemd/system/docker.service.d/data-root.conf"
EXEC_START = "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"
BURST, INTERVAL, RESTART_SEC = 3, 60.0, 2.0
UNIT = f"""[Unit]
Description=Docker Application Container Engine
Documentation=https://docs.docker.com
After=network-online.target nss-lookup.target docker.socket firewalld.service containerd.service time-set.target
Wants=network-online.target containerd.service
Requires=docker.socket
StartLimitBurst={BURST}
StartLimitIntervalSec={int(INTERVAL)}

[Service]
Type=notify
ExecStart={EXEC_START}
ExecReload=/bin/kill -s HUP $MAINPID
TimeoutStartSec=0
RestartSec={int(RESTART_SEC)}
Restart=always
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
Delegate=yes
KillMode=process
OOMScoreAdjust=-500

[Install]
WantedBy=multi-user.target
"""
LIMIT_HIT = ("Job for docker.service failed because start of the service was attempted too "
             "often.\nSee \"systemctl status docker.service\" and \"journalctl -xeu "
             "docker.service\" for details.\nTo force a start use \"systemctl reset-failed "
             "docker.service\" followed by \"systemctl start docker.service\" again.")


def extra_flags():
    return [str(f) for f in runtime.node_config().get("dockerd_flags") or []]


def cat_text():
    text = f"# {UNIT_PATH}\n{UNIT}"
    flags = extra_flags()
    if flags:
        argv = EXEC_START.split(" ", 1)
        text += (f"\n# {DROPIN_PATH}\n[Service]\nExecStart=\nExecStart={argv[0]} "
                 f"{shlex.join(flags)} {argv[1]}\n")
    return text


def flag_data_root():
    """The --data-root the unit gives dockerd, or None."""
    flags = extra_flags()
    for i, flag in enumerate(flags):
        name, eq, value = flag.partition("=")
        if name == "--data-root":
            return value if eq else (flags[i + 1] if i + 1 < len(flags) else None)
    return None


def limit_hit(state, now=None):
    now = time.time() if now is None else now
    recent = [t for t in state.get("starts", []) if now - t < INTERVAL]
    state["starts"] = recent
    return len(recent) >= BURST


def count_start(state, failed, now=None):
    """Record a start; a failed one is followed by systemd's own restarts up to the limit."""
    now = time.time() if now is None else now
    starts = state.setdefault("starts", [])
    starts.append(now)
    while failed and len(starts) < BURST:
        starts.append(starts[-1] + RESTART_SEC)


def reset_failed(state):
    state["starts"] = []
    if state.get("service") == "failed":
        state["service"] = "inactive"
