"""Container records: $K3TB_RUN/docker/containers/<id>/{config.json, state.json, container.log}.

config.json (0600, written once at create) is the contract with the engine's entry.py;
state.json is the mutable part (status, pids, exit code), always changed under the
container's lock file. Containers belong to the data root they were created under.
"""
import contextlib
import os
import time

from . import daemon, runtime

ADJECTIVES = ["admiring", "brave", "clever", "eager", "focused", "gifted", "jolly", "keen",
              "nifty", "quirky", "serene", "vibrant", "wizardly", "zealous"]
SURNAMES = ["babbage", "curie", "dijkstra", "euler", "hopper", "knuth", "lovelace", "noether",
            "ritchie", "shannon", "thompson", "turing", "wozniak", "yalow"]


def root():
    return os.path.join(daemon.docker_dir(), "containers")


class Container:
    def __init__(self, cdir):
        self.dir = cdir
        self.config = runtime.read_json(os.path.join(cdir, "config.json"))
        self.state = runtime.read_json(os.path.join(cdir, "state.json"), {})

    @property
    def id(self):
        return self.config["id"]

    @property
    def name(self):
        return self.config["name"]

    @property
    def config_path(self):
        return os.path.join(self.dir, "config.json")

    @property
    def log_path(self):
        return os.path.join(self.dir, "container.log")

    @property
    def lock_path(self):
        return os.path.join(self.dir, "lock")

    @property
    def running(self):
        return self.state.get("status") in ("running", "restarting")

    def reload(self):
        self.state = runtime.read_json(os.path.join(self.dir, "state.json"), {})
        return self

    def exists(self):
        return os.path.isdir(self.dir)

    @contextlib.contextmanager
    def update(self):
        """Lock, hand out the current state dict for editing, save it. No-op once removed."""
        if not self.exists():
            yield {}
            return
        with runtime.locked(self.lock_path):
            state = runtime.read_json(os.path.join(self.dir, "state.json"), {})
            yield state
            if self.exists():
                runtime.write_json_atomic(os.path.join(self.dir, "state.json"), state)
        self.state = state

    def reconcile(self):
        """A running record whose supervisor and process both vanished (node killed, someone
        sent SIGKILL to the supervisor) becomes exited, as docker reports after a crash."""
        s = self.state
        if not self.running or runtime.process_alive(s.get("supervisor_pid"), s.get("supervisor_start")):
            return self
        if runtime.process_alive(s.get("pid"), s.get("pid_start")):
            return self
        with self.update() as state:
            if state.get("status") in ("running", "restarting"):
                state.update(status="exited", exit_code=137, finished_at=time.time(), pid=0)
        return self


def load(cdir):
    try:
        c = Container(cdir)
    except (ValueError, OSError):
        return None
    return c.reconcile() if c.config else None


def all_containers(data_root):
    """Every container created under `data_root`, oldest first."""
    try:
        names = os.listdir(root())
    except FileNotFoundError:
        return []
    found = [load(os.path.join(root(), n)) for n in names]
    found = [c for c in found if c and c.config.get("data_root") == data_root]
    return sorted(found, key=lambda c: c.config["created"])


def find(data_root, ref):
    """By exact name (with or without '/'), full id, or unique id prefix."""
    ref = ref.lstrip("/")
    everything = all_containers(data_root)
    for c in everything:
        if c.name == ref or c.id == ref:
            return c
    matches = [c for c in everything if ref and c.id.startswith(ref)]
    return matches[0] if len(matches) == 1 else None


class NameConflict(Exception):
    def __init__(self, name, other_id):
        super().__init__(f'Conflict. The container name "/{name}" is already in use by container '
                         f'"{other_id}". You have to remove (or rename) that container to be able '
                         "to reuse that name.")


def create(data_root, config):
    """Allocate id (and name unless given) under the names lock and write the record."""
    import random  # not at the top: read-only calls must not pay for it
    import secrets
    with runtime.locked(os.path.join(daemon.docker_dir(), "names.lock")):
        taken = {c.name: c.id for c in all_containers(data_root)}
        name = config.get("name")
        if name in taken:
            raise NameConflict(name, taken[name])
        while not name or name in taken:
            name = f"{random.choice(ADJECTIVES)}_{random.choice(SURNAMES)}"
        cid = secrets.token_hex(32)
        cdir = os.path.join(root(), cid)
        os.makedirs(cdir, mode=0o700)
        config = dict(config, id=cid, name=name, data_root=data_root, created=time.time())
        runtime.write_json_atomic(os.path.join(cdir, "config.json"), config, mode=0o600)
        runtime.write_json_atomic(os.path.join(cdir, "state.json"), {
            "status": "created", "pid": 0, "exit_code": 0, "restart_count": 0,
            "started_at": 0, "finished_at": 0, "execs": []})
        open(os.path.join(cdir, "container.log"), "a").close()
    return Container(cdir)


def delete(container):
    import shutil  # not at the top: read-only calls must not pay for it
    shutil.rmtree(container.dir, ignore_errors=True)
