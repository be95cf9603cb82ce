"""The serve-time guard: one per node, started detached after verify, standard library only.

When one rank of a multi-node engine dies, the others do not exit: they hang in NCCL holding
their GPUs and the endpoint accepts requests it never answers. The guard fail-stops the group:
it watches its own engine container (`docker wait`: no polling), the other nodes' guards (signed
long polls on the private network, guard_http.py) and, on the head, the serving port. On the
first failure anywhere it writes an incident record and stops its local engine container
(docker stop, the engine's grace period). It never restarts an engine: `up` does that, after
which the guard step replaces this spent guard.

usage: python3 guard.py CONFIG.json   (the secret is read from the file the config names)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, TypedDict

sys.dont_write_bytecode = True  # nothing but its own files in the guard dir
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docker_inspect import Container, parse_inspect
import guard_http as net
import guard_progress as progress
import guard_record as rec
import guard_wedge as wedge

if TYPE_CHECKING:
    from types import FrameType

    from guard_record import Config, Doc, Engine, PeerConfig

WEDGE_STOP_GRACE = 5  # seconds: a wedged engine cannot drain its requests anyway


class PeerSeen(TypedDict):
    """What this guard last heard from one peer's guard (on its own monotonic clock)."""
    last_ok: float
    error: str | None
    state: Doc | None



def engine_state(info: Container | None, engine_id: str) -> tuple[bool, int | None, str | None]:
    """(running, exit code, FinishedAt) of the container this guard watches, from its inspect.
    Another container under the name (a relaunch) or none at all: not running, code unknown."""
    if info is None or info.id != engine_id:
        return False, None, None
    if info.running:
        return True, None, None
    return False, info.exit_code, info.finished

class Guard:
    def __init__(self, cfg: Config, secret: str):
        self.cfg, self.secret = cfg, secret
        self.dir = cfg["dir"]
        self.lock = threading.Lock()
        self.engine: Engine = {"running": True, "exit_code": None, "id": None}
        self.peers: dict[str, PeerSeen] = {
            p["node"]: {"last_ok": time.monotonic(), "error": None, "state": None}
            for p in cfg["peers"]}
        self.incident: Doc | None = None
        self.refused_since: float | None = None
        self.secrets = rec.secret_values(secret, cfg.get("secrets_dir"))
        self.hold = net.hold_seconds(cfg["peer_timeout"], cfg["poll"])
        self.published = net.Versioned(self.public_state)
        metrics_port = cfg.get("metrics_port")
        self.local = progress.Local(metrics_port, cfg["poll"]) if metrics_port else None
        probe = cfg.get("probe")
        self.probe = progress.Probe(probe["port"], probe["model"],
                                    progress.read_api_key(probe.get("key_file")),
                                    cfg["wedge_seconds"] + 5) if probe else None

    # -- log and state -------------------------------------------------------------------
    def log(self, text: str) -> None:
        line = f"{rec.now_iso()} {self.cfg['node']} {rec.redact(text, self.secrets)}\n"
        with open(os.path.join(self.dir, "guard.log"), "a", encoding="utf-8") as fh:
            fh.write(line)

    def write_state(self) -> None:
        rec.atomic_write_json(os.path.join(self.dir, "state.json"), {
            "pid": os.getpid(), "digest": self.cfg["digest"], "beat": time.time(),
            "phase": "fired" if self.incident else "watching", "container_id": self.engine["id"]})

    def public_state(self) -> Doc:
        with self.lock:
            return {"node": self.cfg["node"], "rank": self.cfg["rank"],
                    "digest": self.cfg["digest"], "engine": rec.engine_doc(self.engine),
                    "incident": self.incident,
                    "progress": progress.public_doc(self.local.public()) if self.local else None}

    def engine_id(self) -> str:
        """The watched container's id: start() sets it before any thread or stop needs it."""
        found = self.engine["id"]
        if found is None:
            raise RuntimeError("the guard has not started: no engine container to act on")
        return found

    # -- the engine container ----------------------------------------------------------
    def inspect(self) -> Container | None:
        """None when the container is gone (`[]` on stdout, "Error: No such container")."""
        res = subprocess.run(["docker", "inspect", "--type", "container", self.cfg["container"]],
                             capture_output=True, text=True, timeout=60, check=False)
        return parse_inspect(res.stdout)

    def watch_engine(self) -> None:
        """Blocks in `docker wait` until the container stops; re-checks with inspect."""
        while True:
            subprocess.run(["docker", "wait", self.engine_id()], capture_output=True, check=False)
            running, code, finished = engine_state(self.inspect(), self.engine_id())
            if running:
                time.sleep(5)  # docker wait failed for another reason (daemon restart)
                continue
            with self.lock:
                self.engine.update({"running": False, "exit_code": code, "finished": finished})
            self.published.changed()
            return

    def stop_engine(self) -> str:
        if not self.engine["running"]:
            return f"already exited ({self.engine['exit_code']})"
        failure = self.incident.get("failure") if self.incident else None
        wedged = isinstance(failure, dict) and failure.get("kind") == "wedged"
        grace = str(int(min(self.cfg["stop_grace"], WEDGE_STOP_GRACE) if wedged
                        else self.cfg["stop_grace"]))
        res = subprocess.run(["docker", "stop", "-t", grace, self.engine_id()],
                             capture_output=True, text=True, check=False)
        self.log(f"docker stop -t {grace} {self.cfg['container']}: exit {res.returncode}")
        return f"stopped by the guard at {rec.now_iso()}" if res.returncode == 0 else \
            f"docker stop failed ({res.returncode}): {res.stderr.strip()[:200]}"

    # -- the other guards --------------------------------------------------------------
    def poll_peer(self, peer: PeerConfig) -> None:
        """The peer's state as it changes (a held poll answers at once on a change), with a
        heartbeat every `hold` seconds; a failed poll is retried after one poll interval."""
        link = net.PeerLink(peer["address"], self.cfg["port"], self.secret, self.hold)
        while True:
            try:
                state = link.ask()
                with self.lock:
                    self.peers[peer["node"]].update(
                        {"last_ok": time.monotonic(), "error": None, "state": state})
                if link.legacy:
                    time.sleep(self.cfg["poll"])
            except OSError as err:
                with self.lock:
                    self.peers[peer["node"]]["error"] = str(err)[:200]
                time.sleep(self.cfg["poll"])

    def serving(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.cfg["serve_port"]), timeout=2).close()
            return True
        except OSError:
            return False

    # -- deciding ----------------------------------------------------------------------
    def first_failure(self) -> Doc | None:
        """This round's reason to stop, as an incident record, or None."""
        cfg, now = self.cfg, time.monotonic()
        with self.lock:
            engine, peers = self.engine.copy(), {n: p.copy() for n, p in self.peers.items()}
        if not engine["running"]:
            first = rec.failure(cfg["node"], cfg["rank"], "exited", exit_code=engine["exit_code"],
                                at=engine.get("finished"))
            return rec.incident(cfg, first, cfg["node"], self.evidence())
        for peer in cfg["peers"]:
            theirs = (peers[peer["node"]]["state"] or {}).get("incident")
            if isinstance(theirs, dict) and theirs:
                return rec.adopt(cfg, theirs, peer["node"])
        # A healthy peer answers at least every `hold` seconds (its heartbeat).
        silent = max(5.0, 3 * cfg["poll"], 2 * self.hold)
        quiet = {n for n, p in peers.items() if now - p["last_ok"] > silent}
        lost = [p for p in cfg["peers"] if now - peers[p["node"]]["last_ok"] > cfg["peer_timeout"]]
        if lost and len(quiet) == len(cfg["peers"]) > 1:
            # Nobody answers (their polls fell silent within a round of each other): this
            # node is the one cut off (partition, its NIC), not all the rest.
            first = rec.failure(cfg["node"], cfg["rank"], "unreachable",
                                detail=f"this node reaches none of its {len(quiet)} peers")
            return rec.incident(cfg, first, cfg["node"])
        if lost:
            seen = peers[lost[0]["node"]]
            first = rec.failure(lost[0]["node"], lost[0]["rank"], "unreachable",
                                detail=f"its guard gave no answer for {now - seen['last_ok']:.0f}s "
                                f"({seen['error']})")
            return rec.incident(cfg, first, cfg["node"])
        return self.serving_failure(now) or self.wedge_failure(now, peers)

    # -- progress (head only: it has the probe) ----------------------------------------
    def views(self, local: progress.Local, peers: dict[str, PeerSeen]) -> list[wedge.View]:
        now = time.monotonic()
        mine = [wedge.view(self.cfg["node"], self.cfg["rank"], local.public(), now)]
        theirs = [wedge.view(p["node"], p["rank"], progress.public_from(
            (peers[p["node"]]["state"] or {}).get("progress")), peers[p["node"]]["last_ok"])
            for p in self.cfg["peers"]]
        return [v for v in mine + theirs if v]

    def wedge_failure(self, now: float, peers: dict[str, PeerSeen]) -> Doc | None:
        probe = self.cfg["probe"]
        if self.probe is None or self.local is None or probe is None:
            return None
        views, cfg = self.views(self.local, peers), self.cfg
        if wedge.wants_probe(now, views, self.probe.state(), probe["every"]):
            self.probe.start()
        # A peer's view reaches the head within a heartbeat (hold), its samples are a poll
        # plus their timeout apart: older than that, its metrics did not answer.
        silent_after = self.hold + 2 * cfg["poll"] + progress.SAMPLE_TIMEOUT + 1
        verdict = wedge.judge(now, views, self.probe.state(), cfg["wedge_seconds"], silent_after)
        if verdict is None:
            return None
        first_rank = verdict["ranks"][0]
        first = rec.failure(first_rank["node"], first_rank["rank"], "wedged",
                            detail=wedge.cause_detail(verdict))
        return {**rec.incident(cfg, first, cfg["node"], self.evidence()),
                "wedge": wedge.verdict_doc(verdict)}

    def serving_failure(self, now: float) -> Doc | None:
        if not self.cfg.get("serve_port"):
            return None
        if self.serving():
            self.refused_since = None
            return None
        self.refused_since = self.refused_since or now
        if now - self.refused_since <= self.cfg["peer_timeout"]:
            return None
        first = rec.failure(self.cfg["node"], self.cfg["rank"], "not serving",
                            detail=f"port {self.cfg['serve_port']} refused for "
                            f"{now - self.refused_since:.0f}s")
        return rec.incident(self.cfg, first, self.cfg["node"], self.evidence())

    def evidence(self) -> Doc:
        return {"log_tail": rec.log_tail(self.cfg["container"], self.secrets),
                "kernel": rec.kernel_lines(self.secrets)}

    def fire(self, found: Doc) -> None:
        with self.lock:
            self.incident = found
        self.published.changed()  # the held polls of every peer answer now
        failure = found.get("failure")   # a peer's record (adopted) is only read as JSON
        cause = failure.get("cause") if isinstance(failure, dict) else None
        self.log(f"incident: {cause} (seen by {found.get('seen_by')}); "
                 "stopping the local engine")
        path = os.path.join(self.dir, "incident.json")
        rec.atomic_write_json(path, found)  # on record before the slow stop
        found = {**found, **self.leave_router(), "local_engine": self.stop_engine()}
        with self.lock:
            self.incident = found
        self.published.changed()
        rec.atomic_write_json(path, found)
        self.write_state()

    def leave_router(self) -> Doc:
        """A fleet's group: out of the router before its ranks stop (guard_router.py)."""
        link = self.cfg.get("router")
        if not link:
            return {}
        import guard_router   # shipped for a fleet's groups only (node/guard_config.py)
        said = guard_router.leave(link)
        self.log(said)
        return {"router": said}

    # -- main --------------------------------------------------------------------------
    def start(self) -> None:
        info = self.inspect()
        if info is None or not info.running:
            self.log("no running engine container to guard; exiting")
            sys.exit(1)
        self.engine["id"] = info.id
        self.write_state()
        cfg = self.cfg
        net.serve(cfg["bind"], cfg["port"], self.secret, self.published, self.hold)
        threading.Thread(target=self.watch_engine, daemon=True).start()
        if self.local:
            threading.Thread(target=self.local.run, daemon=True).start()
        for peer in self.cfg["peers"]:
            threading.Thread(target=self.poll_peer, args=(peer,), daemon=True).start()
        self.log(f"guarding {self.cfg['container']} (rank {self.cfg['rank']}), "
                 f"{len(self.cfg['peers'])} peers, peer_timeout {self.cfg['peer_timeout']}s")

    def run(self) -> None:
        self.start()
        last_beat = time.monotonic()
        while True:
            if self.incident is None:
                found = self.first_failure()
                if found:
                    self.fire(found)
            if time.monotonic() - last_beat > 10:
                self.write_state()
                last_beat = time.monotonic()
            time.sleep(self.cfg["poll"])


def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as fh:
        cfg: Config = json.load(fh)   # the laptop wrote it: node/guard_config.py
    with open(cfg["secret_file"], encoding="utf-8") as fh:
        secret = fh.read().strip()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    guard = Guard(cfg, secret)

    def stopped(_signum: int, _frame: FrameType | None) -> None:
        # `down`, or a replacement: leave the engine alone
        guard.log("stopped (SIGTERM); the engine is left as it is")
        os._exit(0)
    signal.signal(signal.SIGTERM, stopped)
    guard.run()


if __name__ == "__main__":
    main(sys.argv[1])
