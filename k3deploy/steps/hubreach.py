"""Preflight's look at the way out: every node reaches the Hub endpoint and the CDN host its
/resolve redirects to (the gate check on the laptop learned it, cluster/hubgate.py). A node
that cannot reach the CDN would only show read timeouts part-way through the download."""

from __future__ import annotations

import json

from k3deploy.node import facts as F
from k3deploy.remote import script_text

PROGRAM = script_text("hub_reach.py")


def _urls(node) -> list[str]:
    reach = node.run.inputs.hub_reach
    if reach is None:
        return []
    return [f"{o.scheme}://{o.host}:{o.port}" for o in reach.origins()]


def _parse(out: str, code: int) -> dict | None:
    try:
        return json.loads(out.strip().splitlines()[-1]) if code == 0 else None
    except (ValueError, IndexError):
        return None


def facts(node) -> list[F.Fact]:
    urls = _urls(node)
    return [F.python("hub_reach", PROGRAM, urls, _parse)] if urls else []


def problems(found, node) -> list[tuple[str, str]]:
    urls = _urls(node)
    if not urls:
        return []
    answers = found.get("hub_reach")
    if answers is None:
        return [("hub", f"could not probe {', '.join(urls)} from this node (python3 failed)")]
    reach = node.run.inputs.hub_reach
    names = {f"{o.scheme}://{o.host}:{o.port}": ("the Hub" if o == reach.hub else "the Hub's CDN")
             for o in reach.origins()}
    return [("hub", f"cannot reach {names[url]} at {url.split('://', 1)[1]} ({why}): the weights "
             "come from there; open outbound TCP to it (firewall, proxy or DNS on this node)")
            for url, why in answers.items() if why is not True and url in names]
