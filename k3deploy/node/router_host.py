"""The fleet's router on its node, over that node's SSH connection: look at it, start it (its
keys in a 0600 file, never in argv), ask its admin API, chat through it, stop it.

The admin API and the chat are called from the router's node itself (remote/router_admin.py,
remote/endpoint_probe.py, their keys on stdin): the laptop need not reach the router's port,
as verify probes a group's engine from its head.
"""

from __future__ import annotations

import json
import shlex
from typing import NamedTuple, cast

from k3deploy.cluster import router_service as svc
from k3deploy.cluster.fleet_router import RouterSpec
from k3deploy.core.digest import sha256_text
from k3deploy.core.errors import StepFailed
from k3deploy.core.redact import redact
from k3deploy.core.jsonvalue import JSON
from k3deploy.facts import http
from k3deploy.facts.docker import Container, inspect_script, parse_inspect
from k3deploy.facts.lastjson import last_json_line
from k3deploy.node import http_probe
from k3deploy.node.transport import NodeConnection
from k3deploy.remote import bundled, script_text
from k3deploy.remote.router_reconcile import Worker

STEP = "router"
ADMIN = bundled("router_admin.py", ("router_reconcile.py",))
MARK = "--k3deploy-router-files--"
ADMIN_TIMEOUT = 30.0


class RouterLook(NamedTuple):
    container: Container | None
    files_sha: str | None        # sha256 of the args file then the launcher, None if absent

    def serving(self, wanted_sha: str) -> bool:
        """Running with the files it would be started with now: nothing to do."""
        return bool(self.container and self.container.running) and self.files_sha == wanted_sha


def files_sha(args_doc: str) -> str:
    return sha256_text(args_doc + script_text(svc.LAUNCHER_FILE))


class RouterHost:
    def __init__(self, conn: NodeConnection, spec: RouterSpec, work: str):
        self.conn, self.spec, self.dir = conn, spec, svc.router_dir(work)

    @property
    def node(self) -> str:
        return self.conn.ep.name

    def look(self) -> RouterLook:
        files = " ".join(shlex.quote(f"{self.dir}/{f}") for f in (svc.ARGS_FILE, svc.LAUNCHER_FILE))
        script = (f"{inspect_script(svc.CONTAINER, [])}; echo {MARK}; "
                  f"cat {files} 2>/dev/null | sha256sum; test -e {shlex.quote(self.dir)}/"
                  f"{svc.ARGS_FILE} && echo present; true")
        out = self.conn.run(["sh", "-c", script], sudo=True, check=False, retry=True,
                            step=STEP).stdout
        inspect, _, files_part = out.partition(MARK)
        lines = files_part.split()
        present = "present" in lines
        return RouterLook(parse_inspect(inspect), lines[0] if present and lines else None)

    def start(self, args_doc: str) -> None:
        """(Re)write its files and run its container anew (an old one, stopped or not, removed)."""
        self.conn.run(["install", "-d", "-m", "700", self.dir], sudo=True, retry=True, step=STEP)
        self.conn.put_texts([(args_doc, f"{self.dir}/{svc.ARGS_FILE}", 0o600),
                             (script_text(svc.LAUNCHER_FILE), f"{self.dir}/{svc.LAUNCHER_FILE}",
                              0o644)], sudo=True, step=STEP)
        image = shlex.quote(self.spec.image)
        script = (f"docker rm -f {svc.CONTAINER} >/dev/null 2>&1; "
                  f"docker image inspect {image} >/dev/null 2>&1 || docker pull -q {image} "
                  f">/dev/null && {shlex.join(svc.docker_run_argv(self.spec, self.dir))}")
        self.conn.run(["sh", "-c", script], sudo=True, step=STEP)

    def stop(self) -> bool:
        """Remove its container and its files (the keys); whether a container was there."""
        script = (f"docker rm -f {svc.CONTAINER} 2>/dev/null | grep -q . && echo removed; "
                  f"rm -rf {shlex.quote(self.dir)}; true")
        out = self.conn.run(["sh", "-c", script], sudo=True, retry=True, step=STEP).stdout
        return "removed" in out

    def logs(self) -> str | None:
        """The router container's output (`docker logs`, both streams), redacted; None when
        there is no container."""
        res = self.conn.run(["sh", "-c", f"docker logs {svc.CONTAINER} 2>&1"], sudo=True,
                            check=False, retry=True, step=STEP)
        return redact(res.stdout) if res.exit_code == 0 else None

    def admin(self, admin_key: str, op: str, **cfg: JSON) -> dict[str, JSON]:
        """One admin call through remote/router_admin.py on the node; its JSON answer.
        StepFailed naming the router's answer when it refused or did not answer."""
        doc = {"base": svc.loopback_base(self.spec), "admin_key": admin_key, "op": op,
               "timeout": ADMIN_TIMEOUT, **cfg}
        res = self.conn.run(["python3", "-c", ADMIN], stdin=json.dumps(doc), check=False,
                            timeout=ADMIN_TIMEOUT * 3, step=STEP)
        answer = last_json_line(res.stdout)
        if not isinstance(answer, dict):
            raise StepFailed(self.node, f"the router's admin call ({op}) printed no answer: "
                             f"{res.output[-300:]}", step=STEP,
                             hint=f"`docker logs {svc.CONTAINER}` on {self.node}")
        if res.exit_code != 0 or "error" in answer:
            raise StepFailed(self.node, f"the router's admin API ({op}): {answer.get('error')}",
                             step=STEP, hint=f"`docker logs {svc.CONTAINER}` on {self.node}; "
                             "the router is started again by the next `up`")
        return answer

    def workers(self, admin_key: str) -> list[Worker]:
        listed = self.admin(admin_key, "workers").get("workers")
        # router_admin.py's workers() kept only entries with a string id and url (_is_worker)
        return cast(list[Worker], listed) if isinstance(listed, list) else []

    def chat(self, api_key: str | None, model: str) -> http.Endpoint:
        """A chat completion through the router (from its node's loopback), as verify asks
        a group's engine."""
        doc = {"base": svc.loopback_base(self.spec), "key": api_key, "model": model,
               "checks": ["chat"], "health_timeout": 30.0, "within": None}
        res = self.conn.run(["python3", "-c", http_probe.SCRIPT], stdin=json.dumps(doc),
                            check=False, timeout=360, step=STEP)
        return http.parse_endpoint(res.stdout, res.exit_code) or http.unanswered(["chat"])
