"""The campaign families' measures: the GMV-margin conflict, replays of the world."""

from __future__ import annotations

import pytest

from transferlab.platform.measures import spread
from transferlab.simulator.compare_columns import campaign_replay, gmv_margin_conflict, world_market


def test_gmv_margin_conflict_on_a_small_panel() -> None:
    panel = {
        "a": {"gmv": 100.0, "profit": 30.0},
        "b": {"gmv": 200.0, "profit": 20.0},
        "c": {"gmv": 300.0, "profit": 10.0},
    }
    conflict = gmv_margin_conflict(panel)
    assert conflict.value == pytest.approx(-1.0) and conflict.unit == "corr" and "3 panel" in conflict.how


def test_world_replays_differ_across_seeds_but_not_within_one() -> None:
    def market(_seed: int) -> object:
        return world_market(100, 1)

    different = campaign_replay(market, [1, 2, 3])
    same = campaign_replay(market, [1, 1])
    assert spread(different["returns"])["std"] > 0
    assert spread(same["returns"])["std"] == 0.0
