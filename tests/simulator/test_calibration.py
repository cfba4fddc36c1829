"""Calibration: shifts by hand, a damped simulator corrected toward the world, and the report command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.simulator.calibration import (
    CalibrationError,
    calibrate,
    calibrate_economics,
    deployment_outcomes,
    economics_factors,
    level_shift,
    offer_shifts,
    predict_single_campaigns,
)
from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.learned import LearnedSimulator
from transferlab.simulator.logs import Logs, LogSpec, generate_logs, write_logs
from transferlab.simulator.policies import Schedule
from transferlab.simulator.policy_calibration import RESPONSE_SHIFTS
from transferlab.simulator.vocabulary import CATALOG, CampaignAction, catalog_index
from transferlab.simulator.world_config import WorldConfig

SHORT = EpisodeConfig.build(horizon=14, warmup_days=3, settle_days=7)
ACTION = catalog_index(CampaignAction(0.1, 20, "bargain", 20.0))


@pytest.fixture(scope="module")
def logs() -> Logs:
    return generate_logs(LogSpec(days=120, world=WorldConfig(n_customers=600, seed=11)))


@pytest.fixture(scope="module")
def sim(logs: Logs) -> LearnedSimulator:
    return LearnedSimulator.fit(logs)


def test_shifts_by_hand_and_pooling_by_discount() -> None:
    other = catalog_index(CampaignAction(0.1, 9, "loyal", 60.0))  # same discount, no outcomes
    deep = catalog_index(CampaignAction(0.3, 9, "loyal", 60.0))
    obs = pd.DataFrame({"action_index": [ACTION] * 3, "orders": [10.0, 12.0, 14.0]})
    pred = pd.DataFrame({"action_index": [ACTION] * 2, "orders": [5.0, 7.0]})
    shifts = offer_shifts(obs, pred, shrinkage=1.0)
    # n=3: 3/4 * log((36 + 1) / (6 * 3 + 1))
    assert shifts[ACTION] == pytest.approx(0.75 * np.log(37 / 19))
    assert shifts[other] == pytest.approx(shifts[ACTION] * 1 / 2)  # pooled over 1 action, shrunk by 1/(1+1)
    assert shifts[deep] == 0.0 and shifts[0] == 0.0


def test_bad_outcomes_are_named() -> None:
    with pytest.raises(CalibrationError, match="no outcomes"):
        offer_shifts(pd.DataFrame(columns=["action_index", "orders"]), pd.DataFrame())
    with pytest.raises(CalibrationError, match=r"missing column\(s\) \['orders'\]"):
        offer_shifts(pd.DataFrame({"action_index": [1]}), pd.DataFrame())
    with pytest.raises(CalibrationError, match=r"outside 1\.\.150"):
        offer_shifts(pd.DataFrame({"action_index": [0], "orders": [1.0]}), pd.DataFrame())
    with pytest.raises(CalibrationError, match="missing or negative orders"):
        offer_shifts(pd.DataFrame({"action_index": [3], "orders": [np.nan]}), pd.DataFrame())


def test_a_damped_simulator_is_pulled_back_toward_what_campaigns_really_sold(sim: LearnedSimulator) -> None:
    from dataclasses import replace

    damped = LearnedSimulator(sim.config, replace(sim.params, offer=sim.params.offer - 1.5), sim.report)
    truth = predict_single_campaigns(sim, np.array([ACTION]), n_envs=64, seed=3)  # stands in for the world
    before = predict_single_campaigns(damped, np.array([ACTION]), n_envs=64, seed=3)["orders"].mean()
    fixed = calibrate(damped, truth, shrinkage=1.0, seed=3)
    after = predict_single_campaigns(fixed, np.array([ACTION]), n_envs=64, seed=3)["orders"].mean()
    target = truth["orders"].mean()
    assert abs(after - target) < 0.5 * abs(before - target)
    assert np.array_equal(damped.params.offer, sim.params.offer - 1.5)  # the input is untouched
    assert fixed.report["calibration"][-1]["campaigns"] == 64


def test_deployment_pairs_world_results_with_the_simulator_s_predictions(
    sim: LearnedSimulator, logs: Logs
) -> None:
    panel = {"weekly": Schedule(7, CATALOG[ACTION], horizon=14)}
    deployed = deployment_outcomes(sim, logs.manifest, panel, episodes=3, seed=0, episode=SHORT)
    observed, predicted = deployed.observed, deployed.predicted
    assert set(observed["action_index"]) == {ACTION} == set(predicted["action_index"])
    assert len(observed) == 6  # 2 campaigns (days 0 and 7) x 3 episodes, offer windows closed
    assert (observed["orders"] >= 0).all()
    world_orders, sim_orders = deployed.totals
    assert world_orders > observed["orders"].sum() and sim_orders > 0  # the whole shop, not only campaigns
    weekly = deployed.per_policy["weekly"]
    assert set(weekly) == {"return", "return_se", "orders", "gmv", "profit", "complaints"}
    assert weekly["orders"] * 3 == pytest.approx(world_orders) and weekly["return_se"] > 0


def test_economics_factors_by_hand() -> None:
    world = {"gmv": 1100.0, "profit": 300.0}
    goods = {"gmv": 1000.0, "profit": 230.0, "push_cost": 20.0}  # 1000 paid - 700 goods - 50 pending - 20
    free = {"gmv": 1000.0, "profit": 930.0, "push_cost": 20.0}
    double = {"gmv": 2000.0, "profit": 1930.0, "push_cost": 20.0}
    shift, factor = economics_factors(world, goods, free, double)
    assert shift == pytest.approx(np.log(1.1))
    # 1.1 * (1000 - 700 k) - 50 - 20 = 300  ->  k = (1000 - 370 / 1.1) / 700
    assert factor == pytest.approx((1000 - 370 / 1.1) / 700)
    with pytest.raises(CalibrationError, match="GMV per episode"):
        economics_factors({"gmv": 0.0, "profit": 0.0}, goods, free, double)


def test_economics_calibration_recovers_a_known_spend_and_cost(sim: LearnedSimulator) -> None:
    """A 'world' that is the simulator with 20% higher list prices and 10% dearer goods: calibrating
    on its GMV and profit per episode recovers both (common random numbers make it exact)."""
    from dataclasses import replace

    from transferlab.simulator.envs.campaign import run_policy

    panel = {"weekly": Schedule(7, CATALOG[ACTION], horizon=14)}
    truth = LearnedSimulator(
        sim.config,
        replace(
            sim.params, spend_mu=sim.params.spend_mu + np.log(1.2), cost_ratio=sim.params.cost_ratio * 1.1
        ),
        sim.report,
    )

    def per_episode(s: LearnedSimulator) -> dict[str, float]:
        out = run_policy(s.market(n_envs=8, n_customers=600, seed=4), panel["weekly"], SHORT, seed=4)[
            "outcome"
        ]
        return {"gmv": float(out[:, 1].mean()), "profit": float(out[:, 2].mean())}

    world = per_episode(truth)
    fixed = calibrate_economics(sim, world, panel, n_customers=600, episodes=8, seed=4, episode=SHORT)
    last = fixed.report["calibration"][-1]
    assert last["spend_shift"] == pytest.approx(np.log(1.2), abs=1e-3)
    assert last["cost_factor"] == pytest.approx(1.1, abs=1e-3)
    again = per_episode(fixed)
    assert again["gmv"] == pytest.approx(world["gmv"], rel=1e-3)
    assert again["profit"] == pytest.approx(world["profit"], rel=1e-3)


def test_the_level_shift_moves_every_purchase() -> None:
    assert level_shift(900.0, 1000.0) == pytest.approx(np.log(0.9))
    with pytest.raises(CalibrationError, match="must be positive"):
        level_shift(0.0, 10.0)


def test_infinite_offer_shrinkage_keeps_the_fitted_offer_response_and_moves_only_the_level(
    sim: LearnedSimulator,
) -> None:
    observed = pd.DataFrame({"action_index": [ACTION, ACTION], "orders": [40.0, 60.0]})
    predicted = pd.DataFrame({"action_index": [ACTION, ACTION], "orders": [10.0, 10.0]})
    kept = calibrate(sim, observed, predicted, totals=(110.0, 100.0), shrinkage=float("inf"))
    assert np.array_equal(kept.params.offer, sim.params.offer)
    assert np.allclose(kept.params.base, sim.params.base + np.log(1.1))
    moved = calibrate(sim, observed, predicted, totals=(110.0, 100.0), shrinkage=5.0)
    assert not np.array_equal(moved.params.offer, sim.params.offer)  # 2 campaigns at 5x the prediction


def test_calibrating_the_level_fixes_a_simulator_that_sells_too_much(sim: LearnedSimulator) -> None:
    from dataclasses import replace

    from transferlab.simulator.envs.campaign import run_policy
    from transferlab.simulator.policies import NoCampaign

    def orders(s: LearnedSimulator) -> float:
        res = run_policy(s.market(n_envs=32, n_customers=600, seed=5), NoCampaign(), SHORT, seed=5)
        return float(res["outcome"][:, 0].sum())

    eager = LearnedSimulator(sim.config, replace(sim.params, base=sim.params.base + 0.4), sim.report)
    truth, before = orders(sim), orders(eager)
    none = pd.DataFrame({"action_index": [ACTION], "orders": [1.0]})
    fixed = calibrate(eager, none, none, totals=(truth, before), shrinkage=1e9)
    assert fixed.report["calibration"][-1]["level_shift"] == pytest.approx(np.log(truth / before), abs=1e-4)
    assert abs(orders(fixed) - truth) < 0.3 * abs(before - truth)


@pytest.mark.slow
@pytest.mark.timeout(900)  # minutes of simulation, and `make test` runs it beside other test processes
def test_the_fidelity_command_writes_a_report(logs: Logs, sim: LearnedSimulator, tmp_path: Path) -> None:
    from transferlab.simulator.train import CampaignPolicy

    write_logs(logs, tmp_path / "logs")
    sim.save(tmp_path / "sim")
    CampaignPolicy(8).save(tmp_path / "p.pt")  # an untrained policy, as `sim train` saves one
    out = tmp_path / "fid"
    args = [
        "sim",
        "fidelity",
        "--simulator",
        str(tmp_path / "sim"),
        "--logs",
        str(tmp_path / "logs"),
        "--out",
        str(out),
        "--episodes",
        "2",
        "--deploy-episodes",
        "2",
        "--calibration-episodes",
        "16",
        "--policy",
        str(tmp_path / "p.pt"),
        "--json",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["before"]["policies"] == 22 and "kendall_tau" in summary["after"]  # the held-out panel
    assert "trained:p.pt" in summary["panels"]["evaluation"] and "--policy" in summary["command"]
    assert summary["in_sample"]["before"]["policies"] == 12
    for key in ("tau_before", "tau_after", "tau_ceiling", "profit_error_before", "profit_error_after"):
        assert isinstance(summary[key], float), key
    assert set(summary["tau_ci"]) == {"before", "after"}
    assert summary["offer_shrinkage"] == 5.0 and "--offer-shrinkage" not in summary["command"]
    assert summary["calibration_method"] == "policies" and "--calibration " not in summary["command"]
    assert summary["calibration_episodes"] == 16 and "--calibration-episodes 16" in summary["command"]
    assert set(summary["calibration_shifts"]) == set(RESPONSE_SHIFTS)
    assert summary["command"].startswith("transferlab sim fidelity --simulator ")
    assert not set(summary["panels"]["calibration"]) & set(summary["panels"]["evaluation"])
    for name in (
        "report.md",
        "report.html",
        "figures/sim_vs_world.png",
        "fidelity.json",
        "result.json",
        "calibrated_sim/params.npz",
    ):
        assert (out / name).is_file(), name
    text = (out / "report.md").read_text()
    assert "the first fit's cost by iteration" not in text and "fit seed 3000" not in text  # one fit
    costs = LearnedSimulator.load(out / "calibrated_sim").report["calibration"][-1]["costs"]
    assert costs[-1] < 0.5 * costs[0]  # the deployed policies' residuals, before and after the fit
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "not empty" in again.stderr
    other = tmp_path / "fid2"
    bad = [*args[:7], str(other), *args[8:-3], "--policy", str(tmp_path), "--json"]
    refused = CliRunner().invoke(app, bad)
    assert refused.exit_code == 2 and "no policy.pt there" in refused.stderr and not other.exists()


def test_a_negative_offer_shrinkage_is_refused(tmp_path: Path) -> None:
    args = [
        "sim",
        "fidelity",
        "--simulator",
        str(tmp_path),
        "--logs",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    ]
    res = CliRunner().invoke(app, [*args, "--offer-shrinkage", "-1"])
    assert res.exit_code == 2 and "--offer-shrinkage" in res.output + res.stderr
    assert not (tmp_path / "o").exists()


def test_offer_shrinkage_needs_campaign_calibration_and_a_method_must_be_known(tmp_path: Path) -> None:
    base = [
        "sim",
        "fidelity",
        "--simulator",
        str(tmp_path),
        "--logs",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
    ]
    res = CliRunner().invoke(app, [*base, "--offer-shrinkage", "5"])
    assert res.exit_code == 2 and "applies to --calibration campaigns only" in res.stderr
    res = CliRunner().invoke(app, [*base, "--calibration", "orders"])
    assert res.exit_code == 2 and "not one of policies, campaigns" in res.stderr
    res = CliRunner().invoke(app, [*base, "--calibration", "campaigns", "--calibration-fits", "2"])
    assert res.exit_code == 2 and "--calibration-fits applies to --calibration policies only" in res.stderr
    assert not (tmp_path / "o").exists()
