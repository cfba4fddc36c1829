"""PPO math of the campaign trainer, against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transferlab.simulator.ppo import (
    FEATURE_DIM,
    FeatureScaler,
    action_penalty,
    behaviour_action_probs,
    categorical,
    explained_variance,
    factorised_action_probs,
    gae,
    kl_penalty,
    obs_features,
    ppo_loss,
    whiten,
)
from transferlab.simulator.vocabulary import CATALOG, OBS_KEYS, CampaignAction, catalog_index


def test_gae_three_steps_by_hand() -> None:
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    adv, targets = gae(rewards, values, gamma=0.9, lam=0.8)
    # delta_2 = 3 - 1.5 = 1.5;  delta_1 = 2 + 0.9 * 1.5 - 1 = 2.35;  delta_0 = 1 + 0.9 * 1 - 0.5 = 1.4
    # A_2 = 1.5;  A_1 = 2.35 + 0.72 * 1.5 = 3.43;  A_0 = 1.4 + 0.72 * 3.43 = 3.8696
    assert adv[:, 0].tolist() == pytest.approx([3.8696, 3.43, 1.5])
    assert targets[:, 0].tolist() == pytest.approx([4.3696, 4.43, 3.0])


def test_gae_lambda_one_gives_returns_to_go_per_env() -> None:
    rewards = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 5.0]])
    _, targets = gae(rewards, torch.rand(3, 2), gamma=1.0, lam=1.0)
    assert torch.allclose(targets, torch.tensor([[6.0, 5.0], [5.0, 5.0], [3.0, 5.0]]))


def test_gae_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(T, N\)"):
        gae(torch.zeros(3, 2), torch.zeros(3), 1.0, 1.0)


def test_clipped_loss_by_hand() -> None:
    new_logp = torch.log(torch.tensor([1.5, 0.5]))
    terms = ppo_loss(
        new_logp,
        torch.zeros(2),
        torch.tensor([1.0, -1.0]),
        torch.tensor([1.0, 2.0]),
        torch.tensor([1.0, 2.0]),
        torch.tensor([0.0, 4.0]),
        clip=0.2,
        vf_coef=0.5,
        ent_coef=0.01,
    )
    # sample 1: min(1.5 * 1, 1.2 * 1) = 1.2;  sample 2: min(0.5 * -1, 0.8 * -1) = -0.8
    assert float(terms.policy_loss) == pytest.approx(-(1.2 - 0.8) / 2)
    assert float(terms.value_loss) == pytest.approx(0.5 * (1.0 + 4.0) / 2)
    assert float(terms.entropy) == pytest.approx(1.5)
    assert float(terms.loss) == pytest.approx(-0.2 - 0.01 * 1.5 + 0.5 * 1.25)
    assert float(terms.clip_frac) == 1.0
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert float(terms.approx_kl) == pytest.approx(kl)


def test_loss_inside_the_clip_range_is_the_plain_surrogate() -> None:
    terms = ppo_loss(
        torch.log(torch.tensor([1.1])),
        torch.zeros(1),
        torch.tensor([2.0]),
        torch.zeros(1),
        torch.zeros(1),
        torch.zeros(1),
        clip=0.2,
    )
    assert float(terms.policy_loss) == pytest.approx(-2.2)
    assert float(terms.clip_frac) == 0.0


def test_categorical_logp_and_entropy() -> None:
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]])
    logp, entropy = categorical(logits, torch.tensor([2, 0]))
    assert logp.tolist() == pytest.approx([math.log(0.25), 0.0], abs=1e-6)
    assert entropy.tolist() == pytest.approx([math.log(4.0), 0.0], abs=1e-6)


def test_whiten_and_explained_variance() -> None:
    x = whiten(torch.tensor([1.0, 2.0, 3.0]))
    assert x.tolist() == pytest.approx([-1.0, 0.0, 1.0], abs=1e-6)
    assert whiten(torch.tensor([5.0])).tolist() == [0.0]
    target = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(target, target) == 1.0
    assert explained_variance(torch.full((3,), 2.0), target) == pytest.approx(0.0)


def test_action_penalty_by_hand() -> None:
    log_p = np.log(np.array([0.5, 0.001, 0.01, 0.0001]))
    cost = action_penalty(np.array([0, 1, 2, 3, 1]), log_p, coef=2.0, min_prob=0.01)
    # 0.001 is one decade (log 10 nats) below the floor, 0.0001 two decades
    assert cost.tolist() == pytest.approx([0.0, 2 * math.log(10), 0.0, 2 * math.log(100), 2 * math.log(10)])
    assert action_penalty(np.array([1]), log_p, coef=0.0, min_prob=0.01).tolist() == [0.0]
    with pytest.raises(ValueError, match="min_prob"):
        action_penalty(np.array([1]), log_p, coef=1.0, min_prob=0.0)


def test_kl_penalty_by_hand_and_its_mean_is_the_kl() -> None:
    log_logged = np.log(np.array([0.5, 0.25, 0.25]))
    policy = np.log(np.array([0.25, 0.5, 0.25]))
    cost = kl_penalty(policy[[0, 1]], log_logged, np.array([0, 1]), coef=2.0)
    assert cost.tolist() == pytest.approx([2 * math.log(0.5), 2 * math.log(2.0)])
    mean = float(np.exp(policy) @ kl_penalty(policy, log_logged, np.arange(3), coef=1.0))
    kl = 0.25 * math.log(0.25 / 0.5) + 0.5 * math.log(0.5 / 0.25)
    assert mean == pytest.approx(kl)


def _idx(discount: float, hour: int, segment: str, budget: float) -> int:
    return catalog_index(CampaignAction(discount, hour, segment, budget))


def test_factorised_and_shrunk_action_probabilities_by_hand() -> None:
    bargain, loyal = _idx(0.1, 20, "bargain", 20.0), _idx(0.1, 20, "loyal", 60.0)
    logged = np.array([0, 0, bargain, loyal, -1])  # -1: an off-catalog row, ignored
    q = factorised_action_probs(logged)
    assert q.sum() == pytest.approx(1.0)
    assert q[0] == 0.5
    # 0.5 x discount 0.1: 3/7 x hour 20: 3/5 x bargain: 2/7 x budget 20: 1/2
    assert q[bargain] == pytest.approx(0.5 * 3 / 7 * 3 / 5 * 2 / 7 * 1 / 2)
    rare = _idx(0.3, 9, "premium", 60.0)
    assert q[rare] == pytest.approx(0.5 * 1 / 7 * 1 / 5 * 1 / 7 * 1 / 2)
    p = behaviour_action_probs(logged, prior_strength=4.0)
    assert p.sum() == pytest.approx(1.0)
    assert p[0] == pytest.approx((2 + 4 * 0.5) / 8)
    assert p[bargain] == pytest.approx((1 + 4 * q[bargain]) / 8)
    assert p[rare] == pytest.approx(4 * q[rare] / 8)
    raw = behaviour_action_probs(logged, prior_strength=0.0)
    assert raw[0] == 0.5 and raw[bargain] == 0.25 and raw[rare] == 0.0


def test_action_probabilities_need_logged_actions() -> None:
    with pytest.raises(ValueError, match="no logged"):
        factorised_action_probs(np.array([-1]))
    with pytest.raises(ValueError, match="prior_strength"):
        behaviour_action_probs(np.array([0]), prior_strength=-1.0)


def test_obs_features_one_hot_weekday_and_signed_log() -> None:
    obs = torch.zeros(2, len(OBS_KEYS) + 1)
    obs[0, OBS_KEYS.index("weekday")] = 3.0
    obs[0, OBS_KEYS.index("profit_7d")] = -(math.e - 1.0)
    obs[1, OBS_KEYS.index("gmv_7d")] = math.e**2 - 1.0
    f = obs_features(obs)
    assert f.shape == (2, FEATURE_DIM)
    assert f[0, :7].tolist() == [0, 0, 0, 1, 0, 0, 0] and f[1, :7].tolist() == [1, 0, 0, 0, 0, 0, 0]
    rest = [k for k in OBS_KEYS if k != "weekday"]
    assert float(f[0, 7 + rest.index("profit_7d")]) == pytest.approx(-1.0)
    assert float(f[1, 7 + rest.index("gmv_7d")]) == pytest.approx(2.0)


def test_feature_scaler_standardises_all_but_the_weekday() -> None:
    rng = np.random.default_rng(0)
    obs = rng.uniform(0, 100, size=(50, len(OBS_KEYS) + 1))
    obs[:, OBS_KEYS.index("weekday")] = rng.integers(0, 7, 50)
    obs[:, OBS_KEYS.index("subscribed")] = 0.5  # constant: the std is floored
    s = FeatureScaler.from_observations(obs)
    assert s.mean[:7].tolist() == [0.0] * 7 and s.std[:7].tolist() == [1.0] * 7
    feats = (obs_features(torch.as_tensor(obs)).numpy() - s.mean) / s.std
    assert np.abs(feats[:, 7:].mean(axis=0)).max() < 1e-9
    assert s.std[7 + [k for k in OBS_KEYS if k != "weekday"].index("subscribed")] == 0.05
    assert len(CATALOG) == 151
