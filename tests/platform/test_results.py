"""result.json: comparisons built from clustered values, the schema, and reading a bad file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from transferlab.platform.results import (
    Arm,
    Comparison,
    Estimate,
    Result,
    ResultError,
    comparison,
    estimate,
    read_result,
    write_result,
)
from transferlab.platform.stats import clustered_bootstrap_diff_ci, mde

SEEDS = [0, 0, 0, 1, 1, 1, 2, 2, 2]
TASKS = ["t0", "t1", "t2"] * 3
SFT = [0.25, 0.5, 0.0, 0.5, 0.75, 0.25, 0.0, 0.25, 0.5]
RL = [0.5, 0.5, 0.25, 0.25, 1.0, 0.5, 0.25, 0.25, 0.5]


def result(**changes: object) -> Result:
    data: dict[str, object] = {
        "experiment": "coding-learn",
        "command": "transferlab coding experiment learn --preset smoke",
        "seeds": [0, 1, 2],
        "settings": {"eval_samples": 2},
        "arms": {
            "sft": {"held_out_success": {"estimate": 0.33, "ci": [0.2, 0.45]}, "n_episodes": 18},
            "grpo": {
                "held_out_success": {"estimate": 0.44, "ci": [0.3, 0.6]},
                "n_episodes": 18,
                "per_seed": [0.4, 0.6, 0.3],
            },
        },
        "comparisons": [
            {
                "name": "grpo - sft",
                "estimate": 0.11,
                "ci": [-0.05, 0.27],
                "cluster": "seed",
                "n_clusters": 3,
                "mde": 0.23,
            }
        ],
    }
    data.update(changes)
    return Result.model_validate(data)


def test_a_seed_clustered_comparison_is_a_t_interval_on_per_seed_differences() -> None:
    c = comparison("grpo - sft", SFT, SEEDS, RL, SEEDS, cluster="seed", paired=True)
    # per seed, mean(RL) - mean(SFT): 1/6, 1/12, 1/12; mean 1/9, sd 0.0481, t(0.975, 2) = 4.3027
    diffs = [1 / 6, 1 / 12, 1 / 12]
    sd = float(np.std(diffs, ddof=1))
    half = 4.302653 * sd / np.sqrt(3)
    assert c.estimate == pytest.approx(sum(RL) / 9 - sum(SFT) / 9) == pytest.approx(1 / 9)
    assert c.ci == pytest.approx((1 / 9 - half, 1 / 9 + half), abs=1e-6)
    assert c.n_clusters == 3 and c.cluster == "seed"
    assert c.mde == pytest.approx((4.302653 + 1.060660) * sd / np.sqrt(3), abs=1e-6)
    with pytest.raises(ValueError, match="pass paired=True"):
        comparison("grpo - sft", SFT, SEEDS, RL, SEEDS, cluster="seed", paired=False)


def test_other_clusters_are_the_conditional_bootstrap_and_say_so() -> None:
    pairs = list(zip(SEEDS, TASKS, strict=True))
    c = comparison("grpo - sft", SFT, pairs, RL, pairs, cluster="seed+task", paired=True)
    codes = list(range(9))
    iv = clustered_bootstrap_diff_ci(SFT, codes, RL, codes, paired=True, seed=0)
    assert c.ci == (iv.low, iv.high) and c.conditional
    line = c.sentence()
    assert line.startswith("grpo - sft, conditional on these trained policies: +11.1 points")
    assert "improved" not in line and "no detectable change" not in line


def test_seed_task_clusters_are_pairs_and_count_every_pair() -> None:
    pairs = list(zip(SEEDS, TASKS, strict=True))
    c = comparison("grpo - sft", SFT, pairs, RL, pairs, cluster="seed+task", paired=True)
    assert c.n_clusters == 9
    # one item per cluster: the same as clustering by any labels that name each pair once
    same = comparison("grpo - sft", SFT, list(range(9)), RL, list(range(9)), cluster="seed+task", paired=True)
    assert c.ci == same.ci


def test_unpaired_comparison_counts_the_smaller_side() -> None:
    c = comparison(
        "a - b", [0.0, 1.0, 0.5, 0.5], [0, 0, 1, 1], [1.0, 0.0, 1.0], [5, 6, 7], cluster="task", paired=False
    )
    assert c.n_clusters == 2


def test_a_constant_shift_gives_a_point_interval_and_zero_mde() -> None:
    c = comparison("b - a", [0.25] * 6, SEEDS[:6], [0.5] * 6, SEEDS[:6], cluster="seed", paired=True)
    assert c.ci == (0.25, 0.25) and c.mde == 0.0
    assert c.verdict == "improved"


def test_a_comparison_straddling_zero_is_never_called_improved() -> None:
    c = Comparison(
        name="grpo - sft",
        estimate=0.139,
        ci=(-0.012, 0.29),
        cluster="seed",
        n_clusters=3,
        mde=mde(-0.012, 0.29),
    )
    assert c.verdict == "no detectable change"
    line = c.sentence()
    assert line.startswith("grpo - sft: pipeline ran, no detectable change: +13.9 points")
    assert "MDE 21.6 points" in line and "95% t-interval over 3 seeds" in line
    assert "improved" not in line


def test_estimate_is_a_t_interval_over_the_seed_means() -> None:
    e = estimate(RL, SEEDS)
    means = [1.25 / 3, 1.75 / 3, 1.0 / 3]
    half = 4.302653 * float(np.std(means, ddof=1)) / np.sqrt(3)
    assert e.estimate == pytest.approx(sum(RL) / 9)
    assert e.ci == pytest.approx((sum(RL) / 9 - half, sum(RL) / 9 + half), abs=1e-6)
    assert estimate([0.2, 0.4], [0, 0]).ci == (pytest.approx(0.3), pytest.approx(0.3))  # one seed


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    r = result()
    path = write_result(tmp_path / "report", r)
    assert path == tmp_path / "report" / "result.json"
    assert read_result(path) == r
    assert read_result(tmp_path / "report") == r  # the directory works too
    assert r.arms["grpo"].model_extra == {"per_seed": [0.4, 0.6, 0.3]}
    assert json.loads(path.read_text())["comparisons"][0]["ci"] == [-0.05, 0.27]
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]  # no temp file left behind


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "is not valid JSON"),
        ('{"experiment": "x"}', "command: Field required"),
        ("[1, 2]", "(top level)"),
    ],
)
def test_a_malformed_file_is_one_clear_error(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "result.json"
    path.write_text(text)
    with pytest.raises(ResultError, match="regenerate it") as info:
        read_result(path)
    assert needle in str(info.value) and str(path) in str(info.value)


def test_a_missing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ResultError, match=r"does not exist: pass a result\.json"):
        read_result(tmp_path)


def test_the_schema_rejects_reversed_intervals_unknown_clusters_and_missing_figures() -> None:
    base = result().model_dump(mode="json")
    bad_ci = {**base["comparisons"][0], "ci": [0.3, -0.1]}
    with pytest.raises(ValueError, match="low <= high"):
        result(comparisons=[bad_ci])
    with pytest.raises(ValueError, match="cluster"):
        result(comparisons=[{**base["comparisons"][0], "cluster": "world"}])
    with pytest.raises(ValueError, match="mde"):
        result(comparisons=[{k: v for k, v in base["comparisons"][0].items() if k != "mde"}])
    with pytest.raises(ValueError, match="n_episodes"):
        result(arms={"sft": {"held_out_success": {"estimate": 0.1, "ci": [0.0, 0.2]}}})
    assert Arm(held_out_success=Estimate(estimate=0.5, ci=(0.4, 0.6)), n_episodes=4).n_episodes == 4


def test_a_paired_comparison_differences_item_by_item() -> None:
    from transferlab.platform.results import paired_comparison

    # the same 3 world futures per seed under two policies; b - a per item: seed 0: 1, 1, 1; seed 1: 2, 2, 2
    a = [10.0, -5.0, 30.0, 8.0, 0.0, -20.0]
    b = [11.0, -4.0, 31.0, 10.0, 2.0, -18.0]
    seeds = [0, 0, 0, 1, 1, 1]
    c = paired_comparison("b - a", a, b, seeds, cluster="seed")
    # the unit is the seed: per-seed mean differences 1 and 2, a t-interval with 1 degree of freedom
    half = 12.706205 * float(np.std([1.0, 2.0], ddof=1)) / np.sqrt(2)
    assert c.estimate == pytest.approx(1.5) and c.n_clusters == 2
    assert c.ci == pytest.approx((1.5 - half, 1.5 + half), abs=1e-5)
    # conditional on the policies, items paired by future: every replicate lies between 1 and 2
    pairs = list(zip(seeds, range(6), strict=True))
    episodes = paired_comparison("b - a", a, b, pairs, cluster="seed+episode")
    assert episodes.n_clusters == 6 and episodes.conditional
    assert episodes.ci[0] >= 1.0 - 1e-12 and episodes.ci[1] <= 2.0 + 1e-12
    # the futures drawn independently for the two sides: their shared noise swamps the difference
    loose = comparison("b - a", a, pairs, b, pairs, cluster="seed+episode", paired=False)
    assert loose.ci[1] - loose.ci[0] > 10 * (episodes.ci[1] - episodes.ci[0])
    with pytest.raises(ValueError, match="one a, one b and one cluster label per item"):
        paired_comparison("x", a, b[:-1], seeds, cluster="seed")
