"""What the cluster costs: GPUs x hours x the inventory's price per GPU-hour. Pure.

Rates move within an afternoon (the guide watched H100 spot double), so the price is the
user's, from the inventory or `plan --price`; nothing here is a quoted rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from k3deploy.cluster.inventory import Inventory

SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£"}


def per_hour(gpus: int, price_per_gpu_hour: float) -> float:
    return gpus * price_per_gpu_hour


def spent(gpus: int, price_per_gpu_hour: float, seconds: float) -> float:
    return per_hour(gpus, price_per_gpu_hour) * max(0.0, seconds) / 3600


def money(amount: float, currency: str = "USD") -> str:
    symbol = SYMBOLS.get(currency)
    return f"{symbol}{amount:,.2f}" if symbol else f"{amount:,.2f} {currency}"


def duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class CostSummary(TypedDict):
    gpus: int
    per_gpu_hour: float
    currency: str
    per_hour: float
    seconds: float
    spent: float


def summary(inv: Inventory, seconds: float) -> CostSummary | None:
    """Cost of `seconds` of the whole cluster, and its burn per hour; None without a price."""
    price = inv.price
    if price is None:
        return None
    gpus = inv.total_gpus
    return {"gpus": gpus, "per_gpu_hour": price.per_gpu_hour, "currency": price.currency,
            "per_hour": round(per_hour(gpus, price.per_gpu_hour), 2),
            "seconds": round(seconds, 1),
            "spent": round(spent(gpus, price.per_gpu_hour, seconds), 2)}
