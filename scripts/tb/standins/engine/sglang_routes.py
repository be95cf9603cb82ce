"""SGLang's metadata and load routes, as the router (SMG) reads them from a worker.

What SMG asks of an HTTP SGLang worker (smg-project/smg@f8daa883; seen against smg 1.13.0 in
tests/integration/test_fleet_router.py): at registration `/health`, `/server_info` (404 ->
`/get_server_info`), `/model_info` (404 -> `/get_model_info`), `/v1/models`
(model_gateway/src/workflow/steps/local/discover_metadata.rs get_json_with_fallback,
detect_backend.rs); then `/health` every --health-check-interval-secs
(model_gateway/src/worker/worker.rs); for load, `/v1/loads?include=core,disagg,queues,memory`
(404 is remembered: Absent) and SGLang's `/metrics` gauges (model_gateway/src/worker/monitor.rs
probe_native_loads, fetch_http_load_sglang), with the worker's api key as a bearer token.

The shapes are SGLang 0.5.16's (the sglang-0.5.16 wheel: srt/entrypoints/http_server.py
model_info, get_model_info, get_load; srt/entrypoints/v1_loads.py get_loads;
srt/managers/load_snapshot.py LoadSnapshot, _CORE_KEYS). Auth is srt/utils/auth.py
decide_request_auth at the NORMAL level: with an api key every route but /health* and
/metrics* wants it.
"""
import time
from datetime import datetime, timezone

from common import say

# srt/managers/load_snapshot.py _CORE_KEYS (to_dict always includes them)
CORE_KEYS = ("timestamp", "dp_rank", "num_running_reqs", "num_waiting_reqs",
             "num_waiting_uncached_tokens", "num_used_tokens", "num_total_tokens",
             "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput",
             "cache_hit_rate", "utilization")
SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
ARCHITECTURE = "KimiK3ForConditionalGeneration"  # what sglang.py logs at `Load weight end.`


def open_path(path):
    """decide_request_auth: health and metrics need no key, whatever the server's keys."""
    return path.startswith("/health") or path.startswith("/metrics")


def model_info(state):
    """http_server.py model_info (the duplicate `weight_version` key of the source collapses)."""
    return {"model_path": state.model_root, "tokenizer_path": state.model_root,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": "default",   # server_args.py weight_version default
            "has_image_understanding": not state.vision_off, "has_audio_understanding": False,
            "model_type": None, "architectures": [ARCHITECTURE]}


def _snapshot(state):
    """One DP rank's LoadSnapshot: the stand-in runs dp 1, every running request in one batch
    (collective.py: continuous batching, nothing waits). A request still being paced out to
    its client (pacing.py: node.json decode_tok_s) is decoding, so running too, as in SGLang,
    where a request stays in the running batch until its last token (srt/managers/scheduler.py
    update_running_batch: running_batch.filter_batch() drops only finished requests)."""
    forward, progress = state.forward, state.progress
    running = (forward.running if forward is not None else 0) + state.pacer.active
    return {"timestamp": time.time(), "dp_rank": 0, "num_running_reqs": running,
            "num_waiting_reqs": 0, "num_waiting_uncached_tokens": 0,
            "num_used_tokens": progress.kv_tokens if progress is not None else 0,
            "num_total_tokens": 0, "max_total_num_tokens": 0, "max_running_requests": 0,
            "token_usage": 0.0,
            "gen_throughput": progress.throughput() if progress is not None else 0.0,
            "cache_hit_rate": 0.0, "utilization": 0.0}


def v1_loads(state, query):
    """(status, body) of GET /v1/loads: the core keys (no optional section is modelled, so
    every `include` gives them alone, as to_dict does for sections that are None); an unknown
    section is 400 with LoadSnapshot.to_dict's ValueError."""
    include = query.get("include")
    if include:
        asked = {s.strip() for s in include.split(",")}
        if not asked <= SECTIONS:
            return 400, {"detail": f"Invalid include sections: {asked - SECTIONS}. "
                                   f"Valid options: {sorted(SECTIONS)}"}
    return 200, {"timestamp": datetime.now(timezone.utc).isoformat(), "version": state.version,
                 "loads": [_snapshot(state)]}


def get_load(state):
    """http_server.py get_load: the deprecated shim over /v1/loads' core, warning each call."""
    say("WARNING: Endpoint '/get_load' is deprecated and will be removed in a future version. "
        "Please use '/v1/loads' instead.")
    r = _snapshot(state)
    return [{"dp_rank": r["dp_rank"], "num_reqs": r["num_running_reqs"] + r["num_waiting_reqs"],
             "num_waiting_reqs": r["num_waiting_reqs"], "num_tokens": r["num_total_tokens"],
             "num_pending_tokens": r["num_total_tokens"] - r["num_used_tokens"],
             "ts_tic": time.perf_counter()}]


def route(state, path, query):
    """(status, body) for the routes above, or None for another path. A release before the
    /server_info rename (openai_api.Serving.info_paths) answers /get_model_info only, without
    the warning; the newer routes are modelled as arriving with that rename (not pinned down
    further: the stand-in's old release is 0.5.4)."""
    new = "/server_info" in state.info_paths
    if path == "/get_model_info":
        if new:
            say("WARNING: Endpoint '/get_model_info' is deprecated and will be removed in a "
                "future version. Please use '/model_info' instead.")
        return 200, model_info(state)
    if not new:
        return None
    if path == "/model_info":
        return 200, model_info(state)
    if path == "/v1/loads":
        return v1_loads(state, query)
    if path == "/get_load":
        return 200, get_load(state)
    return None
