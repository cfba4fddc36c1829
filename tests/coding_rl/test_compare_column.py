"""The coding family's measures: committed reports parsed, the verifier graded and attacked."""

from __future__ import annotations

from pathlib import Path

import pytest

from transferlab.coding_rl.compare_column import (
    coding_attacks,
    coding_determinism,
    flat_shares,
    learn_figures,
    parse_learn_report,
)

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_committed_coding_results_parse(tmp_path: Path) -> None:
    learn = learn_figures(RESULTS / "coding_learn")
    assert learn["gain"] == pytest.approx(0.139, abs=5e-4) and learn["sft_success"] == pytest.approx(
        0.489, abs=5e-4
    )
    assert (round(learn["gain_low"], 3), round(learn["gain_high"], 3)) == (-0.006, 0.275)  # seed clusters
    assert learn["gain_clusters"] == 3 and learn["gain_mde"] == pytest.approx(0.201, abs=5e-4)
    assert (learn["wall_min"], learn["cores"]) == (7.1, 2.0)
    flat = flat_shares(RESULTS / "coding_dense_sparse")
    assert flat == pytest.approx({"dense_flat_share": 0.546, "sparse_flat_share": 0.736}, abs=5e-4)
    assert parse_learn_report("nothing here") == {}
    assert learn_figures(tmp_path) == {} and flat_shares(tmp_path) == {}


def test_coding_grading_is_exactly_repeatable_and_attacks_are_blocked() -> None:
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig
    from transferlab.coding_rl.sandbox.verifier import Verifier

    backend, _, _ = open_backend(SandboxConfig(workers=2))
    try:
        verifier = Verifier(backend)
        det, delay = coding_determinism(verifier, replays=3)
        attacks = coding_attacks(verifier)
    finally:
        backend.close()
    assert det.value == 0.0
    assert det.extra["per_source"]["solution"]["mean"] > det.extra["per_source"]["bug"]["mean"]
    assert delay.value is not None and 0 < delay.value < 5
    assert attacks.value == 1.0 and attacks.extra["honest"] == "passed"
