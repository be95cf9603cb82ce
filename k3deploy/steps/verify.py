"""verify: the endpoint answers like Kimi K3 should, and every GPU holds what it should.

The guide's most common configuration error (a kimi_k2 parser carried over) starts without
complaint and only shows in the response shape; a rank that failed to load its shard only
shows in memory. Both are checked here.
"""

from __future__ import annotations

from k3deploy import apikey, endpoint
from k3deploy import facts as F
from k3deploy.steps import probes
from k3deploy.steps.base import Step

GIB_MIB = 1024
SHORT_FRACTION = 0.85  # below this share of the expected memory a rank did not load its shard


def expected_used_mib(inv, total_mib: int) -> float:
    if inv.engine.kind == "vllm":
        return float(inv.engine.args.get("gpu-memory-utilization") or 0.9) * total_mib
    return inv.engine.mem_fraction_static * total_mib


def _message(res: dict) -> dict:
    body = res.get("body") if isinstance(res.get("body"), dict) else {}
    choices = body.get("choices") or [{}]
    return choices[0].get("message") or {}


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
    elif not msg.get("content") or not msg.get("reasoning_content"):
        out.append(("reasoning", "reasoning_content is empty and the chain of thought is in "
                    "content: --reasoning-parser kimi_k3 did not take effect (kimi_k2 carried "
                    "over from a K2 deployment?)"))
    calls = _message(results.get("tools", {})).get("tool_calls")
    if chat.get("status") == 200 and not calls:
        out.append(("tools", "the tool-call probe did not parse into tool_calls: set "
                    "--tool-call-parser kimi_k3"))
    return out


def memory_problems(gpus: list[dict] | None, inv, rank: int) -> list[tuple[str, str]]:
    if not gpus:
        return [("memory", "nvidia-smi gave no GPUs")]
    out = []
    for index, gpu in enumerate(gpus):
        want = expected_used_mib(inv, gpu["total_mib"])
        if gpu["used_mib"] < SHORT_FRACTION * want:
            out.append(("memory", f"rank {rank} GPU {index}: {gpu['used_mib'] / GIB_MIB:.1f} GiB "
                        f"in use, expected ~{want / GIB_MIB:.1f} GiB of "
                        f"{gpu['total_mib'] / GIB_MIB:.1f}: this rank failed to load its shard"))
    return out


class VerifyEndpoint(Step):
    name = "verify"
    summary = "endpoint contract and per-GPU memory"
    read_only = True
    needs_all_nodes = True

    def prepare(self, run):
        run.shared.setdefault("api_key", apikey.load_or_create(run.inv, run.session.state_dir,
                                                               create=False))

    def facts(self, node):
        found = F.gather(node.conn, [probes.gpus()], step=self.name)
        if node.is_head:
            found["endpoint"] = endpoint.probe(node.conn, node.inv, ["models", "chat", "tools"],
                                               node.run.shared["api_key"], step=self.name)
        return found

    def problems(self, facts, node):
        out = memory_problems(facts.get("gpus"), node.inv, node.rank)
        if node.is_head:
            out += endpoint_problems(facts["endpoint"], node.inv.model.repo)
        return out

    def closing_lines(self, run) -> list[str]:
        key = apikey.key_path(run.session.state_dir)
        auth = f'-H "Authorization: Bearer $(cat {key})" ' if run.shared.get("api_key") else ""
        return [f"endpoint: {endpoint.url(run.inv)}   model: {run.inv.model.repo}",
                f"call it:  curl -s {endpoint.url(run.inv)}/chat/completions {auth}"
                "-H 'Content-Type: application/json' -d '{\"model\": \"" + run.inv.model.repo +
                "\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], "
                "\"reasoning_effort\": \"low\"}'"]

    def detail(self, facts, node):
        gpus = facts.get("gpus") or []
        return {"used_gib": [round(g["used_mib"] / GIB_MIB, 1) for g in gpus]}
