"""The campaign_offline column's summary of the committed offline RL result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transferlab.comparison.offline_column import offline_summary

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_offline_summary_of_the_committed_result() -> None:
    data = json.loads((RESULTS / "offline_rl" / "result.json").read_text())
    o = offline_summary(data)
    pol = data["main"]["policies"]
    assert o["chosen"] == data["main"]["selection"]["chosen"]
    paired = next(
        c for c in data["comparisons"] if c["name"] == "selected - marketer" and c["cluster"] == "seed"
    )
    assert o["gain"] == pytest.approx(paired["estimate"]) and o["gain_ci"] == paired["ci"]
    assert o["gain_seeds"] == len(data["seeds"]) >= 3
    assert set(o["chosen_by_seed"].values()) <= set(pol)
    assert o["ope_half_width_median"] > 0 and 0 <= o["trusted"] <= o["learners"]
