"""The report rubric and its probes, human ratings as rewards, the data platform's arguments."""

from __future__ import annotations

import math

import pytest

from transferlab.simulator.ops.data_platform import DataPlatform, ToolError, parse_action, parse_window
from transferlab.simulator.ops.env import ExpertAgent, OpsAnalysisEnv, run_episode
from transferlab.simulator.ops.grader import (
    human_report_reward,
    mentions,
    report_subject,
    rubric_human_agreement,
    rubric_score,
)
from transferlab.simulator.ops.scenarios import scenario


@pytest.fixture(scope="module")
def competitor_task_and_report() -> tuple[object, str]:
    env = OpsAnalysisEnv(n_tasks=1)
    ep = run_episode(env, ExpertAgent(), options={"task_id": "ops-0001"})
    return env.task, parse_action(ep["actions"][-1]).args["text"]


def test_keyword_stuffing_scores_low(competitor_task_and_report: tuple[object, str]) -> None:
    task, expert = competitor_task_and_report
    stuffed = "Causes: stock-out, competitor price cut, failed campaign, seasonality, late deliveries."
    assert rubric_score(task, stuffed).total == 0.0  # type: ignore[arg-type]
    numbers = " ".join(f"{e.name} {e.values[0]}" for e in task.evidence)  # type: ignore[attr-defined]
    assert rubric_score(task, stuffed + " " + numbers).total <= 3.0  # type: ignore[arg-type]
    assert rubric_score(task, expert).total == 10.0  # type: ignore[arg-type]


def test_right_cause_without_numbers_scores_lower_than_with(
    competitor_task_and_report: tuple[object, str],
) -> None:
    task, expert = competitor_task_and_report
    bare = rubric_score(task, "The competitor price cut explains the drop.")  # type: ignore[arg-type]
    full = rubric_score(task, expert)  # type: ignore[arg-type]
    assert bare.named == ("competitor_price_cut",) and bare.components["evidence_cited"] == 0.0
    assert bare.total == 6.0 < full.total


def test_wrong_cause_and_negations() -> None:
    task = scenario(1).task  # competitor_price_cut
    wrong = rubric_score(task, "A stock-out: 21 stock-out days.")
    assert wrong.blamed_absent == ("stock_out",) and wrong.total == 0.0
    said = mentions("No stock-out. Competitor prices were cut by a competitor price cut; 缺货 没有")
    assert said["stock_out"] == "ruled_out" and said["competitor_price_cut"] == "blamed"


def test_human_ratings_as_final_reward_and_agreement() -> None:
    subject = report_subject("ops-0001", "report text")
    assert subject.startswith("ops:ops-0001:") and subject == report_subject("ops-0001", "report text")
    ratings = [(subject, 0.8), (subject, 0.6), ("ops:other:0", 0.1)]  # ratings_as_rewards' form
    assert human_report_reward(ratings, subject) == pytest.approx(14.0)  # 2 x mean 7/10
    assert human_report_reward(ratings, "ops:none:0") is None
    agree = rubric_human_agreement([10, 6, 1, 0], [9, 7, 2, 1])
    assert agree.spearman == pytest.approx(1.0) and agree.mean_abs_diff == pytest.approx(1.0) and agree.n == 4
    assert math.isnan(rubric_human_agreement([5, 5], [1, 2]).spearman)
    with pytest.raises(ValueError, match="human scores"):
        rubric_human_agreement([1, 2], [1])


def test_human_scorer_replaces_the_rubric() -> None:
    env = OpsAnalysisEnv(n_tasks=1, report_scorer=lambda task, report: 7.0)
    ep = run_episode(env, ExpertAgent(), options={"task_id": "ops-0001"})
    assert ep["info"]["components"]["report_score"] == 14.0


def test_platform_aliases_and_windows() -> None:
    data = DataPlatform(scenario(1))
    cat = scenario(1).task.category
    zh = {"shoes": "鞋", "womenswear": "女装", "menswear": "男装", "accessories": "配饰"}[cat]
    a = data.call(parse_action(f'{{"action": "query_sales_data", "category": "{zh}", "time": "近30天"}}'))
    b = data.call(
        parse_action(f'{{"action": "query_sales_data", "category": "{cat}", "window": "last 30 days"}}')
    )
    assert a == b and "orders_change_pct:" in a
    assert parse_window("4 weeks") == 28 and parse_window("7d") == 7 and parse_window(None) == 30
    for bad in ("forever", "90 days"):
        with pytest.raises(ToolError):
            parse_window(bad)
    with pytest.raises(ToolError, match="filter"):
        data.call(parse_action('{"action": "analyze_user_feedback", "filter": "sparkly"}'))
    assert "womenswear_competitor_index" in data.call(
        parse_action('{"action": "competitor_analysis", "platform": "天猫"}')
    )
