"""k3deploy's command line. Expected failures become a few lines and an exit code:
0 done, 1 a step failed (or up/run lost a node), 2 bad input, 3 partial (down, logs, status,
check: some nodes unreachable, the rest handled), 130/143 interrupted."""

from __future__ import annotations

import logging
import sys
from enum import Enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, TypedDict, Unpack

import typer

if TYPE_CHECKING:  # checked against the installed typer's (one module, not both)
    from typer._click import exceptions as click_exc

    from k3deploy.node.context import RunContext
    from k3deploy.run.report import RunReport
    from k3deploy.steps.base import AnyStep
else:
    try:  # typer >= 0.20 vendors click; its exceptions are the ones raised
        from typer._click import exceptions as click_exc
    except ImportError:  # pragma: no cover - older typer uses the click package
        from click import exceptions as click_exc

from k3deploy.cli import roll_cmd
from k3deploy.cli.options import AcceptNew, Check, Group, Inv, Json, StateDir
from k3deploy.core import interrupt
from k3deploy.core import log as klog
from k3deploy.core.errors import EXIT_BAD_INPUT, K3Error
from k3deploy.core.redact import redact

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Bring Kimi K3 up on multi-node GPU clusters over SSH, verify it, tear it down.")

@app.callback()
def _global(log_json: Annotated[bool, typer.Option("--log-json", help="log as JSON lines")] = False,
            verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False) -> None:
    _OUTPUT["log_json"] = log_json
    klog.configure(json_lines=log_json, verbose=verbose)


_OUTPUT = {"log_json": False}  # set by the global options, read by the commands


class _RunOptions(TypedDict, total=False):   # run_steps' keyword arguments the commands pass
    check: bool
    options: dict[str, object] | None
    accept_new_host_keys: bool
    state_dir: str | None
    after: Callable[[RunContext, RunReport], list[str]] | None
    per_node: bool | None


def _run(inventory: str, steps: list[AnyStep], **kw: Unpack[_RunOptions]) -> int:
    from k3deploy.run.run_steps import run_steps
    return run_steps(inventory, steps, log_json=_OUTPUT["log_json"], **kw).exit_code()


@app.command()
def plan(gpu: Annotated[str | None, typer.Option(help="h100 h200 b200 b300 gb200")] = None,
         nodes: int | None = None,
         gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node")] = None,
         precision: Annotated[str | None, typer.Option(help="mxfp4 mxfp8 bf16")] = None,
         engine: Annotated[str | None, typer.Option(help="sglang or vllm")] = None,
         max_model_len: Annotated[int | None, typer.Option("--max-model-len")] = None,
         mem_fraction_static: Annotated[float | None, typer.Option("--mem-fraction-static")] = None,
         price: Annotated[float | None, typer.Option(
             "--price", "--price-per-gpu-hour", help="price per GPU-hour: adds $/hour")] = None,
         emit_inventory: Annotated[str | None, typer.Option("--emit-inventory")] = None,
         groups: Annotated[int, typer.Option("--groups", min=1, help="with --emit-inventory: "
                                             "a fleet of N such groups behind one router")] = 1,
         json_out: Json = False) -> int:
    """Sizing arithmetic: which GPU configs fit. No arguments: every reference config."""
    from k3deploy.cli.plan_cmd import run_plan
    return run_plan(gpu=gpu, nodes=nodes, gpus_per_node=gpus_per_node, precision=precision,
                    engine=engine, max_model_len=max_model_len,
                    mem_fraction_static=mem_fraction_static, price=price,
                    emit_inventory=emit_inventory, json_out=json_out, groups=groups)


@app.command()
def init(hosts: Annotated[list[str], typer.Argument(help="each node's SSH address, rank order "
                                                    "(the first is the head); behind one "
                                                    "gateway, GATEWAY:PORT each")],
         out: Annotated[str, typer.Option("-o", "--out", help="inventory to write")] = "cluster.yaml",
         user: Annotated[str | None, typer.Option("--user", help="SSH user")] = None,
         key: Annotated[str | None, typer.Option("--key", help="SSH private key file")] = None,
         port: Annotated[int | None, typer.Option("--port", min=1, max=65535)] = None,
         known_hosts: Annotated[str | None, typer.Option(
             "--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts)")] = None,
         hub_endpoint: Annotated[str | None, typer.Option(
             "--hub-endpoint", help="Hugging Face endpoint for model.endpoint (default: "
             "$HF_ENDPOINT, else https://huggingface.co)")] = None,
         cluster: Annotated[str | None, typer.Option("--cluster", help="cluster name")] = None,
         force: Annotated[bool, typer.Option("--force", help="overwrite OUT")] = False,
         accept_new_host_keys: AcceptNew = False) -> int:
    """Find each host's private address, NIC, GPUs, NVMe; write an inventory. Read-only."""
    from k3deploy.cli.init_cmd import InitArgs, run_init
    args = InitArgs(hosts=hosts, out=out, user=user, key=key, port=port, known_hosts=known_hosts,
                    accept_new_host_keys=accept_new_host_keys, hub_endpoint=hub_endpoint,
                    cluster=cluster, force=force)
    return run_init(args, sys.argv[2:] if sys.argv[1:2] == ["init"] else list(hosts))


@app.command()
def check(inventory: Inv,
          fabric: Annotated[bool, typer.Option("--fabric", help="also measure the private "
                                               "network pair by pair and name slow links")] = False,
          accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """Read-only preflight on every node; prints every problem found."""
    from k3deploy.run.run_steps import single
    from k3deploy.cli.fleet_check import check_fleet
    from k3deploy.cli.launch_contract import report_warnings
    fleet_code = check_fleet(inventory, log_json=_OUTPUT["log_json"])
    if fleet_code is not None:   # a fleet: validated and listed; its nodes are not checked yet
        return fleet_code
    report_warnings(inventory, log_json=_OUTPUT["log_json"])
    steps = single("preflight") + (single("fabric-mesh") if fabric else [])
    return _run(inventory, steps, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir)


@app.command()
def up(inventory: Inv, check: Check = False,
       replace: Annotated[bool, typer.Option("--replace", help="replace a running container "
                                             "whose configuration differs")] = False,
       no_dry_fire: Annotated[bool, typer.Option("--no-dry-fire", help="skip the dry-fire (the "
                                                 "real group with dummy weights while the "
                                                 "weights download)")] = False,
       no_fabric: Annotated[bool, typer.Option("--no-fabric", help="skip the fabric mesh (the "
                                               "private network measured pair by pair in "
                                               "preflight)")] = False,
       accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """Run playbooks/bringup.yaml to a verified endpoint (a fleet: each group, then its router)."""
    from k3deploy.run.run_steps import playbook_steps
    from k3deploy.cli.up_close import closing_for
    from k3deploy.cli.fleet_cmd import fleet_of, fleet_up
    options: dict[str, object] = {"replace": replace, "no_dry_fire": no_dry_fire,
                                  "no_fabric": no_fabric}
    if fleet := fleet_of(inventory):
        return fleet_up(fleet, check=check, options=options, state_dir=state_dir,
                        accept_new_host_keys=accept_new_host_keys, log_json=_OUTPUT["log_json"])
    return _run(inventory, playbook_steps("bringup"), check=check, options=options,
                accept_new_host_keys=accept_new_host_keys, state_dir=state_dir,
                after=closing_for())


@app.command("run")
def run_playbook(playbook: str, inventory: Inv, check: Check = False,
                 replace: Annotated[bool, typer.Option("--replace")] = False,
                 accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """Run any playbook by name (bringup, resume-download, teardown) or path."""
    from k3deploy.run.run_steps import playbook_steps
    return _run(inventory, playbook_steps(playbook), check=check, options={"replace": replace},
                accept_new_host_keys=accept_new_host_keys, state_dir=state_dir)


@app.command()
def status(inventory: Inv, json_out: Json = False,
           steps: Annotated[bool, typer.Option("--steps", help="each step's status on every "
                                               "node, and the download's detail")] = False,
           accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """The cluster's state, then one line per node; the state files plus live facts."""
    from k3deploy.cli.fleet_cmd import run_status   # a fleet's, or status_cmd's for one group
    return run_status(inventory, json_out=json_out, accept_new_host_keys=accept_new_host_keys,
                      state_dir=state_dir, steps=steps)


@app.command()
def verify(inventory: Inv, accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """Endpoint and memory checks on a running cluster (a fleet: each group's, then its router)."""
    from k3deploy.cli.fleet_cmd import fleet_of, fleet_verify
    from k3deploy.run.run_steps import single
    if fleet := fleet_of(inventory):
        return fleet_verify(fleet, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir,
                            log_json=_OUTPUT["log_json"])
    # Its goal is the cluster's endpoint: a node out of reach fails it (1), not partial (3).
    return _run(inventory, single("verify"), accept_new_host_keys=accept_new_host_keys,
                state_dir=state_dir, per_node=False)


@app.command()
def logs(inventory: Inv, out: Annotated[str | None, typer.Option("--out")] = None,
         accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """Collect each node's engine log, named by node and rank (a fleet: by group, and the router's)."""
    from k3deploy.cli.fleet_cmd import fleet_logs, fleet_of
    from k3deploy.run.run_steps import single
    if fleet := fleet_of(inventory):
        return fleet_logs(fleet, out=out, accept_new_host_keys=accept_new_host_keys,
                          state_dir=state_dir, log_json=_OUTPUT["log_json"])
    return _run(inventory, single("collect-logs"), options={"out_dir": out},
                accept_new_host_keys=accept_new_host_keys, state_dir=state_dir)


@app.command()
def down(inventory: Inv,
         wipe_weights: Annotated[bool, typer.Option("--wipe-weights", help="also delete the "
                                                    "downloaded weights")] = False,
         out: Annotated[str | None, typer.Option("--out", help="where logs go")] = None,
         check: Check = False, accept_new_host_keys: AcceptNew = False,
         state_dir: StateDir = None) -> int:
    """Capture logs, remove containers, report unreachable nodes (exit 3); a fleet: each group
    out of the router and down, then the router."""
    from k3deploy.run.run_steps import playbook_steps, single
    from k3deploy.cli.fleet_cmd import fleet_down, fleet_of
    if fleet := fleet_of(inventory):
        return fleet_down(fleet, check=check, options={"out_dir": out}, wipe_weights=wipe_weights,
                          state_dir=state_dir, accept_new_host_keys=accept_new_host_keys,
                          log_json=_OUTPUT["log_json"])
    steps = playbook_steps("teardown") + (single("wipe-weights") if wipe_weights else [])
    return _run(inventory, steps, check=check, options={"out_dir": out},
                accept_new_host_keys=accept_new_host_keys, state_dir=state_dir)


class Effort(str, Enum):
    low = "low"
    medium = "medium"
    high = "high"


@app.command()
def chat(inventory: Inv,
         message: Annotated[str | None, typer.Argument(help="ask once and exit (for "
                                                          "scripts); none: interactive")] = None,
         effort: Annotated[Effort | None, typer.Option(
             "--effort", help="reasoning_effort (default: low)")] = None,
         tools: Annotated[bool, typer.Option("--tools", help="offer the model local read-only "
                                             "tools (utc_now, cluster_info)")] = False,
         json_out: Json = False, state_dir: StateDir = None, group: Group = None) -> int:
    """Talk to the endpoint (a fleet's router); every assistant message goes back whole."""
    from k3deploy.cli.chat_cmd import run_chat
    return run_chat(inventory, message, effort=effort and effort.value, json_out=json_out,
                    tools=tools, state_dir=state_dir, group=group)


@app.command()
def bench(inventory: Inv,
          concurrency: Annotated[str, typer.Option(help="concurrency levels (a single stream "
                                                   "always comes first)")] = "1,4,8",
          seconds: Annotated[float, typer.Option(help="time bound of each level",
                                                 min=1, max=600)] = 20.0,
          effort: Annotated[Effort, typer.Option("--effort", help="reasoning_effort")] = Effort.low,
          max_tokens: Annotated[int, typer.Option("--max-tokens", min=1)] = 512,
          json_out: Json = False, accept_new_host_keys: AcceptNew = False,
          state_dir: StateDir = None, group: Group = None) -> int:
    """Short bounded load test from this laptop; writes a bring-up certificate."""
    from k3deploy.cli.bench_cmd import run_bench_cmd
    return run_bench_cmd(inventory, levels=concurrency, seconds=seconds, effort=effort.value,
                         max_tokens=max_tokens, json_out=json_out, state_dir=state_dir,
                         accept_new_host_keys=accept_new_host_keys, group=group)


certificate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                              help="Bring-up certificates (.k3deploy/CLUSTER/certificates/).")
app.add_typer(certificate_app, name="certificate")


@certificate_app.command("diff")
def certificate_diff(a: str, b: str, json_out: Json = False) -> int:
    """What changed between two bring-ups: flags, versions, latency moved by more than 10%."""
    from k3deploy.cli.certificate_cmd import run_diff
    return run_diff(a, b, json_out)


@app.command()
def watch(inventory: Inv,
          restart: Annotated[int | None, typer.Option(
              "--restart", min=0, help="after an incident, run the bring-up again, at most N "
              "times (with backoff); then exit 1 naming every incident")] = None,
          interval: Annotated[float, typer.Option("--interval", min=1.0,
                                                  help="seconds between looks")] = 5.0,
          accept_new_host_keys: AcceptNew = False, state_dir: StateDir = None) -> int:
    """Follow the cluster (serving / stopped by the guard / down), one line per change."""
    from k3deploy.cli.watch_cmd import refuse_bad_input, run_watch
    refuse_bad_input(inventory)
    return run_watch(inventory, restart=restart, interval=interval,
                     accept_new_host_keys=accept_new_host_keys, state_dir=state_dir)


app.command()(roll_cmd.roll)   # `roll` on a fleet: its own module (cli/roll_cmd.py)


def _print_error(err: K3Error) -> None:
    if _OUTPUT["log_json"]:
        klog.get().error("error", kind=type(err).__name__, lines=[redact(x) for x in err.lines()])
        return
    for line in err.lines():
        print(redact(line), file=sys.stderr)


GLOBAL_FLAGS = ("--log-json", "-v", "--verbose")


def global_flags_first(argv: list[str]) -> list[str]:
    """`k3deploy up -i inv.yaml --log-json` as well as `k3deploy --log-json up ...`: click only
    takes group options before the subcommand, so the global flags (they take no value) move
    there; anything after `--` stays where it is."""
    end = argv.index("--") if "--" in argv else len(argv)
    flags = [a for a in argv[:end] if a in GLOBAL_FLAGS]
    return flags + [a for a in argv[:end] if a not in GLOBAL_FLAGS] + argv[end:]


def main(argv: list[str] | None = None) -> None:
    """In-process (tests): ends with SystemExit like any click program."""
    sys.exit(exit_code(argv))


def program() -> None:
    """The `k3deploy` command. Every file and state write is complete by now (state files
    and certificates are written atomically, the sessions closed), so the interpreter's own
    teardown of ~900 modules (a tenth of a second, a no-op `up`'s largest idle cost) is
    skipped; only the output streams need flushing."""
    code = exit_code()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`k3deploy status | head`)
            pass
    interrupt.exit_process(code)   # the one os._exit on the laptop side (tests replace it)


def exit_code(argv: list[str] | None = None) -> int:
    command = typer.main.get_command(app)
    argv = global_flags_first(sys.argv[1:] if argv is None else list(argv))
    try:
        code = command.main(args=argv, prog_name="k3deploy", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as err:
        print(err.ctx.get_help() if err.ctx else str(err))
        code = 0
    except click_exc.ClickException as err:
        err.show()
        code = EXIT_BAD_INPUT
    except typer.Exit as err:  # typer's own classes (click's in older typer), not click_exc's
        code = err.exit_code
    except typer.Abort:
        code = 130
    except K3Error as err:
        _print_error(err)
        code = err.exit_code
    return code if isinstance(code, int) else 0
