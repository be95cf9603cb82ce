"""Step plans from fact fixtures: facts in, commands out. No I/O."""

import dataclasses
import json
from pathlib import Path

import pytest

from k3deploy import engines
from k3deploy.cluster import inventory
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.node.run_inputs import RunInputs
from k3deploy.node.run_ledger import RunLedger
from k3deploy.core.errors import StepFailed
from k3deploy.cluster.hubmeta import Manifest, RepoFile
from k3deploy.steps.weights.download import DownloadWeights
from k3deploy.steps.files import EnsureFile, FileFacts
from k3deploy.facts.docker import Image
from k3deploy.steps.engine.image import SCRIPT, PullImage
from k3deploy.steps.weights.peers import PeerPaths
from k3deploy.steps.engine.launch import LaunchEngine
from k3deploy.steps.disks.nvme import MoveToNvme
from k3deploy.steps.teardown import ContainerFacts, RemoveContainers, StopDownload, WipeFacts, \
    WipeWeights
from tests.unit.fakes import FakeSession
from tests.unit.invdata import four_nodes
from tests.unit import typed
from tests.unit.download_facts import facts as download_facts
from tests.unit.docker_facts import container
from tests.unit.looked import looked

SHA = "a" * 40


def node_ctx(tmp_path, rank=0, options=None, doc=None, token=None, **inputs):
    inv = inventory.parse(doc or four_nodes())
    run = RunContext(inv=inv, session=FakeSession(inv, tmp_path), options=options or {},
                     inputs=RunInputs(token=token, settled=frozenset({"token"}), **inputs))
    return NodeContext(run, inv.ranked()[rank][1], rank)


def shown(actions):
    return [a.shown() for a in actions]


# -- nvme ---------------------------------------------------------------------------------
NVME_DONE = {"hf_owner": "root", "hf_writable": True, "login_user": "root", "docker_dir": True,
             "daemon_json": {"settings": {"data-root": "/mnt/nvme/docker",
                                          "log-driver": "json-file"}},
             "daemon_json_present": True, "docker_root": "/mnt/nvme/docker",
             "docker_root_wanted": "/mnt/nvme/docker", "driver_status": None,
             "system_containerd": False, "containerd_toml": "", "docker_unit": None}


def nvme_facts(**changes):
    """The nvme step's typed facts: NVME_DONE with `changes` (JSON-like, as a fixture's)."""
    return typed.facts(MoveToNvme, {**NVME_DONE, **changes})


def daemon_json(**settings):
    return {"settings": {k.replace("_", "-"): v for k, v in settings.items()}}


def test_nvme_done_plans_nothing(tmp_path):
    assert MoveToNvme().plan(nvme_facts(), node_ctx(tmp_path)) == []


def test_nvme_merges_daemon_json_and_restarts(tmp_path):
    facts = nvme_facts(daemon_json=daemon_json(log_driver="json-file", data_root="/var/lib/docker"),
                       docker_root="/var/lib/docker")
    actions = MoveToNvme().plan(facts, node_ctx(tmp_path))
    assert actions[0].argv == ("cp", "-p", "/etc/docker/daemon.json",
                               "/etc/docker/daemon.json.k3deploy-previous")
    write = actions[1]
    assert write.upload_to == "/etc/docker/daemon.json" and write.sudo
    assert json.loads(write.content) == {"data-root": "/mnt/nvme/docker", "log-driver": "json-file"}
    assert shown(actions[2:]) == ["stop docker: sudo systemctl stop docker docker.socket",
                                  "clear docker's failed starts: sudo systemctl reset-failed "
                                  "docker.service docker.socket",
                                  "start docker: sudo systemctl start docker"]


def test_nvme_file_right_but_daemon_not_restarted(tmp_path):
    facts = nvme_facts(docker_root="/var/lib/docker")
    assert [a.description for a in MoveToNvme().plan(facts, node_ctx(tmp_path))] == \
        ["stop docker", "clear docker's failed starts", "start docker"]


def test_nvme_refuses_unparseable_daemon_json(tmp_path):
    with pytest.raises(StepFailed, match="not valid JSON"):
        MoveToNvme().plan(nvme_facts(daemon_json=None), node_ctx(tmp_path))


def test_nvme_gives_cache_to_login_user(tmp_path):
    facts = nvme_facts(hf_owner="root", login_user="ubuntu", docker_dir=False)
    out = shown(MoveToNvme().plan(facts, node_ctx(tmp_path)))
    assert out == ["create docker data-root: sudo mkdir -p /mnt/nvme/docker",
                   "create HF cache and k3deploy work dirs: sudo mkdir -p /mnt/nvme/hf/hub "
                   "/mnt/nvme/.k3deploy",
                   "give them to the login user: sudo chown ubuntu: /mnt/nvme/hf /mnt/nvme/hf/hub "
                   "/mnt/nvme/.k3deploy"]


def test_a_misspelt_nvme_fact_fails():
    with pytest.raises(TypeError, match="docker_roots"):
        nvme_facts(docker_roots="/mnt/nvme/docker")
    with pytest.raises(TypeError, match="data-root"):
        nvme_facts(daemon_json={"data-root": "/mnt/nvme/docker"})


# -- image --------------------------------------------------------------------------------
def test_image_pull_only_when_missing(tmp_path):
    step, ctx = PullImage(), node_ctx(tmp_path, doc=four_nodes(download={"peers": False}))
    present = {"lmsysorg/sglang:kimi-k3": {"id": IMAGE_ID}}
    assert step.plan(typed.facts(step, {"cuda": "13.0", "images": present,
                                        "image": "lmsysorg/sglang:kimi-k3"}), ctx) == []
    (pull,) = step.plan(typed.facts(step, {"cuda": "12.8", "images": present,
                                           "image": "lmsysorg/sglang:kimi-k3-cu12"}), ctx)
    assert pull.argv == ("docker", "pull", "lmsysorg/sglang:kimi-k3-cu12") and pull.retry


IMAGE_ID = "sha256:" + "ab" * 32


def test_image_fetched_from_a_peer_else_pulled(tmp_path):
    """A missing image is asked of every other node's peer server (the first that holds it
    sends it, proven by its config), else pulled: no look at the peers while it is present."""
    step, ctx = PullImage(), node_ctx(tmp_path, rank=1)
    missing = {"cuda": "13.0", "images": {}, "image": "lmsysorg/sglang:kimi-k3"}
    up, fetch = step.plan(typed.facts(step, missing), ctx)
    assert up.upload_to.endswith("/image_peers.py") and up.content == SCRIPT
    assert fetch.sudo and fetch.argv[:3] == ("python3", up.upload_to, "fetch")
    args = dict(zip(fetch.argv[3::2], fetch.argv[4::2]))
    others = [f"{n.name}={n.self_ip}" for _, n in ctx.inv.ranked() if n.name != ctx.name]
    assert args == {"--ref": "lmsysorg/sglang:kimi-k3", "--peers": ",".join(others),
                    "--port": str(ctx.inv.ports.peer), "--secret-file": PeerPaths(ctx.inv).secret}
    present = {**missing, "images": {"lmsysorg/sglang:kimi-k3": {"id": IMAGE_ID}}}
    assert step.plan(typed.facts(step, present), ctx) == []
    assert [f.name for f in step.probes(ctx)] == ["cuda", "images"]


def test_image_from_the_registry_without_peers(tmp_path):
    step = PullImage()
    solo = node_ctx(tmp_path, doc=four_nodes(download={"peers": False}))
    missing = {"cuda": "13.0", "images": {}, "image": "lmsysorg/sglang:kimi-k3"}
    (pull,) = step.plan(typed.facts(step, missing), solo)
    assert pull.argv == ("docker", "pull", "lmsysorg/sglang:kimi-k3")
    pinned = {**missing, "image": "lmsysorg/sglang@sha256:" + "ef" * 32}
    (pull,) = step.plan(typed.facts(step, pinned), node_ctx(tmp_path, rank=1))
    assert pull.argv[:2] == ("docker", "pull")


def test_image_facts_pick_the_chosen_tag(tmp_path):
    step, ctx = PullImage(), node_ctx(tmp_path, rank=1)
    assert step.head_first
    found = {"cuda": "13.0", "images": {"lmsysorg/sglang:kimi-k3": Image(IMAGE_ID)}}
    facts = step.observe(found, ctx)
    assert facts.image == "lmsysorg/sglang:kimi-k3" and facts.present and facts.id == IMAGE_ID
    assert not step.observe({**found, "cuda": "12.8"}, ctx).present   # the cu12 tag
    with pytest.raises(TypeError, match="peer_images"):
        step.observe({**found, "peer_images": {}}, ctx)


# -- download -----------------------------------------------------------------------------
NO_PEERS = four_nodes(download={"peers": False})


def manifest():
    return Manifest("moonshotai/Kimi-K3", "main", SHA, None,
                    (RepoFile("model-00001-of-00096.safetensors", 10, "b" * 64, "c" * 40),))


def test_download_complete_plans_nothing(tmp_path):
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json="{}", token=None)
    assert DownloadWeights().plan(download_facts(missing_count=0), ctx) == []


def test_download_start_uploads_token_file_and_detaches(tmp_path):
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json='{"m": 1}', token="hf_tok")
    actions = DownloadWeights().plan(download_facts(missing_count=3), ctx)
    env = next(a for a in actions if a.upload_to == "/mnt/nvme/.k3deploy/hf.env")
    assert env.content == "HF_TOKEN=hf_tok\n" and env.mode == 0o600
    start, waiting, remove = actions[-3:]
    assert start.argv[:2] == ("sh", "-c") and "setsid nohup python3" in start.argv[2]
    assert start.tag == "start-downloader"
    assert "--env-file /mnt/nvme/.k3deploy/hf.env" in start.argv[2]
    assert "hf_tok" not in " ".join(shown(actions))
    # The runner waits (stall limit: the params', at least the node's retry budget of 15 min
    # and a minute), then the token file goes.
    assert waiting.wait.until == "every file verified (start 1)" and waiting.wait.stall == 960
    assert remove.argv == ("rm", "-f", "/mnt/nvme/.k3deploy/hf.env")


def test_download_running_is_reattached_not_restarted(tmp_path):
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json="{}", token=None)
    assert shown(DownloadWeights().plan(download_facts(missing_count=3, running=True), ctx)) == \
        ["wait until every file is verified",
         "remove the HF token file (download complete): rm -f /mnt/nvme/.k3deploy/hf.env"]
    assert DownloadWeights({"wait": False}).plan(download_facts(missing_count=3, running=True),
                                                 ctx) == []


class LooksCounted(DownloadWeights):
    """The download step whose looks are counted; the wait (the runner's Waiter) returns
    `done` and commands go to the session's FakeConn: Step.run_action itself runs."""

    def __init__(self, done):
        super().__init__()
        self.done, self.looks = done, 0

    def facts(self, node, waiting=False):
        self.looks += 1
        return dataclasses.replace(self.done, token_file=False)


@pytest.mark.parametrize("token_left", [False, True])
def test_after_the_wait_its_last_look_plans_and_rechecks(tmp_path, token_left):
    """The wait's last look follows every action: the replan uses it, and when nothing runs
    after it, so does the re-check (each look spared is a round trip on every node). An action
    after it (the token's removal) makes the re-check look again."""
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json="{}", token=None)
    step = LooksCounted(download_facts(missing_count=0, token_file=token_left))
    waits = []
    ctx.run.executor.waiter = lambda s, node, w: waits.append(w.until) or step.done
    step.apply(ctx, step.plan(download_facts(missing_count=3, running=True), ctx))
    facts, left = step.recheck(ctx)
    assert waits == ["every file verified (start 1)"]
    assert ctx.conn.commands == ["rm -f /mnt/nvme/.k3deploy/hf.env"] * token_left
    assert (step.looks, left, facts.status.missing_count) == (int(token_left), [], 0)
    assert step.recheck(ctx)[0] is not step.done and step.looks == int(token_left) + 1


def started_downloads(ctx, times: int) -> None:
    """The run's ledger as after `times` starts of the node's downloader (the first at 1.0)."""
    from k3deploy.steps.weights import hub_restart
    ledger = ctx.run.ledger = RunLedger()
    for i in range(times):
        ledger.record(ctx.name, "download", hub_restart.START, at=1.0 + i)


# -- launch -------------------------------------------------------------------------------
def launch_facts(tmp_path, rank=0, container=None, key="k3-testkey-0123456789", options=None):
    ctx = node_ctx(tmp_path, rank=rank, options=options, manifest=manifest(), api_key=key)
    step = LaunchEngine()
    return step, ctx, looked(step, ctx, cuda="13.0", container=container)


def test_launch_fresh_node_writes_key_file_then_runs_its_rank(tmp_path):
    step, ctx, facts = launch_facts(tmp_path, rank=2)
    actions = step.plan(facts, ctx)
    # The compile cache is prepared (script uploaded, checked) right before the container starts.
    assert [a.description for a in actions] == ["create secrets dir (0700)",
                                                 "write the endpoint key (0600)",
                                                 "upload compile_cache_dir.py",
                                                 "check the compile cache (a peer's when there "
                                                 "is none)",
                                                 "clear the previous engine's NCCL debug files",
                                                 "start rank 2"]
    run = list(actions[-1].argv)
    assert run[:3] == ["docker", "run", "-d"] and run[run.index("--node-rank") + 1] == "2"
    assert run[run.index("--dist-init-addr") + 1] == "10.0.0.10:20000"
    assert "k3-testkey-0123456789" not in " ".join(run)
    assert "k3-testkey-0123456789" in actions[1].content


def test_launch_same_config_running_is_left_alone(tmp_path):
    step, ctx, facts = launch_facts(tmp_path)
    label = facts.spec.labels[engines.CONFIG_LABEL]
    facts = dataclasses.replace(facts, container=container(labels={engines.CONFIG_LABEL: label}))
    assert step.plan(facts, ctx) == []


def test_launch_other_config_needs_replace(tmp_path):
    step, ctx, facts = launch_facts(tmp_path)
    bare = dataclasses.replace(facts.spec, labels={})
    running = engines.with_config_label(dataclasses.replace(
        bare, extra_args={**bare.extra_args, "max-running-requests": 48}), ctx.run.inputs.api_key)
    facts = dataclasses.replace(facts, container=container(labels=dict(running.labels)))
    with pytest.raises(StepFailed, match="runs another configuration") as err:
        step.plan(facts, ctx)
    assert "--replace" in err.value.hint
    assert "engine.args.max-running-requests: 48 -> unset" in str(err.value)
    step, ctx, facts = launch_facts(tmp_path, options={"replace": True},
                                    container=container(labels={engines.CONFIG_LABEL: "old"}))
    assert [a.description for a in step.plan(facts, ctx)][-5:] == [
        "remove old container k3", "upload compile_cache_dir.py",
        "check the compile cache (a peer's when there is none)",
        "clear the previous engine's NCCL debug files", "start rank 0"]


def test_launch_picks_cu12_image_from_driver(tmp_path):
    ctx = node_ctx(tmp_path, manifest=manifest(), api_key=None)
    spec = looked(LaunchEngine(), ctx, cuda="12.8").spec
    assert spec.image == "lmsysorg/sglang:kimi-k3-cu12" and spec.secrets_host_dir is None


# -- teardown and files -------------------------------------------------------------------
def test_teardown_removes_only_existing_container(tmp_path):
    ctx = node_ctx(tmp_path)
    assert RemoveContainers().plan(ContainerFacts(container=None), ctx) == []
    assert shown(RemoveContainers().plan(ContainerFacts(container=container(False)), ctx)) == \
        ["remove container k3: sudo docker rm -f k3"]


def test_wipe_weights_targets(tmp_path):
    ctx = node_ctx(tmp_path)
    assert shown(WipeWeights().plan(WipeFacts(weights=True, work=False), ctx)) == \
        ["delete weights and k3deploy files: sudo rm -rf -- "
         "/mnt/nvme/hf/hub/models--moonshotai--Kimi-K3"]


def test_teardown_facts_refuse_a_misspelt_field():
    assert typed.facts(WipeWeights, {"weights": False, "work": True}) == WipeFacts(work=True)
    with pytest.raises(TypeError, match="exists0"):
        typed.facts(WipeWeights, {"exists0": True, "work": True})
    with pytest.raises(TypeError, match="downloder"):
        typed.facts(StopDownload, {"downloder": 4711})


def test_file_step_plans_content_then_mode(tmp_path):
    step, ctx = EnsureFile({"path": "/etc/k3", "content": "hi\n", "mode": "0640"}), node_ctx(tmp_path)
    import hashlib
    digest = hashlib.sha256(b"hi\n").hexdigest()
    assert step.plan(FileFacts(sha256=None, mode=None), ctx)[0].upload_to == "/etc/k3"
    assert shown(step.plan(FileFacts(sha256=digest, mode="644"), ctx)) == \
        ["set mode of /etc/k3: sudo chmod 640 /etc/k3"]
    assert step.plan(FileFacts(sha256=digest, mode="640"), ctx) == []


def test_manifest_names_the_default_endpoint_when_the_inventory_has_none(monkeypatch):
    from types import SimpleNamespace

    from k3deploy.cluster import hubmeta

    class Api:
        endpoint = "https://huggingface.co"

        def repo_info(self, repo, revision):
            return SimpleNamespace(sha=SHA)

        def list_repo_tree(self, repo, revision, recursive):
            lfs = SimpleNamespace(sha256="b" * 64)
            return [SimpleNamespace(path="a.safetensors", size=3, lfs=lfs, blob_id="c" * 40)]

    monkeypatch.setattr(hubmeta, "_api", lambda endpoint, token: Api())
    manifest = hubmeta.resolve("moonshotai/Kimi-K3", "main", None, None)
    assert manifest.endpoint == "https://huggingface.co"
    assert manifest.to_json()["files"][0]["sha256"] == "b" * 64


def test_download_started_by_this_run_and_dead_is_reported_not_restarted(tmp_path):
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json="{}", token=None)
    started_downloads(ctx, 1)
    facts = download_facts(missing_count=1, total=2, log="ERROR: sha256 mismatch\n",
                           progress={"error": "model-00007: sha256 mismatch after 3"})
    with pytest.raises(StepFailed, match="download failed: model-00007: sha256 mismatch") as err:
        DownloadWeights().plan(facts, ctx)
    assert "ERROR: sha256 mismatch" in str(err.value)   # the log's error line, from the facts


def test_port_report_names_blocked_targets_with_the_reason():
    from k3deploy.facts.reach import NotRun
    from k3deploy.steps.checks.reachability import _report
    found = _report({"node1": mesh({"probes": {"10.0.0.10:20000": "timed out",
                                               "10.0.0.12:40000": True}}),
                     "node2": NotRun(127, ("sh: 1: python3: not found",))}, ADDRESSES)
    assert ("node2", "ports", "the port check did not run: python3 exited 127: "
            "sh: 1: python3: not found") in found
    (blocked,) = [p for p in found if p[0] == "node1"]
    assert blocked[2].startswith("cannot reach 10.0.0.10:20000 (timed out): open the full TCP")


ADDRESSES = {"node0": "10.0.0.10", "node1": "10.0.0.11", "node2": "10.0.0.12"}


def mesh(printed: dict):
    """A node's mesh as remote/portcheck.py prints it, read as the cluster look reads it."""
    from k3deploy.facts.reach import parse_mesh
    return parse_mesh(json.dumps(printed))


def test_a_port_its_node_could_not_open_proves_nothing_either_way():
    """node2's sampled port 41000 was held by one of node2's own outgoing connections (the
    ephemeral range is shared), so nothing listened there: node0's refused probe of it is
    no finding, while its refused probe of node2's other port is."""
    from k3deploy.steps.checks.reachability import _report
    found = _report({"node0": mesh({"ports": {"40000": "listening"},
                                    "probes": {"10.0.0.12:41000": "Connection refused",
                                               "10.0.0.12:42000": "Connection refused"}}),
                     "node2": mesh({"ports": {"41000": "busy", "42000": "listening"},
                                    "probes": {"10.0.0.10:40000": True}})}, ADDRESSES)
    assert found == [("node0", "ports", "cannot reach 10.0.0.12:42000 (Connection refused): "
                      "open the full TCP range between the nodes (NCCL/Gloo hang on a partial "
                      "range)")]


def test_launch_key_path_matches_the_engine_builders(tmp_path):
    from k3deploy.engines.spec_from_inventory import api_key_file
    from k3deploy.steps.engine.launch import secret_file
    step, ctx, facts = launch_facts(tmp_path)
    assert api_key_file(ctx.inv) == secret_file(facts.spec)[0] == \
        "/mnt/nvme/.k3deploy/secrets/sglang-secret.yaml"


def test_ports_in_use_come_from_proc_net_tcp():
    # Seen on the testbed: a sampled port held by a guard's outgoing poll could not be
    # listened on, and its peers' probes were refused until the mesh's 15 s deadline.
    from k3deploy.steps.checks.reachability import ports_in_use
    proc = ("  sl  local_address rem_address   st tx_queue rx_queue\n"
            "   0: 0A0DD50A:1D4C 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n"
            "   1: 0A0DD50A:0016 0A0DD501:C350 01 00000000:00000000 00:00000000 00000000\n"
            "  sl  local_address                         remote_address   st\n"
            "   0: 00000000000000000000000000000000:22F7 00000000000000000000000000000000:0000 0A\n")
    assert ports_in_use(proc, 0) == {0x1D4C, 0x16, 0x22F7}   # 7500, 8951 listening; 22 connected


def test_download_uploads_only_the_programs_the_node_does_not_have(tmp_path):
    import hashlib

    from k3deploy.remote import downloader_files
    from k3deploy.steps import node_files
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json="{}", token=None)
    files = downloader_files("/mnt/nvme/.k3deploy")
    same, stale = files[0], files[1]
    present = {same[0]: hashlib.sha256(same[1].encode()).hexdigest(), stale[0]: "0" * 64}
    facts = download_facts(missing_count=3, node_files=present)
    uploads = [a.upload_to for a in DownloadWeights().plan(facts, ctx) if a.upload_to]
    assert same[0] not in uploads and stale[0] in uploads
    assert len(uploads) == (len(files) - 1) + 1   # the other programs, and the manifest
    out = f"{present[same[0]]}  {same[0]}\nsha256sum: {stale[0]}: No such file or directory\n"
    assert node_files.fact([same[0], stale[0]]).parse(out, 1) == {same[0]: present[same[0]]}


def test_launch_waits_for_the_engine_past_its_own_checks_only_while_waiting(tmp_path):
    step, ctx, facts = launch_facts(tmp_path)
    label = facts.spec.labels[engines.CONFIG_LABEL]
    # Importing torch and SGLang: nothing from its schedulers yet.
    log = "[2026-02-25 15:39:20] server_args=ServerArgs(model_path='m', tp_size=16)\n"
    facts = dataclasses.replace(facts, container=container(labels={engines.CONFIG_LABEL: label}),
                                log=log)
    [action] = step.plan(facts, ctx)
    assert action.wait.until == "rank 0 engine started" and action.wait.timeout == 300
    log += "[2026-02-25 15:39:24 TP0] Init torch distributed begin.\n"
    assert step.plan(dataclasses.replace(facts, log=log), ctx) == []


def test_launch_does_not_wait_for_lines_a_quiet_log_level_hides(tmp_path):
    step, ctx, facts = launch_facts(tmp_path)
    spec = dataclasses.replace(facts.spec, extra_args={"log-level": "warning"})
    label = spec.labels[engines.CONFIG_LABEL]
    facts = dataclasses.replace(facts, spec=spec, log="",
                                container=container(labels={engines.CONFIG_LABEL: label}))
    assert step.plan(facts, ctx) == []


def test_launch_names_the_rank_and_the_engines_own_error_line(tmp_path):
    from k3deploy.steps.engine.launch import _died
    _step, ctx, _facts = launch_facts(tmp_path, rank=1)
    log = (Path(__file__).parents[1] / "fixtures" / "real" / "sglang" / "0.5.16" /
           "check-server-args-error.txt").read_text()
    err = _died(ctx, container(False, exit_code=1), log)
    assert str(err).startswith("rank 1 engine exited (1) during start-up: AssertionError: "
                               "multi-node data parallel is not supported unless dp attention!")
    assert err.node == ctx.name and "engine.args" in err.hint


def test_download_restarted_after_dying_of_the_hub_alone_at_most_three_times(tmp_path):
    from k3deploy.steps.weights import hub_restart
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json='{"m": 1}', token="hf_tok")
    dead = download_facts(missing_count=3, total=5, progress={
        "transient": True, "error": "x: no new byte for 900s (retry budget; last: HTTP 503)"})
    step = DownloadWeights()
    for restarts in range(hub_restart.MAX_HUB_RESTARTS):
        started_downloads(ctx, restarts + 1)
        actions = step.plan(dead, ctx)
        assert any(a.tag == "start-downloader" for a in actions)
        assert actions[-2].wait.until == f"every file verified (start {restarts + 2})"
    started_downloads(ctx, hub_restart.MAX_HUB_RESTARTS + 1)
    with pytest.raises(StepFailed, match="no new byte for 900s"):
        step.plan(dead, ctx)
    with pytest.raises(StepFailed, match="mismatch"):   # not the Hub's minutes: no restart
        started_downloads(ctx, 1)
        step.plan(download_facts(missing_count=3, total=5,
                                 progress={"transient": False, "error": "sha256 mismatch"}), ctx)


def test_a_downloader_stopped_by_its_disk_is_a_disk_error_with_the_space_and_no_restart(tmp_path):
    from k3deploy.core.errors import EXIT_STEP_FAILED, DiskError
    ctx = node_ctx(tmp_path, doc=NO_PEERS, manifest=manifest(), manifest_json='{"m": 1}', token="hf_tok")
    started_downloads(ctx, 1)
    disk = {"path": "/mnt/nvme/hf/hub/models--moonshotai--Kimi-K3/blobs/abc.k3deploy-partial",
            "reason": "No space left on device (ENOSPC)", "needed": 24_000_000, "free": 500_000}
    dead = download_facts(missing_count=80, total=96, progress={
        "transient": False, "error": "...: No space left on device", "disk": disk})
    with pytest.raises(DiskError) as caught:
        DownloadWeights().plan(dead, ctx)
    err = caught.value
    assert err.node == ctx.name and err.exit_code == EXIT_STEP_FAILED
    assert "ENOSPC" in str(err) and "24.0 MB still needed, 0.5 MB free" in str(err)
    assert err.hint.startswith(f"free at least 23.5 MB on {ctx.name}'s filesystem") and "kept" in err.hint


def test_launch_reads_the_log_again_when_the_look_that_saw_the_exit_missed_its_last_lines(
        tmp_path, monkeypatch):
    """docker logs and docker inspect run at once in a look: the container may exit between
    them, so the log read beside its exit may end before the error line."""
    from k3deploy.steps.engine.launch import LaunchEngine
    step, ctx, facts = launch_facts(tmp_path, rank=1)
    log = (Path(__file__).parents[1] / "fixtures" / "real" / "sglang" / "0.5.16" /
           "check-server-args-error.txt").read_text()
    looks = []
    monkeypatch.setattr(LaunchEngine, "facts",
                        lambda self, node, waiting=False: looks.append(waiting) or
                        dataclasses.replace(facts, log=log))
    assert step._final_log(ctx, "") == log and looks == [True]
    assert step._final_log(ctx, log) == log and looks == [True]   # had its line: no look
