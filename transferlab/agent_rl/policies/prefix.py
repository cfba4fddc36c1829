"""Teacher-forced log-probs of completions that share prompts: each distinct prompt runs once.

GRPO samples G completions per prompt, so a batch of ``B = tasks x G`` (prompt + completion) rows
holds each prompt G times. :func:`completion_logprobs` runs the model over each run of equal
consecutive prompts once (left-padded, with the KV cache on and gradients flowing), repeats that
prompt's keys and values for its rows (``Cache.reorder_cache``: an ``index_select``, so the
gradient of every row flows back into the one shared prompt pass), then runs the right-padded
completions against it. The result equals :func:`~transferlab.agent_rl.policies.generation.
sequence_logprobs` on the concatenated rows up to float rounding (~1e-6), gradients included, and
the prompt tokens are computed ``B / distinct prompts`` times fewer: for the toy GRPO batch (8 prompts
of ~37 tokens, 4 completions of up to 24 tokens each) that is about half the tokens of the update's
forward and backward pass.

The layout is the one :func:`~transferlab.agent_rl.policies.generation.generate` samples in (left-
padded prompts, positions counted from each prompt's first token), and the result is completion-only:
``B x max completion length``, with a mask of the real completion tokens.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["completion_logprobs", "packed_logprobs", "prompt_runs", "right_pad"]


def prompt_runs(prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts of runs of equal consecutive prompts, and the row -> run index."""
    distinct: list[list[int]] = []
    index: list[int] = []
    for p in prompts:
        ids = [int(t) for t in p]
        if not distinct or distinct[-1] != ids:
            distinct.append(ids)
        index.append(len(distinct) - 1)
    return distinct, index


def right_pad(
    rows: Sequence[Sequence[float]], width: int, dtype: torch.dtype, value: float = 0
) -> torch.Tensor:
    """``rows`` as a ``len(rows) x width`` tensor, each row right-padded with ``value``."""
    import torch

    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, row in enumerate(rows):
        if len(row):
            out[i, : len(row)] = torch.tensor(list(row), dtype=dtype)
    return out


def _checkpointing(model: Any) -> bool:
    """Whether activation (gradient) checkpointing is on; transformers 5 renamed the flag."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def completion_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion token, ``log p(token | prompt, earlier completion tokens)`` under ``model``.

    Returns ``(logp, mask)``, both ``B x max(len(completion))`` on the model's device: ``logp`` is
    float32 (0 where ``mask`` is False), ``mask`` is True on each row's real completion tokens.
    Row ``i`` is ``completions[i]`` after ``prompts[i]``; equal consecutive prompts are run once.
    Gradients flow; the model's train/eval mode is left as it is. A model training with gradient
    checkpointing keeps no cache, so there every row runs whole (the same numbers, no sharing).
    Raises ``ValueError`` for an empty prompt, mismatched lengths, or a batch whose completions are
    all empty.
    """
    import torch

    from transferlab.agent_rl.policies.generation import sequence_logprobs

    if len(prompts) != len(completions) or not prompts:
        raise ValueError(
            f"completion_logprobs needs one prompt per completion, got {len(prompts)} prompts and "
            f"{len(completions)} completions"
        )
    if any(len(p) == 0 for p in prompts):
        raise ValueError("completion_logprobs got an empty prompt; start each prompt with a token")
    width = max(len(c) for c in completions)
    if width == 0:
        raise ValueError("completion_logprobs got only empty completions; there is nothing to score")
    device = next(model.parameters()).device
    if model.training and _checkpointing(model):
        seqs = [[*p, *c] for p, c in zip(prompts, completions, strict=True)]
        full_width = max(len(s) for s in seqs)
        full = right_pad(seqs, full_width, torch.long, pad_id).to(device)
        attention = right_pad([[1] * len(s) for s in seqs], full_width, torch.long).to(device)
        scored = sequence_logprobs(model, full, attention)
        cols = torch.tensor([len(p) for p in prompts], device=device)[:, None] + torch.arange(
            width, device=device
        )
        mask = right_pad([[1] * len(c) for c in completions], width, torch.long).to(device).bool()
        picked = scored.gather(-1, cols.clamp(max=full_width - 1))
        return torch.where(mask, picked, torch.zeros_like(picked)), mask
    distinct, index = prompt_runs(prompts)
    plen = max(len(p) for p in distinct)
    prompt_ids = torch.full((len(distinct), plen), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(distinct), plen), dtype=torch.long)
    for i, p in enumerate(distinct):
        prompt_ids[i, plen - len(p) :] = torch.tensor(p, dtype=torch.long)
        prompt_mask[i, plen - len(p) :] = 1
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    keep: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    out = model(
        input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True, **keep
    )
    rows = torch.tensor(index, dtype=torch.long, device=device)
    cache = getattr(out, "cache", None)
    cache = cache if cache is not None else out.past_key_values
    cache.reorder_cache(rows)  # each row gets its prompt's keys and values (index_select: grads flow)
    first = out.logits[:, -1:, :].index_select(0, rows)  # predicts each completion's first token

    ids = right_pad(completions, width, torch.long, pad_id).to(device)
    mask = right_pad([[1] * len(c) for c in completions], width, torch.long).to(device)
    lengths = torch.tensor([len(distinct[j]) for j in index], dtype=torch.long, device=device)
    comp_positions = lengths[:, None] + torch.arange(width, device=device)[None, :]
    if width > 1:
        rest = model(
            input_ids=ids[:, :-1],
            attention_mask=torch.cat([prompt_mask.index_select(0, rows), mask[:, :-1]], dim=-1),
            position_ids=comp_positions[:, :-1],
            use_cache=True,
            **{cache_arg: cache},
        ).logits
        logits = torch.cat([first, rest], dim=1).float()
    else:
        logits = first.float()
    picked = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    keep_mask = mask.bool()
    return torch.where(keep_mask, picked, torch.zeros_like(picked)), keep_mask


def packed_logprobs(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
) -> torch.Tensor:
    """:func:`completion_logprobs` laid out as ``sequence_logprobs`` of right-padded ``prompt + completion``.

    ``B x max(len(prompt) + len(completion))``, float32: the completion tokens' log-probs at their
    positions in the concatenated row, 0 elsewhere (the layout of ``code_rl.pack``).
    """
    import torch

    logp, mask = completion_logprobs(model, prompts, completions, pad_id)
    width = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True))
    out = torch.zeros((len(prompts), width + logp.shape[1]), dtype=logp.dtype, device=logp.device)
    cols = torch.tensor([len(p) for p in prompts], device=logp.device)[:, None] + torch.arange(
        logp.shape[1], device=logp.device
    )
    out = out.scatter(1, cols, torch.where(mask, logp, torch.zeros_like(logp)))
    return out[:, :width]
