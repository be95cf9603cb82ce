"""verify: the endpoint answers like Kimi K3 should, and every GPU holds what it should.

The guide's most common configuration error (a kimi_k2 parser carried over) starts without
complaint and only shows in the response shape; a rank that failed to load its shard only
shows in memory. Both are checked here.
"""

from __future__ import annotations

import dataclasses

from k3deploy.node import run_settle
from k3deploy.engines import vision
from k3deploy.engines.spec import render_flags
from k3deploy.engines.static_fraction import inventory_static_fraction
from k3deploy.node import apikey, http_probe
from k3deploy.steps import certify, fabric_check, probes
from k3deploy.steps.base import Step

GIB_MIB = 1024
SHORT_FRACTION = 0.85  # below this share of the expected memory a rank did not load its shard


CHECKS = ["models", "chat", "tools", "vision"]


def expected_used_mib(inv, total_mib: int) -> float:
    return inventory_static_fraction(inv) * total_mib


def _message(res: dict) -> dict:
    body = res.get("body") if isinstance(res.get("body"), dict) else {}
    choices = body.get("choices") or [{}]
    return choices[0].get("message") or {}


def reasoning_field(msg: dict) -> str | None:
    """Which field carries the chain of thought: SGLang fills `reasoning_content`; vLLM may
    name it `reasoning` instead (newer releases), or send both with the same text."""
    for name in ("reasoning_content", "reasoning"):
        if msg.get(name):
            return name
    return None


def endpoint_problems(results: dict, model: str) -> list[tuple[str, str]]:
    out = []
    models = results.get("models", {})
    ids = [m.get("id") for m in (models.get("body") or {}).get("data", [])] \
        if isinstance(models.get("body"), dict) else []
    if models.get("status") != 200 or model not in ids:
        out.append(("models", f"/v1/models answered {models.get('status')} with {ids}; "
                    f"expected {model}"))
    chat = results.get("chat", {})
    msg = _message(chat)
    if chat.get("status") != 200:
        out.append(("chat", f"chat completion answered {chat.get('status')}: "
                    f"{str(chat.get('body') or chat.get('error'))[:200]}"))
    elif not msg.get("content") or not reasoning_field(msg):
        out.append(("reasoning", "reasoning_content (or reasoning) is empty and the chain of "
                    "thought is in content: --reasoning-parser kimi_k3 did not take effect "
                    "(kimi_k2 carried over from a K2 deployment?)"))
    tools = results.get("tools", {})
    calls = _message(tools).get("tool_calls")
    if chat.get("status") == 200 and tools.get("status") != 200:
        out.append(("tools", f"the tool-call probe answered {tools.get('status')}: "
                    f"{str(tools.get('body') or tools.get('error'))[:200]} (vLLM needs "
                    "--enable-auto-tool-choice with --tool-call-parser kimi_k3)"))
    elif chat.get("status") == 200 and not calls:
        out.append(("tools", "the tool-call probe did not parse into tool_calls: set "
                    "--tool-call-parser kimi_k3"))
    return out


def vision_off(inv) -> list[vision.VisionOff]:
    """The inventory's own flags (engine.args) that turn the vision path off; k3deploy's
    defaults never do (tests/unit/test_vision_flags.py checks every reference launch)."""
    return vision.vision_off(inv.engine.kind, render_flags([], inv.engine.args))


def vision_problems(res: dict | None, inv) -> list[tuple[str, str]]:
    """The image probe must be answered with a message. A launch that turns vision off fails
    even when the engine answers 200: SGLang then drops the image and answers from the text."""
    res = res or {}
    answer = (f"answered {res.get('status')}: "
              f"{str(res.get('body') or res.get('error'))[:200]}")
    off = vision_off(inv)
    if off:
        keys = ", ".join(f"engine.args.{v.flag[2:]}" for v in off)
        return [("vision", f"the launch turns the vision path off with "
                 f"{', '.join(v.as_given for v in off)} (the image probe {answer}): remove "
                 f"{keys} from the inventory, then run `k3deploy up --replace`")]
    if res.get("status") != 200 or not _message(res).get("content"):
        return [("vision", f"the image probe (a base64 PNG in an image_url block) {answer}")]
    return []


def _parser_setting(inv, check: str) -> str:
    """Point at the inventory line when it is what overrides the kimi_k3 parser."""
    flag = {"reasoning": "reasoning-parser", "tools": "tool-call-parser"}.get(check)
    args = inv.engine.args
    value = args.get(flag) if flag else None   # FlagName: engine.args keys have no "_"
    if not value or value == "kimi_k3":
        return ""
    return (f"; the inventory sets engine.args.{flag}: {value}: set it to kimi_k3 (or remove it), "
            "then run `k3deploy up --replace`")


def memory_problems(gpus: list[dict] | None, inv, rank: int) -> list[tuple[str, str]]:
    if not gpus:
        return [("memory", "nvidia-smi gave no GPUs")]
    short = [(i, g) for i, g in enumerate(gpus)
             if g["used_mib"] < SHORT_FRACTION * expected_used_mib(inv, g["total_mib"])]
    if not short:
        return []
    # One row per rank, not eight: a short load shows on every GPU of the rank at once.
    used = sorted({f"{g['used_mib'] / GIB_MIB:.1f}" for _, g in short}, key=float)
    total = short[0][1]["total_mib"]
    which = "every GPU" if len(short) == len(gpus) else "GPU " + ", ".join(str(i) for i, _ in short)
    return [("memory", f"rank {rank}, {which}: {'-'.join([used[0], used[-1]][:len(used)])} GiB "
             f"in use of {total / GIB_MIB:.1f} GiB, expected ~"
             f"{expected_used_mib(inv, total) / GIB_MIB:.1f} GiB: this rank failed to load its "
             f"shard; `k3deploy logs -i {inv.source}` shows why, then `k3deploy down` and "
             "`k3deploy up` reload every rank")]


class VerifyEndpoint(Step):
    name = "verify"
    read_only = True
    needs_all_nodes = True

    def prepare(self, run):
        run_settle.api_key(run)

    def probes(self, node):
        # What the certificate records, GPUs included; on the head one endpoint probe for
        # both (its checks and the engine's version), in verify's own look only: its chat
        # requests hang on a group that lost a rank, and ahead of time they would hold up the
        # bring-up's first look (preflight) until that group is stopped.
        found = certify.node_probes(node.inv, node.is_head, node.run.inputs.api_key,
                                    checks=tuple(CHECKS)) + [probes.lost_gpus(),
                                                             *probes.fabric_facts()]
        return [dataclasses.replace(f, ahead=False) if f.name == "endpoint" else f
                for f in found]

    def observe(self, found, node):
        if node.is_head and found.get("endpoint") is None:
            found = {**found, "endpoint": http_probe.unanswered(CHECKS)}
        return found

    def problems(self, facts, node):
        lost = facts.get("gpus_lost")
        out = (probes.lost_gpu_problems(lost, "memory") if lost
               else memory_problems(facts.get("gpus"), node.inv, node.rank))
        if node.is_head:
            out += [(check, message + _parser_setting(node.inv, check)) for check, message
                    in endpoint_problems(facts["endpoint"], node.inv.model.repo)]
            out += vision_problems(facts["endpoint"].get("vision"), node.inv)
        return out

    def closing_lines(self, run, all_facts) -> list[str]:
        key = apikey.key_path(run.session.state_dir)
        auth = f'-H "Authorization: Bearer $(cat {key})" ' if run.inputs.api_key else ""
        head = run.session.states[run.inv.head.name].step(self.label)
        field = (head.get("detail") or {}).get("reasoning_field")
        return [f"endpoint: {http_probe.url(run.inv)}   model: {run.inv.model.repo}"
                + (f"   chain of thought in: {field}" if field else ""),
                f"call it:  curl -s {http_probe.url(run.inv)}/chat/completions {auth}"
                "-H 'Content-Type: application/json' -d '{\"model\": \"" + run.inv.model.repo +
                "\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], "
                "\"reasoning_effort\": \"low\"}'"] + fabric_check.transport_lines(all_facts)

    def detail(self, facts, node):
        gpus = facts.get("gpus") or []
        out = {"used_gib": [round(g["used_mib"] / GIB_MIB, 1) for g in gpus],
               "certificate": certify.node_record(facts)}
        if "endpoint" in facts:
            out["reasoning_field"] = reasoning_field(_message(facts["endpoint"].get("chat", {})))
        return out
