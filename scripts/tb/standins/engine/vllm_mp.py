"""`vllm serve` across nodes with the multiprocessing executor (no Ray): one `vllm serve` per
node, the API node's and --headless ones, as vLLM's internal-load-balancing DP deployment runs
(docs/serving/data_parallel_deployment.md, vllm-project/vllm@01e4fce0).

- Every node: --data-parallel-size (global), --data-parallel-size-local (its ranks), the API
  node's --data-parallel-address and --data-parallel-rpc-port; the others --headless and
  --data-parallel-start-rank. Each node's ranks x TP must be its GPUs.
- A headless node logs "Launching %d data parallel engine(s) in headless mode, with head node
  address %s." (tcp://ADDR:PORT) and starts its engine cores, which connect to that handshake
  address (vllm/entrypoints/cli/serve.py run_headless, @78265ccd); `data_parallel_size_local
  must be > 0 in headless mode` otherwise.
- The API node waits for every local and remote engine core to connect, then to start, with no
  deadline: wait_for_engine_startup polls every STARTUP_POLL_PERIOD_MS (10 s) and only logs
  "Waiting for %d local, %d remote core engine proc(s) to connect." at DEBUG (vllm/v1/engine/
  utils.py @5f25cfbe). So at the default INFO level a missing node shows nothing; the API
  server starts only once every rank loaded (MPClient waits for each engine's ready message,
  core_client.py @00080ee1, bounded by VLLM_ENGINE_READY_TIMEOUT_S, default 600, envs.py).
- After start-up the API node's monitor (MPClient.start_engine_core_monitor) watches only the
  engine processes it started itself; a remote engine core that dies ends no local process:
  the local ranks sit in the next DP/EP collective until torch's timeout
  (--distributed-timeout-seconds), as rendezvous.py models a lost peer ("hang"), unless the
  node's faults.json says on_peer_loss "abort" (a peer that closed its sockets).

The group itself is rendezvous.py's (real TCP to the API node's RPC port); the steps over it are
collective.py's, as for SGLang's ranks.
"""
import time

import collective
import progress
import rendezvous
from common import EngineExit

# wait_for_engine_startup has no deadline; the group's formation here gets one this long.
NO_DEADLINE = 10 ** 7
# torch.distributed's default process-group timeout (vLLM passes --distributed-timeout-seconds
# when it is set): the watchdog that ends ranks stuck in a collective.
DEFAULT_TIMEOUT = 600


def multi_node(args):
    """Several nodes, each its own `vllm serve`: the mp executor's DP form."""
    if "ray" in (args.data_parallel_backend, args.distributed_executor_backend):
        return False
    local = args.data_parallel_size_local
    return bool(args.headless) or (local is not None and local < args.data_parallel_size)


def check(args, gpus):
    """run_headless's check and the node's GPUs for its ranks."""
    local = args.data_parallel_size_local
    if args.headless and not local:
        raise EngineExit("ValueError: data_parallel_size_local must be > 0 in headless mode")
    if local is None or args.data_parallel_size % local:
        raise EngineExit(f"ValueError: data_parallel_size ({args.data_parallel_size}) must be a "
                         f"multiple of data_parallel_size_local ({local})")
    if local * args.tensor_parallel_size != gpus:
        raise EngineExit(
            f"ValueError: --data-parallel-size-local {local} x --tensor-parallel-size "
            f"{args.tensor_parallel_size} = {local * args.tensor_parallel_size} ranks on this "
            f"node, but it has {gpus} GPUs; size the ranks to the GPUs.")
    if args.data_parallel_address is None:
        raise EngineExit("ValueError: --data-parallel-address is needed when the data parallel "
                         "ranks span nodes (data_parallel_size_local < data_parallel_size)")
    return local * args.tensor_parallel_size


class Node:
    """This node's engine cores in the DP group: node rank start_rank // local."""

    def __init__(self, args, ctx, log_line, on_hang):
        local = args.data_parallel_size_local
        self.args, self.ctx = args, ctx
        self.headless = bool(args.headless)
        self.start_rank = (args.data_parallel_start_rank or 0) if self.headless else 0
        self.node_rank = self.start_rank // local
        port = args.data_parallel_rpc_port or 13345   # vLLM's own default for the RPC port
        self.address = f"{args.data_parallel_address}:{port}"
        # the option table types it loosely (int | None in vLLM): its text here
        timeout = float(args.distributed_timeout_seconds or DEFAULT_TIMEOUT)
        # rendezvous.py writes torch's store lines; at INFO vLLM shows none of its waiting.
        self.group = rendezvous.Group(lambda text: None, self.node_rank,
                                      args.data_parallel_size // local, self.address, timeout,
                                      ctx.env.get("VLLM_HOST_IP"), local * args.tensor_parallel_size,
                                      ctx.faults().get("on_peer_loss", "hang"), on_hang)
        self.group.deadline = time.monotonic() + NO_DEADLINE
        self.timeout, self.log_line = timeout, log_line

    @property
    def engine_name(self):
        return f"EngineCore_DP{self.start_rank}"

    def form(self):
        # The line as run_headless words it; its line number in 0.33.0 is not known here.
        if self.headless:
            self.log_line(f"Launching {self.args.data_parallel_size_local} data parallel "
                          f"engine(s) in headless mode, with head node address "
                          f"tcp://{self.address}.", "serve.py")
        self.group.form()
        self.group.watch()

    def attach_headless(self, model_name):
        """A headless node's share of each forward step (no API server on it)."""
        counts = progress.Progress("vllm", model_name, self.start_rank, 0)
        collective.Share(self.ctx, self.group, counts)

    def attach_api(self, serving, metrics):
        serving.forward = collective.Forward(self.ctx, self.group, metrics, self.timeout)
