"""The campaign_offline column's summary of the committed offline RL result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transferlab.comparison.measures import offline_summary

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_offline_summary_of_the_committed_result() -> None:
    data = json.loads((RESULTS / "offline_rl" / "result.json").read_text())
    o = offline_summary(data)
    pol = data["main"]["policies"]
    assert o["chosen"] == data["main"]["selection"]["chosen"]
    assert o["gain"] == pytest.approx(
        pol[o["chosen"]]["world"]["estimate"] - pol["marketer"]["world"]["estimate"]
    )
    assert o["ope_half_width_median"] > 0 and 0 <= o["trusted"] <= o["learners"]
