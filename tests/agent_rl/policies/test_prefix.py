"""completion_logprobs / packed_logprobs equal teacher forcing of whole rows, gradients included."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from transferlab.agent_rl.policies.generation import sequence_logprobs
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.policies.prefix import (
    completion_logprobs,
    packed_logprobs,
    prompt_runs,
    right_pad,
)
from transferlab.agent_rl.policies.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return train_tokenizer(["def f(x):\n    return x + 1\n"] * 20, vocab_size=300)


def _batch() -> tuple[list[list[int]], list[list[int]]]:
    """3 prompts of different lengths, 3 completions each (lengths 1-7), as GRPO lays them out."""
    g = torch.Generator().manual_seed(0)
    prompts = [[1, 3, *torch.randint(5, 60, (n,), generator=g).tolist()] for n in (5, 9, 3)]
    flat = [p for p in prompts for _ in range(3)]
    completions = [torch.randint(5, 60, (n,), generator=g).tolist() for n in (4, 1, 7, 2, 6, 6, 3, 5, 1)]
    return flat, completions


def _whole_rows(model: Any, prompts: list[list[int]], completions: list[list[int]], pad: int) -> torch.Tensor:
    seqs = [p + c for p, c in zip(prompts, completions, strict=True)]
    width = max(map(len, seqs))
    ids = right_pad(seqs, width, torch.long, pad)
    attention = right_pad([[1] * len(s) for s in seqs], width, torch.long)
    mask = right_pad(
        [[0] * len(p) + [1] * len(c) for p, c in zip(prompts, completions, strict=True)], width, torch.long
    )
    return sequence_logprobs(model, ids, attention, mask)


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_shared_prompts_give_the_whole_row_log_probs_and_gradients(
    tokenizer: Any, architecture: str, checkpointing: bool
) -> None:
    model = TinyPolicyConfig(architecture=architecture, n_layer=2, d_model=32, seed=1).create(tokenizer)
    if checkpointing:
        model.activation_checkpointing_enable()
    model.train()
    prompts, completions = _batch()
    pad = tokenizer.pad_token_id

    shared = packed_logprobs(model, prompts, completions, pad)
    shared.sum().backward()
    shared_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    whole = _whole_rows(model, prompts, completions, pad)
    whole.sum().backward()
    whole_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]

    assert shared.shape == whole.shape
    assert torch.allclose(shared, whole, atol=1e-5)
    assert (shared != 0).sum() == sum(map(len, completions))
    assert len(shared_grads) == len(whole_grads) > 0
    for a, b in zip(shared_grads, whole_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_completion_layout_and_mask(tokenizer: Any) -> None:
    model = TinyPolicyConfig(n_layer=1, d_model=32, seed=2).create(tokenizer)
    prompts, completions = _batch()
    with torch.no_grad():
        logp, mask = completion_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    assert logp.shape == mask.shape == (9, 7)
    assert mask.sum(-1).tolist() == [len(c) for c in completions]
    assert bool((logp[mask] < 0).all()) and bool((logp[~mask] == 0).all())


def test_prompt_runs_group_equal_neighbours_only() -> None:
    assert prompt_runs([[1, 2], [1, 2], [3], [1, 2]]) == ([[1, 2], [3], [1, 2]], [0, 0, 1, 2])


def test_bad_input_names_the_problem(tokenizer: Any) -> None:
    model = TinyPolicyConfig(n_layer=1, d_model=32).create(tokenizer)
    with pytest.raises(ValueError, match="one prompt per completion"):
        completion_logprobs(model, [[1, 2]], [[3], [4]], 0)
    with pytest.raises(ValueError, match="empty prompt"):
        completion_logprobs(model, [[]], [[3]], 0)
    with pytest.raises(ValueError, match="only empty completions"):
        completion_logprobs(model, [[1, 2]], [[]], 0)
