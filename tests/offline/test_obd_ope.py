"""Off-policy evaluation of Bernoulli TS on the real Open Bandit Dataset (men campaign sample)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from transferlab.offline.obd_ope import ESTIMATORS, ObdOpeResult, click_model, evaluate_bts_on_random
from transferlab.simulator.realdata.obd import load_obd

# Measured on the 10,000-row men samples (seed 0; point estimates do not depend on the seed):
# actual BTS CTR 0.00690; relative errors dm 0.253, ips 0.180, snips 0.168, dr 0.172, sndr 0.170,
# switch_dr 0.172 (tau=10 exceeds the largest weight, 7.48, so it equals DR). ESS 2869 of 10,000.
IPS_SNIPS_MAX_RELATIVE_ERROR = 0.25


@pytest.fixture
def result(shared_data: Callable[[str], Path]) -> ObdOpeResult:
    random_log = load_obd(shared_data("obd/random/men/men.csv"))
    bts_log = load_obd(shared_data("obd/bts/men/men.csv"))
    return evaluate_bts_on_random(random_log, bts_log, seed=0, n_boot=200)


def test_obd_ope_on_real_logs(result: ObdOpeResult) -> None:
    estimates = result["estimates"]
    assert set(estimates) == set(ESTIMATORS)
    for name, iv in estimates.items():
        assert math.isfinite(iv.estimate) and iv.estimate > 0.0, name
        assert iv.low <= iv.estimate <= iv.high, name
    actual = result["actual"]
    assert 0.0 < actual.estimate < 0.05

    rel = result["relative_error"]
    for name in ("ips", "snips"):
        assert rel[name] < IPS_SNIPS_MAX_RELATIVE_ERROR, (name, rel[name])
        iv = estimates[name]
        assert iv.low <= actual.estimate <= iv.high, name

    cov = result["coverage"]
    assert cov.trustworthy, cov.reason
    assert cov.rare_actions == ()


def test_click_model_is_smoothed_rate() -> None:
    q = click_model([0, 0, 1], [0, 0, 0], [1, 0, 0], n_items=3, n_positions=2)
    assert q.shape == (2, 3)
    assert np.all((q >= 0.0) & (q <= 1.0))
    assert q[0, 0] > q[0, 1]
