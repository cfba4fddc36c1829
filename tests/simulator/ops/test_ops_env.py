"""OpsAnalysis-v0: the Gymnasium contract, determinism, rewards by hand, scripted agents."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import transferlab.simulator.envs  # noqa: F401  (registers the ids)
from transferlab.platform.agent_env import RewardTable, Task, ToolEnv
from transferlab.simulator.ops.data_platform import parse_fields
from transferlab.simulator.ops.env import (
    ExpertAgent,
    NaiveAgent,
    OpsAnalysisEnv,
    RandomAgent,
    call,
    run_episode,
)
from transferlab.simulator.ops.grader import DENSE_OPS_REWARDS, SPARSE_OPS_REWARDS
from transferlab.simulator.ops.scenarios import (
    FAMILIES,
    ScenarioConfig,
    family_of,
    scenario,
    seed_of,
    task_seeds,
)

HELD_OUT = task_seeds("validation", 2 * len(FAMILIES))  # two tasks of every family


def test_check_env_on_the_registered_id() -> None:
    env = gym.make("transferlab/OpsAnalysis-v0", n_tasks=2)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert "Find why sales of" in obs and info["split"] == "train"


def test_the_env_and_its_tasks_implement_the_agent_env_contract() -> None:
    env = OpsAnalysisEnv(n_tasks=2, render_mode="ansi")
    assert isinstance(env, ToolEnv) and env.domain == "ecommerce"
    check_env(env, skip_render_check=True)
    task = scenario(seed_of("ops-0001")).task
    assert isinstance(task, Task) and task.domain == "ecommerce" and task.split == "validation"
    provenance = {"source": "scenario", "family": "competitor_price_cut", "seed": 1}
    assert task.provenance == {**provenance, "world_seed": task.world_seed}
    by_task, info = env.reset(seed=0, options={"task": task})
    assert info["task_id"] == "ops-0001" and env.render() == by_task
    by_id, _ = env.reset(seed=0, options={"task_id": "ops-0001"})
    assert by_task == by_id
    _, _, _, _, info = env.step("{")
    assert env.last_timings["env_s"] >= 0.0 and info["reward_components"] == info["components"]


def test_a_task_of_another_scenario_config_is_refused() -> None:
    env = OpsAnalysisEnv(n_tasks=1, scenario_config=ScenarioConfig(window=14))
    task = scenario(seed_of("ops-0001")).task
    with pytest.raises(ValueError, match="differs from the one this env builds"):
        env.reset(options={"task": task})
    with pytest.raises(ValueError, match="must be an OpsTask"):
        env.reset(options={"task": "ops-0001"})


def test_the_dense_and_sparse_tables() -> None:
    assert DENSE_OPS_REWARDS.weights == {
        "query_success": 0.5,
        "check_before_report": 1.0,
        "redundant_query": -0.5,
        "tool_error": -1.0,
        "report_without_query": -2.0,
        "report_score": 2.0,
        "task_failed": -4.0,
    }
    assert SPARSE_OPS_REWARDS.end_only and SPARSE_OPS_REWARDS.final == ("report_score", "task_failed")
    assert SPARSE_OPS_REWARDS.weights == {**DENSE_OPS_REWARDS.weights, "task_failed": -5.0}
    with pytest.raises(ValueError, match="which OpsAnalysis-v0 records"):
        OpsAnalysisEnv(n_tasks=1, reward_mode=RewardTable(weights={"report_score": 2.0}))


def test_same_seed_same_observations() -> None:
    runs = []
    for _ in range(2):
        env = OpsAnalysisEnv(n_tasks=3)
        runs.append(run_episode(env, ExpertAgent(), seed=7))
    assert runs[0]["observations"] == runs[1]["observations"]
    assert runs[0]["rewards"] == runs[1]["rewards"]


@pytest.mark.slow
def test_expert_scores_high_and_naive_low_on_held_out_tasks_of_every_family() -> None:
    env = OpsAnalysisEnv(n_tasks=2)
    seen = set()
    for seed in HELD_OUT:
        task_id = f"ops-{seed:04d}"
        expert = run_episode(env, ExpertAgent(), options={"task_id": task_id})
        seen.add(env.task.family)
        assert env.task.split == "validation"
        assert expert["info"]["report_score"] == 10.0, expert["actions"][-1]  # rubric >= 8 asked
        naive = run_episode(env, NaiveAgent(), options={"task_id": task_id})
        assert naive["info"]["report_score"] < 3.0
        assert naive["info"]["components"]["report_without_query"] == -2.0
    assert seen == set(FAMILIES)


def test_compact_expert_reports_score_the_same_in_under_two_thirds_the_text() -> None:
    """The compact report drops only what rules causes out: same rubric, same calls before it."""
    env = OpsAnalysisEnv(n_tasks=2)
    for seed in HELD_OUT:
        task_id = f"ops-{seed:04d}"
        full = run_episode(env, ExpertAgent(), options={"task_id": task_id})
        compact = run_episode(env, ExpertAgent(compact=True), options={"task_id": task_id})
        assert compact["info"]["report_score"] == full["info"]["report_score"] == 10.0
        assert compact["actions"][:-1] == full["actions"][:-1]
        short, long = (json.loads(e["actions"][-1])["text"] for e in (compact, full))
        assert len(short) < 2 / 3 * len(long), (short, long)
        assert "not the cause" not in short and "No campaign" not in short


def test_split_option_draws_tasks_of_that_split() -> None:
    env = OpsAnalysisEnv(n_tasks=2)
    for split in ("train", "validation", "test"):
        _, info = env.reset(seed=3, options={"split": split})
        assert info["split"] == split
    with pytest.raises(ValueError, match="unknown split 'held_out'; choose one of train, validation, test"):
        env.reset(options={"split": "held_out"})


def _short_trajectory(mode: str) -> list[tuple[float, dict[str, float], bool]]:
    env = OpsAnalysisEnv(n_tasks=2, reward_mode=mode)
    env.reset(options={"task_id": "ops-0001"})  # competitor_price_cut
    cat = env.task.category
    agent = ExpertAgent(compact=True)  # the full report would rule causes out with numbers never queried here
    agent.reset(cat)
    actions = [
        call("query_sales_data", category=cat, time="近30天"),
        call("query_sales_data", category=cat, time="近30天"),  # redundant
        "{not json",  # tool error
        call("competitor_analysis", category=cat),
    ]
    out = []
    for action in actions:
        obs, reward, terminated, _, info = env.step(action)
        agent.fields.update(parse_fields(obs))
        out.append((reward, info["components"], terminated))
    _, reward, terminated, _, info = env.step(call("generate_report", text=agent.report()))
    out.append((reward, info["components"], terminated))
    return out


def test_dense_and_sparse_components_by_hand() -> None:
    dense = _short_trajectory("dense")
    assert [c for _, c, _ in dense[:4]] == [
        {"query_success": 0.5},
        {"redundant_query": -0.5},
        {"tool_error": -1.0},
        {"query_success": 0.5},
    ]
    last_reward, last, terminated = dense[4]
    assert terminated and last == {"check_before_report": 1.0, "report_score": 20.0}
    assert last_reward == 21.0
    sparse = _short_trajectory("sparse")
    assert [c for _, c, _ in sparse[:4]] == [{}, {}, {}, {}]
    assert sparse[4][1] == {"report_score": 20.0} and sparse[4][0] == 20.0


def test_tool_errors_are_observations_and_counted() -> None:
    env = OpsAnalysisEnv(n_tasks=2, max_steps=4)
    env.reset(options={"task_id": "ops-0003"})
    bad = [
        json.dumps({"action": "query_sales_data"}),  # missing category
        json.dumps({"action": "check_inventory", "category": "toys"}),  # unknown category
        json.dumps({"action": "query_sales_data", "category": "shoes", "window": "last 400 days"}),
        json.dumps({"action": "drop_table"}),
    ]
    for i, action in enumerate(bad, 1):
        obs, _, terminated, truncated, info = env.step(action)
        assert obs.startswith("tool error:") and info["tool_errors"] == i and not info["tool_ok"]
    assert truncated and not terminated and info["components"]["tool_error"] == -1.0


def test_random_agent_runs_and_scores_low() -> None:
    env = OpsAnalysisEnv(n_tasks=2)
    scores = [
        run_episode(env, RandomAgent(s), options={"task_id": f"ops-{seed:04d}"})["info"].get(
            "report_score", 0.0
        )
        for s, seed in enumerate(HELD_OUT)
    ]
    assert max(scores) <= 6.0


def test_scenarios_are_deterministic_given_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from transferlab.simulator.ops import scenarios

    monkeypatch.setenv(scenarios.CACHE_ENV, "off")  # build twice, never load
    scenarios._cached.cache_clear()
    first = scenario(1)
    scenarios._cached.cache_clear()
    again = scenario(1)
    assert first.task == again.task
    assert first.events.equals(again.events) and first.market.equals(again.market)


def test_a_built_scenario_is_loaded_from_the_disk_cache_not_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transferlab.simulator.ops import scenarios

    monkeypatch.setenv(scenarios.CACHE_ENV, str(tmp_path))
    scenarios._cached.cache_clear()
    built = scenario(2)
    [cached] = list(tmp_path.glob("*/2.pkl"))
    scenarios._cached.cache_clear()
    monkeypatch.setattr(scenarios, "_build", lambda *a: pytest.fail("built again despite the cache"))
    loaded = scenario(2)
    assert loaded.task == built.task and loaded.events.equals(built.events)
    cached.write_bytes(b"not a pickle")  # a damaged file is ignored and the scenario built again
    scenarios._cached.cache_clear()
    monkeypatch.undo()
    monkeypatch.setenv(scenarios.CACHE_ENV, str(tmp_path))
    assert scenario(2).task == built.task and cached.read_bytes() != b"not a pickle"
    scenarios._cached.cache_clear()


def test_train_validation_and_test_are_disjoint_and_balanced() -> None:
    train, val, test = (set(task_seeds(s, 60)) for s in ("train", "validation", "test"))
    assert not train & val and not train & test and not val & test
    for split, seeds in (("validation", val), ("test", test)):
        assert {scenario(s).task.split for s in sorted(seeds)[:2]} == {split}
        families = [family_of(s) for s in sorted(seeds)]
        assert all(families.count(f) == 12 for f in FAMILIES)  # 60 = 12 of each family
