"""IdentityEnv keeps the agent-environment contract: Gymnasium's checker, every ending's reward, bad input."""

from __future__ import annotations

import doctest

import pytest
from gymnasium.utils.env_checker import check_env

from transferlab.agent_rl import identity_env
from transferlab.agent_rl.identity_env import (
    SPARSE_IDENTITY_REWARDS,
    WORDS,
    IdentityEnv,
    IdentityTask,
    identity_env_factory,
    identity_tasks,
)
from transferlab.platform.agent_env import RewardTable, Task, ToolEnv


def test_doctests() -> None:
    assert doctest.testmod(identity_env).failed == 0


def test_check_env_and_the_protocols() -> None:
    env = IdentityEnv(identity_tasks(4), render_mode="ansi")
    check_env(env, skip_render_check=True)
    assert isinstance(env, ToolEnv) and isinstance(env.tasks[0], Task)
    obs, info = env.reset(seed=0, options={"task": env.tasks[0]})
    assert env.render() == obs and info["task_id"] == env.tasks[0].task_id
    assert IdentityEnv(identity_tasks(4)).render() is None


def test_tasks_are_balanced_seeded_and_unique() -> None:
    tasks = identity_tasks(10, seed=3)
    counts = [sum(t.target == w for t in tasks) for w in WORDS]
    assert max(counts) - min(counts) <= 1
    assert tasks == identity_tasks(10, seed=3) and tasks != identity_tasks(10, seed=4)
    assert len({t.task_id for t in tasks}) == 10
    assert tasks[0].provenance == {"source": "identity", "seed": 3} and tasks[0].domain == "coding"


@pytest.mark.parametrize(
    ("action", "reward", "terminated", "success", "components"),
    [
        (" red\n", 1.0, True, True, {"correct": 1.0}),
        ("gold", -1.0, True, False, {"task_failed": -1.0}),
        ("red red", -1.0, True, False, {"task_failed": -1.0}),
    ],
)
def test_an_answer_ends_the_episode(
    action: str, reward: float, terminated: bool, success: bool, components: dict[str, float]
) -> None:
    env = IdentityEnv([IdentityTask("t", "red")], max_steps=3)
    env.reset(options={"task": env.tasks[0]})
    _, got, term, trunc, info = env.step(action)
    assert (got, term, trunc, info["success"], info["components"]) == (
        reward,
        terminated,
        False,
        success,
        components,
    )
    with pytest.raises(RuntimeError, match="reset"):
        env.step("red")


def test_empty_answers_run_into_the_step_limit() -> None:
    env = IdentityEnv([IdentityTask("t", "red")], max_steps=2)
    env.reset()
    obs, reward, term, trunc, info = env.step("  ")
    assert (reward, term, trunc, info["success"]) == (-0.1, False, False, None)
    obs, reward, term, trunc, info = env.step("")
    assert (round(reward, 6), term, trunc, info["success"]) == (-1.1, False, True, False)
    assert "step limit of 2 reached" in obs and info["events"] == {"no_answer": 1, "task_failed": 1}


def test_sparse_pays_only_the_endings_and_the_factory_builds_envs() -> None:
    tasks = [IdentityTask("t", "red")]
    env = identity_env_factory(tasks, rewards="sparse", max_steps=1)
    assert env.rewards == SPARSE_IDENTITY_REWARDS and env.max_steps == 1
    env.reset()
    _, reward, _, trunc, info = env.step("")
    assert (reward, trunc, info["components"]) == (-1.0, True, {"task_failed": -1.0})


def test_bad_input_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        IdentityEnv([])
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        IdentityEnv(identity_tasks(1), max_steps=0)
    with pytest.raises(ValueError, match="'dense' or 'sparse'"):
        IdentityEnv(identity_tasks(1), rewards="shaped")
    with pytest.raises(ValueError, match="no weight for"):
        IdentityEnv(identity_tasks(1), rewards=RewardTable(weights={"correct": 1.0}))
    with pytest.raises(ValueError, match="must be an IdentityTask"):
        IdentityEnv(identity_tasks(1)).reset(options={"task": "red"})
    with pytest.raises(ValueError, match="n must be >= 1"):
        identity_tasks(0)
    with pytest.raises(ValueError, match="at least one word"):
        identity_tasks(1, words=())
