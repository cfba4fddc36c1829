"""The one-turn single-step env: the prompt, the sandbox's verdict on the body, and what it refuses."""

from __future__ import annotations

import pytest

from transferlab.coding_rl.env.single_step import CodeTaskEnv, code_task_env, prompt_text
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.tasks.toy import toy_repo_tasks, toy_solution, toy_tasks
from transferlab.platform.agent_env import ToolEnv


def test_one_turn_pays_the_verifier_s_reward_and_ends(sandbox: SandboxBackend) -> None:
    task = toy_tasks()[0][0]
    env = code_task_env([task], sandbox=sandbox)
    assert isinstance(env, ToolEnv) and env.max_steps == 1
    obs, _ = env.reset(options={"task": task})
    assert obs == prompt_text(task) == f"{task.task_description}\n{task.function_signature}"
    status, reward, terminated, truncated, info = env.step(toy_solution(task))
    assert (status, terminated, truncated, info["success"]) == ("passed", True, False, True)
    assert reward == sum(info["components"].values()) and reward >= 11.0  # runs 1 + all tests 10 (+ fast)
    env.reset(options={"task": task})
    status, reward, terminated, _, info = env.step("    return None\n")
    assert terminated and status != "passed" and not info["success"] and reward < 11.0


def test_it_refuses_other_tasks_and_a_step_before_reset(sandbox: SandboxBackend) -> None:
    repo = toy_repo_tasks()[0][0]
    with pytest.raises(ValueError, match="the single-step code env plays CodeTasks, got a RepoTask"):
        code_task_env([repo], sandbox=sandbox)
    env = CodeTaskEnv(toy_tasks()[0][:1], sandbox)
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step("return 1")
    with pytest.raises(ValueError, match="CodeTaskEnv plays code tasks"):
        env.reset(options={"task": repo})
