"""The math of PPO in the campaign simulator, as small pure functions on batches.

Used by :mod:`transferlab.simulator.train`; each function is unit-tested against hand-computed
cases (``tests/simulator/test_ppo.py``):

* :func:`gae`: generalised advantage estimation over ``(T, N)`` rollouts whose episodes all end at
  step ``T`` (the campaign episodes share one clock and settle on their last step, so nothing is
  bootstrapped past it);
* :func:`ppo_loss`: the clipped surrogate, value and entropy terms, with diagnostics;
* :func:`behaviour_action_probs` and :func:`action_penalty`: the penalty on actions the logs
  rarely or never took (Virtual-Taobao's spirit: a policy trained in a learned simulator should not
  live where the simulator had no data to be right);
* :func:`obs_features`: the fixed feature map of campaign observations.

>>> import numpy as np
>>> log_p = np.log(np.array([0.5, 0.001]))
>>> action_penalty(np.array([0, 1]), log_p, coef=1.0, min_prob=0.01).round(3).tolist()
[0.0, 2.303]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from transferlab.simulator.vocabulary import (
    CATALOG,
    CATALOG_BUDGETS,
    CATALOG_DISCOUNTS,
    CATALOG_HOURS,
    OBS_KEYS,
    TARGETS,
)

N_WEEKDAYS = 7
WEEKDAY = OBS_KEYS.index("weekday")
FEATURE_DIM = N_WEEKDAYS + len(OBS_KEYS)  # weekday one-hot + every other observation + share left


# ----------------------------------------------------------------------------------------- advantages


def gae(rewards: Tensor, values: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Advantages and value targets ``(T, N)`` of rollouts whose episodes all end after step ``T``.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` with ``V_T = 0`` (the episode is over: the last step
    already holds the settlement days' rewards), ``A_t = delta_t + gamma * lam * A_{t+1}``, and the
    value targets are ``A_t + V_t``. With ``lam = 1`` the targets are the discounted returns-to-go.
    """
    if rewards.shape != values.shape or rewards.ndim != 2:
        raise ValueError(f"rewards and values must both be (T, N), got {rewards.shape} and {values.shape}")
    advantages = torch.zeros_like(rewards)
    next_adv = torch.zeros_like(rewards[0])
    next_value = torch.zeros_like(values[0])
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * next_value - values[t]
        next_adv = delta + gamma * lam * next_adv
        advantages[t] = next_adv
        next_value = values[t]
    return advantages, advantages + values


def categorical(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
    """Log-probabilities of ``actions`` ``(n,)`` under ``logits`` ``(n, A)``, and each row's entropy."""
    logp = torch.log_softmax(logits, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, actions[:, None]).squeeze(-1), entropy


def whiten(x: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / (std + eps)`` over the whole tensor (a single element becomes 0)."""
    if x.numel() < 2:
        return torch.zeros_like(x)
    return (x - x.mean()) / (x.std() + eps)


# ---------------------------------------------------------------------------------------------- loss


@dataclass(frozen=True)
class PPOLoss:
    """The terms of one PPO minibatch loss (``loss`` carries the gradient; the rest are diagnostics)."""

    loss: Tensor
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor
    clip_frac: Tensor


def ppo_loss(
    new_logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    entropy: Tensor,
    new_values: Tensor,
    value_targets: Tensor,
    *,
    clip: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
) -> PPOLoss:
    """Clipped PPO loss: ``policy - ent_coef * entropy + vf_coef * value`` (all means over the batch).

    * policy: ``-min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A)`` with ``ratio = exp(new - old)``;
    * value: ``0.5 * (V - target)^2``;
    * ``approx_kl``: the low-variance estimator ``(ratio - 1) - log ratio`` of KL(old || new);
    * ``clip_frac``: share of samples whose ratio is outside ``[1 - clip, 1 + clip]``.
    """
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    policy_loss = -torch.min(unclipped, clipped).mean()
    value_loss = 0.5 * (new_values - value_targets).pow(2).mean()
    mean_entropy = entropy.mean()
    loss = policy_loss - ent_coef * mean_entropy + vf_coef * value_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_frac = ((ratio - 1.0).abs() > clip).float().mean()
    return PPOLoss(loss, policy_loss, value_loss, mean_entropy, approx_kl, clip_frac)


def explained_variance(predicted: Tensor, target: Tensor) -> float:
    """``1 - Var(target - predicted) / Var(target)``: 1 is a perfect critic, 0 no better than a constant."""
    var = float(target.var())
    return float("nan") if var == 0.0 else 1.0 - float((target - predicted).var()) / var


# ------------------------------------------------------------------------------------ action penalty


def factorised_action_probs(action_index: np.ndarray) -> np.ndarray:
    """A smooth estimate of how often the logs take each catalog action, from few rows.

    ``q(0)`` = share of days without a campaign; a campaign ``(discount, hour, target, budget)`` gets
    ``(1 - q(0))`` times the product of its four attributes' shares among the logged campaigns, each
    add-one smoothed. Rows outside the catalog (``action_index < 0``) are ignored.
    """
    logged = np.asarray(action_index, dtype=np.int64)
    logged = logged[logged >= 0]
    if logged.size == 0:
        raise ValueError("no logged catalog actions to estimate the behaviour policy from")
    p_noop = float(np.mean(logged == 0))
    campaigns = [CATALOG[i] for i in logged if i != 0]
    factors = (
        (CATALOG_DISCOUNTS, lambda a: a.discount),
        (CATALOG_HOURS, lambda a: a.push_hour),
        (TARGETS, lambda a: a.segment),
        (CATALOG_BUDGETS, lambda a: a.budget),
    )
    shares = []
    for values, attr in factors:
        counts = pd.Series([attr(a) for a in campaigns], dtype=object).value_counts()
        total = len(campaigns) + len(values)
        shares.append({v: (float(counts.get(v, 0)) + 1.0) / total for v in values})
    q = np.empty(len(CATALOG))
    q[0] = p_noop
    for i, a in enumerate(CATALOG[1:], start=1):
        p = 1.0 - p_noop
        for share, (_, attr) in zip(shares, factors, strict=True):
            p *= share[attr(a)]
        q[i] = p
    return q


def behaviour_action_probs(action_index: np.ndarray, prior_strength: float = 20.0) -> np.ndarray:
    """The logged action distribution ``p(a)``: counts shrunk toward the factorised estimate.

    ``p(a) = (n_a + prior_strength * q(a)) / (N + prior_strength)`` with ``q`` from
    :func:`factorised_action_probs`: a Dirichlet prior centred on ``q`` worth ``prior_strength``
    pseudo-rows. A year of logs has a few hundred rows over 151 actions, so raw counts are mostly 0
    or 1; ``q`` says which discounts, hours, targets and budgets the logs know about.
    """
    if prior_strength < 0:
        raise ValueError(f"prior_strength={prior_strength} must be >= 0 (0 = raw frequencies)")
    logged = np.asarray(action_index, dtype=np.int64)
    logged = logged[logged >= 0]
    counts = np.bincount(logged, minlength=len(CATALOG)).astype(np.float64)
    q = factorised_action_probs(logged)
    return (counts + prior_strength * q) / (counts.sum() + prior_strength)


def action_penalty(actions: np.ndarray, log_p_logged: np.ndarray, coef: float, min_prob: float) -> np.ndarray:
    """Reward taken off each action: ``coef * max(0, log(min_prob) - log p_logged(a))``.

    Zero for actions the logs took at least ``min_prob`` of the time; grows by ``coef`` per nat
    below it (an action logged ``min_prob / e`` of the time costs ``coef``).
    """
    if not 0.0 < min_prob <= 1.0:
        raise ValueError(f"min_prob={min_prob} must be in (0, 1]")
    below = math.log(min_prob) - log_p_logged[np.asarray(actions, dtype=np.int64)]
    return np.asarray(coef * np.maximum(below, 0.0), dtype=np.float64)


def kl_penalty(
    logp_policy: np.ndarray, log_p_logged: np.ndarray, actions: np.ndarray, coef: float
) -> np.ndarray:
    """Reward taken off each sampled action: ``coef * (log pi(a|s) - log p_logged(a))``.

    Its mean over ``a ~ pi(.|s)`` is ``coef * KL(pi(.|s) || p_logged)``: the policy pays for every nat
    it moves away from what the logs did, campaign frequency included (KL-regularised RL).
    """
    return np.asarray(
        coef * (logp_policy - log_p_logged[np.asarray(actions, dtype=np.int64)]), dtype=np.float64
    )


# -------------------------------------------------------------------------------------- observations


def obs_features(obs: Tensor) -> Tensor:
    """Fixed features of observations ``(n, len(OBS_KEYS) + 1)``: ``(n, FEATURE_DIM)``.

    The weekday becomes a 7-way one-hot; every other entry (7-day counts and money, shares, stock
    cover, competitor index, share of the episode left) becomes ``sign(x) * log1p(|x|)``, so money
    and counts of any shop size land within a few units; :class:`FeatureScaler` then standardises.
    """
    weekday = obs[:, WEEKDAY].round().long().clamp(0, N_WEEKDAYS - 1)
    onehot = torch.nn.functional.one_hot(weekday, N_WEEKDAYS).to(obs.dtype)
    rest = torch.cat([obs[:, :WEEKDAY], obs[:, WEEKDAY + 1 :]], dim=1)
    return torch.cat([onehot, rest.sign() * rest.abs().log1p()], dim=1)


@dataclass(frozen=True)
class FeatureScaler:
    """Fixed standardisation of :func:`obs_features`, estimated once from the logs' contexts.

    Fixed (not a running mean) so the policy that sampled a rollout and the one being updated see
    the same inputs, and a saved policy needs nothing else. The one-hot weekday is left as is.
    """

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def identity(cls) -> FeatureScaler:
        """No scaling (for toy markets without logs)."""
        return cls(np.zeros(FEATURE_DIM), np.ones(FEATURE_DIM))

    @classmethod
    def from_observations(cls, obs: np.ndarray, min_std: float = 0.05) -> FeatureScaler:
        """Mean and std (floored at ``min_std``) of the features of observations ``(n, OBS_DIM)``."""
        feats = obs_features(torch.as_tensor(obs, dtype=torch.float64)).numpy()
        mean, std = feats.mean(axis=0), np.maximum(feats.std(axis=0), min_std)
        mean[:N_WEEKDAYS], std[:N_WEEKDAYS] = 0.0, 1.0
        return cls(mean, std)

    @classmethod
    def from_logs(cls, campaigns: pd.DataFrame) -> FeatureScaler:
        """From the ``ctx_*`` columns of ``campaigns.parquet`` (the share of the episode left, which the
        logs lack, is spread uniformly over (0, 1])."""
        missing = [f"ctx_{k}" for k in OBS_KEYS if f"ctx_{k}" not in campaigns.columns]
        if missing:
            raise ValueError(f"the campaigns log lacks context column(s) {missing}; regenerate the logs")
        ctx = campaigns[[f"ctx_{k}" for k in OBS_KEYS]].to_numpy(dtype=np.float64)
        left = 1.0 - (np.arange(len(ctx)) % 30) / 30.0
        return cls.from_observations(np.concatenate([ctx, left[:, None]], axis=1))


__all__ = [
    "FEATURE_DIM",
    "FeatureScaler",
    "PPOLoss",
    "action_penalty",
    "behaviour_action_probs",
    "categorical",
    "explained_variance",
    "factorised_action_probs",
    "gae",
    "kl_penalty",
    "obs_features",
    "ppo_loss",
    "whiten",
]
