"""k3deploy's testbed: a GPU cluster simulated on one Linux machine (see docs/architecture.md).

Entry point: scripts/testbed (tb.cli). Modules: net (bridge, netns, veth, iptables), nodespec
(what each node is), nodefs (its host directories), node (init, kill, SSH readiness), standins
(DIR/standins and the node python), hubctl (the mock Hub process), inventory, testbed (up/down),
faults, stats, state (DIR/testbed.json).
"""
