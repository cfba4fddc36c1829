"""Off-policy evaluation of Bernoulli TS on the real Open Bandit Dataset (men campaign sample)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transferlab.offline.obd_ope import (
    ESTIMATORS,
    ObdOpeResult,
    click_model,
    evaluate_bts_on_random,
    evaluate_random_on_bts,
    ope_obd,
)
from transferlab.offline.ope import MIN_ESS_SHARE
from transferlab.simulator.realdata.obd import ObdLog, load_obd

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


# ------------------------------------------------------------------------------- reverse direction

# Measured on the men samples (seed 0): uniform random estimated from the BTS log, truth 0.0046
# (the random log's CTR); dm 0.00659, ips 0.00301, snips 0.00319, dr 0.00316, sndr 0.00296,
# switch_dr 0.00527; ESS 656 of 10,000 (6.6%), max weight 178: below ope.MIN_ESS_SHARE (10%, the one
# threshold of the campaign and the OBD protocols), so it is flagged.
DIRECTION_KEYS = {"truth", "truth_ci", "estimates", "coverage", "n", "behaviour", "target"}
COVERAGE_KEYS = {"ess", "max_weight", "unsupported_mass", "trusted", "ess_share", "reason"}


def synthetic_csv(path: Path, item_ctr: list[float], propensity: list[float], n: int, seed: int) -> Path:
    """An OBD-shaped CSV: item ``i`` shown with ``propensity[i]`` and clicked with ``item_ctr[i]``."""
    rng = np.random.default_rng(seed)
    probs = np.asarray(propensity, dtype=np.float64)
    item = rng.choice(len(probs), size=n, p=probs)
    frame = pd.DataFrame(
        {
            "timestamp": pd.Timestamp("2019-11-24", tz="UTC") + pd.to_timedelta(np.arange(n), unit="s"),
            "item_id": item,
            "position": rng.integers(1, 4, size=n),
            "click": (rng.random(n) < np.asarray(item_ctr)[item]).astype(int),
            "propensity_score": probs[item],
            "user_feature_0": rng.choice(["u0", "u1"], size=n),
        }
    )
    for i in range(len(probs)):
        frame[f"user-item_affinity_{i}"] = 0.0
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=True)
    return path


ITEM_CTR = [0.02, 0.30, 0.10, 0.20, 0.05]
UNIFORM = [0.2] * 5
#: A "TS-like" log that shows item 0 almost always: uniform's weights are 20 on the other items.
SKEWED = [0.96, 0.01, 0.01, 0.01, 0.01]
#: A mildly skewed log: every weight is between 0.67 and 2.
MILD = [0.3, 0.1, 0.2, 0.1, 0.3]


def _logs(tmp_path: Path, bts_propensity: list[float]) -> tuple[ObdLog, ObdLog]:
    random_log = load_obd(synthetic_csv(tmp_path / "random.csv", ITEM_CTR, UNIFORM, 4000, seed=1))
    bts_log = load_obd(synthetic_csv(tmp_path / "bts.csv", ITEM_CTR, bts_propensity, 4000, seed=2))
    return random_log, bts_log


def test_reverse_direction_is_flagged_when_the_log_concentrates(tmp_path: Path) -> None:
    random_log, bts_log = _logs(tmp_path, SKEWED)
    result = evaluate_random_on_bts(random_log, bts_log, seed=0, n_boot=200)
    assert result["actual"].estimate == pytest.approx(random_log.ctr)
    for name, iv in result["estimates"].items():
        assert math.isfinite(iv.estimate) and iv.low <= iv.estimate <= iv.high, name
    cov = result["coverage"]
    assert cov.max_weight == pytest.approx(0.2 / 0.01)
    assert cov.ess_share < MIN_ESS_SHARE
    assert not cov.trustworthy and cov.reason is not None and "effective sample size" in cov.reason


def test_reverse_direction_is_trusted_and_unbiased_with_overlap(tmp_path: Path) -> None:
    random_log, bts_log = _logs(tmp_path, MILD)
    result = evaluate_random_on_bts(random_log, bts_log, seed=0, n_boot=200)
    assert result["coverage"].trustworthy, result["coverage"].reason
    truth = float(np.mean(ITEM_CTR))
    for name in ("ips", "snips", "dr", "sndr"):
        iv = result["estimates"][name]
        assert abs(iv.estimate - truth) < 0.02, (name, iv.estimate, truth)


def test_ope_obd_json_shape(tmp_path: Path) -> None:
    random_log, bts_log = _logs(tmp_path, SKEWED)
    out = json.loads(json.dumps(ope_obd(random_log, bts_log, seed=0, n_boot=50)))
    assert set(out) == {"forward", "reverse"}
    for direction in out.values():
        assert set(direction) == DIRECTION_KEYS
        assert set(direction["estimates"]) == set(ESTIMATORS)
        for est in direction["estimates"].values():
            assert set(est) == {"value", "ci", "relative_error"}
            assert len(est["ci"]) == 2 and math.isfinite(est["relative_error"])
        assert set(direction["coverage"]) == COVERAGE_KEYS
    assert out["forward"]["coverage"]["trusted"] is True
    assert out["reverse"]["coverage"]["trusted"] is False


def test_no_clicks_in_the_truth_log_is_a_clear_error(tmp_path: Path) -> None:
    random_log = load_obd(synthetic_csv(tmp_path / "random.csv", [0.0] * 5, UNIFORM, 200, seed=1))
    bts_log = load_obd(synthetic_csv(tmp_path / "bts.csv", ITEM_CTR, MILD, 200, seed=2))
    with pytest.raises(ValueError, match="no clicks"):
        evaluate_random_on_bts(random_log, bts_log, n_boot=10)


def test_reverse_on_real_logs_is_flagged(shared_data: Callable[[str], Path]) -> None:
    random_log = load_obd(shared_data("obd/random/men/men.csv"))
    bts_log = load_obd(shared_data("obd/bts/men/men.csv"))
    result = evaluate_random_on_bts(random_log, bts_log, seed=0, n_boot=200)
    assert result["actual"].estimate == pytest.approx(random_log.ctr)
    cov = result["coverage"]
    assert not cov.trustworthy, cov
    assert cov.max_weight > 100.0
    # the ESS is what flags it (6.6% of the rows, under the one threshold), not unsupported actions
    assert 0.05 < cov.ess_share < MIN_ESS_SHARE and cov.unsupported_mass == 0.0
