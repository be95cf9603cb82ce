"""verify: the endpoint answers like Kimi K3 should, and every GPU holds what it should.

The guide's most common configuration error (a kimi_k2 parser carried over) starts without
complaint and only shows in the response shape; a rank that failed to load its shard only
shows in memory. Both are checked here.
"""

from __future__ import annotations

from dataclasses import dataclass

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.node import run_settle
from k3deploy.engines import vision
from k3deploy.engines.spec import render_flags
from k3deploy.engines.static_fraction import inventory_static_fraction
from k3deploy.facts import http
from k3deploy.facts.fabric import IbPort
from k3deploy.facts.nvidia_smi import Gpu, LostGpu
from k3deploy.node import apikey, http_probe
from k3deploy.node.context import NodeContext, RunContext
from k3deploy.steps import probes
from k3deploy.steps.engine import certify
from k3deploy.steps.fabric import fabric_check
from k3deploy.steps.base import AnyFact, Step

GIB_MIB = 1024
SHORT_FRACTION = 0.85  # below this share of the expected memory a rank did not load its shard


CHECKS = ["models", "chat", "tools", "vision"]


@dataclass(frozen=True)
class VerifyFacts(certify.CertifyFacts):
    """What the certificate records, the GPUs nvidia-smi lost, and the fabric (the closing
    lines' transport)."""
    gpus_lost: tuple[LostGpu, ...] = ()
    ib_ports: tuple[IbPort, ...] | None = None
    ib_devices: tuple[str, ...] | None = None
    gpudirect_rdma: bool = False


def expected_used_mib(inv: Inventory, total_mib: int) -> float:
    return inventory_static_fraction(inv) * total_mib


def _message(res: http.Answer | None) -> http.Message:
    return (res.message if res else None) or http.Message()


def reasoning_field(msg: http.Message) -> str | None:
    """Which field carries the chain of thought: SGLang fills `reasoning_content`; vLLM may
    name it `reasoning` instead (newer releases), or send both with the same text."""
    if msg.reasoning_content:
        return "reasoning_content"
    return "reasoning" if msg.reasoning else None


def _status(res: http.Answer | None) -> int | None:
    return res.status if res else None


def _shown(res: http.Answer | None) -> str:
    return res.shown() if res else "None"


def endpoint_problems(results: http.Endpoint, model: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    models = results.models
    ids = list(models.models) if models else []
    if _status(models) != 200 or model not in ids:
        out.append(("models", f"/v1/models answered {_status(models)} with {ids}; "
                    f"expected {model}"))
    chat = results.chat
    msg = _message(chat)
    if _status(chat) != 200:
        out.append(("chat", f"chat completion answered {_status(chat)}: {_shown(chat)}"))
    elif not msg.content or not reasoning_field(msg):
        out.append(("reasoning", "reasoning_content (or reasoning) is empty and the chain of "
                    "thought is in content: --reasoning-parser kimi_k3 did not take effect "
                    "(kimi_k2 carried over from a K2 deployment?)"))
    tools = results.tools
    if _status(chat) == 200 and _status(tools) != 200:
        out.append(("tools", f"the tool-call probe answered {_status(tools)}: "
                    f"{_shown(tools)} (vLLM needs "
                    "--enable-auto-tool-choice with --tool-call-parser kimi_k3)"))
    elif _status(chat) == 200 and not _message(tools).tool_calls:
        out.append(("tools", "the tool-call probe did not parse into tool_calls: set "
                    "--tool-call-parser kimi_k3"))
    return out


def vision_off(inv: Inventory) -> list[vision.VisionOff]:
    """The inventory's own flags (engine.args) that turn the vision path off; k3deploy's
    defaults never do (tests/unit/test_vision_flags.py checks every reference launch)."""
    return vision.vision_off(inv.engine.kind, render_flags([], inv.engine.args))


def vision_problems(res: http.Answer | None, inv: Inventory) -> list[tuple[str, str]]:
    """The image probe must be answered with a message. A launch that turns vision off fails
    even when the engine answers 200: SGLang then drops the image and answers from the text."""
    answer = f"answered {_status(res)}: {_shown(res)}"
    off = vision_off(inv)
    if off:
        keys = ", ".join(f"engine.args.{v.flag[2:]}" for v in off)
        return [("vision", f"the launch turns the vision path off with "
                 f"{', '.join(v.as_given for v in off)} (the image probe {answer}): remove "
                 f"{keys} from the inventory, then run `k3deploy up --replace`")]
    if _status(res) != 200 or not _message(res).content:
        return [("vision", f"the image probe (a base64 PNG in an image_url block) {answer}")]
    return []


def _parser_setting(inv: Inventory, check: str) -> str:
    """Point at the inventory line when it is what overrides the kimi_k3 parser."""
    flag = {"reasoning": "reasoning-parser", "tools": "tool-call-parser"}.get(check)
    args = inv.engine.args
    value = args.get(flag) if flag else None   # FlagName: engine.args keys have no "_"
    if not value or value == "kimi_k3":
        return ""
    return (f"; the inventory sets engine.args.{flag}: {value}: set it to kimi_k3 (or remove it), "
            "then run `k3deploy up --replace`")


def memory_problems(gpus: tuple[Gpu, ...] | None, inv: Inventory,
                    rank: int) -> list[tuple[str, str]]:
    if not gpus:
        return [("memory", "nvidia-smi gave no GPUs")]
    short = [(i, g) for i, g in enumerate(gpus)
             if g.used_mib < SHORT_FRACTION * expected_used_mib(inv, g.total_mib)]
    if not short:
        return []
    # One row per rank, not eight: a short load shows on every GPU of the rank at once.
    used = sorted({f"{g.used_mib / GIB_MIB:.1f}" for _, g in short}, key=float)
    total = short[0][1].total_mib
    which = "every GPU" if len(short) == len(gpus) else "GPU " + ", ".join(str(i) for i, _ in short)
    return [("memory", f"rank {rank}, {which}: {'-'.join([used[0], used[-1]][:len(used)])} GiB "
             f"in use of {total / GIB_MIB:.1f} GiB, expected ~"
             f"{expected_used_mib(inv, total) / GIB_MIB:.1f} GiB: this rank failed to load its "
             f"shard; `k3deploy logs -i {inv.source}` shows why, then `k3deploy down` and "
             "`k3deploy up` reload every rank")]


def _tunnel_lines(inv: Inventory) -> list[str]:
    hint = http_probe.tunnel_hint(inv)
    return [f"reach it:  {hint}"] if hint else []


class VerifyEndpoint(Step[VerifyFacts]):
    name = "verify"
    read_only = True
    needs_all_nodes = True
    Facts = VerifyFacts

    def prepare(self, run: RunContext) -> None:
        run_settle.api_key(run)

    def probes(self, node: NodeContext) -> list[AnyFact]:
        # What the certificate records, GPUs included; on the head one endpoint probe for
        # both (its checks and the engine's version).
        return certify.node_probes(node.inv, node.is_head, node.run.inputs.api_key,
                                   checks=tuple(CHECKS)) + [probes.lost_gpus(),
                                                            *probes.fabric_facts()]

    def problems(self, facts: VerifyFacts, node: NodeContext) -> list[tuple[str, str]]:
        out = (probes.lost_gpu_problems(facts.gpus_lost, "memory") if facts.gpus_lost
               else memory_problems(facts.gpus, node.inv, node.rank))
        if node.is_head:
            # the head's probe always answers each check (node/http_probe.py fact)
            endpoint = facts.endpoint or http.unanswered(CHECKS)
            out += [(check, message + _parser_setting(node.inv, check)) for check, message
                    in endpoint_problems(endpoint, node.inv.model.repo)]
            out += vision_problems(endpoint.vision, node.inv)
        return out

    def closing_lines(self, run: RunContext, all_facts: dict[str, VerifyFacts]) -> list[str]:
        key = apikey.key_path(run.session.state_dir)
        auth = f'-H "Authorization: Bearer $(cat {key})" ' if run.inputs.api_key else ""
        head = run.session.states[run.inv.head.name].step(self.label)
        field = (head.get("detail") or {}).get("reasoning_field")
        return [f"endpoint: {http_probe.url(run.inv)}   model: {run.inv.model.repo}"
                + (f"   chain of thought in: {field}" if field else ""),
                f"call it:  curl -s {http_probe.url(run.inv)}/chat/completions {auth}"
                "-H 'Content-Type: application/json' -d '{\"model\": \"" + run.inv.model.repo +
                "\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], "
                "\"reasoning_effort\": \"low\"}'"] + _tunnel_lines(run.inv) \
            + fabric_check.transport_lines(all_facts)

    def detail(self, facts: VerifyFacts, node: NodeContext) -> dict[str, JSON] | None:
        out: dict[str, JSON] = {"used_gib": [round(g.used_mib / GIB_MIB, 1) for g in facts.gpus or ()],
               "certificate": certify.node_record(facts)}
        if facts.endpoint is not None:
            out["reasoning_field"] = reasoning_field(_message(facts.endpoint.chat))
        return out
