"""The Ray pool on a running cluster: address resolution, clear errors, and a real two-node cluster.

The slow tests start their own two-node cluster on this machine (``ray start --head`` plus a second
``ray start --address ...``, each node a separate raylet with one CPU and its own temp dir) and stop it
by signalling the two ``ray start --block`` processes they started: never ``ray stop``, which would
also stop other Ray instances of this user.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from transferlab.agent_rl.policies.generation import SamplingConfig
from transferlab.agent_rl.policies.model import TinyPolicyConfig, load_policy, save_policy
from transferlab.agent_rl.rollout_worker import Chunk, RolloutWorker, WorkerSpec
from transferlab.agent_rl.workers import (
    DiagnosticWorker,
    RayPool,
    WorkerError,
    make_pool,
    resolve_ray_address,
)
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.tasks.toy import toy_tasks
from transferlab.coding_rl.training import CODE_TASK_ENV

ray = pytest.importorskip("ray")

FACTORY = functools.partial(DiagnosticWorker, state="s0")
_BESIDE = Path(sys.executable).with_name("ray")
RAY_CLI = str(_BESIDE) if _BESIDE.exists() else shutil.which("ray")
NODE_START_S = 180.0  # a node takes 10-35 s to come up on a busy 2-core machine


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port nobody listens on (bound and released, so a connection to it is refused), never one
    handed out before in this session: a node given the same port for two components does not start."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


# ------------------------------------------------------------------------------------- address handling


def test_the_address_comes_from_the_argument_then_ray_address_then_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_ray_address() is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert resolve_ray_address() == "10.0.0.5:6379"
    assert resolve_ray_address("10.0.0.6:7000") == "10.0.0.6:7000"
    assert resolve_ray_address("local") is None  # the argument wins, and 'local' means a local Ray
    monkeypatch.setenv("RAY_ADDRESS", " ")
    assert resolve_ray_address() is None


def test_a_closed_port_gives_a_connection_error_naming_the_address_and_the_fix() -> None:
    assert not ray.is_initialized()
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionError) as caught:
        make_pool("ray", FACTORY, size=1, ray_address=address)
    message = str(caught.value)
    assert f"no Ray cluster to join at {address}" in message and "refused" in message
    assert f"ray start --head --port={address.rsplit(':', 1)[1]}" in message
    assert not ray.is_initialized()  # nothing left connected or started


def test_an_address_from_ray_address_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"localhost:{free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    with pytest.raises(ConnectionError, match=f"no Ray cluster to join at {address}"):
        make_pool("ray", FACTORY, size=1)


@pytest.mark.parametrize("address", ["nonsense", "10.0.0.5", "10.0.0.5:port", ":6379", "10.0.0.5:70000"])
def test_an_address_that_is_not_host_port_is_a_value_error(address: str) -> None:
    with pytest.raises(ValueError, match=r"is not HOST:PORT: give the head's address"):
        make_pool("ray", FACTORY, size=1, ray_address=address)


def test_negative_gpus_are_refused() -> None:
    with pytest.raises(ValueError, match=r"num_gpus must be >= 0"):
        make_pool("ray", FACTORY, size=1, num_gpus=-1.0)


def test_the_other_backends_ignore_the_ray_arguments() -> None:
    with make_pool("inline", FACTORY, ray_address="10.0.0.5:6379", num_gpus=1.0) as pool:
        assert pool.broadcast("get_state") == ["s0"]


# ------------------------------------------------------------------------------------- a real cluster


@dataclass
class Cluster:
    address: str
    head: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]


def start_node(args: list[str], temp_dir: str, log: Path) -> subprocess.Popen[bytes]:
    """``ray start --block`` with one CPU and its own ports; returns once the node has joined."""
    ports = {
        "node-manager-port",
        "object-manager-port",
        "dashboard-agent-listen-port",
        "dashboard-agent-grpc-port",
        "metrics-export-port",
        "runtime-env-agent-port",
    }
    assert RAY_CLI is not None
    cmd = [RAY_CLI, "start", "--block", *args, "--num-cpus=1", "--object-store-memory=200000000"]
    cmd += [
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        *(f"--{p}={free_port()}" for p in sorted(ports)),
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # RAY_AUTH_MODE=token: see cluster
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + NODE_START_S
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_node(process)
            pytest.fail(f"`{' '.join(cmd)}` did not start a node:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    return process


def stop_node(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM makes ``ray start --block`` drain and stop the node's processes; SIGKILL if it hangs."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two nodes on this machine: a head and a worker node that declares one (virtual) GPU.

    Token authentication on, Ray 2.60's default, with the user's token (``~/.ray/auth_token``, which
    any local ``ray.init`` creates): a process that has started a local Ray is in token mode for good,
    and a driver in token mode cannot serve the actors of a cluster without it (they die at startup).
    """
    if RAY_CLI is None:
        pytest.skip(f"the ray CLI is not installed (not beside {sys.executable}, not on PATH)")
    assert not ray.is_initialized(), "another test left this process connected to Ray"
    subprocess.run([RAY_CLI, "get-auth-token", "--generate"], check=True, capture_output=True)
    logs = tmp_path_factory.mktemp("ray-logs")
    temp_dirs = [tempfile.mkdtemp(prefix="tlray", dir="/tmp") for _ in range(2)]  # short: socket paths
    port = free_port()
    head_args = ["--head", f"--port={port}", "--include-dashboard=false"]
    nodes: list[subprocess.Popen[bytes]] = []
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "token")  # for the nodes and for this driver, whose Ray config
        ray._raylet.Config.initialize("")  # was read at import: read it again, as Ray does on a switch
        try:
            ports = [f"--ray-client-server-port={free_port()}"]
            nodes.append(start_node([*head_args, *ports], temp_dirs[0], logs / "head.log"))
            worker_args = [f"--address=127.0.0.1:{port}", "--num-gpus=1"]
            nodes.append(start_node(worker_args, temp_dirs[1], logs / "worker.log"))
            yield Cluster(f"127.0.0.1:{port}", *nodes)
        finally:
            if ray.is_initialized():
                ray.shutdown()
            for node in reversed(nodes):
                stop_node(node)
            for d in temp_dirs:
                shutil.rmtree(d, ignore_errors=True)
    ray._raylet.Config.initialize("")  # this process's previous RAY_AUTH_MODE


def alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


@pytest.fixture
def policy_dir(tok: Any, tmp_path: Path) -> Path:
    model = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=128, seed=0).create(tok)
    return save_policy(model, tok, tmp_path / "policy")


@pytest.mark.slow
@pytest.mark.timeout(900)  # two Ray nodes start, and `make test` runs it beside other test processes
def test_workers_on_two_nodes_run_graded_rollouts_each_with_its_own_sandbox(
    cluster: Cluster, policy_dir: Path, sandbox: SandboxBackend, one_thread: None
) -> None:
    spec = WorkerSpec(policy_dir=str(policy_dir), threads=1, env_factory=CODE_TASK_ENV)
    tasks = toy_tasks()[0]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=3)
    chunks = [
        Chunk(tasks=[tasks[0]] * 2, groups=[0, 0], sampling=sampling, first_row=0),
        Chunk(tasks=[tasks[1]] * 2, groups=[1, 1], sampling=sampling, first_row=2),
    ]
    pool = make_pool("ray", spec, size=2, ray_address=cluster.address)
    try:
        assert isinstance(pool, RayPool)
        nodes = alive_nodes()
        assert len(nodes) == 2
        placed = pool.node_ids()
        assert set(placed) == nodes  # one CPU per node, one CPU per worker: one worker on each node
        results = pool.map("run", chunks, timeout_s=600.0)
    finally:
        pool.close()
    assert not ray.is_initialized()  # the pool disconnected this driver ...
    assert cluster.head.poll() is None and cluster.worker.poll() is None  # ... and the cluster runs on

    assert [r.error for r in results] == [None, None]
    assert sorted(r.worker for r in results) == [0, 1]  # a chunk on each worker, so on each node
    # the reference: the same saved policy and the same chunks here, graded by this process's sandbox
    model, tokenizer = load_policy(policy_dir)
    here = RolloutWorker(
        model,
        tokenizer,
        WorkerSpec(policy_dir=str(policy_dir), threads=0, env_factory=CODE_TASK_ENV),
        env_kwargs={"sandbox": sandbox},
    )
    for result, chunk in zip(results, chunks, strict=True):
        want = here.run(chunk)
        got = result.value
        assert [t.steps[0].action_ids for t in got] == [t.steps[0].action_ids for t in want]
        assert [t.steps[0].observation_text for t in got] == [t.steps[0].observation_text for t in want]
        assert [t.steps[0].reward_components for t in got] == [t.steps[0].reward_components for t in want]
        assert all(t.steps[0].timings["sandbox_s"] > 0 for t in got)  # graded by the worker's own sandbox


@pytest.mark.slow
def test_ray_address_from_the_environment_joins_the_cluster(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    with make_pool("ray", FACTORY, size=2) as pool:
        assert isinstance(pool, RayPool)
        assert ray.get_runtime_context().gcs_address.endswith(cluster.address.rsplit(":", 1)[1])
        assert set(pool.node_ids()) == alive_nodes() and len(alive_nodes()) == 2  # a local Ray has one node
        assert pool.broadcast("get_state") == ["s0", "s0"]
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_gpu_worker_lands_on_the_gpu_node_and_sees_its_gpu(cluster: Cluster) -> None:
    with make_pool("ray", FACTORY, size=1, ray_address=cluster.address, num_gpus=1.0) as pool:
        assert isinstance(pool, RayPool)
        [node] = pool.node_ids()
        gpu_nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU")]
        assert [node] == gpu_nodes
        assert pool.broadcast("env", "CUDA_VISIBLE_DEVICES") == ["0"]  # Ray hands the actor its GPU


@pytest.mark.slow
def test_more_gpu_workers_than_gpus_warn_then_fail_to_start_with_the_reason(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="transferlab.agent_rl.workers")
    # the worker that gets the GPU must start within the timeout, on a machine `make test` keeps busy
    # with other test processes (10 s was too short there: both timed out)
    with pytest.raises(WorkerError) as caught:
        make_pool("ray", FACTORY, size=2, ray_address=cluster.address, num_gpus=1.0, startup_timeout_s=45.0)
    assert "2 Ray workers with num_gpus=1 need 2 GPUs; Ray has 1" in caplog.text
    message = str(caught.value)
    # One of the two gets the only GPU; which one is a race, but exactly one must time out.
    failed = re.findall(r"worker (\d) failed to start: timeout after 45\.0 s", message)
    assert len(failed) == 1 and failed[0] in {"0", "1"}, message
    assert "asks for 1 CPUs and 1 GPUs" in message
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_process_connected_elsewhere_is_not_silently_reused(cluster: Cluster) -> None:
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        other = f"127.0.0.1:{free_port()}"
        with pytest.raises(ValueError, match=f"connected to the Ray cluster at .*, not {other}"):
            make_pool("ray", FACTORY, size=1, ray_address=other)
        with make_pool("ray", FACTORY, size=1, ray_address=cluster.address) as pool:  # the same one is
            assert pool.broadcast("get_state") == ["s0"]
        assert ray.is_initialized()  # the pool did not connect, so it does not disconnect
    finally:
        ray.shutdown()
