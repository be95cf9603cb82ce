"""nvme: the Hugging Face cache, Docker's data-root and, with the containerd image store,
containerd's root on the NVMe mount.

daemon.json and config.toml are merged, not overwritten (other keys such as runtimes or log
options stay). docker is restarted only when the daemon does not already run with the NVMe
data-root as dockerd reports it (canonicalised: a symlinked mount or a trailing slash still
compares equal), containerd only when its config names another root. A docker start that
fails is rolled back to the previous daemon.json (docker_rollback): docker is never left down.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3deploy.core.errors import CommandError, StepFailed
from k3deploy.core.jsonvalue import JSON
from k3deploy.facts.dockerd import DaemonJson, parse_daemon_json
from k3deploy.node import facts as F
from k3deploy.node.context import NodeContext
from k3deploy.remote import protocol
from k3deploy.steps import probes
from k3deploy.steps.disks import containerd_config, docker_host, docker_rollback, docker_unit
from k3deploy.steps.weights import shared_hf
from k3deploy.steps.base import Action, AnyFact, Step, cmd, take_uploads, upload

DAEMON_JSON = docker_rollback.DAEMON_JSON


@dataclass(frozen=True)
class NvmeFacts:
    hf_owner: str | None
    hf_writable: bool
    login_user: str | None
    docker_dir: bool
    daemon_json: DaemonJson | None     # None: there but not a JSON object
    daemon_json_present: bool
    docker_root_wanted: str | None     # data-root as dockerd would report it (realpath -m)
    docker_root: str | None            # as dockerd reports it now
    driver_status: str | None
    system_containerd: bool
    containerd_toml: str
    docker_unit: str | None
    shared_marker: str | None = None   # with a shared HF cache only

    @property
    def docker_moved(self) -> bool:
        return self.docker_root == self.docker_root_wanted


class MoveToNvme(Step[NvmeFacts]):
    name = "nvme"
    Facts = NvmeFacts

    def probes(self, node: NodeContext) -> list[AnyFact]:
        p = node.inv.paths
        return [
            F.native("hf_owner", "owner", [_owned(node)], F.text),
            F.native("hf_writable", "writable", _local_dirs(node), F.exit_ok),
            F.native("login_user", "login_user", [], F.text),
            F.native("docker_dir", "is_dir", [p.docker], F.exit_ok, sudo=True),
            F.read("daemon_json", DAEMON_JSON, parse_daemon_json, sudo=True),
            F.native("daemon_json_present", "exists", [DAEMON_JSON], F.exit_ok, sudo=True),
            docker_host.resolved("docker_root_wanted", p.docker), probes.docker_root(),
            *docker_host.image_store_facts(), *shared_hf.marker_fact(node.inv),
            docker_unit.unit_fact(),
        ]

    def plan(self, facts: NvmeFacts, node: NodeContext) -> list[Action]:
        actions = self._dirs(facts, node) + shared_hf.write_marker(facts, node)
        actions += self._daemon_json(facts, node)
        moved = self._containerd(facts, node)
        actions += moved
        if moved or not facts.docker_moved:
            actions += docker_rollback.tag_start(docker_unit.restart_actions(cmd))
        return actions

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        """As the base runs them; a failed docker start is rolled back (docker_rollback)."""
        queue = list(actions)
        while queue:
            taken = take_uploads(queue)
            try:
                self.run_action(node, *taken)
            except CommandError:
                if taken[0].tag != docker_rollback.START:
                    raise
                wrote = any(a.upload_to == DAEMON_JSON for a in actions)
                backed_up = any(a.tag == docker_rollback.BACKUP for a in actions)
                docker_rollback.roll_back(self, node, wrote, backed_up, node.inv.paths.docker)

    def _daemon_json(self, facts: NvmeFacts, node: NodeContext) -> list[Action]:
        p, current = node.inv.paths, facts.daemon_json
        if current is None:
            raise StepFailed(node.name, f"{DAEMON_JSON} is not valid JSON; k3deploy will not "
                             "overwrite it", step=self.name, hint="fix or remove the file by hand")
        if current.data_root == p.docker:
            return []
        if docker_unit.data_root_flag(facts.docker_unit):
            if facts.docker_moved:
                return []   # the unit's flag already puts it there: daemon.json must not
            docker_unit.refuse_flag_with_file(facts.docker_unit, node, p.docker, self.name)
        write = upload(f"set data-root {p.docker} in {DAEMON_JSON}", DAEMON_JSON,
                       current.with_data_root(p.docker), mode=0o644, sudo=True)
        return docker_rollback.backup(facts.daemon_json_present) + [write]

    def _containerd(self, facts: NvmeFacts, node: NodeContext) -> list[Action]:
        """With the containerd image store, images go to containerd's root: set it on the
        NVMe and restart containerd (before docker, which then sees the new store)."""
        if not docker_host.images_under_containerd_root(facts):
            return []
        root, text = node.inv.paths.containerd, facts.containerd_toml
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

    def _dirs(self, facts: NvmeFacts, node: NodeContext) -> list[Action]:
        p = node.inv.paths
        user = facts.login_user or "root"
        actions = []
        if not facts.docker_dir:
            actions.append(cmd("create docker data-root", "mkdir", "-p", p.docker, sudo=True,
                               retry=True))
        if facts.hf_owner != user or not facts.hf_writable:
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

    def detail(self, facts: NvmeFacts, node: NodeContext) -> dict[str, JSON] | None:
        out: dict[str, JSON] = {"docker_root": facts.docker_root, "hf_home": node.inv.paths.hf}
        if docker_host.images_under_containerd_root(facts):
            out["containerd_root"] = node.inv.paths.containerd
        return out


def _local_dirs(node: NodeContext) -> list[str]:
    """What this step creates and hands to the login user: the work dir, and the HF cache
    unless it is a shared volume someone else's node writes (only the head prepares that)."""
    p = node.inv.paths
    return [p.hf, p.work] if shared_hf.writer(node.inv, node.name) else [p.work]


def _owned(node: NodeContext) -> str:
    return _local_dirs(node)[0]
