"""nvme: the Hugging Face cache, Docker's data-root and, with the containerd image store,
containerd's root on the NVMe mount.

daemon.json and config.toml are merged, not overwritten (other keys such as runtimes or log
options stay). docker is restarted only when the daemon does not already run with the NVMe
data-root as dockerd reports it (canonicalised: a symlinked mount or a trailing slash still
compares equal), containerd only when its config names another root.
"""

from __future__ import annotations

import json

from k3deploy.node import facts as F
from k3deploy.core.errors import StepFailed
from k3deploy.remote import protocol
from k3deploy.steps import containerd_config, docker_host, docker_unit, probes, shared_hf
from k3deploy.steps.base import Step, cmd, upload

DAEMON_JSON = "/etc/docker/daemon.json"


def _daemon_json(out: str, code: int):
    if code != 0:
        return {}          # no file yet: docker runs on defaults
    try:
        data = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError:
        return None        # present but unreadable: never clobber what we cannot parse
    return data if isinstance(data, dict) else None


class MoveToNvme(Step):
    name = "nvme"

    def probes(self, node):
        p = node.inv.paths
        return [
            F.native("hf_owner", "owner", [_owned(node)], F.text),
            F.native("hf_writable", "writable", _local_dirs(node), F.exit_ok),
            F.native("login_user", "login_user", [], F.text),
            F.native("docker_dir", "is_dir", [p.docker], F.exit_ok, sudo=True),
            F.read("daemon_json", DAEMON_JSON, _daemon_json, sudo=True),
            docker_host.resolved("docker_root_wanted", p.docker), probes.docker_root(),
            *docker_host.image_store_facts(), *shared_hf.marker_fact(node.inv),
            docker_unit.unit_fact(),
        ]

    def plan(self, facts, node):
        actions = self._dirs(facts, node) + shared_hf.write_marker(facts, node)
        actions += self._daemon_json(facts, node)
        moved = self._containerd(facts, node)
        actions += moved
        if moved or facts.get("docker_root") != facts.get("docker_root_wanted"):
            actions += docker_unit.restart_actions(cmd)
        return actions

    def _daemon_json(self, facts, node):
        p, current = node.inv.paths, facts.get("daemon_json")
        if current is None:
            raise StepFailed(node.name, f"{DAEMON_JSON} is not valid JSON; k3deploy will not "
                             "overwrite it", step=self.name, hint="fix or remove the file by hand")
        if current.get("data-root") == p.docker:
            return []
        if docker_unit.data_root_flag(facts.get("docker_unit")):
            if facts.get("docker_root") == facts.get("docker_root_wanted"):
                return []   # the unit's flag already puts it there: daemon.json must not
            docker_unit.refuse_flag_with_file(facts, node, p.docker, self.name)
        merged = json.dumps({**current, "data-root": p.docker}, indent=2, sort_keys=True)
        return [upload(f"set data-root {p.docker} in {DAEMON_JSON}", DAEMON_JSON,
                       merged + "\n", mode=0o644, sudo=True)]

    def _containerd(self, facts, node):
        """With the containerd image store, images go to containerd's root: set it on the
        NVMe and restart containerd (before docker, which then sees the new store)."""
        if not docker_host.images_under_containerd_root(facts):
            return []
        root, text = node.inv.paths.containerd, facts.get("containerd_toml") or ""
        try:
            if containerd_config.root_of(text) == root:
                return []
            changed = containerd_config.with_root(text, root)
        except containerd_config.ConfigError as err:
            raise StepFailed(node.name, f"{err}; k3deploy will not overwrite it", step=self.name,
                             hint="fix the file by hand, or set root there yourself") from None
        return [cmd("create containerd root", "mkdir", "-p", root, sudo=True, retry=True),
                upload(f"set root {root} in {containerd_config.PATH}", containerd_config.PATH,
                       changed, mode=0o644, sudo=True),
                cmd("restart containerd", "systemctl", "restart", "containerd", sudo=True,
                    retry=True)]

    def _dirs(self, facts, node):
        p = node.inv.paths
        user = facts.get("login_user") or "root"
        actions = []
        if not facts.get("docker_dir"):
            actions.append(cmd("create docker data-root", "mkdir", "-p", p.docker, sudo=True,
                               retry=True))
        if facts.get("hf_owner") != user or not facts.get("hf_writable"):
            # The downloader runs as the login user, so it must own the cache and work dir.
            mine = shared_hf.writer(node.inv, node.name)
            made = [protocol.hub_cache(p.hf), p.work] if mine else [p.work]
            owned = [p.hf, *made] if mine else made
            actions += [cmd("create HF cache and k3deploy work dirs" if mine else
                            "create the k3deploy work dir", "mkdir", "-p", *made, sudo=True,
                            retry=True),
                        cmd("give them to the login user", "chown", f"{user}:", *owned,
                            sudo=True, retry=True)]
        return actions

    def detail(self, facts, node):
        out = {"docker_root": facts.get("docker_root"), "hf_home": node.inv.paths.hf}
        if docker_host.images_under_containerd_root(facts):
            out["containerd_root"] = node.inv.paths.containerd
        return out


def _local_dirs(node) -> list[str]:
    """What this step creates and hands to the login user: the work dir, and the HF cache
    unless it is a shared volume someone else's node writes (only the head prepares that)."""
    p = node.inv.paths
    return [p.hf, p.work] if shared_hf.writer(node.inv, node.name) else [p.work]


def _owned(node) -> str:
    return _local_dirs(node)[0]
