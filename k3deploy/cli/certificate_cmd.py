"""Writing certificates after `up` and `bench`, and `k3deploy certificate diff A B`."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from k3deploy.cluster.inventory import Inventory
from k3deploy.core.jsonvalue import JSON
from k3deploy.serving import certificate, certificate_diff, certificate_facts
from k3deploy.serving.certificate import ClusterFacts
from k3deploy.core.errors import EXIT_OK, K3Error
from k3deploy.node.session import Session


def _write(session: Session, inv: Inventory, kind: str, facts: ClusterFacts, *,
           bench: dict[str, JSON] | None = None, bringup: dict[str, JSON] | None = None) -> Path:
    doc = certificate.build(kind, inv.cluster, facts,
                            verify=certificate_facts.verify_results(session), bench=bench,
                            bringup=bringup)
    return certificate.write(session.state_dir, doc)


def write_after_up(session: Session, inv: Inventory, bringup: dict[str, JSON]) -> str:
    try:
        facts = certificate_facts.from_verify(session, inv)
        return f"certificate: {_write(session, inv, 'up', facts, bringup=bringup)}"
    except K3Error as err:   # the endpoint is up and verified: a missing certificate is a note
        return f"certificate not written: {err}"


def write_for_bench(inv: Inventory, doc: dict[str, JSON], state_dir: str | None,
                    accept_new_host_keys: bool, console: Console) -> str | None:
    bench = {k: v for k, v in doc.items() if k != "certificate"}
    try:
        # lock=False: reading facts beside a run is safe; bench may run beside `up`.
        with Session(inv, accept_new_host_keys=accept_new_host_keys, state_dir=state_dir,
                     lock=False) as session:
            facts = certificate_facts.collect(session, inv)
            return str(_write(session, inv, "bench", facts, bench=bench))
    except K3Error as err:
        console.print(f"certificate not written: {err}", markup=False)
        return None


def run_diff(path_a: str, path_b: str, json_out: bool) -> int:
    a, b = certificate.load(path_a), certificate.load(path_b)
    changes = certificate_diff.diff(a, b)
    if json_out:
        print(json.dumps({"a": path_a, "b": path_b, "changes": changes}, indent=1))
        return EXIT_OK
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"{path_a} ({a.get('kind')}, {a.get('written_at')}) -> {path_b} "
                  f"({b.get('kind')}, {b.get('written_at')})", markup=False)
    for change in changes:
        console.print("  " + certificate_diff.render(change), markup=False)
    if not changes:
        console.print("  no change in flags, versions or latency (threshold "
                      f"{certificate_diff.THRESHOLD:.0%})")
    return EXIT_OK
