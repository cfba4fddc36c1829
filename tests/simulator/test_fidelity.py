"""Fidelity: a market compared with itself agrees; a market with broken campaign response does not."""

from __future__ import annotations

import numpy as np
import pytest

from transferlab.simulator.envs.campaign import EpisodeConfig, WorldMarket
from transferlab.simulator.fidelity import (
    RARE_SHARE,
    MarketFactory,
    PanelResult,
    compare,
    evaluate_panel,
    fidelity,
    logged_share,
)
from transferlab.simulator.policies import NoCampaign, Schedule, policy_panel
from transferlab.simulator.vocabulary import CATALOG, CampaignAction
from transferlab.simulator.world_config import WorldConfig

EPISODE = EpisodeConfig.build(horizon=20, warmup_days=7, settle_days=14)


def world(**overrides: float) -> MarketFactory:
    return lambda n, seed: WorldMarket(WorldConfig(n_customers=1000, seed=seed, **overrides), n_envs=n)


@pytest.fixture(scope="module")
def truth() -> PanelResult:
    return evaluate_panel(world(), policy_panel(), episodes=6, seed=1, episode=EPISODE)


def test_the_world_against_itself_ranks_policies_alike(truth: PanelResult) -> None:
    fid = fidelity(world(), world(), episodes=6, seed=0, episode=EPISODE, world_result=truth)
    assert fid.kendall_tau > 0.4 and fid.kendall_p < 0.05  # 6 noisy episodes per policy
    assert fid.summary()["median_abs_rel_error"]["orders"] < 0.1
    assert set(fid.table["policy"]) == set(policy_panel()) and len(fid.table) >= 10


def test_a_market_where_offers_do_nothing_ranks_policies_differently(truth: PanelResult) -> None:
    # campaigns cost money but sell nothing: every campaign policy looks worse than doing nothing
    dead = fidelity(
        world(max_uplift=1.0001, promo_reach_rate=0.0),
        world(),
        episodes=6,
        seed=0,
        episode=EPISODE,
        world_result=truth,
    )
    same = fidelity(world(), world(), episodes=6, seed=0, episode=EPISODE, world_result=truth)
    assert dead.kendall_tau < same.kendall_tau
    row = dead.table.set_index("policy").loc["every3_bargain_5"]
    assert row["err_orders"] < -0.05  # the dead market under-predicts what the campaign sells


def test_held_out_actions_are_those_the_logs_rarely_took() -> None:
    counts = np.zeros(len(CATALOG))
    action = CampaignAction(0.1, 20, "bargain", 20.0)
    counts[0], counts[CATALOG.index(action)] = 990, 10
    assert logged_share(Schedule(7, action), counts) == pytest.approx(0.01)
    assert logged_share(NoCampaign(), counts) is None
    assert logged_share(Schedule(7, CampaignAction(0.3, 9, "premium", 60.0)), counts) == 0.0 < RARE_SHARE
    assert callable(compare)


def _panel(returns: dict[str, np.ndarray]) -> PanelResult:
    return PanelResult({}, {}, {}, returns)


def test_the_noise_ceiling_is_high_for_a_known_ranking_and_low_for_ties() -> None:
    from transferlab.simulator.fidelity import noise_ceiling, ranking_agreement

    rng = np.random.default_rng(0)
    # five policies 1 apart, episode noise sd 0.5, 40 episodes: each half's means keep the order
    ranked = _panel({f"p{k}": k + rng.normal(0, 0.5, 40) for k in range(5)})
    tau, _ = ranking_agreement(ranked, ranked, n_boot=200)
    ceiling, ceiling_ci = noise_ceiling(ranked, n_boot=200)
    assert tau == pytest.approx(1.0) and ceiling == pytest.approx(1.0) and ceiling_ci[0] > 0.5
    # five policies of the same value: the halves order them by noise, the ceiling is near 0
    ties = _panel({f"p{k}": rng.normal(0, 0.5, 40) for k in range(5)})
    _, low_ci = noise_ceiling(ties, n_boot=200)
    assert low_ci[0] < 0 < low_ci[1]
    # a simulator that reverses the order: tau -1, whatever the ceiling
    reversed_sim = _panel({f"p{k}": -k + rng.normal(0, 0.5, 40) for k in range(5)})
    tau, tau_ci = ranking_agreement(reversed_sim, ranked, n_boot=200)
    assert tau == pytest.approx(-1.0) and tau_ci[1] < 0
    with pytest.raises(ValueError, match="at least 4 world episodes"):
        noise_ceiling(_panel({"a": np.ones(3)}))


def test_the_evaluation_panel_shares_no_policy_with_the_calibration_panel() -> None:
    from transferlab.simulator.fidelity_report import check_disjoint
    from transferlab.simulator.policies import evaluation_panel

    cal, ev = policy_panel(), evaluation_panel()
    assert len(ev) >= 20 and not set(cal) & set(ev)
    assert not [p for p in ev.values() if any(p == q for q in cal.values())]
    check_disjoint(cal, ev)  # no error
    with pytest.raises(ValueError, match="share weekly_all_5"):
        check_disjoint(cal, {**ev, "weekly_all_5": cal["weekly_all_5"]})
    with pytest.raises(ValueError, match="copy = weekly_all_5"):
        check_disjoint(cal, {**ev, "copy": cal["weekly_all_5"]})
