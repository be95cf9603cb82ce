"""`up` and `down`: bring a whole testbed to life and take it apart again."""
from __future__ import annotations

import dataclasses
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tb import gateway, hubctl, hubtls, inventory, net, node, nodefs, standins
from tb.nodespec import NodeSpec, spec_from_dict
from tb.sshcmd import KEY_FILE, KNOWN_HOSTS_FILE
from tb.state import TestbedState


@dataclasses.dataclass
class UpOptions:
    nodes: list[NodeSpec]
    gpu: str = "h100"
    gpus_per_node: int = 8
    engine: str = "sglang"
    shard_bytes: int | None = None
    shards: int = hubctl.HUB_SHARDS
    hub_rate: int = 8 * 1024 * 1024
    hub_node_rate: int = 0
    hub_token_file: str | None = None
    hub: bool = True
    hub_cdn: bool = False
    hub_url_ttl: int = 3600
    hub_conn_rates: str | None = None   # "SLOW,FAST,FRACTION"
    hub_conn_seed: int = 1
    hub_cdn_tls: bool = False           # the CDN over TLS, trusted by every node (hubtls.py)
    hub_first_byte_ms: float = 0.0      # the CDN's wait before each answer
    hub_gated: bool = False
    shared_hf: bool = False             # one host dir as every node's HF cache (node.py)
    ssh_gateway: bool = False           # every node's SSH at one address, a port each (gateway.py)
    groups: int = 1                     # > 1: the inventory is a fleet of that many groups


class AlreadyUp(RuntimeError):
    pass


def is_active(tb_dir: Path) -> bool:
    state = TestbedState.load(tb_dir)
    return bool(state and state.data.get("active"))


def up(tb_dir: Path, opts: UpOptions, say=print) -> TestbedState:
    """Start everything; on failure tear down what was started and re-raise."""
    tb_dir = Path(tb_dir).resolve()
    tb_dir.mkdir(parents=True, exist_ok=True)
    if is_active(tb_dir):
        raise AlreadyUp(f"a testbed is already up in {tb_dir}; run `testbed down --dir {tb_dir}` first")
    started = time.monotonic()
    standins.build(tb_dir)
    _client_key(tb_dir)
    state = TestbedState.create(tb_dir, active=True, engine=opts.engine)
    try:
        _bring_up(state, opts, say)
    except BaseException:
        down(tb_dir)
        raise
    say(f"testbed tb{state.idx} up: {len(opts.nodes)} nodes in {time.monotonic() - started:.1f} s; "
        f"inventory {tb_dir / inventory.INVENTORY_FILE}")
    return state


def _client_key(tb_dir: Path) -> None:
    for path in (tb_dir / KEY_FILE, tb_dir / f"{KEY_FILE}.pub"):
        path.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "k3tb-client",
                    "-f", str(tb_dir / KEY_FILE)], check=True, capture_output=True)


def _bring_up(state: TestbedState, opts: UpOptions, say) -> None:
    net.raise_neighbour_limits()
    idx = net.claim_bridge(lambda i: state.update(idx=i, bridge=net.bridge_name(i)),
                           str(Path(state.dir).resolve()))
    for rule in net.accept_rules(idx):
        state.update(iptables=state.data["iptables"] + [rule])
        net.add_rule(rule)
    records = [_record_node(state, idx, spec) for spec in opts.nodes]
    _prepare_nodes(state.dir, opts.nodes, records)
    if opts.shared_hf:
        nodefs.shared_hf_dir(state.dir).mkdir(mode=0o755, exist_ok=True)
    if opts.hub:
        (state.dir / "hub").mkdir(exist_ok=True)
        hubctl.write_nodes_map(state.dir, {r["name"]: r["address"] for r in records})
        if opts.hub_cdn_tls:  # before the nodes start: each binds the trust bundle at its start
            hubtls.make(state.dir / "hub", net.bridge_address(idx))
        hubctl.start(state, net.bridge_address(idx), opts)
    gw = _gateway(state, idx, records) if opts.ssh_gateway else None
    start_nodes(state, records)
    if gw:
        gateway.wait_for_ssh(state.dir, gw, records, 30 + len(records))
    endpoint = (hubctl.wait_ready(state) if opts.hub
                else f"http://{net.bridge_address(idx)}:{hubctl.PREFERRED_PORT}")
    text = inventory.render(f"tb{idx}", endpoint, opts.gpu, opts.gpus_per_node, opts.engine,
                            [(spec, r["address"]) for spec, r in zip(opts.nodes, records)],
                            shared_hf=opts.shared_hf, gateway=gw, groups=opts.groups)
    inventory.write(state.dir, text)


def _gateway(state: TestbedState, idx: int, records: list[dict]) -> dict:
    """The forwarding namespace, recorded first; its `[address]:port` known_hosts lines beside
    the nodes' own (the testbed's tools keep logging in at the nodes' addresses)."""
    gw = gateway.record(idx, records)
    state.update(gateway=gw)
    gateway.create(idx, gw, records)
    keys = {r["name"]: nodefs.host_public_key(state.dir, r["name"]) for r in records}
    with open(state.dir / KNOWN_HOSTS_FILE, "a") as fh:
        fh.writelines(gateway.known_hosts_lines(gw, keys))
    return gw


def _record_node(state: TestbedState, idx: int, spec: NodeSpec) -> dict:
    state.update_node(spec.name, name=spec.name, index=spec.index, user=spec.user,
                      address=net.node_address(idx, spec.index), netns=net.netns_name(idx, spec.name),
                      veth=net.host_veth(idx, spec.index), spec=dataclasses.asdict(spec),
                      status="starting")
    return state.node(spec.name)


def _prepare_nodes(tb_dir: Path, specs: list[NodeSpec], records: list[dict]) -> None:
    nodefs.ensure_host_mount_points()
    client_key = (tb_dir / f"{KEY_FILE}.pub").read_text()
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda sr: nodefs.prepare(tb_dir, sr[0], sr[1]["address"], client_key),
                      zip(specs, records)))
    write_known_hosts(tb_dir, records)


def write_known_hosts(tb_dir: Path, records: list[dict]) -> None:
    lines = [f"{r['address']} {nodefs.host_public_key(tb_dir, r['name'])}\n" for r in records]
    (tb_dir / KNOWN_HOSTS_FILE).write_text("".join(lines))


def start_nodes(state: TestbedState, records: list[dict], timeout: float | None = None) -> None:
    """Namespaces, veths and inits for these (already recorded and prepared) nodes; returns
    when each accepts SSH."""
    net.create_node_links(state.idx, [(r["name"], r["index"]) for r in records])
    for record in records:
        spec = spec_from_dict(record["spec"])
        pid, start = node.start_init(state.dir, spec, record["netns"], record["address"])
        state.update_node(record["name"], init_pid=pid, init_start=start)
    fresh = [state.node(r["name"]) for r in records]
    node.wait_for_ssh(state.dir, fresh, timeout or 30 + len(records))
    for record in records:
        state.update_node(record["name"], status="up", partitioned=False)


def down(tb_dir: Path, say=print) -> bool:
    """Stop everything recorded in DIR/testbed.json. Returns False when nothing was up."""
    state = TestbedState.load(Path(tb_dir))
    if state is None or not state.data.get("active"):
        return False
    records = list(state.data["nodes"].values())
    node.kill_processes(records)
    net.delete_netns([r["netns"] for r in records])
    for record in records:
        net.delete_link(record["veth"])
    gateway.remove(state.data.get("gateway"))
    hubctl.stop(state)
    for rule in state.data["iptables"]:
        net.delete_rule(rule)
    if state.bridge:
        net.delete_link(state.bridge)
    # Forget the live resources: a later down must not touch a testbed that reuses this idx.
    stopped = {name: {**r, "status": "down", "init_pid": None} for name, r in state.data["nodes"].items()}
    state.update(active=False, iptables=[], bridge=None, last_idx=state.idx, nodes=stopped,
                 gateway=None)
    say(f"testbed tb{state.data['last_idx']} down")
    return True
