"""launch: the engine container on every node with its rank, head first.

A running container whose configuration digest matches is left alone; a different one is only
replaced with --replace, because replacing means re-loading 1.5 TB of weights.

A started container is not yet a started engine: a real one imports torch and its package for
10-30 s before it parses its flags and checks them (SGLang: ServerArgs.__post_init__, then
check_server_args in engine.py before the scheduler processes start). So after `docker run`
the step waits until the engine's log shows it is past those checks, or its container exits;
then the failure names the rank and quotes the engine's own error line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from k3deploy import engines
from k3deploy.core.digest import sha256_text
from k3deploy.core.errors import StepFailed
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import dry_fire, startup_log
from k3deploy.engines.compile_cache_key import CacheInputs
from k3deploy.engines.spec import LaunchSpec
from k3deploy.facts import record
from k3deploy.facts.docker import Container
from k3deploy.node import facts as F
from k3deploy.node import run_settle
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps import probes
from k3deploy.steps.engine import compile_cache_prepare, launch_look, raylayout, regroup
from k3deploy.steps.engine.launch_look import LaunchFacts
from k3deploy.steps.base import Action, AnyFact, Step, cmd, upload, wait


class LaunchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start_timeout: float = Field(default=300, gt=0)  # docker run -> engine past its checks
    poll_seconds: float = Field(default=1.0, gt=0)


def secret_file(spec: LaunchSpec) -> tuple[str, Callable[[str], str]]:
    """Where the engine's key file goes on the node, and how its content is rendered."""
    if spec.engine == "sglang":
        return engines.sglang_secret_host_path(spec), engines.sglang_secret_config
    return engines.vllm_env_host_path(spec), engines.vllm_secret_env


LaunchFactsT = TypeVar("LaunchFactsT", bound=LaunchFacts)
LaunchParamsT = TypeVar("LaunchParamsT", bound=BaseModel, covariant=True)


class Launching(Step[LaunchFactsT, LaunchParamsT]):
    """The launch's look and plan, for launch, ray-cluster and the dry-fire's two (each names
    its Facts, a LaunchFacts, and its `with:`)."""

    head_first = True
    needs_all_nodes = True
    # Multi-node vLLM: the ray-cluster step starts the containers; launch only execs
    # `vllm serve` on the head (steps/engine/raylayout.py). RayCluster sets this False.
    serves_over_ray = True
    # The container runs the engine itself (RayCluster's run `ray start`: no engine checks).
    runs_engine = True
    # launch settles whether the group is relaunched whole (when no step before decided it),
    # the dry-fire's whether one passed everywhere
    settles = True

    def prepare(self, run: RunContext) -> None:
        run_settle.api_key(run, create=not run.check)
        run_settle.manifest(run)

    def spec(self, facts: LaunchFactsT, node: NodeContext) -> LaunchSpec:
        return self.spec_and_cache_key(facts, node)[0]

    def spec_and_cache_key(self, facts: LaunchFactsT,
                           node: NodeContext) -> tuple[LaunchSpec, CacheInputs | None]:
        return launch_look.spec_and_cache_key(facts, node, self.adjust_spec)

    def adjust_spec(self, spec: LaunchSpec) -> LaunchSpec:
        """The launch's spec before its cache key and config label (the dry-fire's: dummy
        weights, steps/dry_fire/dry_fire.py)."""
        return spec

    def probes(self, node: NodeContext) -> list[AnyFact]:
        return launch_look.probes(node, serves_over_ray=self.serves_over_ray)

    def observe(self, found: F.Found, node: NodeContext) -> LaunchFactsT:
        return launch_look.with_spec(record(self.Facts, found), node, self.adjust_spec)

    def _on_ray_head(self, facts: LaunchFactsT, node: NodeContext) -> bool:
        """launch over Ray, on the head: it execs the serve there and watches `ray status`."""
        return self.serves_over_ray and node.is_head and engines.uses_ray(facts.launch_spec)

    def plan(self, facts: LaunchFactsT, node: NodeContext) -> list[Action]:
        spec, current = facts.launch_spec, facts.container
        if self.serves_over_ray and engines.uses_ray(spec):
            return raylayout.launch_plan(facts, node)
        want = spec.labels[engines.CONFIG_LABEL]
        decided = node.run.ledger.decided(regroup.Regroup)
        relaunch = regroup.stops(decided, node.name, current)
        if current and current.running and not relaunch and \
                current.labels.get(engines.CONFIG_LABEL) == want:
            return self._start_wait(facts, node)
        if regroup.stopped_since(decided, node.name, current):
            raise _stopped_since(node)
        actions = self._secret_actions(facts, node)
        # A dry-fire's engine (engines/dry_fire.py) is always replaced: it serves nothing.
        if current and current.running and not relaunch and not node.run.option("replace") \
                and not dry_fire.is_dry_fire(current):
            changes = "\n".join(f"  {line}" for line in engines.config_changes(current.labels, spec))
            raise StepFailed(node.name, f"container {spec.container_name} runs another "
                             f"configuration; running -> wanted:\n{changes}", step=self.name,
                             hint="re-run with --replace to restart it (weights are reloaded), "
                             "or set the inventory back to what runs")
        if current:
            actions.append(cmd(f"remove old container {spec.container_name}",
                               *engines.docker_rm_argv(spec.container_name), sudo=True, retry=True))
        if spec.compile_cache_host_dir is not None:
            actions += compile_cache_prepare.prepare_actions(node, spec, facts)
        if spec.nccl_log_host_dir is not None:
            # The last engine's NCCL files would read as this one's (`docker run -v` makes the
            # dir again): the node keeps one launch's, written at communicator set-up.
            actions.append(cmd("clear the previous engine's NCCL debug files", "rm", "-rf",
                               spec.nccl_log_host_dir, sudo=True, retry=True))
        return actions + [cmd(f"start rank {spec.node_rank}", *engines.node_launch_argvs(spec)[0],
                              sudo=True)]

    def _secret_actions(self, facts: LaunchFactsT, node: NodeContext) -> list[Action]:
        spec, key = facts.launch_spec, node.run.inputs.api_key
        if not spec.secrets_host_dir or key is None:   # a spec has the dir only with a key
            return []
        path, render = secret_file(spec)
        content = render(key)
        if facts.key_file_sha == sha256_text(content):
            return []
        return [cmd("create secrets dir (0700)", "install", "-d", "-m", "700",
                    spec.secrets_host_dir, sudo=True, retry=True),
                upload("write the endpoint key (0600)", path, content, sudo=True)]

    def wait_probes(self, node: NodeContext) -> list[AnyFact]:
        # While waiting for the start: the engine's log says how far it got, or why it died.
        return [probes.engine_log(node.inv, node.is_head, tail=40)]

    def _start_wait(self, facts: LaunchFactsT, node: NodeContext) -> list[Action]:
        """What the plan waits for of an engine it left running (StartsEngine's: a step that
        starts no engine waits for none)."""
        return []

    def progress(self, facts: LaunchFactsT, node: NodeContext) -> None:
        if self._on_ray_head(facts, node):   # the detached serve may have exited
            raylayout.check_serve_running(facts, node.inv, self.name)
        return None

    def show_progress(self, facts: LaunchFactsT, node: NodeContext) -> None:
        """Waiting over Ray: each new count `ray status` reports (it lags the cluster)."""
        line = raylayout.whole_problem(facts.ray, node.inv) \
            if self._on_ray_head(facts, node) else None
        if line and line != getattr(self, "_shown", None) and node.run.ui:
            node.run.ui.say(f"{'':>14}{node.name}: {line}")
            self._shown = line

    def inputs(self, node: NodeContext) -> dict[str, object]:
        return {"engine": node.inv.engine.model_dump(), "ports": node.inv.ports.model_dump()}

    def detail(self, facts: LaunchFactsT, node: NodeContext) -> dict[str, JSON] | None:
        return {"image": facts.launch_spec.image, "rank": node.rank,
                "config": facts.launch_spec.labels[engines.CONFIG_LABEL]}



class StartsEngine(Launching[LaunchFactsT, LaunchParams]):
    """A launch whose containers run the engine (launch, dry-fire-launch): after `docker
    run`, it waits until each engine is past its start-up checks."""

    def _start_wait(self, facts: LaunchFactsT, node: NodeContext) -> list[Action]:
        """Only while waiting (the log is looked at): the engine has not yet shown it is past
        its own start-up checks."""
        if not self.runs_engine or facts.log is None or not _logs_its_start(facts.launch_spec):
            return []
        if startup_log.started(node.inv.engine.kind, facts.log):
            return []
        return [self._start_action(node)]

    def _start_action(self, node: NodeContext) -> Action:
        return wait(f"wait until rank {node.rank}'s engine is past its start-up checks",
                    f"rank {node.rank} engine started", poll=self.p.poll_seconds,
                    timeout=self.p.start_timeout,
                    hint=f"`k3deploy logs -i {node.inv.source}` saves every rank's log (how far "
                    "it got); then re-run `k3deploy up` (exited containers are replaced)")

    def apply(self, node: NodeContext, actions: list[Action]) -> None:
        super().apply(node, actions)
        if self.serves_over_ray and raylayout.in_use(node.inv):
            return   # the plan's own wait saw the serve take the GPUs
        facts = self.run_wait(node, self._start_action(node))
        state = facts.container
        if not state or not state.running:
            raise _died(node, state, self._final_log(node, facts.log or ""))

    def _final_log(self, node: NodeContext, log: str) -> str:
        """The log as the exited engine left it. The look that saw it exit read its log at the
        same time (a batch's commands run at once), maybe before its last lines: without its
        error line there, the log is read again."""
        if startup_log.error_line(log):
            return log
        return self.facts(node, waiting=True).log or log


class LaunchEngine(StartsEngine[LaunchFacts]):
    name = "launch"
    Facts = LaunchFacts
    Params = LaunchParams

    def settle(self, all_facts: dict[str, LaunchFacts], run: RunContext) -> regroup.Regroup | None:
        if run.ledger.decided(regroup.Regroup) is None and self.runs_engine:
            # guard-stop decides it first
            return regroup.decide({n: f.container for n, f in all_facts.items()}, run.inv)
        return None

def _logs_its_start(spec: LaunchSpec) -> bool:
    """The engines log their start-up lines at INFO: with a --log-level above it (SGLang's
    docs run `--log-level warning`) there is no line to wait for, so launch does not."""
    args = {str(k).lstrip("-"): v for k, v in spec.extra_args.items()}
    return str(args.get("log-level", "info")).lower() in ("debug", "info")


def _stopped_since(node: NodeContext) -> StepFailed:
    return StepFailed(node.name, f"rank {node.rank}'s engine stopped after the group was looked "
                      "at (it ran then, with every other rank): started alone it cannot join "
                      "the ranks still running", step="launch",
                      hint="re-run `k3deploy up`: it relaunches the whole group, each node "
                      "keeping its rank")


def _died(node: NodeContext, state: Container | None, log: str) -> StepFailed:
    """The engine exited during its start-up: the rank, its exit code and its own error line."""
    said = startup_log.error_line(log)
    tail = "\n".join(log.splitlines()[-15:])
    return probes.engine_exit(
        node.name, f"rank {node.rank} engine exited ({state.exit_code if state else None}) "
        "during start-up" + (f": {said}" if said else "") + f"\nthe end of its log:\n{tail}",
        "launch", log, state.image if state else None,
        "fix what the engine names (engine.args in the inventory), then re-run `k3deploy up` "
        "(exited containers are replaced)")
