"""Bootstrap intervals and threshold crossings, checked against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transferlab.platform.stats import (
    Interval,
    bootstrap_ci,
    bootstrap_diff_ci,
    clustered_bootstrap_ci,
    clustered_bootstrap_diff_ci,
    first_crossing,
    mde,
    pass_at_k,
    verdict,
    verdict_sentence,
)

# ------------------------------------------------------------------------------------ bootstrap_ci


def test_constant_data_gives_a_zero_width_interval() -> None:
    ci = bootstrap_ci([0.3] * 10)
    assert ci == Interval(estimate=0.3, low=0.3, high=0.3, level=0.95, n=10)
    assert ci.width == 0.0


def test_one_observation_gives_low_equal_high_equal_estimate() -> None:
    assert bootstrap_ci([7.5], stat="median") == Interval(7.5, 7.5, 7.5, 0.95, 1)


def test_empty_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="empty"):
        bootstrap_ci([])


def test_nan_input_is_rejected() -> None:
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, math.nan])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"level": 1.0}, "level"), ({"n_boot": 0}, "n_boot"), ({"stat": "mode"}, "stat")],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bootstrap_ci([1.0, 2.0], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("stat", ["mean", "median"])
def test_two_point_dataset(stat: str) -> None:
    # Resamples of [0, 1] are {0,0}, {0,1}, {1,1} with probability 1/4, 1/2, 1/4, so the mean (and the
    # median) of a resample is 0, 0.5 or 1: the 2.5% / 97.5% quantiles are 0 and 1, and the 30% / 70%
    # quantiles are both 0.5.
    wide = bootstrap_ci([0.0, 1.0], stat=stat, level=0.95)  # type: ignore[arg-type]
    assert (wide.estimate, wide.low, wide.high, wide.n) == (0.5, 0.0, 1.0, 2)
    narrow = bootstrap_ci([0.0, 1.0], stat=stat, level=0.4)  # type: ignore[arg-type]
    assert (narrow.low, narrow.high) == (0.5, 0.5)


def test_bernoulli_half_width_matches_the_normal_approximation() -> None:
    # n = 400 draws of Bernoulli(0.5): the standard error is sqrt(p(1-p)/n) ~ 0.025, so a 95% interval
    # is about estimate +- 1.96 * 0.025 = +- 0.049.
    sample = np.random.default_rng(1).random(400) < 0.5
    ci = bootstrap_ci(sample)
    p = sample.mean()
    half = 1.96 * math.sqrt(p * (1 - p) / 400)
    assert ci.estimate == pytest.approx(p)
    assert ci.high - ci.estimate == pytest.approx(half, abs=0.006)
    assert ci.estimate - ci.low == pytest.approx(half, abs=0.006)


def test_bernoulli_interval_covers_the_true_mean_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(2)
    covered = [
        ci.low <= 0.5 <= ci.high
        for ci in (bootstrap_ci(rng.random(400) < 0.5, n_boot=400, seed=i) for i in range(150))
    ]
    assert 0.89 <= np.mean(covered) <= 0.99


def test_same_seed_same_interval_and_other_seed_other_interval() -> None:
    values = np.random.default_rng(3).normal(size=50)
    assert bootstrap_ci(values, seed=4) == bootstrap_ci(values, seed=4)
    assert bootstrap_ci(values, seed=4) != bootstrap_ci(values, seed=5)


def test_interval_formatting() -> None:
    ci = Interval(0.5, 0.25, 0.75, 0.95, 12)
    assert ci.format() == "0.500 [0.250, 0.750]"
    assert ci.format(".1f") == "0.5 [0.2, 0.8]"
    assert str(ci) == "0.500 [0.250, 0.750] (95% CI, n=12)"


# ------------------------------------------------------------------------------ bootstrap_diff_ci


def test_paired_constant_shift_gives_a_zero_width_interval_unpaired_does_not() -> None:
    a = np.random.default_rng(6).normal(size=30)
    b = a + 1.0
    paired = bootstrap_diff_ci(a, b, paired=True)
    assert paired.estimate == pytest.approx(1.0)
    assert paired.low == paired.high == paired.estimate  # exactly, though (a + 1) - a has rounding errors
    assert paired.n == 30
    unpaired = bootstrap_diff_ci(a, b)
    assert unpaired.low < 1.0 < unpaired.high
    assert unpaired.width > 0.5
    assert unpaired.n == 60


def test_unpaired_two_point_dataset() -> None:
    # a is constant, so a replicate of mean(b) - mean(a) is a resampled mean of [0, 1]: 0, 0.5 or 1.
    ci = bootstrap_diff_ci([2.0, 2.0], [2.0, 3.0])
    assert (ci.estimate, ci.low, ci.high) == (0.5, 0.0, 1.0)


def test_paired_needs_equal_lengths() -> None:
    with pytest.raises(ValueError, match=r"equal length.*got 3 and 2"):
        bootstrap_diff_ci([1, 2, 3], [1, 2], paired=True)


def test_pairing_narrows_the_interval_when_pairs_are_correlated() -> None:
    rng = np.random.default_rng(7)
    task_difficulty = rng.normal(size=200)
    a = task_difficulty + rng.normal(scale=0.1, size=200)
    b = task_difficulty + 0.2 + rng.normal(scale=0.1, size=200)
    paired, unpaired = bootstrap_diff_ci(a, b, paired=True), bootstrap_diff_ci(a, b)
    assert paired.estimate == unpaired.estimate
    assert paired.low > 0.1 and paired.high < 0.3
    assert paired.width < unpaired.width / 5


def test_unpaired_bernoulli_difference_half_width() -> None:
    # sd of the difference of two independent means: sqrt(0.25/400 + 0.24/400) ~ 0.035 -> +- 0.069.
    rng = np.random.default_rng(8)
    a, b = rng.random(400) < 0.5, rng.random(400) < 0.6
    ci = bootstrap_diff_ci(a, b, seed=1)
    half = 1.96 * math.sqrt(a.mean() * (1 - a.mean()) / 400 + b.mean() * (1 - b.mean()) / 400)
    assert ci.estimate == pytest.approx(b.mean() - a.mean())
    assert ci.width / 2 == pytest.approx(half, abs=0.008)


# ------------------------------------------------------------------------------------- clustered


def test_clustered_interval_sees_between_cluster_variation() -> None:
    # Seed 0 fails every task, seed 1 solves every task. Resampling the two seeds gives pooled means of
    # 0, 0.5 or 1 (probability 1/4, 1/2, 1/4): the 95% interval is [0, 1]. Treating the 200 items as
    # independent would claim about +- 0.07.
    values = [0.0] * 100 + [1.0] * 100
    seeds = [0] * 100 + [1] * 100
    clustered = clustered_bootstrap_ci(values, seeds)
    assert (clustered.estimate, clustered.low, clustered.high, clustered.n) == (0.5, 0.0, 1.0, 200)
    naive = bootstrap_ci(values)
    assert naive.width < 0.2


def test_one_item_per_cluster_without_within_resampling_is_the_plain_bootstrap() -> None:
    values = np.random.default_rng(9).normal(size=300)
    clustered = clustered_bootstrap_ci(values, np.arange(300), resample_within=False)
    plain = bootstrap_ci(values)
    assert clustered.estimate == plain.estimate
    assert clustered.width == pytest.approx(plain.width, rel=0.1)


def test_clustered_is_deterministic_and_accepts_string_labels() -> None:
    rng = np.random.default_rng(10)
    values = rng.random(60) < 0.4
    labels = [f"seed{i % 5}" for i in range(60)]
    first = clustered_bootstrap_ci(values, labels, n_boot=300, seed=3)
    assert first == clustered_bootstrap_ci(values, labels, n_boot=300, seed=3)
    assert first.low <= first.estimate <= first.high


def test_clustered_needs_one_label_per_value() -> None:
    with pytest.raises(ValueError, match="equal length"):
        clustered_bootstrap_ci([1.0, 2.0, 3.0], [0, 1])


def test_paired_clustered_diff_cancels_the_seed_effect() -> None:
    # Seeds differ a lot (offsets 0, 1, 2, ...); b is a shifted by exactly 0.25 on every item of every seed.
    # Paired by seed and without item resampling, every replicate difference is 0.25; unpaired is wide.
    rng = np.random.default_rng(11)
    seeds = np.repeat(np.arange(6), 20)
    a = seeds * 1.0 + rng.normal(scale=0.05, size=seeds.size)
    b = a + 0.25
    paired = clustered_bootstrap_diff_ci(a, seeds, b, seeds, paired=True, resample_within=False)
    assert paired.estimate == pytest.approx(0.25)
    assert paired.low == pytest.approx(0.25) and paired.high == pytest.approx(0.25)
    assert paired.n == 240
    unpaired = clustered_bootstrap_diff_ci(a, seeds, b, seeds, n_boot=500)
    assert unpaired.low < 0.0 < 0.5 < unpaired.high


def test_paired_clustered_diff_needs_the_same_clusters() -> None:
    with pytest.raises(ValueError, match="same cluster labels"):
        clustered_bootstrap_diff_ci([1.0, 2.0], [0, 1], [1.0, 2.0], [0, 2], paired=True)


# ---------------------------------------------------------------------------------- first_crossing


def test_first_crossing_interpolates_linearly() -> None:
    # Between (100, 0.6) and (200, 1.0) the curve gains 0.1 every 25 x: it reaches 0.7 at x = 125.
    assert first_crossing([0, 100, 200], [0.2, 0.6, 1.0], 0.7) == pytest.approx(125.0)


def test_first_crossing_uses_the_first_time_only() -> None:
    # Reaches 0.5 between x=1 and x=2 (at 1.5), drops, then reaches it again later.
    assert first_crossing([0, 1, 2, 3, 4], [0.0, 0.4, 0.6, 0.1, 0.9], 0.5) == pytest.approx(1.5)


def test_first_crossing_edge_cases() -> None:
    assert first_crossing([5, 10], [0.9, 1.0], 0.5) == 5.0  # already there at the start
    assert first_crossing([0, 100, 200], [0.0, 0.5, 1.0], 0.5) == 100.0  # hits a point exactly
    assert first_crossing([0, 1, 2], [0.0, 0.1, 0.2], 0.5) is None  # never
    assert first_crossing([0, 1, 2], [0.0, math.nan, 1.0], 0.5) == pytest.approx(1.0)  # NaN skipped
    assert first_crossing([0, 1, 1, 2], [0.0, 0.2, 0.8, 1.0], 0.5) == 1.0  # a vertical jump


def test_first_crossing_downwards() -> None:
    # Loss 1.0 -> 0.2 between steps 0 and 10: it is below 0.6 from step 5.
    assert first_crossing([0, 10], [1.0, 0.2], 0.6, direction="down") == pytest.approx(5.0)
    assert first_crossing([0, 10], [1.0, 0.8], 0.6, direction="down") is None


def test_first_crossing_rejects_unsorted_x_and_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        first_crossing([0, 2, 1], [0.0, 0.5, 1.0], 0.5)
    with pytest.raises(ValueError, match="equal length"):
        first_crossing([0, 1], [0.0, 0.5, 1.0], 0.5)


# ------------------------------------------------------------------------------- mde and verdicts


def test_mde_by_hand_at_95_percent_and_80_percent_power() -> None:
    # SE = 0.2 / (2 * 1.959964) ; MDE = (1.959964 + 0.841621) * SE = 0.1 * 2.801585 / 1.959964
    assert mde(-0.1, 0.1) == pytest.approx(0.1 * (1.959964 + 0.841621) / 1.959964, abs=1e-6)
    assert mde(-0.1, 0.1) == pytest.approx(0.14294, abs=1e-5)
    # only the width matters, and it scales linearly
    assert mde(0.3, 0.5) == pytest.approx(mde(-0.1, 0.1))
    assert mde(0.0, 0.4) == pytest.approx(2 * mde(-0.1, 0.1))


def test_mde_other_level_and_power_by_hand() -> None:
    # 90% interval: z = 1.644854; 90% power: z = 1.281552; half-width 1 -> (1.644854 + 1.281552) / 1.644854
    assert mde(-1.0, 1.0, level=0.9, power=0.9) == pytest.approx(2.926406 / 1.644854, abs=1e-6)


def test_mde_of_a_zero_width_interval_is_zero_and_bad_intervals_are_rejected() -> None:
    assert mde(0.2, 0.2) == 0.0
    with pytest.raises(ValueError, match="low <= high"):
        mde(0.2, 0.1)
    with pytest.raises(ValueError, match="low <= high"):
        mde(math.nan, 0.1)
    with pytest.raises(ValueError, match="power"):
        mde(0.0, 0.1, power=1.0)


def test_verdict_calls_a_change_only_when_the_interval_excludes_zero() -> None:
    assert verdict(0.123, (0.041, 0.205), 0.12) == "improved"
    assert verdict(-0.123, (-0.205, -0.041), 0.12) == "worse"
    assert verdict(0.139, (-0.003, 0.231), 0.17) == "no detectable change"
    assert verdict(0.05, (0.0, 0.1), 0.07) == "no detectable change"  # touching zero is not excluding it
    assert verdict(0.0, (0.0, 0.0), 0.0) == "no detectable change"


def test_verdict_sentences_by_hand() -> None:
    assert verdict_sentence(0.123, (0.041, 0.205), 0.117) == "improved: +12.3 points [4.1, 20.5]"
    assert verdict_sentence(-0.1, (-0.2, -0.05), 0.1) == "worse: \u221210.0 points [\u221220.0, \u22125.0]"
    null = verdict_sentence(0.012, (-0.06, 0.084), mde(-0.06, 0.084), name="grpo - sft")
    assert null == (
        "grpo - sft: pipeline ran, no detectable change: +1.2 points [\u22126.0, 8.4] (MDE 10.3 points)"
    )
    assert "improved" not in null
    assert verdict_sentence(0.5, (0.2, 0.9), 0.4, unit="nats", scale=1) == "improved: +0.5 nats [0.2, 0.9]"
    flat = verdict_sentence(0.0, (0.0, 0.0), 0.0)
    assert flat.startswith("pipeline ran, no detectable change: +0.0 points [0.0, 0.0] (MDE unknown")


def test_verdict_rejects_inconsistent_inputs() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        verdict(0.1, (0.2, 0.0), 0.1)
    with pytest.raises(ValueError, match="pair"):
        verdict(0.1, (0.0,), 0.1)
    with pytest.raises(ValueError, match="MDE >= 0"):
        verdict(0.1, (0.0, 0.2), -1.0)


def test_pass_at_k_by_hand() -> None:
    # 4 samples, 1 success: any 2 of the 6 pairs miss it in 3 -> 1 - 3/6
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    # 8 samples, 2 successes, k=4: 1 - C(6,4)/C(8,4) = 1 - 15/70
    assert pass_at_k(8, 2, 4) == pytest.approx(1 - 15 / 70)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the success rate
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 5, 4) == 1.0  # fewer than k failures: every draw of k holds a success


def test_pass_at_k_matches_a_simulation() -> None:
    rng = np.random.default_rng(0)
    draws = [rng.permutation([1] * 3 + [0] * 7)[:4].any() for _ in range(20000)]
    assert pass_at_k(10, 3, 4) == pytest.approx(float(np.mean(draws)), abs=0.01)


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (0, 0, 1, "n >= 1"),
        (4, 5, 1, "0 <= c <= n"),
        (4, 1, 0, "k must be"),
        (4, 1, 5, "k must be"),
        (4, -1, 1, "0 <= c"),
    ],
)
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)
