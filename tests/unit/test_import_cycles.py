"""No import circle anywhere in k3deploy/ (issue 21: sizing <-> sizing_plan <-> sizing_notes
was one): in the import graph import-linter's grimp builds, no module is reachable from a
module it imports."""

from __future__ import annotations

import grimp


def _cycles(graph) -> list[tuple[str, ...]]:
    """One import chain a -> b -> ... -> a per edge a -> b that closes a circle."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                found.append((importer, *back))
    return found


def test_no_import_cycle_in_k3deploy():
    assert _cycles(grimp.build_graph("k3deploy", cache_dir=None)) == []


def test_the_cycle_finder_finds_one():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert ("p.a", "p.b", "p.c", "p.a") in _cycles(graph)
    graph.remove_import(importer="p.c", imported="p.a")
    assert _cycles(graph) == []


# A registered step may import another only to be it in part (a subclass): ray-cluster starts
# the launch's containers (a LaunchEngine), the dry-fire is a launch (over Ray, a ray-cluster
# first), a wait and a seal with dummy weights. Shared decisions live below the steps (engines,
# cluster, remote/protocol) or in the steps' helper modules (probes, raylayout, launch_look:
# what the launch would run, which the seal and the fabric mesh ask too, ...).
STEP_ON_STEP = {("k3deploy.steps.engine.ray_cluster", "k3deploy.steps.engine.launch"),
                ("k3deploy.steps.dry_fire.dry_fire", "k3deploy.steps.engine.launch"),
                ("k3deploy.steps.dry_fire.dry_fire", "k3deploy.steps.engine.wait"),
                ("k3deploy.steps.dry_fire.dry_fire", "k3deploy.steps.engine.ray_cluster"),
                ("k3deploy.steps.dry_fire.dry_fire_verdict", "k3deploy.steps.engine.compile_cache_seal")}


def test_steps_do_not_import_steps_as_utility_modules():
    from k3deploy.steps import REGISTRY
    graph = grimp.build_graph("k3deploy", cache_dir=None)
    steps = {target.split(":")[0] for target in REGISTRY.values()}
    found = {(a, b) for a in steps for b in graph.find_modules_directly_imported_by(a)
             if b in steps and b != a}
    assert found == STEP_ON_STEP
