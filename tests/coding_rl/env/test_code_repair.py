"""CodeRepair-v0: the Gymnasium contract, tools, rewards per design note 000, and the independent verdict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import transferlab.coding_rl.env  # noqa: F401  (registers the id)
from transferlab.coding_rl.agents import call, make_agent
from transferlab.coding_rl.env.code_repair import CodeRepairEnv, code_repair_env
from transferlab.coding_rl.rewards import DENSE_REWARDS, SPARSE_REWARDS, reward_table
from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.platform.agent_env import RewardTable, Task, ToolEnv
from transferlab.platform.trajectory import Domain


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxBackend]:
    backend, _, _ = open_backend(SandboxConfig(workers=1))
    yield backend
    backend.close()


@pytest.fixture
def env(sandbox: SandboxBackend) -> Iterator[CodeRepairEnv]:
    e = CodeRepairEnv(sandbox=sandbox)
    yield e
    e.close()


DIVIDE_ONLY = "def divide(a, b):\n    if b == 0:\n        raise ValueError('b is 0')\n    return a / b\n"


def run(env: CodeRepairEnv, task_id: str, actions: list[str]) -> tuple[list[float], list[dict], bool, bool]:
    env.reset(seed=0, options={"task": task_id})
    rewards, infos, term, trunc = [], [], False, False
    for action in actions:
        _, r, term, trunc, info = env.step(action)
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            break
    return rewards, infos, term, trunc


def test_registered_env_passes_check_env() -> None:
    env = gym.make("transferlab/CodeRepair-v0")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_the_env_and_its_tasks_implement_the_agent_env_contract(env: CodeRepairEnv) -> None:
    assert isinstance(env, ToolEnv) and env.domain == "coding"
    check_env(env, skip_render_check=True)
    for task in env.tasks:
        assert isinstance(task, Task) and task.domain == "coding"
        assert task.split == task.meta.split and task.provenance == task.meta.provenance
    obs, info = env.reset(options={"task": env.tasks[0]})
    assert info["task_id"] == env.tasks[0].task_id
    env.render_mode = "ansi"
    assert env.render() == obs


def test_the_dense_and_sparse_tables_are_the_design_notes() -> None:
    assert DENSE_REWARDS.weights == {
        "read_file_success": 0.5,
        "search_code_success": 0.5,
        "write_file_success": 0.5,
        "tool_error": -1.0,
        "read_before_write": 1.0,
        "write_without_read": -2.0,
        "test_after_modify": 1.5,
        "redundant_action": -0.5,
        "test_pass": 3.0,
        "test_fail": -2.0,
        "all_tests_pass": 5.0,
        "task_complete": 20.0,
        "task_failed": 0.0,
    }
    assert not DENSE_REWARDS.end_only and set(DENSE_REWARDS.descriptions) == set(DENSE_REWARDS.weights)
    assert SPARSE_REWARDS.end_only and SPARSE_REWARDS.final == ("task_complete", "task_failed")
    assert SPARSE_REWARDS.weights == {**DENSE_REWARDS.weights, "task_failed": -5.0}
    assert reward_table("dense") == DENSE_REWARDS and reward_table("dense") is not DENSE_REWARDS
    with pytest.raises(ValueError, match="unknown reward table 'medium'"):
        reward_table("medium")


def test_a_table_without_every_coding_component_is_refused(sandbox: SandboxBackend) -> None:
    partial = RewardTable(weights={"task_complete": 20.0, "task_failed": 0.0})
    with pytest.raises(ValueError, match="which CodeRepair-v0 records"):
        CodeRepairEnv(sandbox=sandbox, rewards=partial)


@dataclass(frozen=True)
class _Question:
    task_id: str = "q-1"
    domain: Domain = "ecommerce"
    split: str = "train"
    provenance: dict[str, Any] = field(default_factory=dict)


def test_the_env_factory_plays_repository_tasks_only(env: CodeRepairEnv, sandbox: SandboxBackend) -> None:
    built = code_repair_env(env.tasks[:2], rewards="sparse", max_steps=4, sandbox=sandbox)
    assert [t.task_id for t in built.tasks] == [t.task_id for t in env.tasks[:2]]
    assert built.max_steps == 4 and built.rewards == SPARSE_REWARDS
    built.close()
    with pytest.raises(ValueError, match=r"plays repository tasks \(RepoTask\), got a _Question"):
        code_repair_env([env.tasks[0], _Question()], sandbox=sandbox)


def test_reset_is_seeded_and_takes_a_task(env: CodeRepairEnv) -> None:
    a, _ = env.reset(seed=3)
    b, _ = env.reset(seed=3)
    assert a == b
    obs, info = env.reset(options={"task": "seed-calculator"})
    assert info["task_id"] == "seed-calculator"
    assert "division" in obs and "src/calculator.py" in obs and "tests/test_calculator.py" in obs
    with pytest.raises(ValueError, match="unknown task"):
        env.reset(options={"task": "nope"})


def test_seed_early_attempt_is_negative(env: CodeRepairEnv) -> None:
    """Seed 000: read the test (+0.5), search (+0.5), write without reading (-2.0 + 0.5) ... negative."""
    rewards, infos, _, _ = run(
        env,
        "seed-calculator",
        [
            call("read_file", path="tests/test_calculator.py"),
            call("search_code", pattern="def divide"),
            call(
                "write_file",
                path="src/calculator.py",
                content=DIVIDE_ONLY,
            ),
            call("run_tests"),
            call("submit"),
        ],
    )
    assert rewards[:3] == [0.5, 0.5, 0.5 - 2.0]
    assert infos[2]["components"] == {"write_file_success": 0.5, "write_without_read": -2.0}
    assert infos[3]["tests"]["passed"] < infos[3]["tests"]["selected"]  # add/subtract/multiply are gone
    assert infos[4]["success"] is False
    assert sum(rewards) < 0


@pytest.mark.parametrize("task_id", ["seed-calculator", "seed-binary_search", "seed-quick_sort"])
def test_expert_workflow_collects_the_completion_bonus(env: CodeRepairEnv, task_id: str) -> None:
    agent = make_agent("expert")
    task = next(t for t in env.tasks if t.task_id == task_id)
    agent.begin(task, 0)
    obs, _ = env.reset(options={"task": task_id})
    rewards, infos = [], []
    for _ in range(env.max_steps):
        obs, r, term, trunc, info = env.step(agent.act(obs))
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            break
    d = DENSE_REWARDS
    assert rewards == [
        d["read_file_success"],
        d["search_code_success"],
        d["read_file_success"],
        d["write_file_success"] + d["read_before_write"],
        d["test_after_modify"] + d["test_pass"],
        d["test_pass"] + d["all_tests_pass"],
        d["task_complete"],
    ]
    assert infos[-1]["success"] is True and infos[-1]["components"] == {"task_complete": 20.0}
    assert sum(rewards) == pytest.approx(35.5)


def test_tool_errors_are_messages_not_crashes(env: CodeRepairEnv) -> None:
    env.reset(options={"task": "seed-quick_sort"})
    for bad, needle in [
        ("not json", "one JSON object"),
        ("[1]", "JSON object"),
        ('{"action": "rm"}', "unknown action"),
        ('{"action": "read_file"}', "needs 'path'"),
        ('{"action": "read_file", "path": "../etc/passwd"}', "without '..'"),
        ('{"action": "read_file", "path": "nope.py"}', "no file"),
        ('{"action": "edit_file", "path": "src/quick_sort.py", "old": "zzz", "new": "y"}', "does not occur"),
        ('{"action": "run_tests", "target": "tests/test_quick_sort.py::test_99"}', "no test"),
    ]:
        obs, r, term, _, info = env.step(bad)
        assert (
            needle in obs and r == DENSE_REWARDS["tool_error"] and info["components"] == {"tool_error": -1.0}
        )
        assert not term


def test_read_file_numbers_lines_and_edit_file_can_address_one_line(env: CodeRepairEnv) -> None:
    """A line edit changes only the named line; each way it can go wrong is a tool error."""
    env.reset(options={"task": "seed-quick_sort"})
    task = env.task
    path = task.meta.source_path
    lines = task.buggy_source.split("\n")
    obs, *_ = env.step(call("read_file", path=path))
    assert obs.split("\n")[1:4] == [f"{n}| {lines[n - 1]}" for n in (1, 2, 3)]
    k = next(n for n, line in enumerate(lines, 1) if line.count("<") == 1)  # a line with one '<'
    for bad, needle in [
        (call("edit_file", path=path, line="two", old="<", new=">"), "line 'two' is not a number"),
        (
            call("edit_file", path=path, line=str(len(lines) + 1), old="<", new=">"),
            f"has lines 1-{len(lines)}",
        ),
        # a piece that is not there: the error shows the line as read_file numbers it, to quote from
        (call("edit_file", path=path, line="1", old="zzz", new="y"), f"does not occur in line 1 of {path}"),
        (call("edit_file", path=path, line="1", old="zzz", new="y"), f"of it:\n1| {lines[0]}"),
        (call("edit_file", path=path, line=str(k), old="", new="y"), f"\n{k}| {lines[k - 1]}"),
    ]:
        obs, _, _, _, info = env.step(bad)
        assert needle in obs and info["components"] == {"tool_error": -1.0}, (bad, obs)
    obs, _, _, _, info = env.step(call("edit_file", path=path, line=str(k), old="<", new=">"))
    assert info["tool_ok"] and obs == f"wrote {path} line {k}: {lines[k - 1].replace('<', '>').strip()}"
    after = env.workspace.read_file(path).split("\n")
    assert (
        after[k - 1] == lines[k - 1].replace("<", ">")
        and after[: k - 1] + after[k:] == lines[: k - 1] + lines[k:]
    )


def test_writes_to_tests_are_refused_and_counted(env: CodeRepairEnv) -> None:
    env.reset(options={"task": "seed-quick_sort"})
    obs, r, *_, info = env.step(
        call("write_file", path="tests/test_quick_sort.py", content="def test_x(): pass\n")
    )
    assert "read-only" in obs and r == -1.0 and info["test_writes_refused"] == 1
    obs, r, *_, info = env.step(call("edit_file", path="tests/test_quick_sort.py", old="def", new="xx"))
    assert info["test_writes_refused"] == 2


def test_success_is_the_verifiers_verdict_not_the_agents_tests(env: CodeRepairEnv) -> None:
    """A patch that passes every developer test but not the hidden ones is a failure on submit."""
    task = next(t for t in env.tasks if t.task_id == "seed-quick_sort")
    dev = {json.dumps(c.call_args()): c.expected for c in task.dev_tests}
    table = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in dev.items()) + "}"
    cheat = f"import json\n\ndef quick_sort(arr):\n    return {table}.get(json.dumps([arr]), arr)\n"
    _, infos, term, _ = run(
        env,
        "seed-quick_sort",
        [
            call("read_file", path="src/quick_sort.py"),
            call("write_file", path="src/quick_sort.py", content=cheat),
            call("run_tests", target="all"),
            call("submit"),
        ],
    )
    assert infos[2]["components"]["all_tests_pass"] == DENSE_REWARDS["all_tests_pass"]
    assert (
        term
        and infos[3]["success"] is False
        and infos[3]["verifier"]["passed"] < infos[3]["verifier"]["total"]
    )


def test_redundant_actions_and_truncation(sandbox: SandboxBackend) -> None:
    env = CodeRepairEnv(sandbox=sandbox, max_steps=3)
    env.reset(options={"task": "seed-quick_sort"})
    _, r1, *_ = env.step(call("read_file", path="src/quick_sort.py"))
    _, r2, _, _, info = env.step(call("read_file", path="src/quick_sort.py"))
    assert r1 == 0.5 and r2 == 0.5 - 0.5 and "redundant_action" in info["components"]
    _, _, term, trunc, info = env.step(call("run_tests"))
    assert trunc and not term and "task_failed" in info["events"]
    with pytest.raises(RuntimeError):
        env.step(call("submit"))
    env.close()


def test_sparse_table_pays_only_at_the_end(sandbox: SandboxBackend) -> None:
    env = CodeRepairEnv(sandbox=sandbox, rewards="sparse")
    agent = make_agent("expert")
    task = next(t for t in env.tasks if t.task_id == "seed-calculator")
    agent.begin(task, 0)
    obs, _ = env.reset(options={"task": task.task_id})
    rewards = []
    for _ in range(10):
        obs, r, term, trunc, info = env.step(agent.act(obs))
        rewards.append(r)
        assert info["events"]  # every event is still recorded
        if term or trunc:
            break
    assert rewards[:-1] == [0.0] * (len(rewards) - 1) and rewards[-1] == 20.0
    env.reset(options={"task": task.task_id})
    assert env.step(call("submit"))[1] == -5.0
    env.close()
