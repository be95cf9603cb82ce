"""The stand-in SGLang's metadata and load routes, which the router (SMG) reads from a worker:
shapes of SGLang 0.5.16 (scripts/tb/standins/engine/sglang_routes.py), its auth rule (every
route but /health* and /metrics* wants the key), and the older release without them."""
import json
import urllib.request

from standin_procs import free_port, http, log_of, make_node, sglang_cmd, wait_health

KEY = "sk-routes"
# srt/managers/load_snapshot.py _CORE_KEYS (sglang 0.5.16)
CORE = {"timestamp", "dp_rank", "num_running_reqs", "num_waiting_reqs",
        "num_waiting_uncached_tokens", "num_used_tokens", "num_total_tokens",
        "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput",
        "cache_hit_rate", "utilization"}


def serve(cluster, tmp_path, *extra, node_json=None):
    run = make_node(tmp_path, "node0")
    if node_json:
        doc = json.loads((run / "node.json").read_text())
        (run / "node.json").write_text(json.dumps({**doc, **node_json}))
    port = free_port()
    proc = cluster.start(run, sglang_cmd(port, "--api-key", KEY, *extra))
    wait_health(port, proc)
    return port, proc


def test_model_info_and_loads_answer_in_sglangs_shapes_with_the_key(cluster, tmp_path):
    port, proc = serve(cluster, tmp_path)
    status, info = http(port, "/model_info", key=KEY)
    assert status == 200 and info["model_path"] == "moonshotai/Kimi-K3"
    assert info["is_generation"] is True and info["weight_version"] == "default"
    assert set(info) >= {"tokenizer_path", "has_image_understanding", "architectures"}
    status, loads = http(port, "/v1/loads?include=core,disagg,queues,memory", key=KEY)
    assert status == 200 and set(loads) == {"timestamp", "version", "loads"}
    assert loads["version"] == "0.5.16" and set(loads["loads"][0]) == CORE
    assert http(port, "/v1/loads?include=bogus", key=KEY)[0] == 400
    status, legacy = http(port, "/get_load", key=KEY)
    assert status == 200 and set(legacy[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs",
                                                 "num_tokens", "num_pending_tokens", "ts_tic"}
    assert "Endpoint '/get_load' is deprecated" in log_of(proc)
    assert http(port, "/get_model_info", key=KEY)[1] == info
    assert "Endpoint '/get_model_info' is deprecated" in log_of(proc)


def test_sglang_wants_the_key_on_every_route_but_health_and_metrics(cluster, tmp_path):
    """srt/utils/auth.py decide_request_auth: /health* and /metrics* always pass."""
    port, _ = serve(cluster, tmp_path, "--enable-metrics")
    for path in ("/server_info", "/model_info", "/v1/loads", "/get_load", "/v1/models"):
        assert http(port, path)[0] == 401, path
        assert http(port, path, key=KEY)[0] == 200, path
    assert http(port, "/health")[0] == 200 and http(port, "/health_generate")[0] == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200 and b"sglang:num_running_reqs" in resp.read()


def test_the_older_release_has_only_get_model_info(cluster, tmp_path):
    port, proc = serve(cluster, tmp_path, node_json={"sglang_version": "0.5.4"})
    assert http(port, "/model_info", key=KEY)[0] == 404
    assert http(port, "/v1/loads", key=KEY)[0] == 404
    assert http(port, "/get_model_info", key=KEY)[0] == 200
    assert "deprecated" not in log_of(proc)
