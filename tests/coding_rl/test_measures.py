"""The coding family's measures: committed reports parsed, the verifier graded and attacked."""

from __future__ import annotations

from pathlib import Path

import pytest

from transferlab.coding_rl.measures import (
    coding_attacks,
    coding_determinism,
    parse_dense_sparse_report,
    parse_learn_report,
)

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_committed_coding_reports_parse() -> None:
    learn = parse_learn_report((RESULTS / "coding_learn" / "report.md").read_text())
    assert learn["gain"] == pytest.approx(0.139) and learn["sft_success"] == pytest.approx(0.489)
    assert (learn["wall_min"], learn["cores"]) == (15.1, 2.0)
    flat = parse_dense_sparse_report((RESULTS / "coding_dense_sparse" / "report.md").read_text())
    assert flat == {"dense_flat_share": 0.546, "sparse_flat_share": 0.808}
    assert parse_learn_report("nothing here") == {}


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
