"""Batched rollouts: scripted agents behave as designed, trajectories land in the run directory."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from transferlab.coding_rl.cli import run_rollout
from transferlab.coding_rl.rollout import byte_ids, open_sandbox, run_batched
from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
from transferlab.platform.trajectory import read_trajectories, to_tensors


def test_agents_on_seed_repositories() -> None:
    tasks = seed_repo_tasks()
    sandbox = open_sandbox("forkserver", 2)
    try:
        expert, s_expert = run_batched(tasks, "expert", 6, 2, sandbox)
        naive, _ = run_batched(tasks, "naive", 3, 2, sandbox)
        rand, s_rand = run_batched(tasks, "random", 3, 2, sandbox, max_steps=6)
    finally:
        sandbox.close()
    assert s_expert.success_rate == 1.0 and s_expert.mean_return == pytest.approx(35.5)
    calc = next(t for t in naive if t.task_id == "seed-calculator")
    assert calc.total_reward < 0 and calc.steps[-1].info["success"] is False  # overwrote add/subtract/...
    assert s_rand.success_rate == 0.0 and all(len(t) <= 6 for t in rand)
    assert [t.task_id for t in expert] == [t.task_id for t in tasks] * 2  # order kept across workers
    assert 0.0 < s_expert.sandbox_share <= 1.0


def test_rollout_writes_a_run_directory(tmp_path: Path) -> None:
    summary, run_dir = run_rollout(runs_root=tmp_path, agent="expert", tasks="seed", episodes=4, workers=2)
    assert summary.successes == 4
    assert {p.name for p in run_dir.iterdir()} >= {
        "config.json",
        "meta.json",
        "metrics.parquet",
        "trajectories.parquet",
        "artifacts",
    }
    trajectories = read_trajectories(run_dir / "trajectories.parquet")
    assert len(trajectories) == 4 and all(t.total_reward == pytest.approx(35.5) for t in trajectories)
    first = trajectories[0]
    assert first.steps[0].prompt_text.startswith("Issue:")
    assert first.token_ids()[: len(first.steps[0].prompt_ids)] == byte_ids(first.steps[0].prompt_text)
    batch = to_tensors(trajectories)
    assert batch["loss_mask"].sum().item() == sum(len(s.action_ids) for t in trajectories for s in t.steps)
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    assert set(metrics["key"]) >= {"rollout/return", "rollout/success", "rollout/success_rate"}


def test_bad_settings_are_config_errors(tmp_path: Path) -> None:
    from transferlab.platform.config import ConfigError

    with pytest.raises(ConfigError, match="agent"):
        run_rollout(runs_root=tmp_path, agent="genius", tasks="seed", episodes=1)


def test_expert_solves_validated_tasks_and_naive_does_not(tmp_path: Path) -> None:
    """If the expert failed a validated task, the task or the environment would be wrong."""
    from transferlab.coding_rl.tasks.corpus import build_corpus
    from transferlab.coding_rl.tasks.repo_task import load_corpus

    build_corpus(tmp_path / "corpus", limit=12, progress=False)
    tasks = load_corpus(tmp_path / "corpus")
    assert len(tasks) >= 10
    sandbox = open_sandbox("forkserver", 2)
    try:
        _, expert = run_batched(tasks, "expert", len(tasks), 2, sandbox)
        _, naive = run_batched(tasks, "naive", len(tasks), 2, sandbox)
    finally:
        sandbox.close()
    assert expert.success_rate >= 0.95
    assert naive.success_rate < expert.success_rate and naive.mean_return < expert.mean_return
