"""What each testbed node received, counted where it was sent: the mock Hub's per-node,
per-file counters and every node's peer server log (one JSON line per GET, with the client).
For test_fanout.py and test_resume.py."""

from __future__ import annotations

import json

WORK = "/mnt/nvme/.k3deploy"
BLOBS = "/mnt/nvme/hf/hub/models--moonshotai--Kimi-K3/blobs"
# One HTTP read may be in flight when a process dies: its bytes can be served twice.
SLACK = 256 * 1024


def manifest_files(tb) -> list[dict]:
    return json.loads(tb.ssh("node0", f"cat {WORK}/manifest.json").stdout)["files"]


def etag_paths(tb) -> dict[str, str]:
    return {f["sha256"] or f["oid"]: f["path"] for f in manifest_files(tb)}


def verified_paths(tb, node) -> set[str]:
    """Files whose blob is in place on NODE (renamed there only after its hash matched): the
    downloader's own record of "done", where the Hub's count of bytes sent is not (a killed
    receiver may not have read the last of them)."""
    paths = etag_paths(tb)
    blobs = tb.ssh(node, f"ls {BLOBS}").stdout.split()
    return {paths[b] for b in blobs if b in paths}


def sizes(tb) -> dict[str, int]:
    return {f["path"]: f["size"] for f in manifest_files(tb)}


def hub_files(tb) -> dict[str, dict[str, int]]:
    """node -> path -> bytes the Hub sent to it."""
    hub = tb.stats()["hub"]
    return {n: {p: f["bytes"] for p, f in hub["by_node"].get(n, {}).get("files", {}).items()}
            for n in tb.nodes}


def peer_served(tb) -> list[tuple[str, dict]]:
    """(serving node, record) for every GET in every node's peer server log."""
    return [(node, json.loads(line)) for node in tb.nodes for line in
            tb.ssh(node, f"cat {WORK}/peer-served.jsonl 2>/dev/null").stdout.splitlines()]


def received(tb) -> dict[str, dict[str, int]]:
    """node -> path -> bytes sent to it by the Hub and by every peer together."""
    got = hub_files(tb)
    by_ip, paths = {tb.address(n): n for n in tb.nodes}, etag_paths(tb)
    for _peer, rec in peer_served(tb):
        files = got[by_ip[rec["client"]]]
        files[paths[rec["etag"]]] = files.get(paths[rec["etag"]], 0) + rec["bytes"]
    return got


def senders(tb, node: str, paths: set[str]) -> dict[str, list]:
    """path: what the Hub sent NODE of it, each peer's log line for it, and NODE's download
    log lines naming it."""
    hub, paths_of = hub_files(tb)[node], etag_paths(tb)
    out: dict[str, list] = {p: [f"hub: {hub.get(p, 0)}"] for p in paths}
    for peer, rec in peer_served(tb):
        if rec["client"] == tb.address(node) and paths_of[rec["etag"]] in paths:
            out[paths_of[rec["etag"]]].append(f"{peer}: {rec}")
    log = tb.ssh(node, f"cat {WORK}/download.log 2>/dev/null").stdout.splitlines()
    for path in paths:
        out[path].extend(line for line in log if path in line)
    return out


def hub_total(tb) -> int:
    return sum(n["bytes"] for n in tb.stats()["hub"]["by_node"].values())


def assert_nothing_received_twice(tb, nodes=None) -> None:
    size = sizes(tb)
    for node, files in received(tb).items():
        if nodes is None or node in nodes:
            twice = {p: b for p, b in files.items() if b > size[p] + SLACK}
            assert twice == {}, (f"{node} received more than once: {twice}; "
                                 f"who sent them: {senders(tb, node, set(twice))}")


def assert_nothing_from_the_hub_twice(tb) -> None:
    size = sizes(tb)
    for node, files in hub_files(tb).items():
        twice = {p: b for p, b in files.items() if b > size[p] + SLACK}
        assert twice == {}, f"the Hub sent {node} more than once: {twice}"


def assert_each_shard_from_the_hub_once(tb) -> None:
    """Fan-out's promise: a checkpoint shard (an LFS file) crosses the Internet to one node;
    only the small files come from the Hub to every node."""
    shards = {f["path"] for f in manifest_files(tb) if f["sha256"]}
    takers: dict[str, list[str]] = {}
    for node, files in hub_files(tb).items():
        for path, sent in files.items():
            if path in shards and sent > SLACK:
                takers.setdefault(path, []).append(node)
    several = {p: n for p, n in takers.items() if len(n) > 1}
    assert several == {}, (f"shards the Hub sent to more than one node: {several}; "
                           f"why, in their download logs: {hub_reasons(tb, several)}")


def hub_reasons(tb, takers: dict[str, list[str]]) -> dict[str, list[str]]:
    """node: the download log's lines that name a shard it took from the Hub, and why."""
    logs = {node: tb.ssh(node, f"cat {WORK}/download.log 2>/dev/null").stdout.splitlines()
            for node in {n for nodes in takers.values() for n in nodes}}
    why: dict[str, list[str]] = {}
    for path, nodes in takers.items():
        for node in nodes:
            why.setdefault(node, []).extend(line for line in logs[node] if path in line)
    return why


def small_socket_buffers(tb) -> None:
    """Bytes are counted where they were sent; what sat unread in a killed receiver's socket
    buffer was sent but never received. Linux grows those buffers to megabytes, more than a whole
    300 kB test shard, so cap them (per network namespace) well below SLACK: a whole shard sent
    twice then means it was received twice."""
    for node in tb.nodes:
        cap = tb.ssh(node, "sysctl -qw net.ipv4.tcp_rmem='4096 32768 65536' "
                     "net.ipv4.tcp_wmem='4096 32768 65536'")
        assert cap.returncode == 0, cap.stderr
