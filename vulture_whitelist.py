"""Names vulture reports as unused that are used by a framework, not by a call it can see.

Checked with: vulture k3deploy vulture_whitelist.py (scripts/lint): uses in tests/ and scripts/
do not count, so nothing here may be a name only a test calls.
"""
# ruff: noqa: B018, F821
# typer: the callback and the commands are registered by decorator; Effort's members are choices
_global
run_playbook
init
up
watch
medium
high
# pydantic settings on every model
model_config
# pydantic calls a model's validators (steps/base.py NoParams)
_ignored
# paramiko calls its host-key policy hook
missing_host_key
# stdlib hooks and attributes read by http.server / socketserver / sys
dont_write_bytecode
daemon_threads
allow_reuse_address
request_queue_size
protocol_version
server_version
log_message
do_HEAD
do_GET
close_connection
# rich reads a column's refresh limit
max_refresh
# TypedDict keys: written and read by string key (json.dumps, doc["..."]), which vulture cannot see
last_error
schema
discarded_at
single_stream_tok_s
aggregate_tok_s
guide_tok_s
measured_tok_s
guide_single_stream_tok_s
measured_single_stream_tok_s
far_below
aggregate
Layers
Created
Os
Architecture
Id
State
Running
ExitCode
StartedAt
FinishedAt
Labels
Cmd
decode_timeout
prompt_limit
answered_at
changed_at
unanswered_s
still_s
stalled_s
requests
error_samples
ttft_s
itl_s
output_tok_s
reasoning_tok_s
content_tok_s
per_stream_decode_tok_s
arguments
function
tool_call_id
last_ok
key_file
# TypedDict keys of the status, bench and certificate documents and of the engines' option
# tables (engines/cli_tables/*.json), read by string key
seconds_per_level
single_stream_decode_tok_s
recorded_on
reachable
guard_last_seen
fabric_warning
seconds_since_launch
run_active
incident_at
relaunch_seconds
incident_to_serving_seconds
in_flight
option_strings
takes_value
deprecated
negative_option_strings
allow_abbrev
underscores_as_dashes
dotted_json_keys
store_true_keys
unsupported_keys
engine_version
config_digests
gpu_memory_mib
started_at
is_healthy
# a Protocol's keyword, named as the library's (remote/fetch_hub.py HttpClient.stream: httpx's)
follow_redirects
# dataclass fields serialised by `plan --json`
static_pool_per_gpu_gb
min_nodes
# the context-manager protocol's __exit__(exc_type, exc, tb)
exc
# steps are loaded by the registry strings in k3deploy/steps/__init__.py
Preflight
FabricMesh
MoveToNvme
DownloadWeights
PullImage
RayCluster
RemoveContainers
WipeWeights
StopPeerServer
EnsureFile
StartGuard
StopGuard
CollectLogs
StopDownload
VerifyEndpoint
WaitHealthy
SealCompileCache
DryFireLaunch
DryFireWait
DryFireVerdict
DryFireRayCluster
DryFireStop
