"""Hand-computed cases for the SFT / GRPO / PPO loss math (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transferlab.agent_rl.losses import (
    aggregate_loss,
    clipped_policy_loss,
    discounted_returns,
    entropy_from_logits,
    explained_variance,
    filter_groups,
    gae,
    group_advantages,
    group_weights,
    grpo_loss,
    kl_estimator,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    policy_logprobs,
    ppo_loss,
    sft_loss,
    step_group_advantages,
    token_entropy,
    token_returns,
    turn_end_mask,
    turn_gae,
    value_loss,
)

D = torch.float64


def t(*rows: object) -> torch.Tensor:
    """A float64 tensor (hand cases are checked in double precision)."""
    return torch.tensor(rows if len(rows) > 1 else rows[0], dtype=D)


def close(actual: torch.Tensor, expected: object, tol: float = 1e-9) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=tol, rtol=0)


# ------------------------------------------------------------------------------------- masked ops


def test_masked_sum_and_mean() -> None:
    x = t([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    m = torch.tensor([[1, 0, 1], [0, 0, 1]])
    close(masked_sum(x, m), 10.0)  # 1 + 3 + 6
    close(masked_sum(x, m, dim=1), [4.0, 6.0])  # 1 + 3 | 6
    close(masked_mean(x, m), 10.0 / 3.0)
    close(masked_mean(x, m, dim=1), [2.0, 6.0])  # (1 + 3) / 2 | 6 / 1
    close(masked_mean(x, m.bool()), 10.0 / 3.0)  # bool masks too


def test_masked_mean_empty_mask_is_zero_with_finite_gradient() -> None:
    x = t([[1.0, 2.0], [3.0, 4.0]]).requires_grad_()
    m = torch.tensor([[0, 0], [1, 0]])
    close(masked_mean(x, m, dim=1), [0.0, 3.0])  # empty row -> 0.0, not NaN
    out = masked_mean(x, torch.zeros_like(m))
    close(out, 0.0)
    (grad,) = torch.autograd.grad(out, x)
    assert torch.isfinite(grad).all() and (grad == 0).all()


def test_masked_ops_ignore_nan_and_inf_outside_the_mask() -> None:
    x = t([1.0, float("nan"), float("inf")])
    m = torch.tensor([1, 0, 0])
    close(masked_sum(x, m), 1.0)
    close(masked_mean(x, m), 1.0)


def test_masked_mean_float_mask_is_a_weighted_mean() -> None:
    # (0.5*2 + 1*4) / (0.5 + 1) = 5 / 1.5
    close(masked_mean(t([2.0, 4.0]), t([0.5, 1.0])), 5.0 / 1.5)


def test_masked_var_and_whiten() -> None:
    x = t([1.0, 2.0, 3.0, 100.0])
    m = torch.tensor([1, 1, 1, 0])
    # mean 2, population variance ((-1)^2 + 0 + 1^2) / 3 = 2/3
    close(masked_var(x, m), 2.0 / 3.0)
    s = math.sqrt(2.0 / 3.0 + 1e-8)
    close(masked_whiten(x, m), [-1.0 / s, 0.0, 1.0 / s, 0.0], tol=1e-7)  # 0.0 outside the mask
    close(masked_whiten(x, m, shift_mean=False), [2 - 1.0 / s, 2.0, 2 + 1.0 / s, 0.0], tol=1e-7)
    close(masked_whiten(x, torch.zeros_like(m)), [0.0, 0.0, 0.0, 0.0])  # empty: zeros, no NaN
    close(masked_whiten(t([5.0, 7.0]), torch.tensor([1, 0])), [0.0, 0.0])  # one element -> 0


def test_mask_that_does_not_broadcast_raises() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        masked_sum(t([1.0, 2.0]), torch.ones(3))


def test_aggregate_loss_modes() -> None:
    per_token = t([1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [5.0, 5.0, 5.0])
    m = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the third episode has no policy token
    close(aggregate_loss(per_token, m, "token_mean"), 2.0)  # (1 + 2 + 3) / 3
    close(aggregate_loss(per_token, m, "seq_mean_token_mean"), 2.25)  # mean(1.5, 3); row 3 left out
    close(aggregate_loss(per_token, m, "seq_mean_token_sum"), 3.0)  # mean(3, 3)
    w = t([1.0, 0.0, 1.0])  # drop episode 2
    close(aggregate_loss(per_token, m, "token_mean", w), 1.5)  # (1 + 2) / 2
    close(aggregate_loss(per_token, m, "seq_mean_token_mean", w), 1.5)
    close(aggregate_loss(per_token, m, "seq_mean_token_sum", t([1.0, 0.5, 0.0])), 3.0)  # (3 + .5*3)/1.5
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate_loss(per_token, m, "sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        aggregate_loss(per_token, m, "token_mean", t([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="seq_weights"):
        aggregate_loss(per_token, m, "token_mean", t([1.0, 1.0]))


# -------------------------------------------------------------------------------- GRPO advantages


def test_group_advantages_std_scaled_unbiased() -> None:
    # mean 0.5; deviations ±0.5; Bessel: var = 4 * 0.25 / 3 = 1/3, std = 0.57735; A = ±0.5 / 0.57735
    out = group_advantages(t([1.0, 0.0, 0.0, 1.0]), group_size=4, eps=0.0)
    a = 0.5 / math.sqrt(1.0 / 3.0)  # 0.8660254
    close(out.advantages, [a, -a, -a, a])
    close(out.group_mean, [0.5])
    close(out.group_std, [math.sqrt(1.0 / 3.0)])
    assert out.zero_std_groups.tolist() == [False]
    assert out.frac_zero_std == 0.0
    # the default eps=1e-6 is added to the std: 0.5 / (0.57735 + 1e-6)
    close(group_advantages(t([1.0, 0.0, 0.0, 1.0]), 4).advantages[0], 0.5 / (math.sqrt(1 / 3) + 1e-6))


def test_group_advantages_std_biased_and_unscaled() -> None:
    # population std = sqrt(4 * 0.25 / 4) = 0.5 -> A = ±1
    biased = group_advantages(t([1.0, 0.0, 0.0, 1.0]), 4, unbiased_std=False, eps=0.0)
    close(biased.advantages, [1.0, -1.0, -1.0, 1.0])
    # no std scaling (Dr. GRPO / DeepSWE): A = r - mean
    close(group_advantages(t([1.0, 0.0, 0.0, 1.0]), 4, scale_by_std=False).advantages, [0.5, -0.5, -0.5, 0.5])


def test_group_advantages_leave_one_out() -> None:
    # baseline_i = (sum - r_i) / 3: r=1 -> 1/3, A = 2/3; r=0 -> 2/3, A = -2/3  (= 4/3 * (r - mean))
    out = group_advantages(t([1.0, 0.0, 0.0, 1.0]), 4, scale_by_std=False, leave_one_out=True)
    close(out.advantages, [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # rewards [3, 1, 2]: baselines (1+2)/2=1.5, (3+2)/2=2.5, (3+1)/2=2 -> A = 1.5, -1.5, 0
    close(group_advantages(t([3.0, 1.0, 2.0]), 3, False, True).advantages, [1.5, -1.5, 0.0])
    # with std scaling too: std([3, 1, 2]) = 1 (Bessel) -> same numbers
    close(group_advantages(t([3.0, 1.0, 2.0]), 3, True, True, eps=0.0).advantages, [1.5, -1.5, 0.0])


def test_group_advantages_zero_variance_groups_detected() -> None:
    rewards = t([1.0, 0.0, 0.0, 1.0, 0.3, 0.3, 0.3, 0.3, 0.0, 0.0, 0.0, 0.0])
    out = group_advantages(rewards, 4)
    assert out.zero_std_groups.tolist() == [False, True, True]
    assert out.frac_zero_std == pytest.approx(2 / 3)
    assert (out.advantages[4:] == 0).all()  # exactly zero, not 1e-9 noise
    # integer rewards are fine
    assert group_advantages(torch.tensor([1, 1, 0, 0]), 2).zero_std_groups.tolist() == [True, True]


def test_group_advantages_validates() -> None:
    with pytest.raises(ValueError, match="group_size"):
        group_advantages(t([1.0, 0.0]), 1)
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages(t([1.0, 0.0, 1.0]), 4)
    with pytest.raises(ValueError, match="1-D"):
        group_advantages(t([[1.0, 0.0]]), 2)


def test_group_weights_and_filter_groups() -> None:
    zero = torch.tensor([False, True, False])
    close(group_weights(zero, 2, "drop").to(D), [1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    close(group_weights(zero, 2, "keep").to(D), [1.0] * 6)
    close(group_weights(zero, 2, 0.25).to(D), [1.0, 1.0, 0.25, 0.25, 1.0, 1.0])
    assert filter_groups(zero, 2).tolist() == [0, 1, 4, 5]
    for bad in ("skip", 1.5, -0.1, True):
        with pytest.raises(ValueError, match="zero_std"):
            group_weights(zero, 2, bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ KL


def test_kl_estimators_two_tokens() -> None:
    logp = t([math.log(0.5), math.log(0.25)])
    ref = t([math.log(0.25), math.log(0.5)])
    # d = ref - logp = [ln .5, ln 2] = [-0.693147, 0.693147]
    ln2 = math.log(2.0)
    close(kl_estimator(logp, ref, "k1"), [ln2, -ln2])  # logp - ref
    close(kl_estimator(logp, ref, "k2"), [0.5 * ln2**2, 0.5 * ln2**2])  # 0.240227 each
    # k3 = e^d - d - 1: 0.5 + 0.693147 - 1 = 0.193147 ; 2 - 0.693147 - 1 = 0.306853
    close(kl_estimator(logp, ref, "k3"), [0.5 + ln2 - 1.0, 2.0 - ln2 - 1.0])
    close(kl_estimator(logp, ref, "k3").mean(), 0.25)  # (0.193147 + 0.306853) / 2
    close(kl_estimator(logp, ref, "k1", clamp=0.5), [0.5, -0.5])
    with pytest.raises(ValueError, match="kind"):
        kl_estimator(logp, ref, "k4")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_estimators_zero_when_equal(kind: str) -> None:
    logp = t([-0.1, -2.0, -7.5])
    assert (kl_estimator(logp, logp.clone(), kind) == 0).all()  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-30.0, 0.0), min_size=1, max_size=8),
    st.lists(st.floats(-30.0, 0.0), min_size=1, max_size=8),
)
def test_k3_is_never_negative(a: list[float], b: list[float]) -> None:
    n = min(len(a), len(b))
    for dtype in (torch.float32, torch.float64):
        k3 = kl_estimator(torch.tensor(a[:n], dtype=dtype), torch.tensor(b[:n], dtype=dtype), "k3")
        assert (k3 >= 0).all()
        assert (
            kl_estimator(torch.tensor(a[:n], dtype=dtype), torch.tensor(b[:n], dtype=dtype), "k2") >= 0
        ).all()


# ------------------------------------------------------------------------------------ clipped loss


def _clip_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Position 0 is a masked observation with garbage old log-prob; then three policy tokens.

    ratios: 1.5 (A=+1), 0.5 (A=-1), 1.1 (A=+1).
    """
    logp = t([[0.0, math.log(1.5), math.log(0.5), math.log(1.1)]]).requires_grad_()
    old = t([[-500.0, 0.0, 0.0, 0.0]])  # exp(500) would overflow if it were not masked
    adv = t([[7.0, 1.0, -1.0, 1.0]])
    mask = torch.tensor([[0, 1, 1, 1]])
    return logp, old, adv, mask


def test_clipped_loss_symmetric_clip() -> None:
    logp, old, adv, mask = _clip_case()
    out = clipped_policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # token 1: A=+1, ρ=1.5 > 1.2 -> max(-1.5, -1.2) = -1.2 (clipped, no gradient)
    # token 2: A=-1, ρ=0.5 < 0.8 -> max(0.5, 0.8)   =  0.8 (clipped, no gradient)
    # token 3: A=+1, ρ=1.1       -> max(-1.1, -1.1) = -1.1 (gradient -ρ = -1.1)
    close(out.loss, (-1.2 + 0.8 - 1.1) / 3)  # -0.5
    close(out.clip_frac, 2 / 3)
    close(out.clip_frac_high, 1 / 3)
    close(out.clip_frac_low, 1 / 3)
    close(out.ratio_mean, (1.5 + 0.5 + 1.1) / 3)
    # approx_kl = mean((ρ-1) - ln ρ) = (0.094535 + 0.193147 + 0.004690) / 3
    expected_kl = sum((r - 1) - math.log(r) for r in (1.5, 0.5, 1.1)) / 3
    close(out.approx_kl, expected_kl)
    (grad,) = torch.autograd.grad(out.loss, logp)
    close(grad, [[0.0, 0.0, 0.0, -1.1 / 3]])  # d(-A ρ)/d logp = -A ρ, over 3 tokens
    assert grad[0, 0] == 0 and grad[0, 1] == 0 and grad[0, 2] == 0  # exactly


def test_clipped_loss_clip_higher() -> None:
    logp, old, adv, mask = _clip_case()
    out = clipped_policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.6)
    # ε_high = 0.6: ρ=1.5 < 1.6 is no longer clipped -> -1.5 with gradient -1.5; the low side is unchanged
    close(out.loss, (-1.5 + 0.8 - 1.1) / 3)  # -0.6
    close(out.clip_frac, 1 / 3)
    close(out.clip_frac_high, 0.0)
    (grad,) = torch.autograd.grad(out.loss, logp)
    close(grad, [[0.0, -1.5 / 3, 0.0, -1.1 / 3]])


def test_clipped_loss_only_clips_in_the_advantage_direction() -> None:
    # A=+1 with ρ=0.5 < 0.8: max(-0.5, -0.8) = -0.5, the unclipped term, so the gradient flows (-0.5)
    logp = t([[math.log(0.5)]]).requires_grad_()
    out = clipped_policy_loss(logp, t([[0.0]]), t([1.0]), torch.tensor([[1]]))
    close(out.loss, -0.5)
    close(out.clip_frac, 0.0)
    (grad,) = torch.autograd.grad(out.loss, logp)
    close(grad, [[-0.5]])


def test_clipped_loss_sequence_advantages_broadcast() -> None:
    logp = t([[-1.0, -2.0], [-0.5, -0.1]])
    old = logp - 0.1
    mask = torch.tensor([[1, 1], [1, 0]])
    per_seq = clipped_policy_loss(logp, old, t([2.0, -1.0]), mask)
    per_tok = clipped_policy_loss(logp, old, t([[2.0, 2.0], [-1.0, -1.0]]), mask)
    close(per_seq.loss, per_tok.loss)
    with pytest.raises(ValueError, match="advantages"):
        clipped_policy_loss(logp, old, t([1.0, 2.0, 3.0]), mask)
    with pytest.raises(ValueError, match="clip_low"):
        clipped_policy_loss(logp, old, t([1.0, 2.0]), mask, clip_low=1.0)
    with pytest.raises(ValueError, match="shapes"):
        clipped_policy_loss(logp, old[:, :1], t([1.0, 2.0]), mask)


# ---------------------------------------------------------------------------------------- GRPO loss


def _kl_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logp = t([[math.log(0.5), math.log(0.25)]]).requires_grad_()
    ref = t([[math.log(0.25), math.log(0.5)]])
    return logp, ref, torch.tensor([[1, 1]])


def test_grpo_loss_with_k3_kl() -> None:
    logp, ref, mask = _kl_case()
    out = grpo_loss(logp, logp.detach(), ref, t([2.0]), mask, kl_coef=0.1)
    # ρ = 1: policy = mean(-2, -2) = -2 ; k3 = mean(0.193147, 0.306853) = 0.25
    close(out.policy_loss, -2.0)
    close(out.kl, 0.25)
    close(out.loss, -2.0 + 0.1 * 0.25)  # -1.975
    # d/dlogp: policy -Aρ/2 = -1 each; k3: d/dlogp (e^d - d - 1) = 1 - e^d -> [0.5, -1] * 0.1 / 2
    (grad,) = torch.autograd.grad(out.loss, logp)
    close(grad, [[-1.0 + 0.025, -1.0 - 0.05]])


def test_grpo_loss_without_kl() -> None:
    logp, ref, mask = _kl_case()
    no_ref = grpo_loss(logp, logp.detach(), None, t([2.0]), mask)  # TRL default: kl_coef 0, no reference
    close(no_ref.loss, -2.0)
    close(no_ref.kl, 0.0)
    logged = grpo_loss(logp, logp.detach(), ref, t([2.0]), mask, kl_coef=0.0)  # KL reported, not trained
    close(logged.kl, 0.25)
    assert not logged.kl.requires_grad
    close(logged.loss, -2.0)
    with pytest.raises(ValueError, match="ref_logp"):
        grpo_loss(logp, logp.detach(), None, t([2.0]), mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="seq_advantages"):
        grpo_loss(logp, logp.detach(), None, t([2.0, 2.0]), mask)  # two advantages for one episode


def test_grpo_loss_zero_variance_group_dropped_or_kept() -> None:
    # episode 0 in a group with variance (A=1), episode 1 in a flat group (A=0); ρ = 1 everywhere
    logp = t([[-1.0, -1.0], [-1.0, -1.0]])
    mask = torch.ones(2, 2)
    adv = t([1.0, 0.0])
    zero = torch.tensor([False, True])
    keep = grpo_loss(logp, logp, None, adv, mask, seq_weights=group_weights(zero, 1, "keep").to(D))
    drop = grpo_loss(logp, logp, None, adv, mask, seq_weights=group_weights(zero, 1, "drop").to(D))
    close(keep.loss, (-1 - 1 + 0 + 0) / 4)  # the flat group dilutes the token mean
    close(drop.loss, (-1 - 1) / 2)  # dropped: out of numerator and denominator


# ------------------------------------------------------------------------------------ returns / GAE


def test_gae_hand_computed() -> None:
    r, v, m = t([[1.0, 0.0, 2.0]]), t([[0.5, 1.0, 1.5]]), torch.ones(1, 3)
    adv, ret = gae(r, v, m, gamma=0.5, lam=0.5)
    # t=2: δ = 2 + .5*0 - 1.5 = 0.5                 A = 0.5
    # t=1: δ = 0 + .5*1.5 - 1 = -0.25               A = -0.25 + .25*0.5 = -0.125
    # t=0: δ = 1 + .5*1 - .5 = 1.0                  A = 1.0 + .25*(-0.125) = 0.96875
    close(adv, [[0.96875, -0.125, 0.5]])
    close(ret, [[1.46875, 0.875, 2.0]])  # A + V


def test_gae_gamma_lambda_one_is_return_minus_value() -> None:
    g = torch.Generator().manual_seed(0)
    r = torch.randn(3, 9, generator=g, dtype=D)
    v = torch.randn(3, 9, generator=g, dtype=D)
    mask = torch.ones(3, 9)
    adv, ret = gae(r, v, mask, 1.0, 1.0)
    reward_to_go = r.flip(1).cumsum(1).flip(1)
    close(adv, reward_to_go - v, tol=1e-12)
    close(ret, reward_to_go, tol=1e-12)
    close(token_returns(r, mask, 1.0), reward_to_go, tol=1e-12)


# The design note 000 worked example: 10 steps, γ = λ = 1, so A_s = r_s + (sum of later rewards) - V_s.
# Step 3 (read the source): r = +0.5, later rewards 0.4 + 1.2 + 10.0 - 0.5 + 0.2 + 15.0 = 26.3, V = 5.0
#   -> A = 0.5 + 26.3 - 5.0 = +21.8
# Step 7 (a redundant re-read): r = -0.5, later rewards 0.2 + 15.0 = 15.2, V = 16.0
#   -> A = -0.5 + 15.2 - 16.0 = -1.3
DESIGN_NOTE_REWARDS = [0.0, 0.2, 0.1, 0.5, 0.4, 1.2, 10.0, -0.5, 0.2, 15.0]
DESIGN_NOTE_VALUES = [1.0, 2.0, 3.0, 5.0, 8.0, 9.0, 10.0, 16.0, 14.0, 12.0]


def test_turn_gae_design_note_worked_example() -> None:
    adv, ret = turn_gae(
        t([DESIGN_NOTE_REWARDS]), t([DESIGN_NOTE_VALUES]), torch.ones(1, 10), gamma=1.0, lam=1.0
    )
    assert sum(DESIGN_NOTE_REWARDS[4:]) == pytest.approx(26.3)
    assert sum(DESIGN_NOTE_REWARDS[8:]) == pytest.approx(15.2)
    assert adv[0, 3].item() == pytest.approx(21.8)
    assert adv[0, 7].item() == pytest.approx(-1.3)
    assert ret[0, 3].item() == pytest.approx(26.8)  # 0.5 + 26.3


def test_token_gae_design_note_worked_example() -> None:
    """The same episode as tokens: prompt, then per turn 2 action tokens and 3 observation tokens."""
    ids_mask: list[int] = [0, 0, 0]  # prompt
    rewards: list[float] = [0.0, 0.0, 0.0]
    values: list[float] = [0.0, 0.0, 0.0]
    first_token: list[int] = []
    for r, v in zip(DESIGN_NOTE_REWARDS, DESIGN_NOTE_VALUES, strict=True):
        first_token.append(len(ids_mask))
        ids_mask += [1, 1, 0, 0, 0]
        rewards += [0.0, r, 0.0, 0.0, 0.0]  # the turn's reward on its last action token
        values += [v, v, 99.0, 99.0, 99.0]  # values on observation tokens must never be read
    adv, _ = gae(t([rewards]), t([values]), torch.tensor([ids_mask]), 1.0, 1.0)
    assert adv[0, first_token[3]].item() == pytest.approx(21.8)
    assert adv[0, first_token[3] + 1].item() == pytest.approx(21.8)
    assert adv[0, first_token[7]].item() == pytest.approx(-1.3)
    assert (adv[0][torch.tensor(ids_mask) == 0] == 0).all()


def _interleave(
    step_rewards: list[float], step_values: list[float], action_lens: list[int], obs_lens: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """Token tensors for one episode (prompt of 2) and the positions of each turn's action tokens."""
    mask, rew, val, spans = [0, 0], [0.0, 0.0], [-7.0, -7.0], []
    for r, v, na, no in zip(step_rewards, step_values, action_lens, obs_lens, strict=True):
        spans.append(list(range(len(mask), len(mask) + na)))
        mask += [1] * na + [0] * no
        rew += [0.0] * (na - 1) + [r] + [0.0] * no
        val += [v] * na + [-7.0] * no
    return t([rew]), t([val]), torch.tensor([mask]), spans


def test_token_gae_with_observations_equals_turn_gae_single_token_turns() -> None:
    # one action token per turn: observation tokens are skipped, so any γ, λ give the turn-level numbers
    sr, sv = [0.3, -0.2, 0.0, 1.0, 0.5], [0.1, 0.4, -0.3, 0.8, 0.2]
    rew, val, mask, spans = _interleave(sr, sv, [1] * 5, [3, 1, 4, 2, 0])
    adv, ret = gae(rew, val, mask, gamma=0.9, lam=0.8)
    turn_adv, turn_ret = turn_gae(t([sr]), t([sv]), torch.ones(1, 5), gamma=0.9, lam=0.8)
    pos = torch.tensor([s[0] for s in spans])
    close(adv[0, pos], turn_adv[0], tol=1e-12)
    close(ret[0, pos], turn_ret[0], tol=1e-12)


def test_token_gae_per_turn_discount_equals_turn_gae_multi_token_turns() -> None:
    sr, sv = [0.3, -0.2, 0.0, 1.0, 0.5], [0.1, 0.4, -0.3, 0.8, 0.2]
    rew, val, mask, spans = _interleave(sr, sv, [2, 4, 1, 3, 2], [3, 1, 4, 2, 0])
    adv, ret = gae(rew, val, mask, gamma=0.9, lam=0.8, discount_per="turn")
    turn_adv, turn_ret = turn_gae(t([sr]), t([sv]), torch.ones(1, 5), gamma=0.9, lam=0.8)
    for s, span in enumerate(spans):  # every token of turn s gets turn s's advantage
        close(adv[0, span], turn_adv[0, s].expand(len(span)), tol=1e-12)
        close(ret[0, span], turn_ret[0, s].expand(len(span)), tol=1e-12)
    # per-token discounting differs: γλ is applied at every action token, not once per turn
    token_adv, _ = gae(rew, val, mask, gamma=0.9, lam=0.8, discount_per="token")
    assert not torch.allclose(token_adv[0, spans[0][0]], turn_adv[0, 0])


def test_turn_gae_padding_steps_and_bootstrap() -> None:
    r = t([1.0, 2.0, 0.0], [1.0, 0.0, 0.0])
    v = t([0.0, 0.0, 5.0], [0.0, 3.0, 3.0])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])  # row 2 has one real step
    adv, _ = turn_gae(r, v, m, gamma=0.5, lam=1.0)
    # row 1: A1 = 2 ; A0 = 1 + .5*0 - 0 + .5*2 = 2      row 2: A0 = 1 (padding values never read)
    close(adv, [[2.0, 2.0, 0.0], [1.0, 0.0, 0.0]])
    # an episode cut by a limit bootstraps from V(next) = 4: A = 1 + 0.5*4 - 0 = 3
    adv_b, ret_b = turn_gae(t([[1.0]]), t([[0.0]]), torch.ones(1, 1), 0.5, 1.0, bootstrap_value=t([4.0]))
    close(adv_b, [[3.0]])
    close(ret_b, [[3.0]])


def test_token_returns_skip_observations() -> None:
    r, m = t([[1.0, 0.0, 0.0, 2.0]]), torch.tensor([[1, 0, 1, 1]])
    # per token: G3 = 2, G2 = 0 + .5*2 = 1, G0 = 1 + .5*1 = 1.5 (position 1 skipped, 0.0)
    close(token_returns(r, m, 0.5), [[1.5, 0.0, 1.0, 2.0]])
    # per turn (turns end at 0 and 3): G3 = 2, G2 = 0 + 1*2 = 2, G0 = 1 + .5*2 = 2
    close(token_returns(r, m, 0.5, discount_per="turn"), [[2.0, 0.0, 2.0, 2.0]])


def test_gae_rejects_reward_outside_mask_and_bad_args() -> None:
    with pytest.raises(ValueError, match="outside the mask"):
        gae(t([[0.0, 1.0]]), t([[0.0, 0.0]]), torch.tensor([[1, 0]]), 1.0, 1.0)
    with pytest.raises(ValueError, match="gamma"):
        gae(t([[0.0]]), t([[0.0]]), torch.ones(1, 1), 1.5, 1.0)
    with pytest.raises(ValueError, match="discount_per"):
        gae(t([[0.0]]), t([[0.0]]), torch.ones(1, 1), 1.0, 1.0, discount_per="step")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bootstrap_value"):
        gae(t([[0.0]]), t([[0.0]]), torch.ones(1, 1), 1.0, 1.0, bootstrap_value=t([1.0, 2.0]))


def test_turn_end_mask() -> None:
    m = torch.tensor([[0, 1, 1, 0, 1, 0, 0, 1]])
    assert turn_end_mask(m).int().tolist() == [[0, 0, 1, 0, 1, 0, 0, 1]]


# ---------------------------------------------------------------------------------- value / PPO


def test_value_loss_clipped() -> None:
    values = t([[2.0, 0.0]]).requires_grad_()
    old, ret, m = t([[1.0, 0.5]]), t([[3.0, 1.0]]), torch.ones(1, 2)
    out = value_loss(values, old, ret, m, clip=0.2)
    # token 0: (2-3)^2 = 1 ; clipped V = 1 + 0.2 = 1.2 -> (1.2-3)^2 = 3.24 ; 0.5*max = 1.62 (clipped)
    # token 1: (0-1)^2 = 1 ; clipped V = 0.5 - 0.2 = 0.3 -> (0.3-1)^2 = 0.49 ; 0.5*max = 0.5
    close(out.loss, (1.62 + 0.5) / 2)  # 1.06
    close(out.clip_frac, 0.5)
    (grad,) = torch.autograd.grad(out.loss, values)
    close(grad, [[0.0, (0.0 - 1.0) / 2]])  # clipped token: constant; token 1: (V - R) / 2
    close(value_loss(values, old, ret, m, clip=None).loss, 0.5 * (1 + 1) / 2)


def test_explained_variance() -> None:
    ret, m = t([1.0, 2.0, 3.0]), torch.ones(3)
    assert explained_variance(ret, ret, m) == pytest.approx(1.0)
    assert explained_variance(t([2.0, 2.0, 2.0]), ret, m) == pytest.approx(0.0)  # Var([-1,0,1]) / Var(R)
    assert math.isnan(explained_variance(ret, t([1.0, 1.0, 1.0]), m))


def test_token_entropy_and_entropy_from_logits() -> None:
    uniform = torch.zeros(1, 3, 4, dtype=D)
    close(token_entropy(uniform), [[0.0, math.log(4), math.log(4)]])  # position 0 has no prediction
    # p = [.25, .75]: H = -(.25 ln .25 + .75 ln .75) = 0.562335
    logits = t([[[0.0, math.log(3.0)], [0.0, 0.0]]])
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    close(token_entropy(logits), [[0.0, h]])
    close(entropy_from_logits(uniform, torch.tensor([[0, 1, 1]])), math.log(4))


def test_ppo_loss_combines_terms() -> None:
    logp = t([[-1.0, -2.0]]).requires_grad_()
    values = t([[2.0, 0.0]]).requires_grad_()
    old_v, ret, m = t([[1.0, 0.5]]), t([[3.0, 1.0]]), torch.ones(1, 2)
    ent = t([[math.log(4), math.log(4)]])
    out = ppo_loss(logp, logp.detach(), t([[1.0, -1.0]]), values, old_v, ret, m, entropy=ent, ent_coef=0.01)
    # ρ = 1: policy = mean(-1, +1) = 0 ; value loss 1.06 (test_value_loss_clipped) ; entropy ln 4
    close(out.policy_loss, 0.0)
    close(out.value_loss, 1.06)
    close(out.entropy, math.log(4))
    close(out.loss, 0.0 + 0.5 * 1.06 - 0.01 * math.log(4))  # 0.516137
    close(out.kl, 0.0)
    with pytest.raises(ValueError, match="entropy"):
        ppo_loss(logp, logp.detach(), t([[1.0, -1.0]]), values, old_v, ret, m, ent_coef=0.01)


def test_ppo_loss_whitens_and_adds_kl() -> None:
    logp = t([[-1.0, -2.0, -0.5]]).requires_grad_()
    values, ret, m = t([[0.0, 0.0, 0.0]]), t([[0.0, 0.0, 0.0]]), torch.tensor([[1, 1, 0]])
    adv = t([[1.0, 3.0, 50.0]])
    out = ppo_loss(logp, logp.detach(), adv, values, values, ret, m, whiten_advantages=True)
    # over the mask adv [1, 3] whitens to [-1, 1] -> policy = mean(1, -1) = 0; gradient -A/2 = [.5, -.5]
    close(out.policy_loss, 0.0)
    (grad,) = torch.autograd.grad(out.loss, logp)
    close(grad, [[0.5, -0.5, 0.0]], tol=1e-7)
    ref = logp.detach() + t([[0.0, 0.0, 3.0]])  # KL only on the masked-out token: none counted
    with_kl = ppo_loss(logp, logp.detach(), adv, values, values, ret, m, ref_logp=ref, kl_coef=1.0)
    close(with_kl.kl, 0.0)


# ------------------------------------------------------------------------------- log-probs and SFT


def _sft_case() -> tuple[torch.Tensor, torch.Tensor]:
    # logits[0] uniform over 3 tokens; logits[1] = ln[1, 2, 1] -> p = [.25, .5, .25]
    logits = t([[[0.0, 0.0, 0.0], [0.0, math.log(2.0), 0.0], [5.0, -1.0, 2.0]]])
    return logits, torch.tensor([[2, 1, 0]])


def test_policy_logprobs_alignment() -> None:
    logits, ids = _sft_case()
    # out[1] = log p(ids[1]=1 | logits[0]) = ln 1/3 ; out[2] = log p(ids[2]=0 | logits[1]) = ln .25
    close(policy_logprobs(logits, ids), [[0.0, math.log(1 / 3), math.log(0.25)]])
    # temperature 2 on doubled logits gives the same distributions
    close(policy_logprobs(2 * logits, ids, temperature=2.0), [[0.0, math.log(1 / 3), math.log(0.25)]])
    with pytest.raises(ValueError, match="input_ids"):
        policy_logprobs(logits, ids[:, :2])


def test_sft_loss_counts_only_masked_targets() -> None:
    logits, ids = _sft_case()
    out = sft_loss(logits, ids, torch.tensor([[0, 0, 1]]))
    close(out.loss, math.log(4))  # -ln .25
    assert out.tokens == 1
    both = sft_loss(logits, ids, torch.tensor([[1, 1, 1]]))  # position 0 can never be predicted
    close(both.loss, (math.log(3) + math.log(4)) / 2)
    assert both.tokens == 2


def test_sft_loss_context_weight_counts_the_other_real_tokens() -> None:
    logits, ids = _sft_case()
    # target 1 (nll ln 3) is context, target 2 (nll ln 4) the policy's: (0.5 ln 3 + ln 4) / 1.5
    out = sft_loss(logits, ids, torch.tensor([[0, 0, 1]]), torch.tensor([[1, 1, 1]]), context_weight=0.5)
    close(out.loss, (0.5 * math.log(3) + math.log(4)) / 1.5)
    assert out.tokens == 1
    padded = sft_loss(logits, ids, torch.tensor([[0, 0, 1]]), torch.tensor([[1, 0, 1]]), context_weight=0.5)
    close(padded.loss, math.log(4))  # a pad position is never counted
    with pytest.raises(ValueError, match="attention_mask"):
        sft_loss(logits, ids, torch.tensor([[0, 0, 1]]), context_weight=0.5)
    with pytest.raises(ValueError, match=">= 0"):
        sft_loss(logits, ids, torch.tensor([[0, 0, 1]]), torch.tensor([[1, 1, 1]]), context_weight=-1)


def test_sft_loss_ignore_mask_drops_a_demonstrated_mistake_from_both_terms() -> None:
    logits, ids = _sft_case()
    # targets 1 and 2 are the policy's (ln 3, ln 4); ignoring target 1 leaves ln 4 alone
    out = sft_loss(logits, ids, torch.tensor([[0, 1, 1]]), ignore_mask=torch.tensor([[0, 1, 0]]))
    close(out.loss, math.log(4))
    assert out.tokens == 1
    # as context (weight 0.5) target 1 would count 0.5 ln 3; ignored, it counts nothing either
    ctx = sft_loss(
        logits, ids, torch.tensor([[0, 0, 1]]), torch.tensor([[1, 1, 1]]), 0.5, torch.tensor([[0, 1, 0]])
    )
    close(ctx.loss, math.log(4))


def test_sft_loss_matches_cross_entropy() -> None:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 6, 11, generator=g)
    ids = torch.randint(0, 11, (2, 6), generator=g)
    mask = torch.tensor([[0, 1, 1, 0, 1, 1], [0, 0, 1, 1, 1, 0]])
    ce = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), ids[:, 1:].reshape(-1), reduction="none")
    expected = (ce * mask[:, 1:].reshape(-1)).sum() / mask[:, 1:].sum()
    torch.testing.assert_close(sft_loss(logits, ids, mask).loss, expected)


# --------------------------------------------------------------- gradients through a tiny "LM"


class TinyLM(nn.Module):
    """Embedding + linear over a 20-token vocabulary, with a value head."""

    def __init__(self, vocab: int = 20, dim: int = 8) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)
        self.value = nn.Linear(dim, 1)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.emb(ids))
        return self.head(h), self.value(h).squeeze(-1)


# prompt (3) | action (2) | observation (3) | action (3) | observation (1)
IDS = torch.tensor([[1, 2, 3, 10, 11, 4, 5, 6, 12, 13, 14, 7]])
LOSS_MASK = torch.tensor([[0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0]])
OBS = LOSS_MASK[0] == 0  # prompt and observation positions (position 0 included)


def _logits_grad_by_target(loss_fn: str, mask: torch.Tensor) -> torch.Tensor:
    """d loss / d logits, re-aligned so entry t is the logit vector that predicted token t."""
    torch.manual_seed(0)
    model = TinyLM()
    logits, _ = model(IDS)
    logp = policy_logprobs(logits, IDS)
    if loss_fn == "sft":
        loss = sft_loss(logits, IDS, mask).loss
    else:
        ref = logp.detach() + 0.1
        loss = grpo_loss(logp, logp.detach() - 0.05, ref, t([1.0]).float(), mask, kl_coef=0.1).loss
    (grad,) = torch.autograd.grad(loss, logits)
    return torch.nn.functional.pad(grad[:, :-1], (0, 0, 1, 0))[0].abs().sum(-1)  # (T,), row t <- logits[t-1]


@pytest.mark.parametrize("loss_fn", ["sft", "grpo"])
def test_observation_tokens_get_exactly_zero_gradient(loss_fn: str) -> None:
    grad = _logits_grad_by_target(loss_fn, LOSS_MASK)
    assert (grad[OBS] == 0).all()  # exactly 0.0, not approximately
    assert (grad[~OBS] != 0).all()


@pytest.mark.parametrize("loss_fn", ["sft", "grpo"])
def test_masking_bug_leaks_gradient_into_observations(loss_fn: str) -> None:
    """The ablation: observation tokens wrongly left in the mask (mask = attention_mask) get trained on."""
    right = _logits_grad_by_target(loss_fn, LOSS_MASK)
    wrong = _logits_grad_by_target(loss_fn, torch.ones_like(LOSS_MASK))
    leaked = OBS.clone()
    leaked[0] = False  # nothing predicts position 0, whatever the mask says
    assert (wrong[leaked] != 0).all()
    assert (right[leaked] == 0).all()
    assert not torch.equal(right, wrong)


def test_ppo_value_and_logprob_gradients_zero_on_observations() -> None:
    torch.manual_seed(0)
    model = TinyLM()
    logits, values = model(IDS)
    logp = policy_logprobs(logits, IDS)
    rewards = torch.zeros(1, 12)
    rewards[0, 4], rewards[0, 10] = 0.5, 1.0  # each turn's reward on its last action token
    adv, ret = gae(rewards, values.detach(), LOSS_MASK, 1.0, 0.95)
    out = ppo_loss(
        logp,
        logp.detach(),
        adv,
        values,
        values.detach(),
        ret,
        LOSS_MASK,
        entropy=token_entropy(logits),
        ent_coef=0.01,
    )
    g_logp, g_values = torch.autograd.grad(out.loss, [logp, values])
    assert (g_logp[0, OBS] == 0).all() and (g_values[0, OBS] == 0).all()
    assert (g_logp[0, ~OBS] != 0).all() and (g_values[0, ~OBS] != 0).all()


def test_truncated_episode_with_zero_weight_gets_zero_gradient() -> None:
    logp = torch.full((2, 3), -1.0, requires_grad=True)
    mask = torch.ones(2, 3)
    out = grpo_loss(
        logp, logp.detach(), None, torch.tensor([1.0, -1.0]), mask, seq_weights=torch.tensor([1.0, 0.0])
    )
    (grad,) = torch.autograd.grad(out.loss, logp)
    assert (grad[1] == 0).all() and (grad[0] != 0).all()


@pytest.mark.parametrize("loss_fn", ["sft", "grpo", "ppo"])
def test_parameters_change_after_one_step(loss_fn: str) -> None:
    torch.manual_seed(0)
    model = TinyLM()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    logits, values = model(IDS)
    logp = policy_logprobs(logits, IDS)
    if loss_fn == "sft":
        loss = sft_loss(logits, IDS, LOSS_MASK).loss
    elif loss_fn == "grpo":
        loss = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0]), LOSS_MASK).loss
    else:
        rewards = torch.zeros(1, 12)
        rewards[0, 10] = 1.0
        adv, ret = gae(rewards, values.detach(), LOSS_MASK, 1.0, 1.0)
        loss = ppo_loss(logp, logp.detach(), adv, values, values.detach(), ret, LOSS_MASK).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    trained = {"emb.weight", "head.weight", "head.bias"} | (
        {"value.weight", "value.bias"} if loss_fn == "ppo" else set()
    )
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) != (name in trained), name


def test_grpo_step_moves_logprobs_with_the_advantage_sign() -> None:
    torch.manual_seed(0)
    model = TinyLM()
    ids = torch.tensor([[1, 10, 11, 4, 12], [1, 15, 16, 4, 17]])  # disjoint action tokens
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 1, 1, 0, 1]])
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def seq_logp() -> torch.Tensor:
        return masked_sum(policy_logprobs(model(ids)[0], ids), mask, dim=1)

    start = seq_logp().detach()
    for _ in range(3):
        logp = policy_logprobs(model(ids)[0], ids)
        loss = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0, -1.0]), mask).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    end = seq_logp().detach()
    assert end[0] > start[0] and end[1] < start[1]


# ------------------------------------------------------------------------------ GiGPO step groups


def test_discounted_returns_by_hand() -> None:
    # R_2 = 10, R_1 = 0 + 0.5 * 10 = 5, R_0 = 1 + 0.5 * 5 = 3.5
    assert discounted_returns([1.0, 0.0, 10.0], 0.5) == [3.5, 5.0, 10.0]
    assert discounted_returns([1.0, 2.0], 1.0) == [3.0, 2.0] and discounted_returns([], 0.9) == []
    with pytest.raises(ValueError, match="gamma must be in"):
        discounted_returns([1.0], 1.5)


def test_step_group_advantages_compare_steps_that_acted_from_one_state() -> None:
    # state s: episodes 0, 1, 2 at step 0 with returns 4, 2, 0 -> mean 2, Bessel std 2 -> 1, 0, -1;
    # state a: episodes 0 and 1 at step 1 with 6, 2 -> mean 4, std sqrt(8) -> +-1/sqrt(2);
    # state b: episode 2 alone at step 1 -> 0.
    keys = [["s", "a"], ["s", "a"], ["s", "b"]]
    returns = [[4.0, 6.0], [2.0, 2.0], [0.0, 0.0]]
    out = step_group_advantages(keys, returns, eps=0.0)
    r = 1 / math.sqrt(2)
    expected = [[1.0, r], [0.0, -r], [-1.0, 0.0]]
    for row, want in zip(out.advantages, expected, strict=True):
        assert row == pytest.approx(want, abs=1e-12)
    assert out.shared_share == pytest.approx(5 / 6) and out.n_groups == 2
    plain = step_group_advantages(keys, returns, scale_by_std=False)
    assert plain.advantages == [[2.0, 2.0], [0.0, -2.0], [-2.0, 0.0]]


def test_step_group_advantages_flat_group_and_bad_input() -> None:
    out = step_group_advantages([["s"], ["s"]], [[3.0], [3.0]])
    assert out.advantages == [[0.0], [0.0]] and out.n_groups == 1 and out.shared_share == 1.0
    with pytest.raises(ValueError, match="episode 0: 2 keys but 1 returns"):
        step_group_advantages([["s", "t"]], [[1.0]])
    with pytest.raises(ValueError, match="differ in length"):
        step_group_advantages([["s"]], [])


def test_grpo_loss_takes_per_token_advantages() -> None:
    # per-token advantages equal to the episode's broadcast give the same loss as (B,) ones
    logp = t([[-1.0, -0.5, -0.2]])
    mask = t([[0.0, 1.0, 1.0]])
    seq = grpo_loss(logp, logp, None, t([2.0]), mask)
    tok = grpo_loss(logp, logp, None, t([[2.0, 2.0, 2.0]]), mask)
    close(tok.loss, seq.loss.item())
    # at ratio 1 the surrogate is -mean(A) over the policy tokens: -(1 + 3) / 2
    close(grpo_loss(logp, logp, None, t([[9.0, 1.0, 3.0]]), mask).loss, -2.0)
    with pytest.raises(ValueError, match="seq_advantages must have shape"):
        grpo_loss(logp, logp, None, t([[1.0, 2.0]]), mask)
