"""The world's opt-in per-category mechanisms: off by default (bit-identical), each moves its category."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd
import pytest

from transferlab.platform.config import ConfigError
from transferlab.simulator.vocabulary import CATEGORIES, CampaignAction
from transferlab.simulator.world import MarketWorld
from transferlab.simulator.world_config import WorldConfig

# sha256 of the values of the event and daily tables of the world below (numbers as float64 bytes of the
# value rounded to 10 significant digits, so no CSV formatting of a pandas version and no last-bit
# difference of numpy's SIMD math enters it). The full-precision digest differs between CPUs: numpy's
# AVX-512 exp/log differ from its AVX2 ones in the last bit (checked by NPY_DISABLE_CPU_FEATURES=X86_V4 on
# an AVX-512 machine: the full digest changes, this one does not). Computed on commit 39270fd, from
# before the per-category seasonality, carrier delay and late-delivery aversion existed, and equal on
# the commit that added them and later ones (pandas 3.1.1, numpy 2.4.6). With their defaults the world
# is unchanged.
DEFAULT_WORLD_SHA256 = "cb10d1759b8de036ad53a75ab4581020e94e1d2ec1656dc3370b9659dfe165a2"


def table_digest(frames: list[pd.DataFrame]) -> str:
    """sha256 over each column's name and values: numbers rounded to 10 significant digits as float64
    bytes, anything else as text."""
    digest = hashlib.sha256()
    for frame in frames:
        for name in frame.columns:
            column = frame[name]
            digest.update(str(name).encode())
            if pd.api.types.is_numeric_dtype(column):
                rounded = [float(f"{x:.10g}") for x in column.to_numpy(dtype="float64")]
                digest.update(np.asarray(rounded, dtype="float64").tobytes())
            else:
                digest.update("\x1f".join(map(str, column.tolist())).encode())
    return digest.hexdigest()


def test_default_world_is_bit_identical_to_before_the_opt_in_mechanisms() -> None:
    world = MarketWorld(WorldConfig(n_customers=400, seed=11, rate_scale=3.0))
    for d in range(50):
        if d % 10 == 0:
            world.launch(CampaignAction(0.2, 20, "all", 4.0))
        world.advance()
    assert table_digest([world.event_frame(), world.daily_frame()]) == DEFAULT_WORLD_SHA256


def events(days: int = 60, n: int = 3000, **cfg: Any) -> pd.DataFrame:
    world = MarketWorld(WorldConfig(n_customers=n, seed=2, rate_scale=3.0, **cfg))
    world.advance(days)
    return world.event_frame()


def per_category(ev: pd.DataFrame, kind: str, lo: int = 0) -> pd.Series:
    mine = ev[(ev["event"] == kind) & (ev["day"] >= lo)]
    return mine.groupby("category").size().reindex(range(len(CATEGORIES)), fill_value=0)


def shares(ev: pd.DataFrame, lo: int, hi: int) -> pd.Series:
    mine = ev[(ev["event"] == "purchase") & (ev["day"] >= lo) & (ev["day"] < hi)]
    return mine.groupby("category").size().reindex(range(len(CATEGORIES)), fill_value=0) / len(mine)


def test_yearly_seasonality_moves_only_its_category_from_peak_to_trough() -> None:
    world = MarketWorld(WorldConfig(category_seasonality={"shoes": (0.6, 0)}))
    k = CATEGORIES.index("shoes")
    assert world.yearly_season(0)[k] == pytest.approx(1.6) and world.yearly_season(182)[k] < 0.41
    assert MarketWorld(WorldConfig()).yearly_season(0) is None  # off: no factor at all
    still = {"drift_per_month": 0.0}  # no preference drift: the mix moves only by the season
    base, season = events(200, **still), events(200, category_seasonality={"shoes": (0.6, 0)}, **still)
    # shoes' share of orders at the peak (days 0-30) over its share at the trough (days 160-200)
    swing = {
        name: shares(ev, 0, 30) / shares(ev, 160, 200) for name, ev in (("base", base), ("season", season))
    }
    assert swing["season"][k] > 2.0 * swing["base"][k]
    others = [j for j in range(len(CATEGORIES)) if j != k]
    # and within the other categories, the mix stays the same
    mix = {
        name: shares(ev, 160, 200)[others] / shares(ev, 160, 200)[others].sum()
        for name, ev in (("base", base), ("season", season))
    }
    assert (mix["season"] - mix["base"]).abs().max() < 0.05


def test_carrier_delay_makes_its_category_late_and_complained_about() -> None:
    base = events()
    late = events(category_carrier_delay={"menswear": (0.6, 5)})
    k = CATEGORIES.index("menswear")
    for kind in ("late_delivery", "complaint"):
        before, after = per_category(base, kind), per_category(late, kind)
        assert after[k] > 5 * max(before[k], 1)
        assert all(after[j] < 2 * before[j] + 10 for j in range(len(CATEGORIES)) if j != k)
    delays = late[late["event"] == "late_delivery"]
    assert len(delays) and (delays["category"] == k).mean() > 0.8


def test_late_delivery_aversion_cuts_repeat_purchases_of_the_late_category() -> None:
    late = {"category_carrier_delay": {"accessories": (0.8, 5)}, "drift_per_month": 0.0}
    k = CATEGORIES.index("accessories")
    plain = shares(events(90, **late), 45, 90)
    averse = shares(events(90, late_delivery_aversion=3.0, **late), 45, 90)
    assert averse[k] < 0.8 * plain[k]  # customers whose accessories came late buy other categories


def test_bad_per_category_values_say_how_to_fix_them() -> None:
    with pytest.raises(ConfigError, match="unknown category 'toys'"):
        WorldConfig(category_seasonality={"toys": (0.3, 10)})
    with pytest.raises(ConfigError, match=r"\[0, 0.9\]"):
        WorldConfig(category_seasonality={"shoes": (1.5, 10)})
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        WorldConfig(category_carrier_delay={"shoes": (1.5, 2)})
