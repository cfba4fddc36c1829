"""The report rubric and its probes, human ratings as rewards, the data platform's arguments."""

from __future__ import annotations

import math

import pytest

from transferlab.simulator.ops.data_platform import DataPlatform, ToolError, parse_action, parse_window
from transferlab.simulator.ops.env import ExpertAgent, OpsAnalysisEnv, run_episode
from transferlab.simulator.ops.grader import (
    NOTHING_RETRIEVED,
    Retrieved,
    human_report_reward,
    mentions,
    report_subject,
    rubric_human_agreement,
    rubric_score,
)
from transferlab.simulator.ops.scenarios import OpsTask, scenario


@pytest.fixture(scope="module")
def competitor_task_and_report() -> tuple[OpsTask, str, Retrieved]:
    env = OpsAnalysisEnv(n_tasks=1)
    ep = run_episode(env, ExpertAgent(), options={"task_id": "ops-0001"})
    retrieved = Retrieved.from_texts(ep["observations"][:-1])
    return env.task, parse_action(ep["actions"][-1]).args["text"], retrieved


def test_keyword_stuffing_scores_low(competitor_task_and_report: tuple[OpsTask, str, Retrieved]) -> None:
    task, expert, retrieved = competitor_task_and_report
    stuffed = "Causes: stock-out, competitor price cut, failed campaign, seasonality, late deliveries."
    assert rubric_score(task, stuffed, retrieved).total == 0.0
    numbers = " ".join(f"{e.name} {e.values[0]}" for e in task.evidence)
    assert rubric_score(task, stuffed + " " + numbers, retrieved).total == 0.0
    assert rubric_score(task, expert, retrieved).total == 10.0


def test_right_cause_without_numbers_scores_lower_than_with(
    competitor_task_and_report: tuple[OpsTask, str, Retrieved],
) -> None:
    task, expert, retrieved = competitor_task_and_report
    bare = rubric_score(task, "The competitor price cut explains the drop.", retrieved)
    full = rubric_score(task, expert, retrieved)
    assert bare.named == ("competitor_price_cut",) and bare.components["evidence_cited"] == 0.0
    assert bare.total == 6.0 < full.total


def test_evidence_counts_only_when_retrieved_and_cited_with_its_metric(
    competitor_task_and_report: tuple[OpsTask, str, Retrieved],
) -> None:
    task, expert, retrieved = competitor_task_and_report
    # the same report without the episode's data: nothing cited, every number unsupported
    alone = rubric_score(task, expert)
    assert alone.components["evidence_cited"] == 0.0 and alone.unsupported and alone.total < 8.0
    index = next(e for e in task.evidence if e.name == "competitor_index").values[0]
    change = next(e for e in task.evidence if e.name == "orders_change_pct").values[0]
    cause = "Cause: a competitor price cut."
    with_metric = f"{cause} Orders changed {change}%. The competitor index fell to {index}."
    without = f"{cause} Orders changed {change}%. It fell to {index}."
    got = rubric_score(task, with_metric, retrieved).components["evidence_cited"]
    assert got > rubric_score(task, without, retrieved).components["evidence_cited"] > 0.0
    # a number near the truth that no tool returned is not evidence, and costs a point
    nearby = (f"{change + d:.1f}" for d in (-0.8, 0.8, -0.9, 0.9))
    near = next(x for x in nearby if not retrieved.supports(x))
    wrong = rubric_score(task, f"{cause} Orders changed {near}%.", retrieved)
    assert wrong.components["evidence_cited"] == 0.0 and wrong.components["unsupported_numbers"] == -1.0


def test_a_spray_of_numbers_loses(competitor_task_and_report: tuple[OpsTask, str, Retrieved]) -> None:
    task, _, retrieved = competitor_task_and_report
    spray = " ".join(str(n) for n in range(3, 100, 6)) + " 0.64 50"
    report = f"Cause: a competitor price cut. Orders, competitor index: {spray}."
    assert rubric_score(task, report, NOTHING_RETRIEVED).total == 0.0
    assert rubric_score(task, report, retrieved).total < 8.0
    assert rubric_score(task, report, retrieved).components["unsupported_numbers"] <= -5.0


def test_wrong_cause_and_negations() -> None:
    task = scenario(1).task  # competitor_price_cut
    wrong = rubric_score(task, "The cause is a stock-out: 21 stock-out days.")
    assert wrong.blamed_absent == ("stock_out",) and wrong.total == 0.0
    said = mentions("No stock-out. Prices were cut: the cause is a competitor price cut; 缺货 没有")
    assert said["stock_out"] == "ruled_out" and said["competitor_price_cut"] == "blamed"


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("I also looked at campaigns: nothing unusual.", "ruled_out"),
        ("Campaigns were checked and were not the cause.", "ruled_out"),
        ("The campaign didn't explain it.", "ruled_out"),
        ("I checked campaign_analysis.", "mentioned"),
        ("campaigns in the last 60 days (margin = paid - cost of goods - push cost)", "mentioned"),
        ("Sales fell because of a failed campaign.", "blamed"),
        ("The drop was due to a deep discount campaign.", "blamed"),
        ("原因是促销活动失败。", "blamed"),
        ("Cause: a failed campaign, not a stock-out.", "blamed"),
    ],
)
def test_blame_needs_an_assertion_and_a_negation_clears(text: str, verdict: str) -> None:
    assert mentions(text)["failed_campaign"] == verdict


def test_an_honest_report_that_clears_a_cause_still_passes(
    competitor_task_and_report: tuple[OpsTask, str, Retrieved],
) -> None:
    task, expert, retrieved = competitor_task_and_report
    more = expert + " I also looked at campaigns: nothing unusual."
    assert rubric_score(task, more, retrieved).total == 10.0


def test_retrieved_numbers_round_at_the_precision_written() -> None:
    got = Retrieved.from_texts(["orders_change_pct: -27.3\ncompetitor_index: 0.62", "tool error: 999 days"])
    assert got.supports("-27.3") and got.supports("27") and got.supports("0.6") and got.supports("0.62")
    assert not got.supports("27.4") and not got.supports("28") and not got.supports("999")


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
    env = OpsAnalysisEnv(n_tasks=1, report_scorer=lambda task, report, retrieved: 7.0)
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
