"""The dry-fire's decode load on a multi-node SGLang group, and what its failure says.

sgl-project/sglang#39568 (open): on the cookbook image (SGLang 0.5.16) a multi-node group
serves, answers a short request, then hangs in the first decode step of 32 concurrent
requests of 8192 prompt tokens until the scheduler watchdog (`--watchdog-timeout`, 300 s by
default) ends every rank. A dry-fire that sends only one short chat would pass and the real
launch would meet the hang 30 minutes and a whole load later, so the verdict sends that load
too (remote/endpoint_probe.py decode_batch). When it fails, the head's engine log says why:
SGLang's own watchdog lines (engines/watchdog_log.py) name the hang; the fix is the working
launch's flags, k3deploy's defaults for this image (engines/sglang_defaults.py).
"""

from __future__ import annotations

from k3deploy.core.errors import StepFailed
from k3deploy.core.jsonvalue import JSON
from k3deploy.engines import sglang_defaults
from k3deploy.engines.sglang import sglang_serve_args
from k3deploy.engines.spec import LaunchSpec
from k3deploy.engines.watchdog_log import WatchdogTimeout, watchdog_timeout
from k3deploy.facts import http

SGLANG_WATCHDOG_S = 300.0   # ServerArgs.watchdog_timeout's default (0.5.4 .. 0.5.23)
SIGQUIT_GRACE_S = 5.0       # the watchdog sleeps this long before it ends the server
MARGIN_S = 60.0
LOG_TAIL = 400              # lines: every rank of the node writes its watchdog block


def wants_load(spec: LaunchSpec | None) -> bool:
    return spec is not None and spec.engine == "sglang" and spec.nnodes > 1


def _flag_value(argv: list[str], name: str) -> str | None:
    flag = f"--{name}"
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) \
        else None


def watchdog_seconds(spec: LaunchSpec) -> float:
    value = _flag_value(sglang_serve_args(spec), "watchdog-timeout")
    try:
        return float(value) if value is not None else SGLANG_WATCHDOG_S
    except ValueError:
        return SGLANG_WATCHDOG_S


def load_settings(spec: LaunchSpec) -> dict[str, JSON]:
    """The probe's settings: each request outwaits the engine's watchdog (polled every half
    timeout, so it fires by 1.5x) and its grace; the prompt fits the context."""
    wait = watchdog_seconds(spec) * 1.5 + SIGQUIT_GRACE_S + MARGIN_S
    limit = (spec.context_length - 64) if spec.context_length else None
    return {"decode_timeout": wait, "prompt_limit": limit}


def turned_off(spec: LaunchSpec) -> list[str]:
    """The working launch's flags this image accepts that the launch does not carry as the
    working launch had them (the inventory's engine.args removed or changed them)."""
    argv = sglang_serve_args(spec)
    return [name for name, value in sglang_defaults.decode_hang_flags(spec.image)
            if (f"--{name}" not in argv if value is True
                else _flag_value(argv, name) != str(value))]


def hang_error(node: str, step: str, spec: LaunchSpec, log: str,
               answer: http.Answer, hint_tail: str) -> StepFailed:
    """The failed load's error: #39568 named from the engine's own lines, or what the load
    got when the log does not say."""
    found = watchdog_timeout(log)
    if found is None:
        return StepFailed(node, "dry-fire (dummy weights): the group answered a short chat, but "
                          f"a batch of 32 long requests answered {answer.status}: "
                          f"{answer.shown()}", step=step, hint=hint_tail)
    return StepFailed(node, _message(found), step=step, hint=_hint(spec, hint_tail))


def _message(found: WatchdogTimeout) -> str:
    return ("dry-fire (dummy weights): the first multi-node decode outlived SGLang's scheduler "
            f"watchdog: {found.line()}, and the engine ended every rank. This is "
            f"{sglang_defaults.ISSUE} (open): the kimi-k3 cookbook image (SGLang 0.5.16) hangs "
            "in the first decode step of a multi-node group under load; the real launch would "
            "meet it after the whole weight load")


def _hint(spec: LaunchSpec, tail: str) -> str:
    off = turned_off(spec)
    if off:
        fix = (f"launch with the working flags of {sglang_defaults.ISSUE}: "
               f"{sglang_defaults.fix_text()} (k3deploy's defaults for this image; the "
               f"inventory's engine.args turns off or changes {', '.join(off)}: drop "
               f"{'that key' if len(off) == 1 else 'those keys'} there)")
    else:
        fix = (f"the working launch's flags of {sglang_defaults.ISSUE} are set and the decode "
               "still hangs: try another image (engine.image), and add what you see to the issue")
    return f"{fix}; {tail}"
