"""The vLLM stand-in and its Ray cluster on loopback: one node, ranks against GPUs, two nodes
over Ray (and a reclaimed worker), `ray start` / `ray stop` in and out of a container. No root
needed."""
import json
import os
import signal
import time

from k3deploy.engines import startup_log
from polling import wait_until
from realfix import real, vllm_shape
from standin_procs import (CHAT, GPUS, TOOLS, VLLM_IMAGE, free_port, gpu_report, http,
                           log_of, make_node, vllm_cmd, wait_exit, wait_for_line, wait_health)


def test_vllm_single_b300_node(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b300")
    port = free_port()
    proc = cluster.start(run, vllm_cmd(port, 8), image=VLLM_IMAGE,
                         env={"VLLM_API_KEY": "sk-vllm"})
    wait_health(port, proc)
    used = gpu_report(run)["used_mib"]
    assert used == [int(0.9 * GPUS["b300"][1])] * 8
    # vLLM 0.33's start-up lines, as k3deploy's wait step reads them.
    log = log_of(proc)
    assert "(APIServer pid=" in log and "version 0.33.0" in log
    # The start-up lines have the shape a published vLLM log has (0.23.0, vllm#46169).
    published = [vllm_shape(ln) for ln in real("vllm/0.23.0/startup-logo.txt").splitlines()]
    started = [vllm_shape(ln) for ln in log.splitlines()]
    assert [ln.replace("0.33.0", "0.23.0").replace("moonshotai/Kimi-K3", "Qwen/Qwen3.5-2B")
            for ln in started[:6]] == published[:6]
    assert startup_log.formed(log) and startup_log.ready(log)
    assert startup_log.loading(log)[0] == startup_log.loading(log)[1] > 0
    assert http(port, "/v1/models")[0] == 401
    models = http(port, "/v1/models", key="sk-vllm")[1]
    assert models["data"][0]["id"] == "moonshotai/Kimi-K3"
    assert models["data"][0]["max_model_len"] == 131072
    reply = http(port, "/v1/chat/completions", CHAT, key="sk-vllm")[1]
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"] and message["reasoning"] == message["reasoning_content"]
    # The guide's vLLM command lacks --enable-auto-tool-choice: vLLM refuses "auto" tools.
    status, error = http(port, "/v1/chat/completions", dict(CHAT, tools=TOOLS), key="sk-vllm")
    assert status == 400 and "--enable-auto-tool-choice" in error["error"]["message"]


def test_vllm_ranks_must_match_the_node(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b300")
    few = cluster.run(run, vllm_cmd(free_port(), 4), image=VLLM_IMAGE)
    assert few.returncode == 1 and "this node has 8 GPUs" in few.stderr
    parser = cluster.run(run, vllm_cmd(free_port(), 8, "--reasoning-parser", "kimi_k9"),
                         image=VLLM_IMAGE)
    assert parser.returncode == 1 and "invalid reasoning parser: kimi_k9" in parser.stderr
    # More ranks than GPUs and no Ray cluster: the private local instance is too small.
    alone = cluster.run(run, vllm_cmd(free_port(), 16), image=VLLM_IMAGE)
    assert alone.returncode == 1
    assert "Not enough resources to allocate 16 placement groups, only created 8" in alone.stderr


def test_vllm_on_two_b200_nodes_over_ray(cluster, tmp_path):
    head_run = make_node(tmp_path, "node0", gpu="b200")
    worker_run = make_node(tmp_path, "node1", gpu="b200")
    ray_port, port = free_port(), free_port()
    head = cluster.start(head_run, ["ray", "start", "--head", f"--port={ray_port}", "--block"],
                         image=VLLM_IMAGE)
    wait_for_line(head, "Ray runtime started.")
    env = {"RAY_ADDRESS": f"127.0.0.1:{ray_port}"}
    short = cluster.run(head_run, vllm_cmd(port, 16), image=VLLM_IMAGE, env=env)
    assert short.returncode == 1
    assert "Not enough resources to allocate 16 placement groups, only created 8" in short.stderr

    worker = cluster.start(worker_run, ["ray", "start", f"--address=127.0.0.1:{ray_port}",
                                        "--block"], image=VLLM_IMAGE)
    wait_for_line(worker, "Ray runtime started.")
    status = cluster.run(head_run, ["ray", "status"], exec_in=head.config)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count(" 1 node_") == 2 and " 0.0/16.0 GPU" in status.stdout

    vllm = cluster.start(head_run, vllm_cmd(port, 16), image=VLLM_IMAGE, env=env)
    wait_health(port, vllm)
    assert gpu_report(head_run)["pid"] == vllm.pid
    assert gpu_report(worker_run)["pid"] == worker.pid           # the worker holds its ranks
    assert len([u for u in gpu_report(worker_run)["used_mib"] if u > 0]) == 8
    assert "16.0/16.0 GPU" in cluster.run(head_run, ["ray", "status"],
                                          exec_in=head.config).stdout
    assert http(port, "/v1/chat/completions", CHAT)[0] == 200

    os.killpg(worker.pid, signal.SIGKILL)                          # node1 is reclaimed
    assert wait_exit(vllm, 10) == 1
    assert "RayActorError" in log_of(vllm)


def test_ray_start_without_block_and_ray_stop(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b200")
    ray_port = free_port()
    started = cluster.run(run, ["ray", "start", "--head", f"--port={ray_port}"],
                          image=VLLM_IMAGE)
    # As a container's main command without --block: banner, exit 0, nothing left running.
    assert started.returncode == 0 and "ray start --address=" in started.stdout
    assert cluster.run(run, ["ray", "status", f"--address=127.0.0.1:{ray_port}"],
                       image=VLLM_IMAGE).returncode == 1
    # Outside a container (or in `docker exec`) it daemonizes and runs until `ray stop`.
    daemon = cluster.run(run, ["ray", "start", "--head", f"--port={ray_port}"], container=False)
    assert daemon.returncode == 0, daemon.stderr
    status = cluster.run(run, ["ray", "status"], container=False)
    assert status.returncode == 0 and " 0.0/8.0 GPU" in status.stdout
    stop = cluster.run(run, ["ray", "stop"], container=False)
    assert "Stopped all 1 Ray processes." in stop.stdout
    gone = cluster.run(run, ["ray", "status"], container=False)
    assert gone.returncode == 1 and "Could not find any running Ray instance" in gone.stderr


def test_ray_stop_in_the_head_container_ends_its_block(cluster, tmp_path):
    run = make_node(tmp_path, "node0", gpu="b200")
    head = cluster.start(run, ["ray", "start", "--head", f"--port={free_port()}", "--block"],
                         image=VLLM_IMAGE)
    wait_for_line(head, "This command will now block forever")
    assert cluster.run(run, ["ray", "status"], exec_in=head.config).returncode == 0
    stop = cluster.run(run, ["ray", "stop"], exec_in=head.config)
    assert "Stopped all 1 Ray processes." in stop.stdout
    assert wait_exit(head, 10) == 0


def test_ray_status_lags_like_ray_2_60(cluster, tmp_path):
    """Profile ray-2.60: `ray status` prints the monitor's last report (one per interval) and
    "No cluster status. ..." before the first (ray 2.60.0 autoscaler/_private/commands.py)."""
    head_run, worker_run = make_node(tmp_path, "node0", gpu="b200"), make_node(tmp_path, "node1", gpu="b200")
    lag = 3.0
    node = json.loads((head_run / "node.json").read_text())
    (head_run / "node.json").write_text(json.dumps(dict(node, ray_status_lag=lag)))
    ray_port = free_port()
    head = cluster.start(head_run, ["ray", "start", "--head", f"--port={ray_port}", "--block"],
                         image=VLLM_IMAGE)
    wait_for_line(head, "Ray runtime started.")

    def status():
        done = cluster.run(head_run, ["ray", "status"], exec_in=head.config)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert status().strip() == ("No cluster status. It may take a few seconds for the Ray "
                                "internal services to start up.")
    wait_until(lambda: status().count(" 1 node_") == 1, lag * 3, "the first report")
    worker = cluster.start(worker_run, ["ray", "start", f"--address=127.0.0.1:{ray_port}",
                                        "--block"], image=VLLM_IMAGE)
    wait_for_line(worker, "Ray runtime started.")
    joined = time.monotonic()
    wait_until(lambda: status().count(" 1 node_") == 2, lag * 3, "a report with the worker",
               interval=0.3)
    assert time.monotonic() - joined <= lag * 3


def test_profile_ray_gpus_reserved_prints_reserved_unused_gpus_and_the_serve_still_holds_them(
        cluster, tmp_path):
    """Profile ray-gpus-reserved (TP 1, DP over Ray): `ray status` shows the serve's placement
    groups reserving every GPU with none in use, as Ray prints that shape
    (tests/fixtures/real/ray/2.x/status-gpus-reserved-unused.txt); launch reads it as the
    serve holding the GPUs, and their release as the serve gone."""
    from k3deploy.facts.ray import parse_status
    from k3deploy.steps.engine import raylayout
    head_run = make_node(tmp_path, "node0", gpu="b200")
    worker_run = make_node(tmp_path, "node1", gpu="b200")
    node = json.loads((head_run / "node.json").read_text())
    (head_run / "node.json").write_text(json.dumps({**node, "ray_pg_gpus_claimed": False}))
    ray_port, port = free_port(), free_port()
    head = cluster.start(head_run, ["ray", "start", "--head", f"--port={ray_port}", "--block"],
                         image=VLLM_IMAGE)
    wait_for_line(head, "Ray runtime started.")
    worker = cluster.start(worker_run, ["ray", "start", f"--address=127.0.0.1:{ray_port}",
                                        "--block"], image=VLLM_IMAGE)
    wait_for_line(worker, "Ray runtime started.")
    vllm = cluster.start(head_run, vllm_cmd(port, 16), image=VLLM_IMAGE,
                         env={"RAY_ADDRESS": f"127.0.0.1:{ray_port}"})
    wait_health(port, vllm)
    held = cluster.run(head_run, ["ray", "status"], exec_in=head.config).stdout
    assert " 0.0/16.0 GPU (0.0 used of 16.0 reserved in placement groups)" in held, held
    assert raylayout.serve_running(parse_status(held, 0), healthy=False)
    os.killpg(vllm.pid, signal.SIGKILL)
    vllm.wait()
    wait_until(lambda: not raylayout.serve_running(parse_status(cluster.run(
        head_run, ["ray", "status"], exec_in=head.config).stdout, 0), healthy=False), 20,
        "Ray to free the killed serve's placement groups")
