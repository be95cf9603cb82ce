"""The laptop's view of the serving endpoint for the official `openai` client: the URL (the
head's address and serve port, as verify prints it), the key from the cluster's secrets file,
and the client's failures turned into a few plain lines. Used by chat and bench."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from k3deploy.node import apikey, http_probe
from k3deploy.core.errors import EndpointError
from k3deploy.core.state import state_dir_for
from k3deploy.cluster.inventory import Inventory

if TYPE_CHECKING:
    import openai  # imported when a client is made: it takes a second to import


@dataclass(frozen=True)
class Target:
    base_url: str
    api_key: str | None
    model: str
    cluster: str
    inventory: str
    tunnel: str | None = None   # how to reach a head behind an SSH gateway (http_probe.tunnel_hint)


def target(inv: Inventory, state_dir: str | None = None) -> Target:
    key = apikey.load_or_create(inv, state_dir_for(inv.source, inv.cluster, state_dir),
                                create=False)
    if inv.engine.require_api_key and key is None:
        raise EndpointError(f"no API key for cluster {inv.cluster} on this laptop",
                            hint=f"k3deploy up -i {inv.source} creates it")
    return Target(http_probe.url(inv), key, inv.model.repo, inv.cluster, inv.source,
                  http_probe.tunnel_hint(inv))


@overload
def client(t: Target, timeout: float = 600.0, asynchronous: Literal[False] = False) -> openai.OpenAI: ...
@overload
def client(t: Target, timeout: float = 600.0, *, asynchronous: Literal[True]) -> openai.AsyncOpenAI: ...
def client(t: Target, timeout: float = 600.0,
           asynchronous: bool = False) -> openai.OpenAI | openai.AsyncOpenAI:
    import openai
    cls = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    # No retries: a bench must see every failure, and chat shows it at once.
    return cls(base_url=t.base_url, api_key=t.api_key or "EMPTY", timeout=timeout,
               max_retries=0)


def explain(err: Exception, t: Target) -> EndpointError:
    """An openai exception as one or two lines naming the endpoint."""
    import openai
    where = f"{t.base_url} ({t.cluster})"
    if isinstance(err, openai.AuthenticationError):
        return EndpointError(f"{where} refused the API key (401)",
                             hint="the key on the nodes differs from .k3deploy/"
                             f"{t.cluster}/secrets/api-key: `k3deploy up -i {t.inventory} "
                             "--replace` puts it back")
    if isinstance(err, openai.APIStatusError):
        return EndpointError(f"{where} answered {err.status_code}: {str(err.message)[:300]}")
    if isinstance(err, openai.APITimeoutError):
        return EndpointError(f"{where} did not answer in time")
    if isinstance(err, openai.APIConnectionError):
        return EndpointError(f"cannot reach {where}: {err.__cause__ or err}",
                             hint=f"`k3deploy status -i {t.inventory}`; the serve port must "
                             "be open to this laptop" + (f"; {t.tunnel}" if t.tunnel else ""))
    return EndpointError(f"{where}: {err}")
