"""Offline datasets from campaign logs: shapes, rewards by hand, maturity, validation naming rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from transferlab.offline.datasets import (
    DatasetConfig,
    DatasetError,
    build_dataset,
    continuous_to_catalog,
    discount_to_continuous,
    from_logs,
)
from transferlab.simulator.envs.campaign import OBS_DIM
from transferlab.simulator.logs import LogSpec, generate_logs
from transferlab.simulator.vocabulary import CATALOG, OBS_KEYS, CampaignAction, catalog_index
from transferlab.simulator.world_config import WorldConfig


@pytest.fixture(scope="module")
def logs():  # type: ignore[no-untyped-def]
    return generate_logs(LogSpec(days=100, world=WorldConfig(n_customers=300, seed=3)))


def _table(n: int = 10) -> pd.DataFrame:
    """A hand-made campaign table with the documented columns."""
    rows = []
    for day in range(n):
        row: dict[str, float | int | bool] = {"day": day, **{f"ctx_{k}": float(day) for k in OBS_KEYS}}
        launched = day % 2 == 1
        row.update(
            action_index=5 if launched else 0,
            propensity=0.5,
            launched=launched,
            discount=CATALOG[5].discount if launched else 0.0,
            matured=launched and day < n - 2,
            day_profit=100.0 * day,
            day_complaints=1.0,
            o_profit=(10.0 if day < n - 2 else np.nan) if launched else np.nan,
        )
        rows.append(row)
    return pd.DataFrame(rows)


def test_from_logs_shapes_and_episodes(logs) -> None:  # type: ignore[no-untyped-def]
    ds = from_logs(logs, DatasetConfig(horizon=30))
    assert len(ds) == 90 and ds.n_episodes == 3  # 100 days: 3 whole episodes, the partial one dropped
    assert ds.observations.shape == (90, OBS_DIM)
    assert ds.terminals.sum() == 3 and ds.terminals[29] and ds.terminals[-1]
    assert np.all((ds.propensity > 0) & (ds.propensity <= 1))
    np.testing.assert_allclose(ds.observations[:30, -1], 1.0 - np.arange(30) / 30)
    mdp = ds.to_mdp()
    assert mdp.size() == 3
    cont = ds.to_mdp("continuous")
    assert cont.episodes[0].actions.shape == (30, 1)


def test_day_reward_by_hand() -> None:
    ds = build_dataset(_table(10), DatasetConfig(horizon=5))
    # default reward: (profit - 10 * complaints) * 0.01
    np.testing.assert_allclose(ds.rewards, (100.0 * np.arange(10) - 10.0) * 0.01)
    assert ds.n_episodes == 2
    np.testing.assert_allclose(ds.episode_returns(), [(1000 - 50) * 0.01, (3500 - 50) * 0.01])


def test_campaign_reward_drops_immature_rows_never_zero() -> None:
    cfg = DatasetConfig(
        horizon=4, reward_source="campaign", reward={"weights": {"profit": 1.0}, "scale": 1.0}
    )
    ds = build_dataset(_table(10), cfg)
    # day 9 is launched but not matured: dropped; day 8 (no campaign) keeps a known zero
    assert 9 not in ds.observations[:, 0]
    assert len(ds) == 8  # days 0-7 in two episodes of 4; day 8 alone is a partial episode, dropped
    np.testing.assert_allclose(ds.rewards, [0, 10, 0, 10, 0, 10, 0, 10])
    assert ds.matured.all()
    with pytest.raises(DatasetError, match=r"rows \[9\].*not matured"):
        build_dataset(_table(10), cfg.model_copy(update={"immature": "error"}))


def test_keep_partial_and_gaps() -> None:
    table = _table(10).drop(index=[3])
    ds = build_dataset(table, DatasetConfig(horizon=30, keep_partial=True))
    assert ds.n_episodes == 2  # a gap in the days ends an episode
    assert ds.terminals.sum() == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.drop(columns=["propensity"]), r"missing column\(s\) \['propensity'\]"),
        (
            lambda t: t.assign(propensity=[0.5] * 4 + [0.0] + [0.5] * 5),
            r"rows \[4\] have propensities outside",
        ),
        (lambda t: t.assign(propensity=[0.5] * 6 + [1.5] + [0.5] * 3), r"rows \[6\] have propensities"),
        (lambda t: t.assign(day_profit=[1.0] * 7 + [np.nan] * 3), r"rows \[7, 8, 9\] have NaN rewards"),
        (lambda t: t.assign(action_index=[0] * 9 + [151]), r"rows \[9\] have action_index outside"),
        (lambda t: t.assign(ctx_gmv_7d=[np.nan] + [1.0] * 9), r"rows \[0\] have NaN or infinite ctx"),
        (lambda t: t.iloc[0:0], r"empty"),
    ],
)
def test_validation_names_rows(mutate, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DatasetError, match=message):
        build_dataset(mutate(_table(10)), DatasetConfig(horizon=5))


def test_too_short_and_bad_campaign_weights() -> None:
    with pytest.raises(DatasetError, match="no complete episode"):
        build_dataset(_table(10), DatasetConfig(horizon=30))
    with pytest.raises(DatasetError, match="reward_source='day'"):
        build_dataset(
            _table(10), DatasetConfig(reward_source="campaign", reward={"weights": {"pushes": 1.0}})
        )


def test_several_logs_get_distinct_episodes() -> None:
    ds = build_dataset([_table(10), _table(10)], DatasetConfig(horizon=5))
    assert ds.n_episodes == 4 and len(ds) == 20


def test_continuous_action_round_trip() -> None:
    launched = pd.Series([False, True, True, True, True])
    discounts = pd.Series([0.0, 0.05, 0.1, 0.2, 0.3])
    a = discount_to_continuous(discounts, launched)
    assert a.min() == -1.0 and a.max() == 1.0
    back = continuous_to_catalog(a.reshape(-1, 1))
    assert back[0] == 0
    for idx, d in zip(back[1:], [0.05, 0.1, 0.2, 0.3], strict=True):
        assert idx == catalog_index(CampaignAction(d, 20, "all", 20.0))
    # values outside [-1, 1] are clipped
    assert continuous_to_catalog(np.array([[5.0]]))[0] == catalog_index(CampaignAction(0.3, 20, "all", 20.0))
