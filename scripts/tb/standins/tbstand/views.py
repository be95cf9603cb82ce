"""How containers look from the docker CLI: `ps` rows, status words, `inspect` documents."""
import time

from . import runtime


def status_text(c, now=None):
    now = now or time.time()
    s = c.state
    status = s.get("status")
    if status == "running":
        return "Up " + runtime.human_duration(now - s["started_at"])
    if status == "restarting":
        return f"Restarting ({s['exit_code']}) {runtime.human_duration(now - s['finished_at'])} ago"
    if status == "exited":
        return f"Exited ({s['exit_code']}) {runtime.human_duration(now - s['finished_at'])} ago"
    return "Created"


def command_text(c, trunc=True):
    command = " ".join(c.config["cmd"])
    if trunc and len(command) > 20:
        command = command[:19] + "…"
    return '"' + command.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ps_row(c, trunc=True):
    """The object `docker ps --format` templates see (docker's ContainerContext fields)."""
    labels = c.config.get("labels", {})
    created = time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(c.config["created"]))
    return {
        "ID": c.id[:12] if trunc else c.id, "Image": c.config["image"],
        "Command": command_text(c, trunc), "CreatedAt": created,
        "RunningFor": runtime.human_duration(time.time() - c.config["created"]) + " ago",
        "Ports": "", "State": c.state.get("status", "created"), "Status": status_text(c),
        "Size": "0B", "Names": c.name, "Networks": c.config.get("network", "bridge"),
        "Labels": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        "Label": lambda key: labels.get(key, ""),
        "Mounts": ",".join(m["host"] or "" for m in c.config.get("mounts", [])),
        "LocalVolumes": "0",
    }


PS_HEADERS = {"ID": "CONTAINER ID", "Image": "IMAGE", "Command": "COMMAND", "CreatedAt": "CREATED AT",
              "RunningFor": "CREATED", "Ports": "PORTS", "State": "STATE", "Status": "STATUS",
              "Size": "SIZE", "Names": "NAMES", "Networks": "NETWORKS", "Labels": "LABELS",
              "Mounts": "MOUNTS", "LocalVolumes": "LOCAL VOLUMES", "Label": lambda key: "LABEL"}
PS_DEFAULT = "table {{.ID}}\t{{.Image}}\t{{.Command}}\t{{.RunningFor}}\t{{.Status}}\t{{.Ports}}\t{{.Names}}"


def _state_doc(c):
    s = c.state
    status = s.get("status", "created")
    return {"Status": status, "Running": status in ("running", "restarting"), "Paused": False,
            "Restarting": status == "restarting", "OOMKilled": False, "Dead": False,
            "Pid": s.get("pid", 0) if status == "running" else 0, "ExitCode": s.get("exit_code", 0),
            "Error": s.get("error") or "", "StartedAt": runtime.rfc3339(s.get("started_at")),
            "FinishedAt": runtime.rfc3339(s.get("finished_at"))}


def _host_config(cfg):
    gpus = cfg.get("gpu_request")
    devices = None
    if gpus:
        devices = [{"Driver": "", "Count": gpus["count"] if gpus["count"] is not None else 0,
                    "DeviceIDs": gpus["ids"], "Capabilities": [["gpu"]], "Options": {}}]
    binds = [f"{m['host']}:{m['container']}" + (":ro" if m["ro"] else "")
             for m in cfg.get("mounts", []) if m["host"]]
    return {"Binds": binds or None, "NetworkMode": cfg.get("network", "bridge"),
            "RestartPolicy": cfg.get("restart"), "AutoRemove": bool(cfg.get("rm")),
            "IpcMode": cfg.get("ipc") or "private", "Privileged": bool(cfg.get("privileged")),
            "ShmSize": cfg.get("shm_size", 67108864), "Ulimits": cfg.get("ulimits") or None,
            "DeviceRequests": devices, "Init": True if cfg.get("init") else None,
            "PortBindings": {p: [{"HostIp": "", "HostPort": p.split(":")[0]}] for p in cfg.get("publish", [])}}


def _mounts(cfg):
    return [{"Type": "bind" if m["host"] and m["host"].startswith("/") else "volume",
             "Source": m["host"] or "", "Destination": m["container"], "Mode": "ro" if m["ro"] else "",
             "RW": not m["ro"], "Propagation": "rprivate"} for m in cfg.get("mounts", [])]


def inspect_doc(c):
    """`docker inspect` for a container, in the real document's shape (a useful subset)."""
    cfg = c.config
    env = [f"{k}={v}" for k, v in cfg["env"].items()]
    return {
        "Id": c.id, "Created": runtime.rfc3339(cfg["created"]),
        "Path": cfg["cmd"][0] if cfg["cmd"] else "", "Args": cfg["cmd"][1:],
        "State": _state_doc(c), "Image": cfg.get("image_id", ""),
        "LogPath": c.log_path, "Name": "/" + c.name, "RestartCount": c.state.get("restart_count", 0),
        "Driver": "overlay2", "Platform": "linux", "HostConfig": _host_config(cfg),
        "Mounts": _mounts(cfg),
        "Config": {"Hostname": cfg.get("hostname", c.id[:12]), "User": cfg.get("user") or "",
                   "Tty": bool(cfg.get("tty")), "Env": env, "Cmd": cfg.get("config_cmd"),
                   "Image": cfg["image"], "WorkingDir": cfg.get("workdir") or "",
                   "Entrypoint": cfg.get("config_entrypoint"), "Labels": cfg.get("labels", {})},
        "NetworkSettings": {"Networks": {cfg.get("network", "bridge"): {"NetworkID": "", "IPAddress": ""}}},
    }

