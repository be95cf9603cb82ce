"""What `up` adds after its summary table: how long the bring-up took and what it cost, and
the bring-up certificate once verify has passed."""

from __future__ import annotations

import time

from rich.console import Console

from k3deploy import cost
from k3deploy import inventory as inventory_mod
from k3deploy import log as klog


def bringup_record(inv, started: float, finished: float) -> dict:
    return {"started": started, "finished": finished,
            "seconds": round(finished - started, 1),
            "cost": cost.summary(inv, finished - started)}


def cost_line(record: dict) -> str:
    took = f"bring-up took {cost.duration(record['seconds'])}"
    c = record["cost"]
    if c is None:
        return took + " (set price: {per_gpu_hour: ..} in the inventory to see its cost)"
    return (f"{took}: {cost.money(c['spent'], c['currency'])} for {c['gpus']} GPUs at "
            f"{cost.money(c['per_gpu_hour'], c['currency'])}/GPU-hour; the cluster burns "
            f"{cost.money(c['per_hour'], c['currency'])}/hour while it is up, idle or not")


def finish_up(inv_path: str, exit_code: int, started: float, *, state_dir, accept_new_host_keys,
              log_json: bool) -> None:
    inv = inventory_mod.load(inv_path)
    record = bringup_record(inv, started, time.time())
    console = Console(stderr=True, highlight=False, soft_wrap=True)

    def say(text: str) -> None:
        if log_json:
            klog.get().info("up.note", text=text)
        else:
            console.print(text, markup=False)

    say(cost_line(record))
    if exit_code == 0:
        from k3deploy.certificate_cmd import write_after_up
        write_after_up(inv, state_dir, accept_new_host_keys, record, say)
