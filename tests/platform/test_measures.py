"""Measure and the shared arithmetic by hand; the timing pool on a toy job."""

from __future__ import annotations

import math

import pytest

from transferlab.platform.measures import (
    Measure,
    agreement_share,
    nonflat_share,
    not_measured,
    pearson,
    per_cost,
    spread,
    throughput_measure,
    timed_pool,
)


def test_spread_by_hand() -> None:
    assert spread([2.0, 2.0, 2.0]) == {"std": 0.0, "iqr": 0.0, "mean": 2.0, "n": 3}
    s = spread([1.0, 2.0, 3.0, 4.0])
    assert s["std"] == pytest.approx(math.sqrt(1.25)) and s["iqr"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="at least one"):
        spread([])


def test_pearson_by_hand() -> None:
    # dx = (-1, 0, 1), dy = (-7/3, -1/3, 8/3): r = 5 / sqrt(2 * 38/3)
    assert pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 38 / 3))
    assert math.isnan(pearson([1, 2, 3], [5, 5, 5]))
    with pytest.raises(ValueError, match="equal-length"):
        pearson([1, 2], [1, 2, 3])


def test_nonflat_share_and_agreement() -> None:
    assert nonflat_share([[0, 0], [0, 1], [1, 1], [2, 3]]) == 0.5
    assert agreement_share([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert per_cost(10.0, 0.5) == 20.0 and math.isnan(per_cost(1.0, 0.0))


def test_measure_cell() -> None:
    assert Measure(0.0, "std", "x").cell() == "0 std"
    assert not_measured("why").cell() == "not measured"
    assert Measure(1.5, "s", "how", {"n": 3}).to_dict() == {"value": 1.5, "unit": "s", "how": "how", "n": 3}


def _count_job(i: int) -> tuple[int, float]:
    return 2, 0.01


def test_timed_pool_counts_episodes() -> None:
    r = timed_pool(_count_job, n_jobs=3, workers=2)
    assert r["episodes"] == 6 and r["cpu_s_per_episode"] == pytest.approx(0.005) and r["eps_per_s"] > 0
    t = throughput_measure({1: {"eps_per_s": 2.0}, 2: {"eps_per_s": 3.0}}, "toy")
    assert t.value == 3.0 and t.extra["speedup"] == 1.5
