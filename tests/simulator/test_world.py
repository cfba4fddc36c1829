"""The ground-truth world: determinism, calibration to its prior, and each mechanism's direction."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from transferlab.simulator.vocabulary import OBS_KEYS, CampaignAction
from transferlab.simulator.world import MarketWorld
from transferlab.simulator.world_config import CustomerPrior, WorldConfig


def run(world: MarketWorld, days: int, action: CampaignAction | None = None, every: int = 1) -> MarketWorld:
    for d in range(days):
        if action is not None and d % every == 0:
            world.launch(action)
        world.advance()
    return world


def test_same_seed_same_world_and_a_different_seed_differs() -> None:
    a = run(MarketWorld(WorldConfig(n_customers=300, seed=4)), 40, CampaignAction(0.1, 20, "all", 3.0), 5)
    b = run(MarketWorld(WorldConfig(n_customers=300, seed=4)), 40, CampaignAction(0.1, 20, "all", 3.0), 5)
    c = run(MarketWorld(WorldConfig(n_customers=300, seed=5)), 40, CampaignAction(0.1, 20, "all", 3.0), 5)
    assert a.daily_frame().equals(b.daily_frame()) and a.event_frame().equals(b.event_frame())
    assert not a.daily_frame().equals(c.daily_frame())


def test_the_calendar_is_in_days_and_the_observation_hides_the_traits() -> None:
    world = MarketWorld(WorldConfig(n_customers=100, seed=0))
    world.advance(3)
    assert world.day == 3 and world.env.now == pytest.approx(3.0)
    assert set(world.observe()) == {"day", *OBS_KEYS}
    assert list(world.customer_frame().columns) == ["customer", "segment"]


def test_baseline_purchases_follow_the_cdnow_prior_rate() -> None:
    # no campaigns: orders per customer-day are the prior's mean rate r/alpha, lowered by recency
    # suppression (< 1) and by dropouts; over the first 30 days they stay within [0.5, 1.1] of it
    prior = CustomerPrior.from_cdnow()
    world = run(MarketWorld(WorldConfig(n_customers=20_000, seed=1)), 30)
    per_customer_day = world.daily_frame()["orders"].sum() / (20_000 * 30)
    assert 0.5 < per_customer_day / (prior.r / prior.alpha_days) < 1.1


def totals(action: CampaignAction | None, seeds: range, every: int = 7, **cfg: Any) -> dict[str, float]:
    frames = [
        run(MarketWorld(WorldConfig(n_customers=2000, seed=s, **cfg)), 60, action, every).daily_frame()
        for s in seeds
    ]
    return {k: float(np.mean([f[k].sum() for f in frames])) for k in frames[0].columns}


def test_a_campaign_sells_more_and_a_deeper_discount_costs_margin() -> None:
    seeds = range(3)
    none = totals(None, seeds)
    mild = totals(CampaignAction(0.05, 21, "bargain", 10.0), seeds)
    deep = totals(CampaignAction(0.3, 21, "bargain", 10.0), seeds)
    assert mild["orders"] > 1.1 * none["orders"]
    assert deep["orders"] > mild["orders"]
    assert deep["profit"] / deep["orders"] < mild["profit"] / mild["orders"]  # GMV up, margin down
    assert deep["discount_cost"] > 3 * mild["discount_cost"]


def test_pushing_everyone_every_day_wears_customers_out() -> None:
    world = run(MarketWorld(WorldConfig(n_customers=2000, seed=2)), 60, CampaignAction(0.1, 20, "all", 100.0))
    assert world.customers.subscribed.mean() < 0.8  # unsubscribed from fatigue
    pushes = world.daily_frame()["pushes"].to_numpy()
    assert pushes[-1] < pushes[0]  # fewer subscribers left to reach


def test_a_tiny_stock_runs_out_and_late_deliveries_bring_complaints() -> None:
    full = totals(None, range(2))
    short = totals(None, range(2), stock_days=0.5, reorder_days=0.0, lead_time_days=(20, 25))
    assert short["stockouts"] > 10 * max(full["stockouts"], 1.0)
    assert short["late_deliveries"] > 2 * full["late_deliveries"]
    assert short["complaints"] > full["complaints"]


def test_returns_come_7_to_21_days_after_delivery() -> None:
    world = run(
        MarketWorld(WorldConfig(n_customers=3000, seed=3)), 60, CampaignAction(0.3, 20, "all", 60.0), 5
    )
    events = world.event_frame()
    returns = events[events.event == "return"]
    assert len(returns) > 20
    first_delivery = events[events.event == "delivery"].groupby("customer")["day"].min()
    gaps = returns["day"].to_numpy() - first_delivery.reindex(returns["customer"]).to_numpy()
    assert gaps.min() >= 7  # a return comes at least 7 days after that customer's first delivery


def test_outcomes_are_unknown_until_they_mature_then_retention_follows() -> None:
    world = MarketWorld(WorldConfig(n_customers=2000, seed=5))
    cid = world.launch(CampaignAction(0.2, 20, "all", 10.0))
    assert cid == 0
    world.advance(29)
    record = world.campaigns[0]
    assert not record.matured and record.result()["result"] is None
    world.advance(2)
    assert record.matured and record.matured_day == 30
    result = record.result()["result"]
    assert result["orders"] > 0 and 0.0 <= result["satisfaction"] <= 1.0
    assert "retention_30" in result and "retention_60" not in result
    world.advance(60)
    o = record.outcome
    assert all(record.retention_known.values())
    assert o["retention_30"] <= o["retention_60"] <= o["retention_90"]


def test_bad_world_config_is_rejected_before_anything_runs() -> None:
    from transferlab.platform.config import ConfigError

    with pytest.raises(ConfigError, match="n_customers"):
        WorldConfig.build(n_customers=0)
    with pytest.raises(ConfigError, match="push_cost"):
        WorldConfig.build(push_cost=-1.0)


def test_a_fork_keeps_the_past_and_pending_events_and_has_its_own_future() -> None:
    world = run(
        MarketWorld(WorldConfig(n_customers=1500, seed=8)), 20, CampaignAction(0.3, 20, "all", 60.0), 3
    )
    pending = len(world._pending)
    a, b, c = world.fork(seed=1), world.fork(seed=1), world.fork(seed=2)
    assert len(a._pending) == pending > 0
    assert (
        a.daily_frame().equals(world.daily_frame()) and a.campaigns[0].outcome == world.campaigns[0].outcome
    )
    for w in (a, b, c):
        w.advance(30)
    assert a.daily_frame().equals(b.daily_frame())  # same seed, same future
    assert not a.daily_frame().equals(c.daily_frame())
    assert a.campaigns[-1].matured  # maturity events scheduled before the fork fired after it
    assert world.day == 20 and not world.campaigns[-1].matured  # the original did not move
    assert a.daily_frame()["returns"].iloc[20:].sum() > 0
    world.env.run(until=20.5)
    with pytest.raises(RuntimeError, match="day boundary"):
        world.fork(seed=3)


def test_order_values_and_inter_purchase_times_match_cdnow() -> None:
    # the CDNOW sample (cdnow_prior.json): order value mean $36.0 / median $26.1, days between one
    # customer's purchases mean 46.0 / median 27; the world without campaigns over CDNOW's 39 weeks
    import json
    from importlib import resources

    cdnow = json.loads(
        resources.files("transferlab.simulator").joinpath("data", "cdnow_prior.json").read_text()
    )
    world = run(MarketWorld(WorldConfig(n_customers=5000, seed=4)), 273)
    events = world.event_frame()
    bought = events[events.event == "purchase"].drop_duplicates(["customer", "day"])  # one a day, as CDNOW
    gaps = bought.sort_values(["customer", "day"]).groupby("customer")["day"].diff().dropna()
    assert bought["list_value"].mean() == pytest.approx(cdnow["spend_mean"], rel=0.15)
    assert bought["list_value"].median() == pytest.approx(cdnow["spend_median"], rel=0.15)
    assert gaps.mean() == pytest.approx(cdnow["inter_purchase_days_mean"], rel=0.2)
    assert gaps.median() == pytest.approx(cdnow["inter_purchase_days_median"], rel=0.25)
