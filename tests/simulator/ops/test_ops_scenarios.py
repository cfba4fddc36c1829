"""The shipping_delays and seasonality families: clean worlds, their evidence on the platform, grading."""

from __future__ import annotations

import pytest

from transferlab.simulator.ops.data_platform import DataPlatform, ToolError, parse_action, parse_fields
from transferlab.simulator.ops.env import ExpertAgent, OpsAnalysisEnv, run_episode
from transferlab.simulator.ops.grader import rubric_score
from transferlab.simulator.ops.scenarios import (
    ALL_CAUSES,
    DROPPED_FAMILIES,
    FAMILIES,
    RELATED,
    Scenario,
    _clean,
    scenario,
    window_sales,
)
from transferlab.simulator.vocabulary import CATEGORIES

SHIPPING, SEASONAL = 3, 4  # ops-0003 and ops-0004


def query(s: Scenario, **args: str) -> dict[str, str]:
    text = DataPlatform(s).call(parse_action(__import__("json").dumps(args)))
    return parse_fields(text)


def test_every_cause_is_a_family_and_related_causes_are_coherent() -> None:
    assert set(FAMILIES) == set(ALL_CAUSES) and not DROPPED_FAMILIES
    assert {"shipping_delays", "seasonality"} <= set(FAMILIES)
    assert RELATED == {"stock_out": ("shipping_delays",)}  # backorders ship late; not the converse
    assert scenario(SHIPPING).task.absent == (
        "stock_out",
        "competitor_price_cut",
        "failed_campaign",
        "seasonality",
    )


def test_shipping_delays_scenario_is_clean_and_late_deliveries_rise_without_a_stock_out() -> None:
    s = scenario(SHIPPING)
    t = s.task
    assert t.family == "shipping_delays" and t.causes == ("shipping_delays",) and _clean(s)
    assert window_sales(s.events, t.category, t.days, t.window)["orders_change_pct"] <= -5.0
    fb = query(s, action="analyze_user_feedback", filter="negative", category=t.category)
    assert int(fb["late_deliveries"]) > 3 * int(fb["late_deliveries_prev"]) + 10
    assert int(fb["delivery_complaints"]) > 2 * int(fb["delivery_complaints_prev"])
    assert float(fb["late_delivery_rate_pct"]) >= 15.0
    assert query(s, action="check_inventory", category=t.category)["stock_out_days"] == "0"
    shop = query(s, action="analyze_user_feedback", filter="投诉")  # every category, side by side
    mine = int(shop[f"{t.category}_delivery_complaints"])
    assert all(mine > int(shop[f"{c}_delivery_complaints"]) for c in CATEGORIES if c != t.category)


def test_seasonality_scenario_is_clean_and_last_year_dipped_too() -> None:
    s = scenario(SEASONAL)
    t = s.task
    assert t.family == "seasonality" and _clean(s) and t.days >= 365 + 2 * t.window
    yoy = query(s, action="query_sales_data", category=t.category, compare="last_year")
    assert float(yoy["orders_change_pct"]) <= -5.0 and float(yoy["last_year_orders_change_pct"]) <= -5.0
    assert query(s, action="check_inventory", category=t.category)["stock_out_days"] == "0"
    assert float(query(s, action="competitor_analysis", category=t.category)["competitor_change_pct"]) > -15
    fb = query(s, action="analyze_user_feedback", filter="negative", category=t.category)
    assert float(fb["late_delivery_rate_pct"]) < 15.0
    truth = [r for r in s.truth if r.get("injected")]
    assert truth[0]["cause"] == "seasonality" and 0.4 <= truth[0]["amplitude"] <= 0.5


def test_other_families_show_no_seasonal_dip_last_year() -> None:
    s = scenario(1)  # competitor_price_cut: last year's same window is ordinary
    yoy = query(s, action="query_sales_data", category=s.task.category, compare="yoy")
    assert float(yoy["last_year_orders_change_pct"]) > -5.0


def test_compare_argument_and_its_errors() -> None:
    s = scenario(SEASONAL)
    cat = s.task.category
    plain = query(s, action="query_sales_data", category=cat)
    assert "last_year_orders" not in plain
    assert query(s, action="query_sales_data", category=cat, compare="previous") == plain
    assert query(s, action="query_sales_data", category=cat, compare="去年") == query(
        s, action="query_sales_data", category=cat, compare="last year"
    )
    with pytest.raises(ToolError, match="unknown compare 'next decade'"):
        query(s, action="query_sales_data", category=cat, compare="next decade")
    short = Scenario(
        s.task.__class__(**{**s.task.__dict__, "days": 200}), s.events, s.market, s.campaigns, s.truth
    )
    with pytest.raises(ToolError, match="holds 200 days"):
        query(short, action="query_sales_data", category=cat, compare="last_year")


@pytest.mark.parametrize("seed", [SHIPPING, SEASONAL])
def test_new_families_grade_the_expert_ten_and_keyword_stuffing_zero(seed: int) -> None:
    env = OpsAnalysisEnv(n_tasks=1)
    ep = run_episode(env, ExpertAgent(), options={"task_id": f"ops-{seed:04d}"})
    report = parse_action(ep["actions"][-1]).args["text"]
    assert ep["info"]["report_score"] == 10.0, report
    assert ep["info"]["components"]["check_before_report"] == 1.0
    stuffed = "Causes: stock-out, competitor price cut, failed campaign, seasonality, late deliveries."
    assert rubric_score(env.task, stuffed).total == 0.0
    numbers = " ".join(f"{e.name} {e.values[0]}" for e in env.task.evidence)
    assert rubric_score(env.task, stuffed + " " + numbers).total == 0.0
    cause = "shipping delays" if env.task.family == "shipping_delays" else "seasonality"
    bare = rubric_score(env.task, f"The drop is due to {cause}.")
    assert bare.total == 6.0  # named, no numbers
