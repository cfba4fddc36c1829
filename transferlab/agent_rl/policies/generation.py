"""Batched sampling with the KV cache, recording per-token log-probs and the exact sampled ids.

:func:`generate` runs its own loop over the model's KV cache: one forward pass over the left-padded
prompts (``use_cache=True``), then one token per step for every unfinished row. For each sampled
token it records

* ``logprobs``: the log-prob of the sampled id under the policy's **untempered** distribution
  (``log_softmax(logits)``: temperature 1, no top-k/top-p truncation). This is what the PPO / GRPO
  importance ratio needs: :func:`sequence_logprobs` recomputes exactly this by teacher forcing, so
  ``ratio = exp(new - old)`` is 1 before the first update (equal to about 1e-5 on CPU float32);
* ``sampling_logprobs``: the log-prob under the distribution actually sampled from (after
  temperature, top-k and top-p); 0 for greedy decoding (``temperature=0``).

The ids in :attr:`Sample.completion_ids` are the sampled ids themselves, in order, including the stop
token when one was sampled; nothing is decoded and re-encoded. :attr:`Sample.text` (the decoded
completion, without the stop token and cut before a stop string) is for the environment only.

**Determinism.** Row ``i`` of a batch draws its random numbers from its own ``torch.Generator``
seeded with ``seed + i`` (inverse-CDF sampling, one uniform per token), so a row's result does not
depend on the other rows: ``generate(m, t, prompts, cfg)[i]`` equals
``generate(m, t, [prompts[i]], cfg with seed=cfg.seed + i)[0]`` (up to float rounding of the padded
batch, ~1e-6 in the log-probs). The same seed gives the same ids on CPU.

**Stopping.** A row finishes when it samples a stop id (``stop_token_ids``: the configured ids and,
with ``stop_at_eos``, the tokenizer's eos, the chat template's end-of-turn token and the generation
config's eos) or when its decoded completion contains one of ``stop_strings``; it is cut
(``finished=False``) at ``max_new_tokens`` or at the model's position limit.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import Field

from transferlab.platform.config import BaseConfig

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["Sample", "SamplingConfig", "StopReason", "generate", "sequence_logprobs", "stop_token_ids"]

StopReason = Literal["stop_token", "stop_string", "length"]


class SamplingConfig(BaseConfig):
    """How :func:`generate` samples."""

    temperature: float = Field(
        default=1.0, ge=0.0, le=100.0, description="Softmax temperature; 0 means greedy (argmax) decoding."
    )
    top_p: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Nucleus sampling: keep the smallest set of tokens with this much probability; 1 = off.",
    )
    top_k: int = Field(default=0, ge=0, description="Keep only the k most likely tokens; 0 = off.")
    max_new_tokens: int = Field(
        default=256, ge=1, le=1_000_000, description="Tokens to sample at most per row."
    )
    stop_token_ids: list[int] = Field(
        default_factory=list, description="Extra token ids that end a completion (the id is kept)."
    )
    stop_strings: list[str] = Field(
        default_factory=list,
        description="Strings that end a completion once its decoded text contains one (ids are kept up "
        "to the token that completed it; the text is cut before it).",
    )
    stop_at_eos: bool = Field(
        default=True,
        description="Also stop on the tokenizer's eos, the chat template's end-of-turn token "
        "(<|im_end|>, <|eot_id|>, ...) and the model generation config's eos.",
    )
    seed: int = Field(
        default=0, ge=0, description="Row i of a batch samples with a generator seeded seed + i."
    )


@dataclass
class Sample:
    """One generated completion."""

    prompt_ids: list[int]
    """The prompt's ids, as given (no padding)."""
    completion_ids: list[int]
    """The sampled ids, in order, including a sampled stop token."""
    logprobs: list[float]
    """Per completion token: log-prob under the untempered policy (temperature 1, no truncation)."""
    sampling_logprobs: list[float]
    """Per completion token: log-prob under the sampling distribution (temperature, top-k, top-p)."""
    text: str
    """Decoded completion without a final stop token and cut before a stop string; for the env only."""
    finished: bool
    """True when a stop token or stop string ended the completion; False when it was cut by length."""
    stop_reason: StopReason
    """``"stop_token"``, ``"stop_string"`` or ``"length"``."""


def stop_token_ids(
    tokenizer: PreTrainedTokenizerBase, cfg: SamplingConfig, model: PreTrainedModel | None = None
) -> set[int]:
    """The ids that end a completion under ``cfg``.

    ``cfg.stop_token_ids``, and with ``cfg.stop_at_eos``: the tokenizer's eos, the chat template's
    end-of-turn token (``<|im_end|>``, ``<|eot_id|>``, ...; none when the tokenizer has no template)
    and the eos id(s) of ``model``'s generation config. No particular token or id is assumed.
    """
    stops = {int(i) for i in cfg.stop_token_ids}
    if not cfg.stop_at_eos:
        return stops
    if tokenizer.eos_token_id is not None:
        stops.add(int(tokenizer.eos_token_id))
    if getattr(tokenizer, "chat_template", None):
        from transferlab.agent_rl.policies.chat import ChatFormat, ChatTemplateError

        try:
            eot = ChatFormat.for_tokenizer(tokenizer).end_of_turn_ids
        except ChatTemplateError:
            eot = ()
        if len(eot) == 1:
            stops.add(int(eot[0]))
    gen_config = getattr(model, "generation_config", None) if model is not None else None
    eos = getattr(gen_config, "eos_token_id", None)
    for i in eos if isinstance(eos, list | tuple) else [eos]:
        if isinstance(i, int):
            stops.add(i)
    return stops


def _forward_kwargs(model: PreTrainedModel) -> tuple[str, bool]:
    """The name of the model's cache argument (``cache`` or ``past_key_values``) and logits_to_keep."""
    params = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in params else "past_key_values"
    return cache_arg, "logits_to_keep" in params


def _out_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _max_positions(model: PreTrainedModel) -> int | None:
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(model.config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _filter_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Temperature, then top-k, then top-p, as -inf masking (at least one token always survives)."""
    import torch

    scaled = logits / cfg.temperature
    if cfg.top_k and cfg.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, cfg.top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        drop_sorted = before > cfg.top_p
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


def _check_prompts(prompt_ids: Sequence[Sequence[int]], vocab: int) -> None:
    if not prompt_ids:
        raise ValueError("generate needs at least one prompt")
    for i, ids in enumerate(prompt_ids):
        if len(ids) == 0:
            raise ValueError(f"prompt {i} is empty; start it with at least one token (e.g. <|bos|>)")
        bad = [t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt {i} holds ids outside the model's vocabulary [0, {vocab}): {bad[:5]}")


class _Row:
    """Book-keeping of one row while sampling."""

    def __init__(self, prompt: list[int], limit: int, seed: int) -> None:
        import torch

        self.prompt = prompt
        self.limit = limit
        self.gen = torch.Generator(device="cpu").manual_seed(seed)
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.sampling_logprobs: list[float] = []
        self.reason: StopReason | None = None

    @property
    def active(self) -> bool:
        return self.reason is None


def _stop_string_hit(
    tokenizer: PreTrainedTokenizerBase, ids: list[int], stops: list[str], window: int
) -> bool:
    tail = tokenizer.decode(ids[-window:], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    return any(s in tail for s in stops)


def _text(tokenizer: PreTrainedTokenizerBase, row: _Row, stop_strings: list[str]) -> str:
    ids = row.ids[:-1] if row.reason == "stop_token" else row.ids
    text = str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    if row.reason == "stop_string":
        cut = min((i for i in (text.find(s) for s in stop_strings) if i >= 0), default=len(text))
        text = text[:cut]
    return text


def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: Sequence[Sequence[int]],
    cfg: SamplingConfig | None = None,
) -> list[Sample]:
    """Sample one completion per prompt, batched with left padding and the KV cache.

    See the module docstring for what is recorded and how rows are seeded. The model runs in eval
    mode (its previous mode is restored) under ``torch.inference_mode``. Raises ``ValueError`` for an
    empty prompt, ids outside the vocabulary, or a prompt that leaves no room below the model's
    position limit.
    """
    import torch

    cfg = cfg if cfg is not None else SamplingConfig()
    device = next(model.parameters()).device
    vocab = int(cast("torch.nn.Embedding", model.get_input_embeddings()).num_embeddings)
    _check_prompts(prompt_ids, vocab)
    prompts = [[int(t) for t in p] for p in prompt_ids]
    stops = stop_token_ids(tokenizer, cfg, model)
    max_pos = _max_positions(model)
    rows: list[_Row] = []
    for i, p in enumerate(prompts):
        room = cfg.max_new_tokens if max_pos is None else min(cfg.max_new_tokens, max_pos - len(p))
        if room < 1:
            raise ValueError(
                f"prompt {i} has {len(p)} tokens, leaving no room below the model's limit of {max_pos} "
                "positions; shorten the prompt (e.g. truncate the observation)"
            )
        rows.append(_Row(p, room, cfg.seed + i))
    window = max((len(s.encode("utf-8")) for s in cfg.stop_strings), default=0) + 2
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    pad_id = int(pad_id) if pad_id is not None else 0

    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention[i, width - len(p) :] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache_arg, has_keep = _forward_kwargs(model)
    keep: dict[str, Any] = {"logits_to_keep": 1} if has_keep else {}

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model(
                input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, **keep
            )
            for _ in range(max(r.limit for r in rows)):
                logits = out.logits[:, -1, :].float()
                next_ids = _sample_step(logits, rows, cfg)
                for i, row in enumerate(rows):
                    if not row.active:
                        next_ids[i] = pad_id
                        continue
                    if int(next_ids[i]) in stops:
                        row.reason = "stop_token"
                    elif cfg.stop_strings and _stop_string_hit(tokenizer, row.ids, cfg.stop_strings, window):
                        row.reason = "stop_string"
                    elif len(row.ids) >= row.limit:
                        row.reason = "length"
                if not any(r.active for r in rows):
                    break
                attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=-1)
                positions = positions[:, -1:] + 1
                if max_pos is not None:  # finished rows keep stepping (on padding) but stay in range
                    positions = positions.clamp(max=max_pos - 1)
                out = model(
                    input_ids=next_ids.to(device)[:, None],
                    attention_mask=attention,
                    position_ids=positions,
                    use_cache=True,
                    **{cache_arg: _out_cache(out)},
                    **keep,
                )
    finally:
        model.train(was_training)
    return [
        Sample(
            prompt_ids=row.prompt,
            completion_ids=row.ids,
            logprobs=row.logprobs,
            sampling_logprobs=row.sampling_logprobs,
            text=_text(tokenizer, row, cfg.stop_strings),
            finished=row.reason in ("stop_token", "stop_string"),
            stop_reason=row.reason or "length",
        )
        for row in rows
    ]


def _sample_step(logits: torch.Tensor, rows: list[_Row], cfg: SamplingConfig) -> torch.Tensor:
    """Pick one id per active row (appending id and log-probs to the row); returns the ids on the CPU.

    The work stays on the logits' device; only the uniforms (drawn on the CPU from each row's
    generator) go in and ``3 x batch`` numbers come out.
    """
    import torch

    logp = torch.log_softmax(logits, dim=-1)
    if cfg.temperature == 0.0:
        chosen = logits.argmax(-1)
        sampling_lp = torch.zeros_like(chosen, dtype=logp.dtype)
    else:
        slogp = torch.log_softmax(_filter_logits(logits, cfg), dim=-1)
        wide = torch.float32 if logits.device.type == "mps" else torch.float64  # mps has no float64
        cdf = slogp.to(wide).exp().cumsum(-1)
        u = torch.zeros(len(rows), 1, dtype=torch.float64)
        for i, row in enumerate(rows):
            if row.active:
                u[i, 0] = torch.rand((), generator=row.gen, dtype=torch.float64)
        u = u.to(device=cdf.device, dtype=wide)
        chosen = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
        chosen = chosen.clamp(max=cdf.shape[-1] - 1)
        sampling_lp = slogp.gather(-1, chosen[:, None]).squeeze(-1)
    policy_lp = logp.gather(-1, chosen[:, None]).squeeze(-1)
    ids, lps, slps = chosen.cpu().tolist(), policy_lp.cpu().tolist(), sampling_lp.cpu().tolist()
    for i, row in enumerate(rows):
        if row.active:
            row.ids.append(int(ids[i]))
            row.logprobs.append(float(lps[i]))
            row.sampling_logprobs.append(float(slps[i]))
    return torch.tensor(ids, dtype=torch.long)


def sequence_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token log-probs of ``input_ids`` under ``model`` by teacher forcing (no KV cache).

    Returns a float32 tensor shaped like ``input_ids``: position ``t`` holds
    ``log p(input_ids[t] | input_ids[:t])`` under the untempered model where ``completion_mask[t]`` is
    set (all positions when it is None) and 0 elsewhere; position 0 has no context and is always 0.
    Left- or right-padded batches both work (positions come from ``attention_mask``). Gradients flow;
    the model's train/eval mode is left as it is (use eval mode, or dropout 0, for PPO ratios).
    """
    import torch

    attention_mask = attention_mask.to(input_ids.device)
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=False)
    logits = out.logits[:, :-1].float()
    targets = input_ids[:, 1:]
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    result = torch.zeros(input_ids.shape, dtype=torch.float32, device=picked.device)
    keep = attention_mask[:, 1:].bool()
    if completion_mask is not None:
        keep = keep & completion_mask.to(keep.device)[:, 1:].bool()
    result[:, 1:] = torch.where(keep, picked, torch.zeros_like(picked))
    return result
