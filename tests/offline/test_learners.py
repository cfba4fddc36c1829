"""Offline learners: one conformance test over every learner, plus bandits that prove each one learns."""

from __future__ import annotations

import json
from pathlib import Path

import d3rlpy
import numpy as np
import pytest
import torch
from d3rlpy.dataset import MDPDataset

from transferlab.offline.learners import (
    CONTINUOUS,
    DISCRETE,
    LEARNERS,
    DiscreteCQLConfig,
    Learner,
    LearnerConfig,
    learner_config,
    load_learner,
)
from transferlab.platform.config import ConfigError

OBS_DIM, N_ACTIONS, N_TRANSITIONS, EPISODE_LEN = 4, 5, 200, 10


def _episodic(continuous: bool, seed: int = 0) -> MDPDataset:
    """~200 random transitions in episodes of 10 that end in a terminal."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(N_TRANSITIONS, OBS_DIM)).astype(np.float32)
    terminals = np.zeros(N_TRANSITIONS, dtype=np.float32)
    terminals[EPISODE_LEN - 1 :: EPISODE_LEN] = 1.0
    rewards = rng.normal(size=N_TRANSITIONS).astype(np.float32)
    if continuous:
        continuous_actions = rng.uniform(-1, 1, size=(N_TRANSITIONS, 1)).astype(np.float32)
        return MDPDataset(
            obs, continuous_actions, rewards, terminals, action_space=d3rlpy.ActionSpace.CONTINUOUS
        )
    discrete_actions = rng.integers(0, N_ACTIONS, size=N_TRANSITIONS)
    return MDPDataset(obs, discrete_actions, rewards, terminals, action_space=d3rlpy.ActionSpace.DISCRETE)


@pytest.fixture(scope="module")
def datasets() -> dict[str, MDPDataset]:
    return {"discrete": _episodic(continuous=False), "continuous": _episodic(continuous=True)}


@pytest.fixture(scope="module")
def observations() -> np.ndarray:
    return np.random.default_rng(7).normal(size=(32, OBS_DIM)).astype(np.float32)


def _params(learner: Learner) -> dict[str, torch.Tensor]:
    out = {}
    for module_name, module in learner.algo.impl.modules.get_torch_modules().items():
        for name, value in module.state_dict().items():
            out[f"{module_name}.{name}"] = value.detach().clone()
    return out


def _fit(name: str, dataset: MDPDataset, n_steps: int, **overrides: object) -> Learner:
    learner = learner_config(name, **overrides).create()
    learner.fit(dataset, n_steps)
    return learner


# --------------------------------------------------------------------------------------------------
# Conformance: every learner through create / fit / predict / save / load / reseed
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LEARNERS))
def test_learner_conformance(
    name: str,
    datasets: dict[str, MDPDataset],
    observations: np.ndarray,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # d3rlpy must not write d3rlpy_logs/ into the cwd
    config = learner_config(name, seed=3)
    assert isinstance(config, LEARNERS[name]) and config.name == name
    learner = config.create()
    assert learner.kind == config.kind == ("discrete" if name in DISCRETE else "continuous")
    dataset = datasets[learner.kind]

    learner.build(dataset)
    before = _params(learner)
    calls: list[tuple[int, int]] = []
    history = learner.fit(
        dataset, 40, n_steps_per_epoch=15, progress=lambda done, total: calls.append((done, total))
    )

    # trained: parameters moved, per-epoch history under offline/, progress reached the end
    after = _params(learner)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert history["offline/step"] == [15.0, 30.0, 40.0]
    loss_key = "offline/loss" if learner.kind == "discrete" else "offline/critic_loss"
    assert len(history[loss_key]) == 3 and all(np.isfinite(history[loss_key]))
    assert all(key.startswith("offline/") and not key.startswith("offline/time_") for key in history)
    assert calls[-1] == (40, 40) and [c[0] for c in calls] == sorted(c[0] for c in calls)
    assert not (tmp_path / "d3rlpy_logs").exists()

    actions = learner.predict(observations)
    if learner.kind == "discrete":
        assert actions.shape == (32,) and actions.dtype == np.int64
        assert actions.min() >= 0 and actions.max() < N_ACTIONS
        probs = learner.action_probabilities(observations)
        assert probs.shape == (32, N_ACTIONS) and np.all(probs >= 0)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-6)
        np.testing.assert_array_equal(probs.argmax(axis=1), actions)
    else:
        assert actions.shape == (32, 1) and actions.dtype == np.float32
        assert np.all(np.abs(actions) <= 1.0)
        with pytest.raises(ValueError, match="continuous"):
            learner.action_probabilities(observations)

    saved = learner.save(tmp_path / "learner")
    assert json.loads((saved / "config.json").read_text())["name"] == name
    loaded = load_learner(saved)
    assert type(loaded.config) is type(config) and loaded.config == config
    np.testing.assert_array_equal(loaded.predict(observations), actions)
    with pytest.raises(FileExistsError, match="not empty"):
        learner.save(saved)

    twin = config.create()
    twin.fit(dataset, 40, n_steps_per_epoch=15)
    np.testing.assert_array_equal(twin.predict(observations), actions)
    assert all(torch.equal(after[k], v) for k, v in _params(twin).items())


def test_configs_map_to_d3rlpy_fields() -> None:
    cql = DiscreteCQLConfig(alpha=2.0, target_update_interval=7, hidden_units=[8])
    d3 = cql.d3rlpy_config()
    assert isinstance(d3, d3rlpy.algos.DiscreteCQLConfig)
    assert (d3.alpha, d3.target_update_interval, d3.encoder_factory.hidden_units) == (2.0, 7, [8])
    assert learner_config("discrete_bcq", action_flexibility=0.1).d3rlpy_config().action_flexibility == 0.1
    iql = learner_config("iql", expectile=0.8, weight_temp=1.0, actor_learning_rate=1e-3).d3rlpy_config()
    assert (iql.expectile, iql.weight_temp, iql.actor_learning_rate) == (0.8, 1.0, 1e-3)
    assert learner_config("td3_plus_bc", alpha=1.0).d3rlpy_config().alpha == 1.0
    assert learner_config("cql").d3rlpy_config().n_action_samples == 4
    assert set(LEARNERS) == set(DISCRETE) | set(CONTINUOUS)
    with pytest.raises(TypeError):
        LearnerConfig()  # type: ignore[abstract]


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


def test_unknown_learner_name_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown learner 'sac'") as info:
        learner_config("sac")
    assert all(name in str(info.value) for name in LEARNERS)


def test_bad_override_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="alpha"):
        learner_config("dqn", alpha=1.0)
    with pytest.raises(ConfigError, match="batch_size"):
        learner_config("dqn", batch_size=0)


@pytest.mark.parametrize("name", ["discrete_cql", "cql"])
def test_wrong_action_kind_is_rejected(name: str, datasets: dict[str, MDPDataset]) -> None:
    learner = learner_config(name).create()
    wrong = datasets["continuous" if learner.kind == "discrete" else "discrete"]
    with pytest.raises(ValueError, match="fix: use one of"):
        learner.fit(wrong, 10)


def test_fit_continues_and_checks_shapes(datasets: dict[str, MDPDataset]) -> None:
    learner = learner_config("dqn").create()
    learner.fit(datasets["discrete"], 10)
    history = learner.fit(datasets["discrete"], 5)
    assert learner.algo.grad_step == 15 and history["offline/step"] == [5.0]
    rng = np.random.default_rng(0)
    other = MDPDataset(
        rng.normal(size=(20, 3)).astype(np.float32), np.arange(20) % 2, np.zeros(20), np.ones(20)
    )
    with pytest.raises(ValueError, match="create a new learner"):
        learner.fit(other, 5)
    with pytest.raises(ValueError, match="n_steps"):
        learner.fit(datasets["discrete"], 0)


def test_continuous_actions_outside_unit_box_are_rejected() -> None:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(20, 2)).astype(np.float32)
    actions = rng.uniform(-3, 3, size=(20, 1)).astype(np.float32)
    dataset = MDPDataset(obs, actions, np.zeros(20, np.float32), np.ones(20))
    with pytest.raises(ValueError, match=r"rescale"):
        learner_config("td3_plus_bc").create().fit(dataset, 10)


def test_unfitted_learner_cannot_predict_or_save(tmp_path: Path) -> None:
    learner = learner_config("dqn").create()
    with pytest.raises(ValueError, match="fit"):
        learner.predict(np.zeros((1, 4), np.float32))
    with pytest.raises(ValueError, match="fit"):
        learner.save(tmp_path / "x")


def test_load_from_a_non_learner_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a saved learner"):
        load_learner(tmp_path)
    (tmp_path / "model.d3").write_bytes(b"")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_learner(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"name": "nope"}))
    with pytest.raises(ValueError, match="valid names"):
        load_learner(tmp_path)


# --------------------------------------------------------------------------------------------------
# Behaviour: each learner learns a one-step bandit
# --------------------------------------------------------------------------------------------------

N_BANDIT = 1000


def _bandit_obs(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 2)).astype(np.float32)


@pytest.fixture(scope="module")
def held_out() -> np.ndarray:
    return _bandit_obs(1, 500)


@pytest.fixture(scope="module")
def sign_bandit() -> MDPDataset:
    """Two actions logged uniformly; reward 1 iff action == (obs[0] > 0); every step is terminal."""
    obs = _bandit_obs(0, N_BANDIT)
    actions = np.random.default_rng(2).integers(0, 2, size=N_BANDIT)
    rewards = (actions == (obs[:, 0] > 0)).astype(np.float32)
    return MDPDataset(obs, actions, rewards, np.ones(N_BANDIT), action_space=d3rlpy.ActionSpace.DISCRETE)


@pytest.fixture(scope="module")
def quadratic_bandit() -> MDPDataset:
    """One continuous action logged uniformly on [-1, 1] (mean 0); reward -(a - 0.5)^2."""
    obs = _bandit_obs(0, N_BANDIT)
    actions = np.random.default_rng(3).uniform(-1, 1, size=(N_BANDIT, 1)).astype(np.float32)
    rewards = -((actions[:, 0] - 0.5) ** 2)
    return MDPDataset(
        obs,
        actions,
        rewards.astype(np.float32),
        np.ones(N_BANDIT),
        action_space=d3rlpy.ActionSpace.CONTINUOUS,
    )


@pytest.mark.parametrize("name", ["discrete_cql", "dqn", "discrete_bcq"])
def test_q_learners_pick_the_rewarded_action(
    name: str, sign_bandit: MDPDataset, held_out: np.ndarray
) -> None:
    learner = _fit(name, sign_bandit, n_steps=300, learning_rate=1e-3)
    accuracy = (learner.predict(held_out) == (held_out[:, 0] > 0)).mean()
    assert accuracy >= 0.9


def test_behaviour_cloning_imitates_the_logged_action(held_out: np.ndarray) -> None:
    obs = _bandit_obs(0, N_BANDIT)
    actions = np.full(N_BANDIT, 2)
    actions[:3] = [0, 1, 0]  # so the dataset has three actions; the behaviour is "always 2"
    dataset = MDPDataset(obs, actions, np.zeros(N_BANDIT, np.float32), np.ones(N_BANDIT))
    learner = _fit("discrete_bc", dataset, n_steps=100, learning_rate=1e-3)
    assert np.all(learner.predict(held_out) == 2)
    probs = learner.action_probabilities(held_out)
    assert probs.shape == (500, 3) and probs[:, 2].min() > 0.5  # beta's L2 penalty on logits keeps them soft


@pytest.mark.parametrize(
    ("name", "max_error"),
    [("td3_plus_bc", 0.45), ("iql", 0.3), ("cql", 0.45)],
)
def test_continuous_learners_move_towards_the_best_action(
    name: str, max_error: float, quadratic_bandit: MDPDataset, held_out: np.ndarray
) -> None:
    learner = _fit(name, quadratic_bandit, n_steps=500, learning_rate=1e-3)
    actions = learner.predict(held_out)[:, 0]
    logged_mean = float(np.mean([ep.actions[0, 0] for ep in quadratic_bandit.episodes]))
    assert abs(logged_mean) < 0.1
    # closer to the best action 0.5 than the logged mean is, on every held-out observation
    print(f"{name}: mean action {actions.mean():.3f}, mean |a - 0.5| {np.abs(actions - 0.5).mean():.3f}")
    assert np.abs(actions - 0.5).mean() < max_error < abs(logged_mean - 0.5)
    assert abs(actions.mean() - 0.5) < abs(logged_mean - 0.5)
