"""Tests for transferlab.offline.ope: closed-form synthetic bandits and hand-computed tiny cases."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from transferlab.offline import ope
from transferlab.offline.ope import BanditData

# ----------------------------------------------------------------------------- synthetic bandit

P_CONTEXT = np.array([0.5, 0.3, 0.2])
MU = np.array(  # Bernoulli reward mean per (context, action)
    [
        [0.2, 0.5, 0.8, 0.1],
        [0.6, 0.3, 0.4, 0.9],
        [0.5, 0.7, 0.2, 0.3],
    ]
)
LOGGING = np.array(
    [
        [0.4, 0.3, 0.2, 0.1],
        [0.25, 0.25, 0.25, 0.25],
        [0.1, 0.2, 0.3, 0.4],
    ]
)
TARGET = np.array(
    [
        [0.1, 0.1, 0.7, 0.1],
        [0.2, 0.0, 0.1, 0.7],
        [0.3, 0.5, 0.1, 0.1],
    ]
)
TRUTH = float(np.sum(P_CONTEXT * np.sum(TARGET * MU, axis=1)))


def test_truth_hand_checked() -> None:
    # context 0: .02+.05+.56+.01 = .64; context 1: .12+0+.04+.63 = .79; context 2: .15+.35+.02+.03 = .55
    assert pytest.approx(0.5 * 0.64 + 0.3 * 0.79 + 0.2 * 0.55) == TRUTH


def make_bandit(n: int, seed: int, q_shift: float = 0.0) -> BanditData:
    """Logs from LOGGING on contexts ~ P_CONTEXT; q_hat = MU + q_shift (a wrong model when shift != 0)."""
    rng = np.random.default_rng(seed)
    x = rng.choice(3, size=n, p=P_CONTEXT)
    cum = np.cumsum(LOGGING[x], axis=1)
    a = np.minimum((rng.random(n)[:, None] > cum).sum(axis=1), 3)
    r = (rng.random(n) < MU[x, a]).astype(np.float64)
    return BanditData(a, r, LOGGING[x, a], TARGET[x], MU[x] + q_shift)


@pytest.fixture(scope="module")
def big() -> BanditData:
    return make_bandit(200_000, seed=1)


def se(rows: npt.NDArray[np.float64]) -> float:
    return float(np.std(rows) / np.sqrt(rows.size))


def test_mean_estimators_unbiased(big: BanditData) -> None:
    for rows in (ope.ips_rows(big), ope.dr_rows(big), ope.dm_rows(big)):
        assert abs(float(np.mean(rows)) - TRUTH) < 4 * se(rows)
    assert ope.ips(big) == pytest.approx(float(np.mean(ope.ips_rows(big))))
    assert ope.dr(big) == pytest.approx(float(np.mean(ope.dr_rows(big))))


def test_self_normalised_estimators_consistent(big: BanditData) -> None:
    w = ope.importance_weights(big)
    v = ope.snips(big)
    snips_se = float(np.std(w * (big.rewards - v)) / np.mean(w) / np.sqrt(big.n))  # delta method
    assert abs(v - TRUTH) < 4 * snips_se
    assert abs(ope.sndr(big) - TRUTH) < 4 * se(ope.dr_rows(big))


def test_dm_with_correct_model_is_exact_given_context_frequencies() -> None:
    # One row per context, weighted by P_CONTEXT through repetition (50/30/20 rows): DM is exactly TRUTH.
    x = np.repeat(np.arange(3), [50, 30, 20])
    data = BanditData(np.zeros(100, dtype=int), np.zeros(100), LOGGING[x, 0], TARGET[x], MU[x])
    assert ope.dm(data) == pytest.approx(TRUTH, abs=1e-12)


def test_wrong_model_biases_dm_but_not_dr() -> None:
    data = make_bandit(200_000, seed=2, q_shift=0.2)
    assert ope.dm(data) - TRUTH == pytest.approx(0.2, abs=0.01)
    assert abs(ope.dr(data) - TRUTH) < 4 * se(ope.dr_rows(data))
    assert abs(ope.sndr(data) - TRUTH) < 4 * se(ope.dr_rows(data))


# ------------------------------------------------------------------------------ tiny hand cases


@pytest.fixture
def tiny() -> BanditData:
    # w = [0.5/0.5, 0.5/0.25, 1/0.5] = [1, 2, 2]
    return BanditData(
        actions=np.array([0, 1, 0]),
        rewards=np.array([1.0, 0.0, 1.0]),
        pscore=np.array([0.5, 0.25, 0.5]),
        action_dist=np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]),
        q_hat=np.array([[0.5, 0.0], [1.0, 0.5], [0.0, 1.0]]),
    )


def test_tiny_hand_computed(tiny: BanditData) -> None:
    np.testing.assert_allclose(ope.importance_weights(tiny), [1.0, 2.0, 2.0])
    # DM rows: .5*.5 + .5*0 = .25; .5*1 + .5*.5 = .75; 1*0 + 0*1 = 0
    np.testing.assert_allclose(ope.dm_rows(tiny), [0.25, 0.75, 0.0])
    assert ope.dm(tiny) == pytest.approx(1.0 / 3.0)
    # IPS rows w*r: 1, 0, 2
    np.testing.assert_allclose(ope.ips_rows(tiny), [1.0, 0.0, 2.0])
    assert ope.ips(tiny) == pytest.approx(1.0)
    assert ope.snips(tiny) == pytest.approx(3.0 / 5.0)
    # residuals r - q(a): .5, -.5, 1 -> w*res: .5, -1, 2 -> DR rows .75, -.25, 2
    np.testing.assert_allclose(ope.dr_rows(tiny), [0.75, -0.25, 2.0])
    assert ope.dr(tiny) == pytest.approx(2.5 / 3.0)
    assert ope.sndr(tiny) == pytest.approx(1.0 / 3.0 + 1.5 / 5.0)
    # tau = 1.5 keeps only row 0's correction: .75, .75, 0
    np.testing.assert_allclose(ope.switch_dr_rows(tiny, 1.5), [0.75, 0.75, 0.0])
    assert ope.switch_dr(tiny, 1.5) == pytest.approx(0.5)


def test_switch_dr_limits(tiny: BanditData, big: BanditData) -> None:
    for data in (tiny, big):
        assert ope.switch_dr(data, float("inf")) == pytest.approx(ope.dr(data))
        assert ope.switch_dr(data, 0.0) == pytest.approx(ope.dm(data))
    with pytest.raises(ValueError, match="tau"):
        ope.switch_dr(tiny, -1.0)


def test_model_based_estimators_need_q_hat(tiny: BanditData) -> None:
    data = BanditData(tiny.actions, tiny.rewards, tiny.pscore, tiny.action_dist)
    assert ope.ips(data) == pytest.approx(1.0)
    for est in (ope.dm, ope.dr, ope.sndr):
        with pytest.raises(ValueError, match="q_hat"):
            est(data)


def test_self_normalised_without_support_raises() -> None:
    data = BanditData(np.array([0, 0]), np.ones(2), np.full(2, 0.5), np.array([[0.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="coverage"):
        ope.snips(data)


# ------------------------------------------------------------------------------------ bootstrap


@pytest.mark.parametrize("estimator", ["dm", "ips", "snips", "dr", "sndr", "switch_dr"])
def test_bootstrap_covers_truth_and_is_seeded(estimator: ope.Estimator) -> None:
    data = make_bandit(5_000, seed=4)  # fixed draw; 95% intervals miss the truth on ~1 seed in 20
    ci = ope.bootstrap_estimate(estimator, data, n_boot=300, seed=7, tau=3.0)
    assert ci.low <= TRUTH <= ci.high
    assert ci.low < ci.estimate < ci.high
    assert ci.n == 5_000 and ci.level == 0.95
    assert ope.bootstrap_estimate(estimator, data, n_boot=300, seed=7, tau=3.0) == ci
    assert ope.bootstrap_estimate(estimator, data, n_boot=300, seed=8, tau=3.0) != ci


def test_bootstrap_point_estimates_match(tiny: BanditData) -> None:
    assert ope.bootstrap_estimate("snips", tiny, n_boot=50).estimate == pytest.approx(0.6)
    assert ope.bootstrap_estimate("sndr", tiny, n_boot=50).estimate == pytest.approx(1 / 3 + 0.3)
    assert ope.bootstrap_estimate("dr", tiny, n_boot=50).estimate == pytest.approx(2.5 / 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"n_boot": 0}, "n_boot"), ({"level": 1.0}, "level")],
)
def test_bootstrap_bad_args(tiny: BanditData, kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ope.bootstrap_estimate("snips", tiny, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="estimator must be one of"):
        ope.bootstrap_estimate("nope", tiny)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- coverage


def test_coverage_ess_hand_checked(tiny: BanditData) -> None:
    cov = ope.coverage(tiny.actions, tiny.pscore, tiny.action_dist)
    assert ope.effective_sample_size(np.array([1.0, 2.0, 2.0])) == pytest.approx(25.0 / 9.0)
    assert cov.ess == pytest.approx(25.0 / 9.0)
    assert cov.ess_share == pytest.approx(25.0 / 27.0)
    assert cov.max_weight == 2.0
    assert cov.unsupported_mass == 0.0 and cov.rare_actions == ()
    assert cov.trustworthy and cov.reason is None


def test_coverage_flags_mass_on_never_logged_action() -> None:
    n = 1_000
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=n)  # uniform over actions 0 and 1; action 2 is never logged
    target = np.tile([0.35, 0.35, 0.3], (n, 1))
    cov = ope.coverage(actions, np.full(n, 0.5), target)
    assert cov.rare_actions == (2,)
    assert cov.unsupported_mass == pytest.approx(0.3)
    assert not cov.trustworthy
    assert cov.reason is not None and "never took" in cov.reason


def test_coverage_rare_threshold_and_counts() -> None:
    actions = np.array([0, 1, 0, 1])
    dist = np.tile([0.5, 0.3, 0.2], (4, 1))
    # counts from the full log: action 2 taken 1 time in 10_000 -> rare at the default threshold
    cov = ope.coverage(actions, np.full(4, 0.5), dist, logged_counts=np.array([5_000, 4_999, 1]))
    assert cov.rare_actions == (2,) and cov.unsupported_mass == pytest.approx(0.2)
    cov = ope.coverage(actions, np.full(4, 0.5), dist, logged_counts=np.array([5_000, 4_999, 1]), rare=0.0)
    assert cov.rare_actions == ()
    with pytest.raises(ValueError, match="logged_counts"):
        ope.coverage(actions, np.full(4, 0.5), dist, logged_counts=np.array([1, 2]))


def test_coverage_flags_low_ess() -> None:
    n = 1_000
    actions = np.zeros(n, dtype=int)
    pscore = np.full(n, 0.9)
    pscore[0] = 1e-6  # one enormous weight dominates
    cov = ope.coverage(actions, pscore, np.tile([1.0, 0.0], (n, 1)))
    assert cov.ess < ope.MIN_ESS_SHARE * n
    assert cov.max_weight == pytest.approx(1e6)
    assert not cov.trustworthy and cov.reason is not None and "effective sample size" in cov.reason


# ----------------------------------------------------------------------------------- validation


def _tiny_kwargs() -> dict[str, npt.NDArray[np.float64] | npt.NDArray[np.int64]]:
    return {
        "actions": np.array([0, 1, 0]),
        "rewards": np.array([1.0, 0.0, 1.0]),
        "pscore": np.array([0.5, 0.25, 0.5]),
        "action_dist": np.array([[0.5, 0.5], [0.5, 0.5], [1.0, 0.0]]),
        "q_hat": np.zeros((3, 2)),
    }


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("pscore", np.array([0.5, 0.5]), "pscore must have shape"),
        ("rewards", np.array([1.0, 0.0]), "rewards must have shape"),
        ("action_dist", np.full((2, 2), 0.5), "action_dist must have shape"),
        ("q_hat", np.zeros((3, 3)), "q_hat must have shape"),
        ("pscore", np.array([0.5, 0.0, 0.5]), r"pscore must lie in \(0, 1\]"),
        ("pscore", np.array([0.5, 1.5, 0.5]), r"pscore must lie in \(0, 1\]"),
        ("action_dist", np.array([[0.5, 0.6], [0.5, 0.5], [1.0, 0.0]]), "rows must sum to 1, row 0"),
        ("action_dist", np.array([[1.5, -0.5], [0.5, 0.5], [1.0, 0.0]]), "non-negative"),
        ("rewards", np.array([1.0, np.nan, 1.0]), "rewards has 1 NaN"),
        ("actions", np.array([0, 2, 0]), r"actions must lie in \[0, 2\)"),
        ("actions", np.array([0, -1, 0]), r"actions must lie in \[0, 2\)"),
        ("actions", np.array([0.0, 1.0, 0.0]), "integer action indices"),
        ("q_hat", np.full((3, 2), np.nan), "q_hat has NaN"),
    ],
)
def test_validation_errors(field: str, value: npt.NDArray[np.float64], match: str) -> None:
    kwargs = _tiny_kwargs()
    kwargs[field] = value
    with pytest.raises(ValueError, match=match):
        BanditData(**kwargs)  # type: ignore[arg-type]


def test_validation_empty_and_coverage_checks() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        BanditData(np.array([], dtype=int), np.array([]), np.array([]), np.zeros((0, 2)))
    with pytest.raises(ValueError, match="pscore must lie"):
        ope.coverage(np.array([0]), np.array([0.0]), np.array([[1.0, 0.0]]))


def test_gain_over_the_logging_policy_hand_computed(tiny: BanditData) -> None:
    # mean logged reward (1 + 0 + 1) / 3; the gain is each estimate minus it, row by row for the means
    logged = 2.0 / 3.0
    for name, value in (("ips", 1.0), ("dr", 2.5 / 3.0), ("snips", 0.6), ("sndr", 1.0 / 3.0 + 0.3)):
        gain = ope.bootstrap_gain(name, tiny, n_boot=200, seed=0)  # type: ignore[arg-type]
        assert gain.estimate == pytest.approx(value - logged), name
        assert gain.low <= gain.estimate <= gain.high
    # IPS gain rows w*r - r: 0, 0, 1 -> the bootstrap draws only 0s and 1s of thirds
    ips = ope.bootstrap_gain("ips", tiny, n_boot=500, seed=1)
    assert ips.low >= 0.0 and ips.high <= 1.0


def test_gain_of_the_logging_policy_itself_is_exactly_zero() -> None:
    # the target is the logging policy: weights 1, IPS gain rows r - r = 0, a point interval
    data = BanditData(
        actions=np.array([0, 1, 1, 0]),
        rewards=np.array([3.0, -1.0, 5.0, 0.0]),
        pscore=np.array([0.5, 0.5, 0.5, 0.5]),
        action_dist=np.full((4, 2), 0.5),
        q_hat=np.zeros((4, 2)),
    )
    for name in ("ips", "snips"):
        gain = ope.bootstrap_gain(name, data, n_boot=200, seed=0)  # type: ignore[arg-type]
        assert gain.estimate == pytest.approx(0.0) and gain.low == pytest.approx(0.0)
        assert gain.high == pytest.approx(0.0)


def test_a_paired_gain_is_narrower_than_the_values_it_subtracts() -> None:
    # shared noise: each day's reward swings by +-10 for every action; the target is +1 everywhere
    rng = np.random.default_rng(0)
    n = 400
    swing = rng.choice([-10.0, 10.0], size=n)
    actions = rng.integers(0, 2, size=n)
    q = np.column_stack([swing, swing + 1.0])
    rewards = q[np.arange(n), actions]
    data = BanditData(actions, rewards, np.full(n, 0.5), np.tile([0.0, 1.0], (n, 1)), q)
    value = ope.bootstrap_estimate("dr", data, n_boot=500, seed=0)
    gain = ope.bootstrap_gain("dr", data, n_boot=500, seed=0)
    assert gain.high - gain.low < (value.high - value.low) / 5
    assert gain.low > 0.0  # the +0.5 gain over a 50/50 logging policy is detected
