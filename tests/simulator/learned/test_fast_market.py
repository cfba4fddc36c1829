"""The batched simulated market: shapes, determinism, the compiled loop equals the tables, pushes and
budgets, campaign attribution, and daily orders close to the world's under the marketer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from transferlab.simulator.behaviour import MarketerPolicy
from transferlab.simulator.learned import LearnedSimulator, SimMarket, SimParams
from transferlab.simulator.learned.features import EXO_COLUMNS, NEVER, K, Panel
from transferlab.simulator.learned.fit import compiled_logit
from transferlab.simulator.logs import Logs, LogSpec, run_behaviour_policy
from transferlab.simulator.vocabulary import (
    CATALOG,
    DAY_KEYS,
    OBS_KEYS,
    OUTCOME_KEYS,
    CampaignAction,
    catalog_index,
)

from .conftest import LOG_DAYS, WORLD

DAY = {k: i for i, k in enumerate(DAY_KEYS)}
OUT = {k: i for i, k in enumerate(OUTCOME_KEYS)}


def _random_actions(rng: np.random.Generator, days: int, n_envs: int) -> np.ndarray:
    return rng.integers(0, len(CATALOG), (days, n_envs))


def test_shapes_day_and_observation(sim: LearnedSimulator) -> None:
    market = sim.market(n_envs=3, n_customers=200, seed=0)
    obs = market.reset(seed=5)
    assert obs.shape == (3, len(OBS_KEYS)) and market.day == 0
    assert (obs[:, 0] == int(sim.params.start_weekday)).all()
    assert np.allclose(obs[:, OBS_KEYS.index("orders_7d")], sim.params.history[:, DAY["orders"]].sum() * 200)
    out = market.step(np.array([0, 5, 150]))
    assert out.shape == (3, len(DAY_KEYS)) and market.day == 1
    after = market.observe()
    assert (after[:, 0] == (obs[:, 0] + 1) % 7).all()
    assert ((after[:, 7:9] >= 0) & (after[:, 7:9] <= 1)).all()  # active_90d, subscribed are shares
    exo = after[:, 9:]
    assert exo.shape == (3, 2 * K) and ((exo[:, K:] > 0.5) & (exo[:, K:] < 1.5)).all()


def test_same_seed_same_result_different_seed_different(sim: LearnedSimulator) -> None:
    actions = _random_actions(np.random.default_rng(0), 20, 4)

    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        market = sim.market(n_envs=4, n_customers=300, seed=seed)
        out = np.stack([market.step(a) for a in actions])
        return out, market.campaign_outcomes().outcomes

    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    market = sim.market(n_envs=4, n_customers=300, seed=7)
    first = [market.step(x) for x in actions[:5]]
    market.reset(seed=7)
    np.testing.assert_array_equal(first, [market.step(x) for x in actions[:5]])


def test_markets_in_a_batch_are_independent(sim: LearnedSimulator) -> None:
    market = sim.market(n_envs=2, n_customers=300, seed=0)
    out = np.stack([market.step(np.array([0, 131])) for _ in range(10)])
    assert out[:, 0, DAY["pushes"]].sum() == 0 and out[:, 1, DAY["pushes"]].sum() > 0


def test_bad_actions_are_rejected(sim: LearnedSimulator) -> None:
    market = sim.market(n_envs=2, n_customers=50, seed=0)
    for bad in (np.array([0]), np.array([0, 151]), np.array([-1, 0]), np.array([0.0, 1.0])):
        with pytest.raises(ValueError, match="action"):
            market.step(bad)


@pytest.mark.parametrize("fitted", ["sim", "sim_two_channel"])
def test_the_loop_computes_the_compiled_log_odds(fitted: str, request: pytest.FixtureRequest) -> None:
    """``SimMarket.purchase_logit`` (flat indices, bit counts) equals the tables read row by row
    (the offer as log-odds, and as a second purchase channel)."""
    sim: LearnedSimulator = request.getfixturevalue(fitted)
    assert int(sim.params.offer_channel) == (fitted == "sim_two_channel")
    params = dataclasses.replace(sim.params, shock_sd=np.array(0.0))
    market = SimMarket(params, n_envs=3, n_customers=400, seed=3)
    for a in _random_actions(np.random.default_rng(3), 12, 3):
        market.step(a)
    logit = market.purchase_logit().ravel()
    n = logit.size
    exo = params.exo[np.repeat(market._ptr, 400)]
    since = (market.day - market.last).ravel()
    on = market.offer_action.ravel() > 0
    panel = Panel(
        row=np.zeros(n, dtype=np.int64),
        day=np.zeros(n, dtype=np.int64),
        segment=market.seg.ravel(),
        since=np.where(since > 10_000, NEVER, since),
        orders=market.orders.ravel(),
        age=np.minimum(market.age0.ravel() + market.day, float(params.age_cap)),
        weekday=np.full(n, (market.weekday0 + market.day) % 7),
        log_competitor=np.log(exo[:, K:]).mean(axis=1),
        cover=np.zeros(n),
        pushes_7d=np.bitwise_count(market.push_bits.ravel() & np.uint32(127)).astype(np.int64),
        pushes_30d=np.bitwise_count(market.push_bits.ravel()).astype(np.int64),
        offer_age=np.where(on, market.offer_age.ravel(), -1),
        offer_discount=np.zeros(n),
        offer_hour=np.zeros(n, dtype=np.int64),
        offer_action=market.offer_action.ravel(),
        label=np.zeros(n, dtype=bool),
        weight=np.ones(n),
    )
    assert on.any() and (panel.pushes_30d > 0).any() and (panel.orders > 0).any()
    tables = {k: np.asarray(v) for k, v in params.to_arrays().items()}
    np.testing.assert_allclose(logit, compiled_logit(tables, panel), atol=2e-4)
    assert len(EXO_COLUMNS) == 2 * K


def test_reach_is_capped_by_budget_and_subscribers(sim: LearnedSimulator) -> None:
    market = sim.market(n_envs=1, n_customers=2000, seed=0)
    subscribed_loyal = int((market.subscribed & (market.seg == 2)).sum())
    small = catalog_index(CampaignAction(discount=0.1, push_hour=20, segment="all", budget=20.0))
    loyal = catalog_index(CampaignAction(discount=0.1, push_hour=20, segment="loyal", budget=60.0))
    out = market.step(np.array([small]))
    assert out[0, DAY["pushes"]] == 1000  # 20 / 0.02: the budget binds
    assert out[0, DAY["push_cost"]] == pytest.approx(1000 * 0.02)
    out = market.step(np.array([loyal]))
    assert 0 < out[0, DAY["pushes"]] <= subscribed_loyal  # every subscribed loyal customer, no one else
    assert market.step(np.array([0]))[0, DAY["pushes"]] == 0


def test_campaign_outcomes_attribute_orders_and_delayed_events(sim: LearnedSimulator) -> None:
    market = sim.market(n_envs=8, n_customers=1000, seed=4)
    launch = catalog_index(CampaignAction(discount=0.3, push_hour=20, segment="all", budget=60.0))
    total = market.step(np.full(8, launch))
    for _ in range(40):
        total = total + market.step(np.zeros(8, dtype=np.int64))
    result = market.campaign_outcomes()
    frame = result.frame()
    assert len(frame) == 8 and frame["matured"].all() and (frame["day"] == 0).all()
    o = result.outcomes
    assert (o[:, OUT["orders"]] > 0).all() and (o[:, OUT["orders"]] <= total[:, DAY["orders"]]).all()
    assert (o[:, OUT["push_cost"]] == total[:, DAY["push_cost"]]).all()
    assert (o[:, OUT["discount_cost"]] > 0).all()
    assert o[:, OUT["returns"]].sum() > 0 and (o[:, OUT["returns"]] <= o[:, OUT["orders"]]).all()
    assert ((o[:, OUT["satisfaction"]] >= 0) & (o[:, OUT["satisfaction"]] <= 1)).all()
    assert np.isfinite(o[:, OUT["retention_30"]]).all() and np.isnan(o[:, OUT["retention_60"]]).all()
    assert 0.03 < total[:, DAY["returns"]].sum() / total[:, DAY["orders"]].sum() < 0.3


def test_toy_parameters_round_trip_as_arrays() -> None:
    toy = SimParams.toy()
    again = SimParams.from_arrays(toy.to_arrays())
    out_a = SimMarket(toy, 2, 100, seed=1).step(np.array([0, 3]))
    out_b = SimMarket(again, 2, 100, seed=1).step(np.array([0, 3]))
    np.testing.assert_array_equal(out_a, out_b)
    with pytest.raises(ValueError, match="refit"):
        SimParams.from_arrays({"base": toy.base})


def _behaviour_run(market: SimMarket, logs: Logs, days: int, seed: int) -> np.ndarray:
    """Daily outcomes of ``market`` under the marketer, whose sales baseline starts from the logs."""
    policy, rng = MarketerPolicy(), np.random.default_rng(seed)
    weekly = [list(logs.campaigns["ctx_gmv_7d"]) for _ in range(market.n_envs)]
    out = []
    for _ in range(days):
        obs, actions = market.observe(), []
        for e in range(market.n_envs):
            state = dict(zip(OBS_KEYS, obs[e], strict=True))
            index, _, _ = policy.act(state, float(np.mean(weekly[e][-56:])), rng)
            weekly[e].append(state["gmv_7d"])
            actions.append(index)
        out.append(market.step(np.array(actions)))
    return np.stack(out)


def test_daily_orders_under_the_marketer_are_close_to_the_worlds(sim: LearnedSimulator, logs: Logs) -> None:
    days = 60
    world, _ = run_behaviour_policy(LogSpec(days=LOG_DAYS + days, world=WORLD))  # the world goes on
    world_orders = world.daily_frame()["orders"].to_numpy()[LOG_DAYS:]
    market = sim.market(n_envs=16, n_customers=WORLD.n_customers, seed=0)
    sim_out = _behaviour_run(market, logs, days, seed=0)
    assert sim_out[..., DAY["orders"]].mean() == pytest.approx(world_orders.mean(), rel=0.25)
    world_pushes = world.daily_frame()["pushes"].to_numpy()[LOG_DAYS:]
    assert sim_out[..., DAY["pushes"]].mean() == pytest.approx(world_pushes.mean(), rel=0.35)


@pytest.mark.parametrize("module", ["features", "fit", "fast_market", "simulator"])
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"transferlab.simulator.learned.{module}"))
    assert result.failed == 0 and result.attempted > 0
