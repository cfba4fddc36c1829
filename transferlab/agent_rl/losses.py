r"""Loss math for SFT, GRPO and PPO on multi-turn coding episodes: small pure functions of B×T tensors.

Every function takes tensors shaped like :func:`transferlab.platform.trajectory.to_tensors` output
(``B`` episodes × ``T`` token positions, right-padded) and returns a tensor or a small frozen
dataclass of loss terms (d3rlpy ``compute_*_loss`` style). Nothing here touches models, optimisers,
files or loggers.

**Alignment.** All per-token tensors are aligned to *token positions*: ``x[:, t]`` is about token
``input_ids[:, t]``. That is how ``loss_mask``, ``old_logprobs`` and ``token_rewards`` are laid out,
and :func:`policy_logprobs` / :func:`token_entropy` shift the model's logits to match::

    position t           0       1        2        3        4
    input_ids          [p0]    [p1]     [a0]     [a1]     [o0]      p prompt, a action, o observation
    loss_mask            0       0        1        1        0
    logits[:, t] predicts input_ids[:, t+1]:
                      logits0 logits1  logits2  logits3  logits4
                         \       \        \        \        \
                          `-> p1  `-> a0   `-> a1   `-> o0   `-> (beyond the sequence: unused)
    policy_logprobs      0    lp(p1|p0) lp(a0|..) lp(a1|..) lp(o0|..)
                         ^ position 0 has no prediction: always 0.0 (keep it out of any mask)

**Masks.** ``mask`` is 1 on the policy's own (action) tokens and 0 on prompt, observation and
padding tokens; it may be bool, int or float, and a float mask acts as per-token weights. Masked-out
positions are removed with ``torch.where`` (never ``x * 0``), so their gradient is *exactly* 0.0 and
a NaN or inf there cannot leak into the loss.

**Loss aggregation** (``loss_agg``), the same for every term:

* ``"token_mean"`` (default; DAPO, verl, TRL ``"dapo"``): sum over every policy token in the batch
  divided by their number, so long episodes weigh in proportion to their tokens.
* ``"seq_mean_token_mean"`` (original GRPO): mean over each episode's tokens, then over episodes.
* ``"seq_mean_token_sum"``: sum over each episode's tokens, then mean over episodes.

Episodes with no policy token are left out of the ``seq_mean_*`` means. ``seq_weights`` (B,
non-negative) weigh whole episodes: 0 drops one (a zero-variance GRPO group, see
:func:`group_weights`; or an episode cut by a step / context / time limit, DeepSWE-style:
``seq_weights=(~truncated).float()``), a value in (0, 1) down-weights it.

**Conventions.** Group standard deviations are Bessel-corrected (``torch.std``, unbiased), as in TRL
and verl; :func:`masked_whiten` uses the population variance. ``clip_frac`` counts the tokens whose
clipped term is the active one (their gradient is zero), as verl does. GAE runs over policy tokens
only: observation tokens are skipped, so a turn's reward on its last action token flows back to the
earlier turns' tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "DiscountPer",
    "GRPOLossTerms",
    "GroupAdvantages",
    "KLKind",
    "LossAgg",
    "PPOLossTerms",
    "PolicyLossTerms",
    "SFTLossTerms",
    "StepGroupAdvantages",
    "ValueLossTerms",
    "ZeroStd",
    "aggregate_loss",
    "clipped_policy_loss",
    "discounted_returns",
    "entropy_from_logits",
    "explained_variance",
    "filter_groups",
    "gae",
    "group_advantages",
    "group_weights",
    "grpo_loss",
    "kl_estimator",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_logprobs",
    "ppo_loss",
    "sft_loss",
    "step_group_advantages",
    "token_entropy",
    "token_returns",
    "turn_end_mask",
    "turn_gae",
    "value_loss",
]

LossAgg: TypeAlias = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"]
"""How per-token terms become one scalar (see the module docstring)."""
KLKind: TypeAlias = Literal["k1", "k2", "k3"]
"""Schulman's per-sample KL estimators (see :func:`kl_estimator`)."""
ZeroStd: TypeAlias = Literal["drop", "keep"] | float
"""What to do with GRPO groups whose rewards are all equal: weight 0, weight 1, or this weight."""
DiscountPer: TypeAlias = Literal["token", "turn"]
"""Whether ``gamma`` / ``lam`` apply per policy token or only when stepping to the next turn."""

_LOSS_AGGS: tuple[str, ...] = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum")


# ------------------------------------------------------------------------------------------ helpers


def _weights(mask: Tensor, like: Tensor) -> Tensor:
    """``mask`` broadcast to ``like``'s shape as floats of ``like``'s dtype."""
    try:
        m = torch.broadcast_to(mask, like.shape)
    except RuntimeError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to shape {tuple(like.shape)}"
        ) from None
    dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
    return m.to(dtype)


def _same_shape(**tensors: Tensor) -> None:
    """Raise ``ValueError`` unless all the named tensors have the same shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shapes must match, got {shapes}")


def _check_2d(name: str, x: Tensor) -> None:
    if x.ndim != 2:
        raise ValueError(f"{name} must be B×T (2-D), got shape {tuple(x.shape)}")


def _check_clip(clip_low: float, clip_high: float) -> None:
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low!r}")
    if clip_high < 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high!r}")


def _check_seq_weights(seq_weights: Tensor | None, batch: int) -> None:
    if seq_weights is None:
        return
    if seq_weights.shape != (batch,):
        raise ValueError(f"seq_weights must have shape ({batch},), got {tuple(seq_weights.shape)}")
    if bool((seq_weights < 0).any()):
        raise ValueError("seq_weights must be non-negative (0 drops an episode, 1 keeps it)")


# ------------------------------------------------------------------------------------- masked ops


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x * mask`` over ``dim`` (all dims if None); masked-out entries contribute exactly 0.

    Args:
        x: values.
        mask: 0/1 (bool, int or float) or non-negative weights, broadcastable to ``x``.
        dim: dimension to reduce, or None for all.
    """
    m = _weights(mask, x)
    kept = torch.where(m != 0, x * m, torch.zeros_like(x))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Weighted mean ``sum(x * mask) / sum(mask)`` over ``dim``; 0.0 (not NaN) where the mask is empty."""
    m = _weights(mask, x)
    total = masked_sum(x, m, dim)
    count = m.sum() if dim is None else m.sum(dim)
    safe = torch.where(count > 0, count, torch.ones_like(count))  # no 0/0 even in the backward pass
    return total / safe


def masked_var(x: Tensor, mask: Tensor) -> Tensor:
    """Population (biased) variance of ``x`` over the mask; 0.0 for an empty mask."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the mask (population variance), 0.0 outside it.

    With ``shift_mean=False`` the mean is added back (scale only). An empty mask gives all zeros.
    """
    mean = masked_mean(x, mask)
    out = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(_weights(mask, x) != 0, out, torch.zeros_like(out))


def aggregate_loss(
    per_token: Tensor, mask: Tensor, loss_agg: LossAgg = "token_mean", seq_weights: Tensor | None = None
) -> Tensor:
    """Reduce a B×T per-token term to a scalar (see "Loss aggregation" in the module docstring)."""
    _check_2d("per_token", per_token)
    _check_seq_weights(seq_weights, per_token.shape[0])
    m = _weights(mask, per_token)
    if loss_agg == "token_mean":
        return masked_mean(per_token, m if seq_weights is None else m * seq_weights[:, None].to(m.dtype))
    if loss_agg == "seq_mean_token_mean":
        per_seq = masked_mean(per_token, m, dim=1)
    elif loss_agg == "seq_mean_token_sum":
        per_seq = masked_sum(per_token, m, dim=1)
    else:
        raise ValueError(f"loss_agg must be one of {list(_LOSS_AGGS)}, got {loss_agg!r}")
    has_tokens = (m != 0).any(dim=1).to(m.dtype)
    sw = has_tokens if seq_weights is None else has_tokens * seq_weights.to(m.dtype)
    return masked_mean(per_seq, sw)


# -------------------------------------------------------------------------------- token log-probs


def _float_logits(logits: Tensor, temperature: float) -> Tensor:
    if logits.ndim != 3:
        raise ValueError(f"logits must be B×T×V (3-D), got shape {tuple(logits.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    z = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    return z if temperature == 1.0 else z / temperature


def policy_logprobs(logits: Tensor, input_ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-prob of each token given the ones before it, aligned to token positions (B×T).

    ``out[:, t] = log softmax(logits[:, t-1] / temperature)[input_ids[:, t]]`` for ``t >= 1`` and
    ``out[:, 0] = 0.0``; see the diagram in the module docstring. The result lines up with
    ``loss_mask``, ``old_logprobs`` and ``token_rewards``. Use the sampling temperature so the
    log-probs match the ones the rollout recorded.

    Args:
        logits: B×T×V model outputs for ``input_ids`` (computed in float32 if lower precision).
        input_ids: B×T token ids.
        temperature: sampling temperature (> 0).
    """
    z = _float_logits(logits, temperature)
    if input_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"input_ids shape {tuple(input_ids.shape)} must equal logits' first two dims "
            f"{tuple(logits.shape[:2])}"
        )
    z = z[:, :-1]
    targets = input_ids[:, 1:].unsqueeze(-1)
    lp = z.gather(-1, targets).squeeze(-1) - torch.logsumexp(z, dim=-1)
    return F.pad(lp, (1, 0))


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of the distribution that predicted each token, aligned like :func:`policy_logprobs`.

    ``out[:, t] = H(softmax(logits[:, t-1] / temperature))`` for ``t >= 1``, ``out[:, 0] = 0.0``.
    """
    z = _float_logits(logits, temperature)[:, :-1]
    logp = torch.log_softmax(z, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    return F.pad(ent, (1, 0))


def entropy_from_logits(logits: Tensor, mask: Tensor, temperature: float = 1.0) -> Tensor:
    """Mean entropy (nats) of the next-token distributions that produced the masked tokens."""
    return masked_mean(token_entropy(logits, temperature), mask)


# ---------------------------------------------------------------------------------------------- SFT


@dataclass(frozen=True)
class SFTLossTerms:
    """Terms of :func:`sft_loss`."""

    loss: Tensor
    """Mean next-token cross-entropy (nats) over the counted tokens."""
    tokens: int
    """Number of tokens counted (``loss_mask == 1`` on target positions 1..T-1)."""


def sft_loss(
    logits: Tensor,
    input_ids: Tensor,
    loss_mask: Tensor,
    attention_mask: Tensor | None = None,
    context_weight: float = 0.0,
    ignore_mask: Tensor | None = None,
) -> SFTLossTerms:
    """Next-token cross-entropy counted only where ``loss_mask`` is 1 on the *target* token.

    ``logits[:, t]`` predicts ``input_ids[:, t+1]`` and is counted iff ``loss_mask[:, t+1]`` is 1
    (the shift of :func:`policy_logprobs`). Position 0 is never counted: nothing predicts it.

    With ``context_weight`` w > 0 (and ``attention_mask``), the other real tokens (issue, observations)
    count too, each with weight w against 1 for a policy token: the weighted mean
    ``sum(nll * (m + w * (a - m))) / sum(m + w * (a - m))``. ``tokens`` still counts policy tokens.

    Tokens where ``ignore_mask`` is 1 count neither way (a demonstrated mistake: the policy should
    see it in its context, not learn to make it).
    """
    _same_shape(input_ids=input_ids, loss_mask=loss_mask)
    if context_weight < 0:
        raise ValueError(f"context_weight must be >= 0, got {context_weight}")
    nll = -policy_logprobs(logits, input_ids)[:, 1:]
    target_mask = loss_mask[:, 1:]
    weights = target_mask.to(nll.dtype)
    if context_weight > 0:
        if attention_mask is None:
            raise ValueError("context_weight > 0 needs the attention_mask (which tokens are real)")
        _same_shape(input_ids=input_ids, attention_mask=attention_mask)
        real = attention_mask[:, 1:].to(nll.dtype)
        weights = weights + context_weight * real * (1 - weights)
    if ignore_mask is not None:
        _same_shape(input_ids=input_ids, ignore_mask=ignore_mask)
        weights = weights * (1 - ignore_mask[:, 1:].to(nll.dtype))
    return SFTLossTerms(loss=masked_mean(nll, weights), tokens=int((weights * target_mask != 0).sum().item()))


# ---------------------------------------------------------------------------------------- GRPO math


@dataclass(frozen=True)
class GroupAdvantages:
    """Result of :func:`group_advantages` for ``N`` groups of ``G`` rollouts."""

    advantages: Tensor
    """(N*G,) one advantage per rollout, in the input order; exactly 0.0 in zero-variance groups."""
    group_mean: Tensor
    """(N,) mean reward of each group."""
    group_std: Tensor
    """(N,) reward standard deviation of each group (Bessel-corrected unless asked otherwise)."""
    zero_std_groups: Tensor
    """(N,) bool: the group's rewards are all equal (max - min <= eps)."""
    frac_zero_std: float
    """Share of zero-variance groups (log it as ``frac_reward_zero_std``)."""


def group_advantages(
    rewards: Tensor,
    group_size: int,
    scale_by_std: bool = True,
    leave_one_out: bool = False,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> GroupAdvantages:
    """Group-relative advantages for GRPO: ``G = group_size`` rollouts of each task, contiguous.

    ``rewards`` is ``[task0 rollout0..G-1, task1 rollout0..G-1, ...]``. With ``b`` the baseline::

        b_i = mean(r)                        (GRPO)
        b_i = (sum(r) - r_i) / (G - 1)        (leave_one_out: RLOO, DeepSWE's GRPO++)
        A_i = (r_i - b_i) / (std(r) + eps)    if scale_by_std else  r_i - b_i

    ``std`` is ``torch.std`` of the group, Bessel-corrected (``unbiased_std=True``, as TRL / verl) or
    the population one. Groups whose rewards are all equal (``max - min <= eps``) carry no signal:
    they are flagged in ``zero_std_groups`` and their advantages are exactly 0.0.

    Args:
        rewards: (N*G,) one scalar reward per rollout.
        group_size: rollouts per task, G >= 2.
        scale_by_std: divide by the group's standard deviation (Dr. GRPO / DeepSWE turn this off).
        leave_one_out: baseline each rollout on the other G - 1 rollouts' mean.
        eps: added to the standard deviation; also the zero-variance tolerance.
        unbiased_std: Bessel's correction (divide by G - 1) in the standard deviation.
    """
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D (N*G,), got shape {tuple(rewards.shape)}")
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 (a group needs rollouts to compare), got {group_size}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.detach()
    r = (r if r.is_floating_point() else r.to(torch.get_default_dtype())).reshape(-1, group_size)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True, correction=1 if unbiased_std else 0)
    zero = (r.amax(dim=1) - r.amin(dim=1)) <= eps
    baseline = (r.sum(dim=1, keepdim=True) - r) / (group_size - 1) if leave_one_out else mean
    adv = r - baseline
    if scale_by_std:
        adv = adv / (std + eps)
    adv = torch.where(zero[:, None], torch.zeros_like(adv), adv)
    return GroupAdvantages(
        advantages=adv.reshape(-1),
        group_mean=mean.squeeze(1),
        group_std=std.squeeze(1),
        zero_std_groups=zero,
        frac_zero_std=float(zero.float().mean().item()) if zero.numel() else 0.0,
    )


def group_weights(zero_std_groups: Tensor, group_size: int, zero_std: ZeroStd = "drop") -> Tensor:
    """Per-rollout weights (N*G,) for ``seq_weights``: 1.0, or the ``zero_std`` weight in flat groups.

    ``"drop"`` gives weight 0 (DAPO ``filter_groups``, SkyRL ``zero_variance_filter``: the group
    leaves the loss and its token count), ``"keep"`` weight 1 (plain GRPO: the group only dilutes the
    mean and still feels the KL term), a float in [0, 1] down-weights.
    """
    if zero_std == "drop":
        w = 0.0
    elif zero_std == "keep":
        w = 1.0
    elif isinstance(zero_std, int | float) and not isinstance(zero_std, bool) and 0.0 <= zero_std <= 1.0:
        w = float(zero_std)
    else:
        raise ValueError(f'zero_std must be "drop", "keep" or a weight in [0, 1], got {zero_std!r}')
    per_group = torch.where(
        zero_std_groups.bool(),
        torch.full(zero_std_groups.shape, w, dtype=torch.get_default_dtype()),
        torch.ones(zero_std_groups.shape, dtype=torch.get_default_dtype()),
    )
    return per_group.repeat_interleave(group_size)


def filter_groups(zero_std_groups: Tensor, group_size: int) -> Tensor:
    """Indices (long) of the rollouts whose group has reward variance, for DAPO's drop-and-resample."""
    keep = (~zero_std_groups.bool()).repeat_interleave(group_size)
    return keep.nonzero().squeeze(-1)


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """Return-to-go of each step of one episode: ``R_t = r_t + gamma * R_{t+1}``, ``R_T = 0``."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    out = [0.0] * len(rewards)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[t]) + gamma * acc
        out[t] = acc
    return out


@dataclass(frozen=True)
class StepGroupAdvantages:
    """Result of :func:`step_group_advantages`: one advantage per (episode, step)."""

    advantages: list[list[float]]
    """Per episode, per step; 0.0 for a step whose anchor state no other step shares, or whose
    group's returns are all equal."""
    shared_share: float
    """Share of steps whose anchor state at least one other step shares (the steps that get a signal)."""
    n_groups: int
    """Number of anchor-state groups with two or more steps."""


def step_group_advantages(
    keys: Sequence[Sequence[Hashable]],
    returns: Sequence[Sequence[float]],
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> StepGroupAdvantages:
    """GiGPO's step-level advantages (Feng et al., 2025): group steps by the state they acted from.

    ``keys[i][t]`` names the state episode ``i`` was in before its step ``t`` (its *anchor state*: in a
    deterministic tool environment, the prompt and every action and observation so far); steps of any
    episodes with equal keys form one group, and each step's advantage compares its return-to-go
    ``returns[i][t]`` (:func:`discounted_returns`) with the group's::

        A_S(i, t) = (R_i,t - mean(R_g)) / (std(R_g) + eps)     (or without the std, scale_by_std=False)

    with the Bessel-corrected std, as :func:`group_advantages`. A step alone in its group, or in a group
    whose returns are all equal (``max - min <= eps``), gets exactly 0.0: the episodes that branched
    from one state are what say which action from it was better. GiGPO adds ``omega * A_S`` to the
    episode-level GRPO advantage of the step's tokens.
    """
    if len(keys) != len(returns):
        raise ValueError(f"keys ({len(keys)} episodes) and returns ({len(returns)}) differ in length")
    groups: dict[Hashable, list[tuple[int, int]]] = {}
    for i, (ks, rs) in enumerate(zip(keys, returns, strict=True)):
        if len(ks) != len(rs):
            raise ValueError(f"episode {i}: {len(ks)} keys but {len(rs)} returns (one of each per step)")
        for t, k in enumerate(ks):
            groups.setdefault(k, []).append((i, t))
    adv = [[0.0] * len(rs) for rs in returns]
    shared = n_groups = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        n_groups += 1
        shared += len(members)
        r = torch.tensor([float(returns[i][t]) for i, t in members], dtype=torch.float64)
        if float(r.max() - r.min()) <= eps:
            continue
        a = r - r.mean()
        if scale_by_std:
            a = a / (r.std(correction=1) + eps)
        for (i, t), value in zip(members, a.tolist(), strict=True):
            adv[i][t] = value
    total = sum(len(rs) for rs in returns)
    return StepGroupAdvantages(adv, shared / total if total else 0.0, n_groups)


def kl_estimator(logp: Tensor, ref_logp: Tensor, kind: KLKind = "k3", clamp: float | None = None) -> Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy (Schulman, 2020).

    With ``d = ref_logp - logp`` (the log of ``p_ref / p``)::

        k1 = logp - ref_logp = -d             unbiased, can be negative, high variance
        k2 = d**2 / 2                         biased, >= 0, low variance
        k3 = exp(d) - d - 1                   unbiased, >= 0, low variance (GRPO's default)

    All three are 0 where ``logp == ref_logp``. ``clamp`` clips each estimate to
    ``[-clamp, clamp]`` (verl clips k3 at 10) for stability; None leaves it as is.
    """
    _same_shape(logp=logp, ref_logp=ref_logp)
    d = ref_logp - logp
    if kind == "k1":
        out = -d
    elif kind == "k2":
        out = 0.5 * d**2
    elif kind == "k3":
        out = (torch.expm1(d) - d).clamp(min=0.0)  # expm1: accurate near 0; clamp: rounding below 0
    else:
        raise ValueError(f'kind must be "k1", "k2" or "k3", got {kind!r}')
    return out if clamp is None else out.clamp(-clamp, clamp)


# ---------------------------------------------------------------------------------- clipped policy


@dataclass(frozen=True)
class PolicyLossTerms:
    """Terms of :func:`clipped_policy_loss` (all scalar tensors; only ``loss`` carries gradient)."""

    loss: Tensor
    """Clipped surrogate loss ``mean(max(-A·ρ, -A·clip(ρ, 1-ε_low, 1+ε_high)))``."""
    clip_frac: Tensor
    """Share of policy tokens where the clipped term is active (their gradient is zero)."""
    clip_frac_low: Tensor
    """Share clipped below: ``ρ < 1 - ε_low`` with ``A < 0``."""
    clip_frac_high: Tensor
    """Share clipped above: ``ρ > 1 + ε_high`` with ``A > 0``."""
    approx_kl: Tensor
    """Mean of ``(ρ - 1) - log ρ`` (k3 estimate of KL(old || new); cleanrl's ``approx_kl``)."""
    ratio_mean: Tensor
    """Mean importance ratio ``ρ = exp(logp - old_logp)`` over policy tokens."""


def _token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """(B,) or B×T advantages as a detached B×T-broadcastable tensor."""
    if advantages.shape == like.shape:
        return advantages.detach()
    if advantages.shape == like.shape[:1]:
        return advantages.detach()[:, None]
    raise ValueError(
        f"advantages must have shape (B,) or B×T = {tuple(like.shape)}, got {tuple(advantages.shape)}"
    )


def clipped_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    loss_agg: LossAgg = "token_mean",
    seq_weights: Tensor | None = None,
) -> PolicyLossTerms:
    """PPO's clipped surrogate with separate lower and upper clip ranges (clip-higher: ε_high > ε_low).

    Per policy token, with ``ρ = exp(logp - old_logp)``::

        loss_t = max(-A·ρ, -A·clip(ρ, 1 - clip_low, 1 + clip_high))

    so a token whose ratio already moved past the clip in the advantage's direction gets no
    gradient. ``old_logp`` and ``advantages`` are treated as constants. Positions outside ``mask``
    have ratio 1 and exactly zero gradient.

    Args:
        logp: B×T log-probs of the tokens under the current policy (:func:`policy_logprobs`).
        old_logp: B×T log-probs under the policy that sampled them (``old_logprobs``; use
            ``logp.detach()`` for a single on-policy step). Where the rollout recorded none
            (``logprob_mask == 0``), recompute them or take those tokens out of ``mask``.
        advantages: (B,) per episode (broadcast to its tokens) or B×T per token.
        mask: B×T, 1 on policy tokens.
        clip_low: ε_low in [0, 1).
        clip_high: ε_high >= 0 (DAPO uses 0.28 with ε_low = 0.2).
        loss_agg: see the module docstring.
        seq_weights: (B,) non-negative episode weights, or None.
    """
    _check_2d("logp", logp)
    _same_shape(logp=logp, old_logp=old_logp, mask=mask)
    _check_clip(clip_low, clip_high)
    adv = _token_advantages(advantages, logp)
    active = mask != 0
    log_ratio = torch.where(active, logp - old_logp.detach(), torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = aggregate_loss(torch.maximum(unclipped, clipped), mask, loss_agg, seq_weights)
    with torch.no_grad():
        w = _weights(mask, logp)
        if seq_weights is not None:
            w = w * seq_weights[:, None].to(w.dtype)
        is_clipped = clipped > unclipped
        return PolicyLossTerms(
            loss=loss,
            clip_frac=masked_mean(is_clipped.to(w.dtype), w),
            clip_frac_low=masked_mean((is_clipped & (ratio < 1.0 - clip_low)).to(w.dtype), w),
            clip_frac_high=masked_mean((is_clipped & (ratio > 1.0 + clip_high)).to(w.dtype), w),
            approx_kl=masked_mean((ratio - 1.0) - log_ratio, w),
            ratio_mean=masked_mean(ratio, w),
        )


def _kl_term(
    logp: Tensor,
    ref_logp: Tensor | None,
    mask: Tensor,
    kl_coef: float,
    kind: KLKind,
    loss_agg: LossAgg,
    seq_weights: Tensor | None,
) -> Tensor:
    """Aggregated KL to the reference: with gradient if ``kl_coef`` != 0, for logging otherwise."""
    if ref_logp is None:
        if kl_coef != 0.0:
            raise ValueError(f"kl_coef={kl_coef} needs ref_logp (the frozen reference's log-probs)")
        return logp.new_zeros(())
    _same_shape(logp=logp, ref_logp=ref_logp)
    active = mask != 0
    zero = torch.zeros_like(logp)
    per_token = kl_estimator(
        torch.where(active, logp, zero), torch.where(active, ref_logp.detach(), zero), kind
    )
    kl = aggregate_loss(per_token, mask, loss_agg, seq_weights)
    return kl if kl_coef != 0.0 else kl.detach()


@dataclass(frozen=True)
class GRPOLossTerms:
    """Terms of :func:`grpo_loss` (scalar tensors; ``loss`` and ``policy_loss`` carry gradient)."""

    loss: Tensor
    """``policy_loss + kl_coef * kl``."""
    policy_loss: Tensor
    """The clipped surrogate (:func:`clipped_policy_loss`)."""
    kl: Tensor
    """KL(policy || reference) by ``kl_kind``; 0.0 if no reference was given."""
    clip_frac: Tensor
    """See :class:`PolicyLossTerms`."""
    clip_frac_low: Tensor
    """See :class:`PolicyLossTerms`."""
    clip_frac_high: Tensor
    """See :class:`PolicyLossTerms`."""
    approx_kl: Tensor
    """KL(old || new) estimate, see :class:`PolicyLossTerms`."""
    ratio_mean: Tensor
    """See :class:`PolicyLossTerms`."""


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    seq_advantages: Tensor,
    mask: Tensor,
    kl_coef: float = 0.0,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    kl_kind: KLKind = "k3",
    seq_weights: Tensor | None = None,
    loss_agg: LossAgg = "token_mean",
) -> GRPOLossTerms:
    """GRPO: clipped surrogate on episode-level advantages plus ``kl_coef`` × KL to a frozen reference.

    ``kl_coef = 0`` (TRL's default, DeepSWE's GRPO++) needs no reference: ``ref_logp`` may be None;
    if given, the KL is still computed and reported, without gradient.

    ``logp``, ``old_logp``, ``mask``, ``clip_low``, ``clip_high`` and ``loss_agg`` are as in
    :func:`clipped_policy_loss`.

    Args:
        ref_logp: B×T log-probs under the frozen reference policy, or None.
        seq_advantages: (B,) one advantage per episode (:func:`group_advantages`), or B×T per token
            (GiGPO: the episode's plus its step's :func:`step_group_advantages`).
        kl_coef: weight of the KL term (>= 0).
        kl_kind: which :func:`kl_estimator` (GRPO uses ``"k3"``).
        seq_weights: (B,) episode weights, e.g. :func:`group_weights` (zero-variance groups) times
            ``(~truncated)`` (episodes cut by a limit), or None.
    """
    _check_2d("logp", logp)
    if seq_advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(
            f"seq_advantages must have shape ({logp.shape[0]},) or B×T = {tuple(logp.shape)}, got "
            f"{tuple(seq_advantages.shape)}"
        )
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
    pol = clipped_policy_loss(
        logp, old_logp, seq_advantages, mask, clip_low, clip_high, loss_agg, seq_weights
    )
    kl = _kl_term(logp, ref_logp, mask, kl_coef, kl_kind, loss_agg, seq_weights)
    return GRPOLossTerms(
        loss=pol.loss + kl_coef * kl if kl_coef != 0.0 else pol.loss,
        policy_loss=pol.loss,
        kl=kl,
        clip_frac=pol.clip_frac,
        clip_frac_low=pol.clip_frac_low,
        clip_frac_high=pol.clip_frac_high,
        approx_kl=pol.approx_kl,
        ratio_mean=pol.ratio_mean,
    )


# ----------------------------------------------------------------------------------- returns / GAE


def turn_end_mask(mask: Tensor) -> Tensor:
    """Bool B×T: the last policy token of each turn (a masked token followed by an unmasked one or the end).

    Two turns with nothing between them (an empty observation) read as one turn here.
    """
    _check_2d("mask", mask)
    active = mask != 0
    next_active = F.pad(active[:, 1:], (0, 1), value=False)
    return active & ~next_active


def _gae_scan(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float,
    lam: float,
    bootstrap_value: Tensor | None,
    discount_per: DiscountPer,
) -> tuple[Tensor, Tensor]:
    """GAE over the masked positions of each row, right to left, skipping unmasked ones."""
    _check_2d("rewards", rewards)
    _same_shape(rewards=rewards, values=values, mask=mask)
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must be in [0, 1], got gamma={gamma!r}, lam={lam!r}")
    if discount_per not in ("token", "turn"):
        raise ValueError(f'discount_per must be "token" or "turn", got {discount_per!r}')
    active = mask != 0
    if bool(((rewards != 0) & ~active).any()):
        raise ValueError(
            "a reward sits on a position outside the mask; put each turn's reward on its last "
            "policy token (to_tensors does) so it is not silently dropped"
        )
    with torch.no_grad():
        r = rewards.detach()
        r = r if r.is_floating_point() else r.to(torch.get_default_dtype())
        v = values.detach().to(r.dtype)
        batch, width = r.shape
        g = torch.full_like(r, gamma)
        lg = torch.full_like(r, gamma * lam)
        if discount_per == "turn":
            ends = turn_end_mask(mask)
            g = torch.where(ends, g, torch.ones_like(g))
            lg = torch.where(ends, lg, torch.ones_like(lg))
        if bootstrap_value is None:
            next_v = r.new_zeros(batch)
        elif bootstrap_value.shape != (batch,):
            raise ValueError(
                f"bootstrap_value must have shape ({batch},), got {tuple(bootstrap_value.shape)}"
            )
        else:
            next_v = bootstrap_value.detach().to(r.dtype)
        next_a = r.new_zeros(batch)
        adv = torch.zeros_like(r)
        for t in range(width - 1, -1, -1):
            on = active[:, t]
            a = r[:, t] + g[:, t] * next_v - v[:, t] + lg[:, t] * next_a
            adv[:, t] = torch.where(on, a, 0.0)
            next_a = torch.where(on, a, next_a)
            next_v = torch.where(on, v[:, t], next_v)
        returns = torch.where(active, adv + v, torch.zeros_like(adv))
    return adv, returns


def gae(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float,
    lam: float,
    bootstrap_value: Tensor | None = None,
    discount_per: DiscountPer = "token",
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over policy tokens; returns ``(advantages, returns)`` (B×T).

    The recurrence runs over the positions where ``mask`` is 1, right to left, jumping over
    observation tokens: for consecutive policy tokens ``t -> n``::

        δ_t = r_t + γ·V_n - V_t          A_t = δ_t + γλ·A_n          R_t = A_t + V_t

    with ``V_n = bootstrap_value`` (default 0: the episode ended) and ``A_n = 0`` after a row's last
    policy token. Each turn's reward sits on its last action token (``token_rewards``), so it flows
    back to every earlier token of every earlier turn. With ``discount_per="token"`` (verl) γ and λ
    apply at every policy token; with ``"turn"`` only when stepping from a turn's last token to the
    next turn (γ = λ = 1 inside a turn, see :func:`turn_end_mask`), which equals :func:`turn_gae`
    on per-turn values. Outputs are detached and 0.0 outside the mask; a nonzero reward outside
    the mask raises ``ValueError``.

    Args:
        token_rewards: B×T rewards, each turn's on its last policy token.
        values: B×T value estimates at each token (only masked positions are read).
        mask: B×T, 1 on policy tokens.
        gamma: discount in [0, 1].
        lam: GAE λ in [0, 1] (1: Monte-Carlo return minus value; 0: one-step TD).
        bootstrap_value: (B,) value after the last policy token (episodes cut by a limit), or None.
        discount_per: ``"token"`` or ``"turn"``.
    """
    return _gae_scan(token_rewards, values, mask, gamma, lam, bootstrap_value, discount_per)


def turn_gae(
    step_rewards: Tensor,
    step_values: Tensor,
    step_mask: Tensor,
    gamma: float,
    lam: float,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAE at the turn level: B×S per-step rewards and values (``step_mask`` 0 on padding steps).

    The same recurrence as :func:`gae` with one position per turn; returns ``(advantages, returns)``.
    """
    return _gae_scan(step_rewards, step_values, step_mask, gamma, lam, bootstrap_value, "token")


def token_returns(
    token_rewards: Tensor, mask: Tensor, gamma: float, discount_per: DiscountPer = "token"
) -> Tensor:
    """Discounted reward-to-go at each policy token (B×T, 0.0 outside the mask): ``G_t = r_t + γ·G_n``."""
    adv, _ = _gae_scan(token_rewards, torch.zeros_like(token_rewards), mask, gamma, 1.0, None, discount_per)
    return adv


@dataclass(frozen=True)
class ValueLossTerms:
    """Terms of :func:`value_loss`."""

    loss: Tensor
    """``0.5 · max((V - R)², (V_clipped - R)²)`` aggregated (no clipping if ``clip`` is None)."""
    clip_frac: Tensor
    """Share of policy tokens where the clipped error is the larger one."""


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip: float | None = 0.2,
    loss_agg: LossAgg = "token_mean",
    seq_weights: Tensor | None = None,
) -> ValueLossTerms:
    """Clipped value loss (PPO2 / cleanrl ``clip_vloss``).

    ``V_clipped = V_old + clip(V - V_old, -clip, clip)``; the clip is in reward units, so scale it to
    your returns (or pass None). ``old_values`` and ``returns`` are constants.
    """
    _check_2d("values", values)
    _same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    ret = returns.detach()
    err = (values - ret) ** 2
    if clip is None:
        return ValueLossTerms(
            loss=aggregate_loss(0.5 * err, mask, loss_agg, seq_weights), clip_frac=err.new_zeros(())
        )
    if clip < 0:
        raise ValueError(f"clip must be >= 0 or None, got {clip!r}")
    old = old_values.detach()
    err_clipped = (old + (values - old).clamp(-clip, clip) - ret) ** 2
    loss = aggregate_loss(0.5 * torch.maximum(err, err_clipped), mask, loss_agg, seq_weights)
    with torch.no_grad():
        frac = masked_mean((err_clipped > err).to(err.dtype), mask)
    return ValueLossTerms(loss=loss, clip_frac=frac)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """``1 - Var(R - V) / Var(R)`` over the mask: 1 is perfect, 0 no better than a constant.

    NaN when the returns do not vary.
    """
    with torch.no_grad():
        var_r = masked_var(returns, mask)
        if float(var_r) == 0.0:
            return float("nan")
        return float(1.0 - masked_var(returns - values, mask) / var_r)


@dataclass(frozen=True)
class PPOLossTerms:
    """Terms of :func:`ppo_loss` (scalar tensors)."""

    loss: Tensor
    """``policy_loss + vf_coef·value_loss - ent_coef·entropy + kl_coef·kl``."""
    policy_loss: Tensor
    """The clipped surrogate."""
    value_loss: Tensor
    """The (clipped) value loss."""
    entropy: Tensor
    """Mean policy entropy over policy tokens (0.0 if not given)."""
    kl: Tensor
    """KL(policy || reference) (0.0 if no reference was given)."""
    clip_frac: Tensor
    """See :class:`PolicyLossTerms`."""
    value_clip_frac: Tensor
    """See :class:`ValueLossTerms`."""
    approx_kl: Tensor
    """KL(old || new) estimate, see :class:`PolicyLossTerms`."""
    ratio_mean: Tensor
    """See :class:`PolicyLossTerms`."""


def ppo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    entropy: Tensor | None = None,
    ref_logp: Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    value_clip: float | None = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.0,
    kl_coef: float = 0.0,
    kl_kind: KLKind = "k3",
    whiten_advantages: bool = False,
    loss_agg: LossAgg = "token_mean",
    seq_weights: Tensor | None = None,
) -> PPOLossTerms:
    """PPO with a value head: clipped surrogate + ``vf_coef`` × value loss − ``ent_coef`` × entropy.

    ``logp``, ``old_logp``, ``mask``, ``clip_low``, ``clip_high``, ``loss_agg`` and ``seq_weights``
    are as in :func:`clipped_policy_loss`; ``old_values`` and ``returns`` are B×T values at rollout
    time and GAE returns (constants); ``vf_coef``, ``ent_coef`` and ``kl_coef`` weigh the terms.

    Args:
        advantages: B×T token advantages (:func:`gae`).
        values: B×T current value-head outputs at each token (with gradient).
        entropy: B×T per-token entropy (:func:`token_entropy`), needed if ``ent_coef`` != 0.
        ref_logp: B×T reference log-probs, needed if ``kl_coef`` != 0.
        value_clip: value clip range in reward units, or None.
        kl_kind: which :func:`kl_estimator`.
        whiten_advantages: whiten ``advantages`` over the mask first (cleanrl ``norm_adv``).
    """
    adv = masked_whiten(advantages.detach(), mask) if whiten_advantages else advantages
    pol = clipped_policy_loss(logp, old_logp, adv, mask, clip_low, clip_high, loss_agg, seq_weights)
    vl = value_loss(values, old_values, returns, mask, value_clip, loss_agg, seq_weights)
    if entropy is None:
        if ent_coef != 0.0:
            raise ValueError(f"ent_coef={ent_coef} needs entropy (token_entropy(logits))")
        ent = logp.new_zeros(())
    else:
        _same_shape(logp=logp, entropy=entropy)
        ent = aggregate_loss(entropy, mask, loss_agg, seq_weights)
        ent = ent if ent_coef != 0.0 else ent.detach()
    kl = _kl_term(logp, ref_logp, mask, kl_coef, kl_kind, loss_agg, seq_weights)
    loss = pol.loss + vf_coef * vl.loss
    if ent_coef != 0.0:
        loss = loss - ent_coef * ent
    if kl_coef != 0.0:
        loss = loss + kl_coef * kl
    return PPOLossTerms(
        loss=loss,
        policy_loss=pol.loss,
        value_loss=vl.loss,
        entropy=ent,
        kl=kl,
        clip_frac=pol.clip_frac,
        value_clip_frac=vl.clip_frac,
        approx_kl=pol.approx_kl,
        ratio_mean=pol.ratio_mean,
    )
