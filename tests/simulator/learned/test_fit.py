"""Fitting from logs only: the compiled tables equal the model, and the fit recovers the world's truths."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import transferlab.simulator.learned as learned
from transferlab.platform.config import ConfigError, load_config
from transferlab.simulator.learned import LearnedSimulator, SimFitConfig, fit_simulator
from transferlab.simulator.learned.features import DesignLayout, build_panel, log_arrays
from transferlab.simulator.learned.fit import (
    compile_purchase,
    compiled_logit,
    fit_purchase,
    fit_shock,
    infer_unsubscribed,
)
from transferlab.simulator.logs import Logs, read_logs
from transferlab.simulator.world import COST_RATIO


def test_compiled_tables_give_the_models_log_odds(logs: Logs) -> None:
    arr = log_arrays(logs)
    layout = DesignLayout(promo_days=7)
    panel = build_panel(arr, 7, negative_rate=0.05, rng=np.random.default_rng(1))
    model = fit_purchase(panel, layout, SimFitConfig())
    tables = compile_purchase(model, layout)
    on_catalog = panel.take(panel.offer_action >= 0)
    assert (on_catalog.offer_age >= 0).any()
    np.testing.assert_allclose(compiled_logit(tables, on_catalog), model.logit(on_catalog, layout), atol=1e-4)


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
