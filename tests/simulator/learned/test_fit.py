"""Fitting from logs only: the compiled tables equal the model, and the fit recovers the world's truths."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

import transferlab.simulator.learned as learned
from transferlab.platform.config import ConfigError, load_config
from transferlab.simulator.learned import LearnedSimulator, SimFitConfig, fit_simulator
from transferlab.simulator.learned.features import DesignLayout, build_panel, log_arrays
from transferlab.simulator.learned.fit import (
    compile_purchase,
    compiled_logit,
    fit_purchase,
    fit_shock,
    fit_two_channel,
    infer_unsubscribed,
    noisy_or_logit,
    two_channel_objective,
)
from transferlab.simulator.logs import Logs, read_logs
from transferlab.simulator.world import COST_RATIO


@pytest.mark.parametrize(
    ("offer_form", "offer_segment"),
    [("log_odds", False), ("log_odds", True), ("noisy_or", False), ("noisy_or", True)],
)
def test_compiled_tables_give_the_models_log_odds(logs: Logs, offer_form: str, offer_segment: bool) -> None:
    arr = log_arrays(logs)
    layout = DesignLayout(promo_days=7, offer_segment=offer_segment)
    panel = build_panel(arr, 7, negative_rate=0.05, rng=np.random.default_rng(1))
    model = fit_purchase(panel, layout, SimFitConfig(offer_form=offer_form, offer_segment=offer_segment))
    assert (model.offer_intercept is not None) == (offer_form == "noisy_or")
    tables = compile_purchase(model, layout)
    assert int(tables["offer_channel"]) == (offer_form == "noisy_or")
    on_catalog = panel.take(panel.offer_action >= 0)
    assert (on_catalog.offer_age >= 0).any()
    np.testing.assert_allclose(compiled_logit(tables, on_catalog), model.logit(on_catalog, layout), atol=1e-4)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_two_channel_log_odds_by_hand() -> None:
    # P(buy) = 1 - (1 - 0.1)(1 - 0.2) = 0.28 with an offer; 0.1 without
    out = noisy_or_logit(np.array([_logit(0.1)] * 2), np.array([_logit(0.2)] * 2), np.array([True, False]))
    np.testing.assert_allclose(out, [_logit(0.28), _logit(0.1)], rtol=1e-10)


def _two_channel_data(
    n: int, seed: int
) -> tuple[sparse.csr_matrix, sparse.csr_matrix, np.ndarray, np.ndarray]:
    """Rows of a known two-channel model: 3 customer groups (column 0-2), 2 offer kinds (columns 3-4)."""
    rng = np.random.default_rng(seed)
    group, kind = rng.integers(0, 3, n), rng.integers(0, 2, n)
    on = (rng.random(n) < 0.5).astype(np.float64)
    x = np.zeros((n, 5))
    x[np.arange(n), group] = 1.0
    x[np.arange(n), 3 + kind] = on
    l0 = np.array([-3.0, -2.0, -1.0])[group] - 0.5
    lq = np.array([-2.5, -1.0])[kind] - 0.5
    p = 1 - (1 - 1 / (1 + np.exp(-l0))) * (1 - on / (1 + np.exp(-lq)))
    y = (rng.random(n) < p).astype(np.float64)
    m0 = np.array([1.0, 1, 1, 0, 0])
    return sparse.csr_matrix(x * m0), sparse.csr_matrix(x * (1 - m0)), on, y


def test_two_channel_gradient_matches_finite_differences() -> None:
    x0, xq, on, y = _two_channel_data(500, 0)
    pen = np.full(5, 0.3)
    theta = np.random.default_rng(1).normal(-1.0, 0.5, 7)
    _, grad = two_channel_objective(theta, x0, xq, on, y, np.ones(len(y)), pen)
    eps = 1e-6
    numeric = [
        (
            two_channel_objective(theta + eps * e, x0, xq, on, y, np.ones(len(y)), pen)[0]
            - two_channel_objective(theta - eps * e, x0, xq, on, y, np.ones(len(y)), pen)[0]
        )
        / (2 * eps)
        for e in np.eye(7)
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_the_two_channel_fit_recovers_a_known_model() -> None:
    x0, xq, on, y = _two_channel_data(200_000, 2)
    theta, _ = fit_two_channel(x0, xq, on, y, np.ones(len(y)), np.full(5, 1e-6), np.zeros(7))
    coef, b0, bq = theta[:5], theta[5], theta[6]
    # each channel is identified up to its own intercept: compare the sums the data pin
    np.testing.assert_allclose(coef[:3] + b0, [-3.5, -2.5, -1.5], atol=0.08)
    np.testing.assert_allclose(coef[3:] + bq, [-3.0, -1.5], atol=0.08)


def test_the_two_channel_form_needs_the_logistic_model() -> None:
    with pytest.raises(ConfigError, match="use model='logistic'"):
        SimFitConfig(model="hgb", offer_form="noisy_or")


def test_a_bigger_discount_raises_purchase_probability(sim: LearnedSimulator) -> None:
    # the world's truth: uplift saturates in the discount; the fit sees only who bought after which push
    by_discount = sim.report["purchase"]["offer_logit_by_discount"]
    levels = [by_discount[k] for k in ("0.05", "0.1", "0.2", "0.3")]
    assert levels == sorted(levels) and levels[-1] - levels[0] > 0.1
    assert by_discount["0"] > 0  # even a plain reminder push brings buyers


def test_the_purchase_model_beats_a_constant_rate_on_held_out_days(sim: LearnedSimulator) -> None:
    p = sim.report["purchase"]
    assert p["heldout_log_loss"] < 0.95 * p["baseline_log_loss"]
    assert p["heldout_auc"] > 0.7
    assert 0.8 < p["heldout_calibration"] < 1.25
    daily = p["daily_orders_heldout"]
    assert daily["predicted_mean"] == pytest.approx(daily["actual_mean"], rel=0.25)
    assert 0 <= p["shock_sd"] < 0.5  # small shops: Poisson noise can swamp a 10% day-level shock


def test_the_fit_recovers_observable_conventions_and_costs(sim: LearnedSimulator, logs: Logs) -> None:
    assert sim.report["inferred"] == {"promo_days": 7, "maturity_days": 30, "push_cost": pytest.approx(0.02)}
    # the daily profit identity pins the cost of goods per category and the cost recovered on a return
    np.testing.assert_allclose(sim.params.cost_ratio, COST_RATIO, atol=1e-6)
    np.testing.assert_allclose(sim.params.return_recovery, 0.9, atol=1e-6)
    assert sim.params.complaint_prob[0] == 0.0 and 0.2 < sim.params.complaint_prob[1] < 0.5
    assert np.all(np.diff(sim.params.unsub_prob) >= 0)


def test_unsubscribes_are_inferred_from_who_full_campaigns_missed(logs: Logs) -> None:
    unsub, _ = infer_unsubscribed(log_arrays(logs), push_cost=0.02)
    observed = 1.0 - float(logs.campaigns["ctx_subscribed"].iloc[-1])  # the share the shop sees
    assert unsub.mean() == pytest.approx(observed, abs=0.02)


def test_fit_shock_by_hand() -> None:
    assert fit_shock(np.array([12.0, 8.0]), np.array([10.0, 10.0])) == 0.0  # within Poisson noise
    # Var(a - p) = p + sd^2 p^2: (100 - 10) * 2 = sd^2 * 200
    assert fit_shock(np.array([20.0, 0.0]), np.array([10.0, 10.0])) == pytest.approx(math.sqrt(0.9))


def test_the_fit_reads_only_the_four_log_tables(logs: Logs, logs_dir: Path) -> None:
    on_disk = read_logs(logs_dir)
    assert on_disk.manifest["world"]  # the manifest names the world config ...
    blind = Logs(on_disk.campaigns, on_disk.events, on_disk.customers, on_disk.daily, manifest={})
    a = fit_simulator(blind).params.to_arrays()  # ... and the fit never needs it
    b = fit_simulator(logs).params.to_arrays()
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-9, err_msg=key)


def test_no_learned_module_imports_the_world() -> None:
    hidden = {
        "world",
        "world_config",
        "reference_world",
        "behaviour",
        "policies",
        "envs",
        "fidelity",
        "train",
    }
    for path in Path(learned.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                assert not (parts[:2] == ["transferlab", "simulator"] and set(parts[2:3]) & hidden), (
                    path,
                    name,
                )


def test_the_boosting_model_is_distilled_into_the_same_tables(logs: Logs) -> None:
    result = fit_simulator(logs, SimFitConfig(model="hgb", hgb_max_iter=20, refit_on_all=False))
    p = result.report["purchase"]
    assert p["model"] == "hgb" and 0.0 < p["distillation_r2"] <= 1.0
    assert "hgb_heldout_log_loss" in p and p["heldout_log_loss"] < p["baseline_log_loss"]
    assert result.params.offer.shape == (4, 151, 7)


def test_config_validates_and_round_trips(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="negative_rate"):
        SimFitConfig(negative_rate=0.0)
    with pytest.raises(ConfigError, match="model"):
        SimFitConfig.build(model="forest")
    cfg = SimFitConfig(seed=3, model="hgb", promo_days=5)
    assert load_config(cfg.save(tmp_path / "config.json")) == cfg
