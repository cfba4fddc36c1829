"""Campaign environments: check_env, reward scalarisation by hand, vector stepping, delayed credit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import transferlab.simulator.envs as envs
from transferlab.platform.config import ConfigError
from transferlab.simulator.envs.campaign import (
    OBS_DIM,
    CampaignEnv,
    CampaignVectorEnv,
    Constraint,
    EpisodeConfig,
    RewardConfig,
    WorldMarket,
    run_policy,
    scalarize,
)
from transferlab.simulator.vocabulary import CATALOG, DAY_KEYS, CampaignAction, catalog_index
from transferlab.simulator.world_config import WorldConfig

SHORT = EpisodeConfig.build(horizon=5, warmup_days=7, settle_days=3)


def test_the_world_env_passes_check_env() -> None:
    env = gym.make(envs.WORLD_ENV_ID, n_customers=200, episode=SHORT)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (OBS_DIM,) and obs[-1] == 1.0


def test_scalarize_by_hand() -> None:
    out = np.zeros((2, len(DAY_KEYS)))
    out[:, DAY_KEYS.index("profit")] = [300.0, 100.0]
    out[:, DAY_KEYS.index("complaints")] = [1.0, 5.0]
    cfg = RewardConfig.build(
        weights={"profit": 1.0, "complaints": -10.0},
        constraints=[Constraint(key="complaints", kind="max", limit=2.0, penalty=50.0)],
        scale=0.01,
    )
    # (300 - 10) * 0.01 = 2.9 ; (100 - 50 - 50 * (5 - 2)) * 0.01 = -1.0
    assert scalarize(out, cfg).tolist() == pytest.approx([2.9, -1.0])


def test_unknown_reward_keys_are_named() -> None:
    with pytest.raises(ConfigError, match="unknown outcome"):
        RewardConfig.build(weights={"revenue": 1.0})
    with pytest.raises(ValueError, match="unknown outcome 'nps'"):
        Constraint(key="nps", limit=1.0, penalty=1.0)


def test_episodes_end_at_the_horizon_and_settle_delayed_effects() -> None:
    env = CampaignEnv(WorldMarket(WorldConfig(n_customers=1500, seed=0)), SHORT)
    env.reset(seed=3)
    deep = catalog_index(CampaignAction(0.3, 20, "all", 60.0))
    infos = []
    for t in range(5):
        _, _, terminated, truncated, info = env.step(deep)
        infos.append(info)
        assert not terminated and truncated == (t == 4)
    assert set(infos[0]["outcome"]) == set(DAY_KEYS)
    assert "settled_reward" in infos[-1] and "settled_reward" not in infos[0]
    with pytest.raises(ValueError, match="not in Discrete"):
        env.step(len(CATALOG))


def test_the_vector_env_steps_many_markets_at_once_and_is_seeded() -> None:
    market = WorldMarket(WorldConfig(n_customers=300, seed=0), n_envs=3)
    venv = CampaignVectorEnv(market, SHORT)
    obs, _ = venv.reset(seed=2)
    assert obs.shape == (3, OBS_DIM)
    obs, rewards, term, trunc, info = venv.step(np.array([0, 1, 2]))
    assert rewards.shape == (3,) and info["outcome"].shape == (3, len(DAY_KEYS))
    assert not term.any() and not trunc.any()
    noop = lambda o, rng: np.zeros(len(o), dtype=np.int64)  # noqa: E731
    a = run_policy(WorldMarket(WorldConfig(n_customers=300), n_envs=2), noop, SHORT, seed=4)
    b = run_policy(WorldMarket(WorldConfig(n_customers=300), n_envs=2), noop, SHORT, seed=4)
    np.testing.assert_array_equal(a["return"], b["return"])
    assert a["return"][0] != a["return"][1]  # independent markets


def test_a_market_with_the_wrong_batch_size_is_refused() -> None:
    with pytest.raises(ValueError, match="n_envs=1"):
        CampaignEnv(WorldMarket(WorldConfig(n_customers=50), n_envs=2))


def test_the_learned_simulator_env_passes_check_env_and_steps_in_batches() -> None:
    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import LogSpec, generate_logs

    logs = generate_logs(LogSpec(days=60, world=WorldConfig(n_customers=300, seed=2)))
    sim = LearnedSimulator.fit(logs)
    env = gym.make(envs.SIM_ENV_ID, simulator=sim, n_customers=300, episode=SHORT)
    check_env(env.unwrapped, skip_render_check=True)
    venv = CampaignVectorEnv(sim.market(n_envs=16, n_customers=300, seed=0), SHORT)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (16, OBS_DIM)
    _, rewards, _, _, info = venv.step(np.arange(16))
    assert rewards.shape == (16,) and info["outcome"].shape == (16, len(DAY_KEYS))
