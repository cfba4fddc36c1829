"""The one-process-per-customer reference world is the same model as the vector world.

They draw from different random streams (Python's ``random`` per customer vs numpy over arrays), so
they are compared in distribution: shop-level rates pooled over a few seeds, with and without a
campaign. A mechanism missing from one of them (an offer's pull, returns, the push's reach) moves
one of these rates by far more than the tolerances; seed-to-seed noise (mostly which customers the
Gamma prior draws) stays well inside them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transferlab.simulator.reference_world import EVENT_COLUMNS, ReferenceWorld, _geometric
from transferlab.simulator.vocabulary import NOOP, OBS_KEYS, CampaignAction
from transferlab.simulator.world import MarketWorld
from transferlab.simulator.world_config import CustomerPrior, WorldConfig

# close to the CDNOW fit; explicit, so the comparison does not depend on the data file
PRIOR = CustomerPrior(r=0.243, alpha_days=30.9, a=0.793, b=2.426, spend_log_mu=3.2, spend_log_sigma=0.8)
CAMPAIGN = CampaignAction(discount=0.2, push_hour=20, segment="all", budget=10.0)  # 500 pushes
SEEDS, DAYS = range(5), 45
World = type[MarketWorld] | type[ReferenceWorld]


def rates(cls: World, campaign: bool) -> dict[str, float]:
    """Shop-level rates pooled over SEEDS: 1,000 customers (5x CDNOW's rate), a campaign every 3rd day."""
    per_seed = []
    for seed in SEEDS:
        world = cls(WorldConfig(n_customers=1000, seed=seed, rate_scale=5.0), prior=PRIOR)
        for day in range(DAYS):
            world.step(CAMPAIGN if campaign and day % 3 == 0 else NOOP)
        per_seed.append(world.daily_frame().sum())
    total = sum(per_seed[1:], per_seed[0])
    return {
        "orders_per_day": total["orders"] / (len(SEEDS) * DAYS),
        "gmv_per_order": total["gmv"] / total["orders"],
        "return_rate": total["returns"] / total["orders"],
        "late_rate": total["late_deliveries"] / total["orders"],
        "discount_share": total["discount_cost"] / (total["gmv"] + total["discount_cost"]),
        "pushes": total["pushes"] / len(SEEDS),
    }


@pytest.fixture(scope="module")
def both() -> dict[tuple[str, bool], dict[str, float]]:
    return {
        (cls.__name__, campaign): rates(cls, campaign)
        for cls in (MarketWorld, ReferenceWorld)
        for campaign in (False, True)
    }


@pytest.mark.parametrize("campaign", [False, True], ids=["no campaign", "campaign every 3rd day"])
def test_the_two_implementations_agree_in_distribution(
    both: dict[tuple[str, bool], dict[str, float]], campaign: bool
) -> None:
    vec, ref = both["MarketWorld", campaign], both["ReferenceWorld", campaign]
    assert ref["orders_per_day"] == pytest.approx(vec["orders_per_day"], rel=0.1)
    assert ref["gmv_per_order"] == pytest.approx(vec["gmv_per_order"], rel=0.08)
    assert ref["return_rate"] == pytest.approx(vec["return_rate"], abs=0.02)
    assert ref["late_rate"] == pytest.approx(vec["late_rate"], abs=0.02)
    assert ref["discount_share"] == pytest.approx(vec["discount_share"], abs=0.02)
    assert ref["pushes"] == vec["pushes"]  # the budget's reach: 500 per campaign day, everyone subscribed


def test_a_campaign_moves_both_worlds_the_same_way(both: dict[tuple[str, bool], dict[str, float]]) -> None:
    def uplift(name: str, key: str) -> float:
        return both[name, True][key] / both[name, False][key]

    assert uplift("MarketWorld", "orders_per_day") > 1.3  # offers sell: the comparison has a signal
    assert uplift("ReferenceWorld", "orders_per_day") == pytest.approx(
        uplift("MarketWorld", "orders_per_day"), rel=0.1
    )
    assert both["ReferenceWorld", True]["discount_share"] > 0.1  # discounts apply to pushed buyers


def test_the_reference_keeps_the_world_api() -> None:
    world = ReferenceWorld(WorldConfig(n_customers=300, seed=2, rate_scale=5.0), prior=PRIOR)
    assert world.launch(NOOP) is None and world.launch(CampaignAction(0.3, 12, "loyal", 1.0)) == 0
    report = world.advance(2)
    assert world.day == 2 and report.day == 1 and world.history[0].pushes == 50
    assert set(world.observe()) == {"day", *OBS_KEYS}
    world.advance(40)
    record = world.campaigns[0]
    assert record.matured and record.matured_day == 30 and record.result()["result"]["orders"] >= 0
    assert record.retention_known[30] and not record.retention_known[60]
    events = world.event_frame()
    assert tuple(events.columns) == EVENT_COLUMNS
    assert {"push", "purchase", "delivery", "return"} <= set(events["event"])
    assert events["t"].is_monotonic_increasing


def test_same_seed_same_reference_world() -> None:
    def run() -> ReferenceWorld:
        world = ReferenceWorld(WorldConfig(n_customers=200, seed=7, rate_scale=5.0), prior=PRIOR)
        for day in range(20):
            world.step(CAMPAIGN if day % 5 == 0 else NOOP)
        return world

    a, b = run(), run()
    assert a.daily_frame().equals(b.daily_frame()) and a.event_frame().equals(b.event_frame())


def test_geometric_draws_match_numpy() -> None:
    import random

    rng = random.Random(0)
    draws = np.array([_geometric(rng, 0.6) for _ in range(20_000)])
    assert draws.min() == 1
    assert draws.mean() == pytest.approx(1 / 0.6, rel=0.03)
    assert np.mean(draws == 1) == pytest.approx(0.6, abs=0.015)
    assert math.isclose(np.mean(draws == 2), 0.24, abs_tol=0.015)
