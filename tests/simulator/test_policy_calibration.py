"""Policy-level calibration: the shifts by hand, the fit on known problems, and a simulator pulled
toward a 'world' that is itself with known shifts."""

from __future__ import annotations

import numpy as np
import pytest

from transferlab.simulator.envs.campaign import EpisodeConfig
from transferlab.simulator.learned import LearnedSimulator, SimParams
from transferlab.simulator.logs import Logs, LogSpec, generate_logs
from transferlab.simulator.policies import NoCampaign, Policy, Schedule
from transferlab.simulator.policy_calibration import (
    FIT_SEED_STRIDE,
    MIN_RETURN_SE,
    RESPONSE_SHIFTS,
    PolicyCalibrationError,
    calibrate_policies,
    damped_gauss_newton,
    policy_residuals,
    shifted_params,
    simulated_policies,
)
from transferlab.simulator.vocabulary import CATALOG, SEGMENTS, CampaignAction, catalog_index
from transferlab.simulator.world_config import WorldConfig

SHORT = EpisodeConfig.build(horizon=14, warmup_days=3, settle_days=7)


def theta(**shifts: float) -> np.ndarray:
    out = np.zeros(len(RESPONSE_SHIFTS))
    for k, v in shifts.items():
        out[RESPONSE_SHIFTS.index(k)] = v
    return out


def test_each_shift_moves_its_own_table_by_hand() -> None:
    p = SimParams.toy()
    q = shifted_params(
        p,
        theta(level=0.2, offer_loyal=0.5, offer_per_discount=-1.0, fatigue_30d=0.1, complaints=np.log(2.0))
        + theta(spend=0.05, cost=np.log(1.1)),
    )
    assert np.allclose(q.base, p.base + 0.2)
    a = catalog_index(CampaignAction(0.2, 20, "premium", 60.0))
    loyal, bargain = SEGMENTS.index("loyal"), SEGMENTS.index("bargain")
    assert np.allclose(q.offer[loyal, a], p.offer[loyal, a] + 0.5 - 1.0 * 0.2)  # any target, loyal customers
    assert np.allclose(q.offer[bargain, a], p.offer[bargain, a] - 0.2)
    assert np.array_equal(q.offer[:, 0], p.offer[:, 0])  # no campaign has no offer
    assert np.allclose(q.fatigue_coef, p.fatigue_coef + np.array([0.0, 0.1]))
    assert np.allclose(q.complaint_prob, np.clip(2.0 * p.complaint_prob, 0, 1))
    assert np.allclose(q.spend_mu, p.spend_mu + 0.05) and np.allclose(q.cost_ratio, 1.1 * p.cost_ratio)
    assert np.array_equal(shifted_params(p, theta()).offer, p.offer)
    with pytest.raises(PolicyCalibrationError, match="need 11 shifts"):
        shifted_params(p, np.zeros(3))


def test_residuals_by_hand_with_the_standard_error_floor() -> None:
    world = {
        "a": {"return": 10.0, "return_se": 0.5, "orders": 100.0, "complaints": 2.0},
        "b": {"return": 20.0, "return_se": 0.01, "orders": 50.0, "complaints": 0.0},
    }
    sim = {
        "a": {"return": 9.0, "orders": 98.0, "complaints": 3.0},
        "b": {"return": 20.6, "orders": 50.0, "complaints": 0.0},
    }
    r = policy_residuals(sim, world)
    assert r[:2] == pytest.approx([-1.0 / 0.5, 0.6 / MIN_RETURN_SE])
    assert r[2:4] == pytest.approx([np.log(0.98) / 0.02, 0.0])
    assert r[4:] == pytest.approx([np.log(3.001 / 2.001) / 0.1, 0.0])


def test_gauss_newton_solves_a_nonlinear_least_squares_problem() -> None:
    t = np.linspace(0.0, 1.0, 8)
    y = 2.0 * np.exp(-1.5 * t)
    off = damped_gauss_newton(
        lambda x: 3.0 * np.exp(-(1.0 + x[1]) * t) * (1 + x[0]) - y, 2, iterations=30, step=1e-4
    )
    assert 3.0 * (1 + off.x[0]) == pytest.approx(2.0, abs=1e-3) and 1.0 + off.x[1] == pytest.approx(
        1.5, abs=1e-3
    )
    assert all(b <= a for a, b in zip(off.costs, off.costs[1:], strict=False))


def test_gauss_newton_stops_when_no_step_lowers_the_cost() -> None:
    fit = damped_gauss_newton(lambda x: np.array([1.0, 2.0]), 3, iterations=4)
    assert np.array_equal(fit.x, np.zeros(3)) and fit.costs == [5.0]


@pytest.fixture(scope="module")
def logs() -> Logs:
    return generate_logs(LogSpec(days=120, world=WorldConfig(n_customers=600, seed=11)))


@pytest.fixture(scope="module")
def sim(logs: Logs) -> LearnedSimulator:
    return LearnedSimulator.fit(logs)


def test_a_simulator_is_pulled_toward_a_world_that_is_itself_shifted(sim: LearnedSimulator) -> None:
    """The 'world' is the simulator with every purchase 0.3 log-odds likelier and 10% dearer goods:
    calibrating on its policies' results finds a positive level shift and brings the returns closer."""
    panel: dict[str, Policy] = {
        "none": NoCampaign(),
        "weekly": Schedule(7, CATALOG[catalog_index(CampaignAction(0.1, 20, "all", 60.0))], horizon=14),
        "every3": Schedule(3, CATALOG[catalog_index(CampaignAction(0.3, 9, "bargain", 20.0))], horizon=14),
    }
    truth = LearnedSimulator(
        sim.config, shifted_params(sim.params, theta(level=0.3, cost=np.log(1.1))), sim.report
    )
    world = simulated_policies(truth, panel, n_customers=600, episodes=16, seed=1, episode=SHORT)
    for v in world.values():
        v["return_se"] = 0.3
    base = sim.params.base.copy()
    kw = {"n_customers": 600, "episodes": 16, "seed": 2, "episode": SHORT}
    before = simulated_policies(sim, panel, **kw)  # type: ignore[arg-type]
    fixed = calibrate_policies(sim, world, panel, iterations=3, **kw)  # type: ignore[arg-type]
    after = simulated_policies(fixed, panel, **kw)  # type: ignore[arg-type]
    shifts = fixed.report["calibration"][-1]["shifts"]
    assert shifts["level"] > 0.1
    gap = lambda s: sum(abs(s[n]["orders"] - world[n]["orders"]) for n in panel)  # noqa: E731
    assert gap(after) < 0.5 * gap(before)
    assert fixed.report["calibration"][-1]["costs"][-1] < fixed.report["calibration"][-1]["costs"][0]
    assert np.array_equal(sim.params.base, base)  # the input simulator is untouched


def test_averaged_fits_are_the_mean_of_the_single_fits(sim: LearnedSimulator) -> None:
    """fits=2 moves the simulator by the mean of the fits at ``seed`` and ``seed + FIT_SEED_STRIDE``,
    and records each one."""
    panel: dict[str, Policy] = {
        "none": NoCampaign(),
        "weekly": Schedule(7, CATALOG[catalog_index(CampaignAction(0.1, 20, "all", 60.0))], horizon=14),
    }
    truth = LearnedSimulator(sim.config, shifted_params(sim.params, theta(level=0.3)), sim.report)
    world = simulated_policies(truth, panel, n_customers=400, episodes=8, seed=1, episode=SHORT)
    for v in world.values():
        v["return_se"] = 0.3
    kw = {"n_customers": 400, "episodes": 8, "episode": SHORT, "iterations": 2}
    one = [
        calibrate_policies(sim, world, panel, seed=s, **kw).report["calibration"][-1]["shifts"]  # type: ignore[arg-type]
        for s in (2, 2 + FIT_SEED_STRIDE)
    ]
    both = calibrate_policies(sim, world, panel, seed=2, fits=2, **kw).report["calibration"][-1]  # type: ignore[arg-type]
    assert [f["seed"] for f in both["fits"]] == [2, 2 + FIT_SEED_STRIDE]
    assert [f["shifts"] for f in both["fits"]] == one
    assert one[0] != one[1]  # the two fits differ, so the mean is not either one
    for k in RESPONSE_SHIFTS:
        assert both["shifts"][k] == pytest.approx((one[0][k] + one[1][k]) / 2, abs=1e-4)
    with pytest.raises(PolicyCalibrationError, match="fits=0"):
        calibrate_policies(sim, world, panel, seed=2, fits=0, **kw)  # type: ignore[arg-type]


def test_a_deployment_without_a_policy_is_refused(sim: LearnedSimulator) -> None:
    panel = {"none": NoCampaign()}
    with pytest.raises(PolicyCalibrationError, match=r"no deployment results for \['none'\]"):
        calibrate_policies(sim, {}, panel, n_customers=600)
    with pytest.raises(PolicyCalibrationError, match="lack"):
        calibrate_policies(sim, {"none": {"return": 1.0}}, panel, n_customers=600)
    bad = {"none": {"return": 1.0, "return_se": 0.1, "orders": 0.0, "complaints": 0.0}}
    with pytest.raises(PolicyCalibrationError, match="sold nothing"):
        calibrate_policies(sim, bad, panel, n_customers=600)


def test_the_module_examples_hold() -> None:
    import doctest

    from transferlab.simulator import policy_calibration

    assert doctest.testmod(policy_calibration).failed == 0
