"""Expert iteration: only verified, new successes join the SFT data, round after round."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from transferlab.agent_rl.policies.generation import SamplingConfig
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.rft import (
    ExpertIterationConfig,
    expert_iteration,
    verified_successes,
)
from transferlab.agent_rl.rollout_worker import Chunk, RolloutWorker, WorkerSpec
from transferlab.agent_rl.sft import SFTConfig, train_sft
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.single_step import code_demonstration
from transferlab.coding_rl.tasks.toy import toy_solution, toy_tasks
from transferlab.coding_rl.training import CODE_TASK_ENV
from transferlab.platform.metrics import MemoryLogger

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def worker_and_model(tok: Any, sandbox: SandboxBackend) -> Iterator[tuple[RolloutWorker, Any]]:
    model = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=128, seed=0).create(tok)
    train, _ = toy_tasks()
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in train[:6]]
    train_sft(model, tok, demos, SFTConfig(steps=60, batch_size=8, lr=3e-3))
    worker = RolloutWorker(
        model,
        tok,
        WorkerSpec(policy_dir="", threads=0, env_factory=CODE_TASK_ENV),
        env_kwargs={"sandbox": sandbox},
    )
    yield worker, model
    worker.close()


def test_rounds_add_only_new_verified_successes(
    tok: Any, worker_and_model: tuple[RolloutWorker, Any]
) -> None:
    worker, model = worker_and_model
    train, _ = toy_tasks()
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in train[:6]]
    before = [p.detach().clone() for p in model.parameters()]
    logger = MemoryLogger()
    config = ExpertIterationConfig(rounds=2, samples_per_task=3, sft=SFTConfig(steps=5, batch_size=4))
    stats = expert_iteration(model, tok, train[:6], demos, config, worker=worker, logger=logger)
    assert [s.round for s in stats] == [0, 1]
    assert stats[0].data_size == len(demos) + stats[0].new_trajectories
    assert stats[1].data_size == stats[0].data_size + stats[1].new_trajectories
    assert all(0.0 <= s.success_rate <= 1.0 for s in stats)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert logger.series("expert_iteration/data_size").tolist() == [float(s.data_size) for s in stats]


def test_verified_successes_keep_passing_episodes_once(
    tok: Any, worker_and_model: tuple[RolloutWorker, Any]
) -> None:
    worker, _ = worker_and_model
    train, _ = toy_tasks()
    chunk = Chunk(
        tasks=[train[0]] * 6,
        groups=list(range(6)),
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=12),
    )
    trajs = worker.run(chunk)  # greedy: six identical episodes
    kept = verified_successes(trajs)
    passed = [t for t in trajs if t.steps[-1].info["success"]]
    assert len(kept) == (1 if passed else 0)
    assert all(t.steps[-1].info["success"] for t in kept)


class _StopAtRound(MemoryLogger):
    """A logger whose ``log`` of round ``stop`` raises, as if the process were killed there."""

    def __init__(self, stop: int) -> None:
        super().__init__()
        self.stop = stop

    def log(self, step: int, metrics: Any) -> None:
        if step == self.stop:
            raise KeyboardInterrupt("killed")
        super().log(step, metrics)


def test_a_checkpointed_run_resumes_after_its_last_round_to_the_same_model(
    tok: Any, sandbox: SandboxBackend, worker_and_model: tuple[RolloutWorker, Any], tmp_path: Path
) -> None:
    """Killed in round 1 and run again, expert iteration ends where an uninterrupted run ends."""
    _, start = worker_and_model
    train, _ = toy_tasks()
    demos = [code_demonstration(tok, t, toy_solution(t)) for t in train[:6]]
    config = ExpertIterationConfig(rounds=2, samples_per_task=3, sft=SFTConfig(steps=5, batch_size=4))

    def run(directory: Path, logger: MemoryLogger) -> tuple[Any, list[Any]]:
        model = copy.deepcopy(start)
        worker = RolloutWorker(
            model,
            tok,
            WorkerSpec(policy_dir="", threads=0, env_factory=CODE_TASK_ENV),
            env_kwargs={"sandbox": sandbox},
        )
        try:
            return model, expert_iteration(model, tok, train[:6], demos, config, worker, logger, directory)
        finally:
            worker.close()

    whole, whole_stats = run(tmp_path / "whole", MemoryLogger())
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", _StopAtRound(1))
    assert (tmp_path / "cut" / "rounds.pt").exists()  # round 0 was saved
    logger = MemoryLogger()
    resumed, resumed_stats = run(tmp_path / "cut", logger)
    assert resumed_stats == whole_stats
    assert logger.series("expert_iteration/data_size").tolist() == [float(whole_stats[1].data_size)]
    for a, b in zip(whole.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(start.parameters(), resumed.parameters(), strict=True))
