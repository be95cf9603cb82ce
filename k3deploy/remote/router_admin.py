"""The router's admin API (SMG, the Shepherd Model Gateway): list, add and remove workers.

Routes and answers (smg-project/smg@f8daa883 model_gateway/src/server.rs worker_routes,
worker/service.rs; docs/reference/api/admin.md): `GET /workers` -> 200 {"workers": [...],
"total"}, each worker with `id`, `url`, `status` (pending, ready, not_ready, failed,
draining) and `is_healthy`; `POST /workers` {"url", "api_key", "runtime_type",
"worker_type", "connection_mode"} -> 202 {"worker_id", "status": "accepted"}: registration is
a background job (the router reads the worker's /health, /server_info, /model_info and
/v1/models first), 409 if the URL is registered; `DELETE /workers/{id}` -> 202, 404 if
unknown. With control-plane keys these routes want `Authorization: Bearer <admin key>` of a
key whose role is admin: 401 without a valid one, 403 for a `user` key
(crates/auth/src/middleware.rs control_plane_auth_middleware).

Runs on the laptop (imported) or on the router's node (as a script: a JSON config on stdin,
the admin key in it, never in argv; one JSON line out). Standard library only.
"""
import json
import sys
import time
import urllib.error
import urllib.request
from typing import IO, TYPE_CHECKING, TypedDict

# For mypy only (annotations naming these are quoted): at run time nothing more is imported.
if TYPE_CHECKING:
    from typing import TypeAlias, TypeGuard

    from router_reconcile import Plan, Worker

    # protocol.JSON's: this program is bundled with router_reconcile.py only
    JSON: TypeAlias = dict[str, "JSON"] | list["JSON"] | str | int | float | bool | None

# SMG's defaults for an HTTP SGLang worker, as dstack registers them (dstackai/dstack@511c318c
# src/dstack/_internal/proxy/gateway/services/model_routers/sglang.py _add_worker_to_router)
WORKER_DEFAULTS = {"worker_type": "regular", "connection_mode": "http", "runtime_type": "sglang"}


# a total=False base rather than NotRequired (Python 3.11): this program runs on the node's python3
class _ServingKey(TypedDict, total=False):
    api_key: str | None


class ServingEntry(_ServingKey):
    """A group serving, in the config's `serving` list (router_reconcile.Serving)."""
    url: str


class _ConfigOptions(TypedDict, total=False):
    admin_key: str | None
    timeout: float
    url: str                        # add, load
    api_key: str | None             # add, load
    worker_id: str                  # remove
    serving: list[ServingEntry]     # reconcile


class Config(_ConfigOptions):
    """main's stdin."""
    base: str
    op: str                         # workers, add, remove, reconcile or load


class Applied(TypedDict):
    """apply's result."""
    added: dict[str, str]           # url -> worker id
    removed: list[str]              # worker ids
    held: list[str]                 # urls


class RouterAdminError(Exception):
    def __init__(self, method: str, path: str, status: int | None, detail: object):
        self.status = status
        super().__init__(f"router {method} {path}: {status or 'no answer'}: {detail}")


class RouterAdmin:
    def __init__(self, base_url: str, admin_key: str | None, timeout: float = 10.0):
        self.base, self.key, self.timeout = base_url.rstrip("/"), admin_key, timeout

    def _send(self, method: str, path: str,
              body: "dict[str, str] | None" = None) -> "tuple[int, JSON]":
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        if self.key:
            req.add_header("Authorization", "Bearer " + self.key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, _json(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, _json(e.read())
        except (urllib.error.URLError, OSError) as e:
            raise RouterAdminError(method, path, None, getattr(e, "reason", e)) from None

    def _expect(self, method: str, path: str, ok: tuple[int, ...],
                body: "dict[str, str] | None" = None) -> "tuple[int, JSON]":
        status, answer = self._send(method, path, body)
        if status not in ok:
            raise RouterAdminError(method, path, status, _detail(answer))
        return status, answer

    def workers(self) -> "list[Worker]":
        status, answer = self._expect("GET", "/workers", (200,))
        listed = answer.get("workers") if isinstance(answer, dict) else None
        workers = [w for w in listed if _is_worker(w)] if isinstance(listed, list) else []
        if not isinstance(listed, list) or len(workers) != len(listed):
            raise RouterAdminError("GET", "/workers", status, "not a list of workers with id and "
                                   "url: " + _detail(answer))
        return workers

    def add(self, url: str, api_key: str | None, **spec: str) -> str:
        """Queue a worker's registration; its id. A URL already registered: RouterAdminError 409."""
        body = dict(WORKER_DEFAULTS, url=url, **spec)
        if api_key:
            body["api_key"] = api_key
        status, answer = self._expect("POST", "/workers", (202,), body)
        worker_id = answer.get("worker_id") if isinstance(answer, dict) else None
        if worker_id is None:
            raise RouterAdminError("POST", "/workers", status, "no worker_id: " + _detail(answer))
        return str(worker_id)

    def remove(self, worker_id: str) -> bool:
        """Queue a worker's removal; False if the router did not know it (already gone)."""
        return self._expect("DELETE", f"/workers/{worker_id}", (202, 404))[0] == 202


def _json(raw: bytes) -> "JSON":
    try:
        answer: JSON = json.loads(raw) if raw else None   # json.loads is typed to return Any
        return answer
    except ValueError:
        return raw.decode(errors="replace")[:300]


def _is_worker(entry: "JSON") -> "TypeGuard[Worker]":
    """An entry of `GET /workers` with what reconcile reads of it (router_reconcile.Worker)."""
    return (isinstance(entry, dict) and isinstance(entry.get("id"), str)
            and isinstance(entry.get("url"), str) and isinstance(entry.get("status", ""), str))


def _detail(answer: "JSON") -> str:
    if isinstance(answer, dict):
        err = answer.get("error")
        return str((err.get("message") if isinstance(err, dict) else err)
                   or answer.get("message") or json.dumps(answer)[:300])
    return str(answer or "(empty body)")


def engine_load(url: str, api_key: "str | None", timeout: float = 10.0) -> "int | None":
    """Requests running or waiting on one SGLang engine (a group's head, as the router
    registered it): `GET /v1/loads?include=core`, num_running_reqs + num_waiting_reqs summed
    over its DP ranks (SGLang 0.5.16 srt/entrypoints/v1_loads.py, the core keys of
    srt/managers/load_snapshot.py; SMG polls the same endpoint, smg-project/smg@f8daa883
    model_gateway/src/worker/monitor.rs). None when the engine has no such endpoint (404:
    an older SGLang) or says nothing readable. The engine's key as the bearer token."""
    status, answer = RouterAdmin(url, api_key, timeout)._send("GET", "/v1/loads?include=core")
    if status == 404:
        return None
    if status != 200:
        raise RouterAdminError("GET", url + "/v1/loads", status, _detail(answer))
    loads = answer.get("loads") if isinstance(answer, dict) else None
    if not isinstance(loads, list):
        return None
    counts = [r.get(k) for r in loads if isinstance(r, dict)
              for k in ("num_running_reqs", "num_waiting_reqs")]
    return sum(c for c in counts if isinstance(c, int))


def apply(admin: RouterAdmin, plan: "Plan", gone_within: float = 30.0) -> Applied:
    """Removes first; adds once the removed ids left the list (SMG answers 409 to a URL it still
    holds). Returns {"added": {url: id}, "removed": [ids], "held": [urls]}: held are adds not
    made this time (a draining worker, or a removal still under way)."""
    removed = [wid for wid in plan.removes if admin.remove(wid)]
    deadline = time.monotonic() + gone_within
    while removed and plan.adds and time.monotonic() < deadline:
        if not {w["id"] for w in admin.workers()} & set(removed):
            break
        time.sleep(0.2)
    added: dict[str, str] = {}
    held = list(plan.waits)
    for s in plan.adds:
        try:
            added[s.url] = admin.add(s.url, s.api_key)
        except RouterAdminError as e:
            if e.status != 409:
                raise
            held.append(s.url)
    return {"added": added, "removed": removed, "held": held}


def main(stdin: IO[str]) -> int:
    """{"base", "admin_key", "op": workers|add|remove|reconcile|load, "url", "api_key", "worker_id",
    "serving": [{"url", "api_key"}]} on stdin; one JSON line out."""
    cfg: Config = json.load(stdin)   # the caller's own document (json.load returns Any)
    admin = RouterAdmin(cfg["base"], cfg.get("admin_key"), cfg.get("timeout", 10.0))
    op = cfg["op"]
    try:
        if op == "workers":
            out = json.dumps({"workers": admin.workers()})
        elif op == "add":
            out = json.dumps({"worker_id": admin.add(cfg["url"], cfg.get("api_key"))})
        elif op == "remove":
            out = json.dumps({"removed": admin.remove(cfg["worker_id"])})
        elif op == "load":   # a worker's engine, not the router (engine_load)
            out = json.dumps({"load": engine_load(cfg["url"], cfg.get("api_key"),
                                                  cfg.get("timeout", 10.0))})
        else:
            import router_reconcile as rr   # shipped next to this file
            serving = [rr.Serving(s["url"], s.get("api_key")) for s in cfg["serving"]]
            out = json.dumps(apply(admin, rr.plan(admin.workers(), serving)))
    except RouterAdminError as e:
        print(json.dumps({"error": str(e), "status": e.status}))
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.stdin))
