"""LoRA adapters, moving trained tensors between models, the value head and the policy forward pass."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from transferlab.agent_rl.policies.adapters import (
    LoraOptions,
    ValueHead,
    forward_policy,
    load_trainable_state,
    trainable_state,
)
from transferlab.agent_rl.policies.generation import sequence_logprobs
from transferlab.agent_rl.policies.model import TinyPolicyConfig

TINY = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=128, seed=0)


pytestmark = pytest.mark.usefixtures("one_thread")


def padded_batch(tok: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Three texts of different lengths, right-padded with the pad id (as to_tensors packs them)."""
    rows = [tok.encode(t) for t in ("Return x plus three.", "def f(x: int) -> int:\n    return x * 7", "x")]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        attention[i, : len(r)] = 1
    assert attention.sum(1).tolist() != [width] * len(rows)  # really padded
    return ids, attention


def params(model: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_lora_starts_as_the_base_model_and_only_adapters_train(tok: Any) -> None:
    base = TINY.create(tok)
    ids, attention = padded_batch(tok)
    with torch.no_grad():
        before = base(input_ids=ids, attention_mask=attention).logits
    model = LoraOptions(r=4).apply(base)

    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert trainable and frozen
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert not any("lora" in n for n in frozen)
    assert not any("lm_head" in n or "embed_tokens" in n for n in trainable)  # the output head is left alone
    # every linear layer of the block is adapted (q, k, v, o and the three MLP projections)
    adapted = {n.split(".lora_A.")[0].rsplit(".", 1)[1] for n in trainable if ".lora_A." in n}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    with torch.no_grad():  # lora_B starts at zero: the wrapped model computes exactly what the base did
        after = model(input_ids=ids, attention_mask=attention).logits
    assert torch.allclose(before, after, atol=1e-6)


def test_an_optimizer_step_changes_only_the_adapters(tok: Any) -> None:
    model = LoraOptions(r=4).apply(TINY.create(tok))
    ids, attention = padded_batch(tok)
    start = params(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loss = -(forward_policy(model, ids, attention).logprobs * attention).sum()
    loss.backward()
    optimizer.step()

    end = params(model)
    changed = {n for n in start if not torch.equal(start[n], end[n])}
    assert changed
    assert all("lora" in n for n in changed)
    assert any(".lora_B." in n for n in changed)
    for n in start:
        if "lora" not in n:
            assert torch.equal(start[n], end[n]), n  # bit-identical base weights


def test_lora_seed_fixes_the_adapters_and_leaves_the_global_rng_alone(tok: Any) -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = trainable_state(LoraOptions(r=4, seed=1).apply(TINY.create(tok)))
    assert torch.equal(torch.rand(3), expected_next)
    b = trainable_state(LoraOptions(r=4, seed=1).apply(TINY.create(tok)))
    c = trainable_state(LoraOptions(r=4, seed=2).apply(TINY.create(tok)))
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(a[n], c[n]) for n in a)


def _train_a_little(model: Any, tok: Any) -> None:
    ids, attention = padded_batch(tok)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):
        optimizer.zero_grad()
        (-(forward_policy(model, ids, attention).logprobs * attention).sum()).backward()
        optimizer.step()


@pytest.mark.parametrize("lora", [None, LoraOptions(r=4)], ids=["full", "lora"])
def test_trainable_state_moves_the_trained_model_into_an_identically_built_one(
    tok: Any, lora: LoraOptions | None
) -> None:
    def build() -> Any:
        model = TINY.create(tok)
        return lora.apply(model) if lora is not None else model

    learner, worker = build(), build()
    _train_a_little(learner, tok)
    state = trainable_state(learner)
    n_trainable = sum(1 for p in learner.parameters() if p.requires_grad)
    assert len(state) == n_trainable
    assert all(not t.requires_grad and t.device.type == "cpu" for t in state.values())

    ids, _ = padded_batch(tok)
    with torch.no_grad():
        assert not torch.equal(learner(input_ids=ids).logits, worker(input_ids=ids).logits)
        load_trainable_state(worker, state)
        assert torch.equal(learner(input_ids=ids).logits, worker(input_ids=ids).logits)
    for t in state.values():  # a copy: changing it later does not reach either model
        t.zero_()
    with torch.no_grad():
        assert torch.equal(learner(input_ids=ids).logits, worker(input_ids=ids).logits)


def test_loading_into_a_differently_built_model_raises_and_names_the_fix(tok: Any) -> None:
    adapters = trainable_state(LoraOptions(r=4).apply(TINY.create(tok)))
    with pytest.raises(ValueError, match="same policy, same LoRA options"):
        load_trainable_state(TINY.create(tok), adapters)  # no LoRA on the worker
    only_q = LoraOptions(r=4, target_modules=["q_proj"]).apply(TINY.create(tok))
    with pytest.raises(ValueError, match=r"have no parameter in this model \(first: '.*lora"):
        load_trainable_state(only_q, adapters)  # fewer adapted layers
    full = trainable_state(TINY.create(tok))
    with pytest.raises(ValueError, match="must be built like the learner's"):
        load_trainable_state(LoraOptions(r=4).apply(TINY.create(tok)), full)  # full weights into LoRA


@pytest.mark.parametrize("rank", [1, 4])
def test_loading_adapters_of_another_rank_raises_a_value_error(tok: Any, rank: int) -> None:
    adapters = trainable_state(LoraOptions(r=rank).apply(TINY.create(tok)))
    worker = LoraOptions(r=8).apply(TINY.create(tok))
    with pytest.raises(ValueError, match="LoRA options"):
        load_trainable_state(worker, adapters)


def test_forward_policy_logprobs_match_teacher_forcing_on_a_padded_batch(tok: Any) -> None:
    model = TINY.create(tok)
    _train_a_little(model, tok)  # not the initial near-uniform model
    ids, attention = padded_batch(tok)
    with torch.no_grad():
        out = forward_policy(model, ids, attention)
        reference = sequence_logprobs(model, ids, attention)
    real = attention.bool()
    real[:, 0] = False
    assert out.logprobs.shape == out.entropy.shape == ids.shape
    assert torch.allclose(out.logprobs[real], reference[real], atol=1e-5)
    assert torch.all(out.logprobs[:, 0] == 0) and torch.all(out.entropy[:, 0] == 0)
    assert torch.all(out.logprobs[real] < 0)
    log_vocab = math.log(model.config.vocab_size)
    assert torch.all(out.entropy >= 0)
    assert torch.all(out.entropy <= log_vocab + 1e-5)
    assert out.values is None


def test_forward_policy_at_a_temperature_gives_the_tempered_log_probs_and_entropy(tok: Any) -> None:
    """log softmax(z / T) by hand: a sharper distribution (lower entropy) below T=1."""
    model = TINY.create(tok)
    _train_a_little(model, tok)
    ids, attention = padded_batch(tok)
    with torch.no_grad():
        hot = forward_policy(model, ids, attention, temperature=0.5)
        plain = forward_policy(model, ids, attention)
        positions = (attention.long().cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
        logits = logits[:, :-1].float() / 0.5
    by_hand = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    probs = torch.softmax(logits, -1)
    entropy = -(probs * torch.log_softmax(logits, -1)).sum(-1)
    real = attention.bool()[:, 1:]
    assert torch.allclose(hot.logprobs[:, 1:][real], by_hand[real], atol=1e-4)
    assert torch.allclose(hot.entropy[:, 1:][real], entropy[real], atol=1e-4)
    assert hot.entropy[:, 1:][real].mean() < plain.entropy[:, 1:][real].mean()
    with pytest.raises(ValueError, match="temperature must be > 0"):
        forward_policy(model, ids, attention, temperature=0.0)


def test_logprobs_keep_their_gradient(tok: Any) -> None:
    model = TINY.create(tok)
    ids, attention = padded_batch(tok)
    out = forward_policy(model, ids, attention)
    assert out.logprobs.requires_grad
    out.logprobs.sum().backward()
    assert model.get_input_embeddings().weight.grad is not None


def test_value_head_starts_at_zero(tok: Any) -> None:
    model = TINY.create(tok)
    head = ValueHead(model)
    ids, attention = padded_batch(tok)
    with torch.no_grad():
        values = forward_policy(model, ids, attention, head).values
    assert values is not None and values.shape == ids.shape
    assert torch.equal(values, torch.zeros_like(values))
    assert sum(p.numel() for p in head.parameters()) == 32 + 1
    # sized from the model's config whatever its family, and through a peft wrapper
    gpt2 = TinyPolicyConfig(architecture="gpt2", n_layer=1, d_model=16, n_head=2, max_positions=64).create(
        tok
    )
    assert ValueHead(gpt2).linear.in_features == 16
    assert ValueHead(LoraOptions(r=2).apply(TINY.create(tok))).linear.in_features == 32
    assert ValueHead(24).linear.in_features == 24


def test_value_at_t_sees_only_the_tokens_before_t(tok: Any) -> None:
    model = TINY.create(tok)
    head = ValueHead(model)
    with torch.no_grad():
        torch.nn.init.normal_(head.linear.weight, std=1.0)
        torch.nn.init.normal_(head.linear.bias, std=1.0)
    ids = torch.tensor([tok.encode("def f(x: int) -> int:\n    return x + 3")])
    attention = torch.ones_like(ids)
    t = ids.shape[1] // 2
    changed = ids.clone()
    changed[0, t] = (ids[0, t] + 1) % model.config.vocab_size
    with torch.no_grad():
        a = forward_policy(model, ids, attention, head)
        b = forward_policy(model, changed, attention, head)
    assert a.values is not None and b.values is not None
    assert a.values[0, 0] == 0
    assert torch.allclose(a.values[:, : t + 1], b.values[:, : t + 1], atol=1e-6)  # V(ids[:s]) for s <= t
    assert not torch.allclose(a.values[:, t + 1], b.values[:, t + 1])  # V(ids[:t+1]) sees ids[t]
    assert torch.allclose(a.logprobs[:, :t], b.logprobs[:, :t], atol=1e-6)
    assert not torch.allclose(a.logprobs[:, t], b.logprobs[:, t])


def test_value_head_gets_gradient_and_the_model_too(tok: Any) -> None:
    model = LoraOptions(r=4).apply(TINY.create(tok))
    head = ValueHead(model)
    ids, attention = padded_batch(tok)
    out = forward_policy(model, ids, attention, head)
    assert out.values is not None
    ((out.values - 1.0) ** 2 * attention).sum().backward()
    assert head.linear.weight.grad is not None and head.linear.bias.grad is not None
    assert float(head.linear.bias.grad.abs().sum()) > 0
    lora_grads = [p.grad for n, p in model.named_parameters() if ".lora_" in n]
    assert any(g is not None for g in lora_grads)


def test_with_lora_the_state_sent_to_workers_is_only_the_float32_adapters_on_the_cpu(tok: Any) -> None:
    """A bfloat16 base under LoRA: the workers get only the ``lora_`` tensors, as CPU copies in the
    adapters' float32 (peft keeps adapters float32 over a half-precision base)."""
    from transferlab.agent_rl.policies.devices import place_model

    model = LoraOptions(r=4).apply(place_model(TINY.create(tok), "cpu", torch.bfloat16))
    state = trainable_state(model)
    assert state and all(".lora_" in n for n in state)
    assert {n for n, p in model.named_parameters() if ".lora_" in n} == set(state)
    assert {t.dtype for t in state.values()} == {torch.float32}
    assert {t.device.type for t in state.values()} == {"cpu"}
    for name, p in model.named_parameters():
        if ".lora_" not in name:
            assert p.dtype == torch.bfloat16, name


def test_a_float32_state_loads_into_a_bfloat16_model(tok: Any) -> None:
    """Weights sent from a float32 learner land in a bfloat16 worker converted to its dtype."""
    from transferlab.agent_rl.policies.devices import place_model

    learner = TINY.model_copy(update={"seed": 1}).create(tok)
    worker = place_model(TINY.create(tok), "cpu", torch.bfloat16)
    load_trainable_state(worker, trainable_state(learner))
    for (name, want), got in zip(learner.named_parameters(), worker.parameters(), strict=True):
        assert got.dtype == torch.bfloat16 and torch.equal(got, want.detach().to(torch.bfloat16)), name
