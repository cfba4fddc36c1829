"""The comparison's measures: the arithmetic by hand, and each environment measure on tiny inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from transferlab.comparison import measures as m
from transferlab.simulator.ops import task_ids

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"


def test_spread_by_hand() -> None:
    assert m.spread([2.0, 2.0, 2.0]) == {"std": 0.0, "iqr": 0.0, "mean": 2.0, "n": 3}
    s = m.spread([1.0, 2.0, 3.0, 4.0])
    assert s["std"] == pytest.approx(math.sqrt(1.25)) and s["iqr"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="at least one"):
        m.spread([])


def test_pearson_by_hand() -> None:
    # dx = (-1, 0, 1), dy = (-7/3, -1/3, 8/3): r = 5 / sqrt(2 * 38/3)
    assert m.pearson([1, 2, 3], [2, 4, 7]) == pytest.approx(5 / math.sqrt(2 * 38 / 3))
    assert math.isnan(m.pearson([1, 2, 3], [5, 5, 5]))
    with pytest.raises(ValueError, match="equal-length"):
        m.pearson([1, 2], [1, 2, 3])


def test_gmv_margin_conflict_on_a_small_panel() -> None:
    panel = {
        "a": {"gmv": 100.0, "profit": 30.0},
        "b": {"gmv": 200.0, "profit": 20.0},
        "c": {"gmv": 300.0, "profit": 10.0},
    }
    conflict = m.gmv_margin_conflict(panel)
    assert conflict.value == pytest.approx(-1.0) and conflict.unit == "corr" and "3 panel" in conflict.how


def test_nonflat_share_and_agreement() -> None:
    assert m.nonflat_share([[0, 0], [0, 1], [1, 1], [2, 3]]) == 0.5
    assert m.agreement_share([1, 2, 3, 4], [1, 2, 0, 4]) == 0.75
    assert m.per_cost(10.0, 0.5) == 20.0 and math.isnan(m.per_cost(1.0, 0.0))


def test_measure_cell() -> None:
    assert m.Measure(0.0, "std", "x").cell() == "0 std"
    assert m.not_measured("why").cell() == "not measured"
    assert m.Measure(1.5, "s", "how", {"n": 3}).to_dict() == {"value": 1.5, "unit": "s", "how": "how", "n": 3}


def test_committed_coding_reports_parse() -> None:
    learn = m.parse_learn_report((RESULTS / "coding_learn" / "report.md").read_text())
    assert learn["gain"] == pytest.approx(0.139) and learn["sft_success"] == pytest.approx(0.489)
    assert (learn["wall_min"], learn["cores"]) == (15.1, 2.0)
    flat = m.parse_dense_sparse_report((RESULTS / "coding_dense_sparse" / "report.md").read_text())
    assert flat == {"dense_flat_share": 0.546, "sparse_flat_share": 0.808}
    assert m.parse_learn_report("nothing here") == {}


def test_offline_summary_of_the_committed_result() -> None:
    data = json.loads((RESULTS / "offline_rl" / "result.json").read_text())
    o = m.offline_summary(data)
    pol = data["main"]["policies"]
    assert o["chosen"] == data["main"]["selection"]["chosen"]
    assert o["gain"] == pytest.approx(
        pol[o["chosen"]]["world"]["estimate"] - pol["marketer"]["world"]["estimate"]
    )
    assert o["ope_half_width_median"] > 0 and 0 <= o["trusted"] <= o["learners"]


def test_coding_grading_is_exactly_repeatable_and_attacks_are_blocked() -> None:
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.coding_rl.sandbox.verifier import Verifier

    backend, _, _ = open_backend(SandboxConfig(workers=2))
    try:
        verifier = Verifier(backend)
        det, delay = m.coding_determinism(verifier, replays=3)
        attacks = m.coding_attacks(verifier)
    finally:
        backend.close()
    assert det.value == 0.0
    assert det.extra["per_source"]["solution"]["mean"] > det.extra["per_source"]["bug"]["mean"]
    assert delay.value is not None and 0 < delay.value < 5
    assert attacks.value == 1.0 and attacks.extra["honest"] == "passed"


def test_ops_replay_has_zero_spread() -> None:
    from transferlab.simulator.ops import ExpertAgent

    tid = task_ids("train", 1)[0]
    expert = m.ops_episode(tid, ExpertAgent())
    returns, report_s = m.ops_replay(tid, expert["actions"], replays=3)
    assert m.spread(returns)["std"] == 0.0 and returns[0] == pytest.approx(expert["return"])
    assert len(report_s) == 3


def test_ops_probes_keep_keyword_stuffing_below_success() -> None:
    probe = m.ops_probes(task_ids("train", 1)[0])
    assert probe.value is not None and probe.value < 8.0
    assert probe.extra["probes"]["expert report"] == 10.0


def test_world_replays_differ_across_seeds_but_not_within_one() -> None:
    def market(_seed: int) -> object:
        return m.world_market(100, 1)

    different = m.campaign_replay(market, [1, 2, 3])
    same = m.campaign_replay(market, [1, 1])
    assert m.spread(different["returns"])["std"] > 0
    assert m.spread(same["returns"])["std"] == 0.0


def _count_job(i: int) -> tuple[int, float]:
    return 2, 0.01


def test_timed_pool_counts_episodes() -> None:
    r = m.timed_pool(_count_job, n_jobs=3, workers=2)
    assert r["episodes"] == 6 and r["cpu_s_per_episode"] == pytest.approx(0.005) and r["eps_per_s"] > 0
    t = m.throughput_measure({1: {"eps_per_s": 2.0}, 2: {"eps_per_s": 3.0}}, "toy")
    assert t.value == 3.0 and t.extra["speedup"] == 1.5
