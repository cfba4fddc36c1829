"""What a trainer adds to a causal LM: LoRA adapters (peft) and, for PPO only, a value head.

* :class:`LoraOptions` ``.apply(model)`` wraps the model with peft LoRA on every linear layer except
  the output head; only the adapters train. :func:`trainable_state` / :func:`load_trainable_state`
  move just the trained tensors (the adapters, or every weight without LoRA) — what a rollout worker
  needs to follow the learner.
* :class:`ValueHead` maps the last hidden state to a scalar. :func:`forward_policy` runs the model
  once and returns, aligned with the token ids, each token's log-prob, the policy entropy at that
  position and (with a head) the value of the state *before* the token — so PPO's ``V_t`` and
  ``log π(a_t)`` sit at the same position, the one :func:`~transferlab.platform.trajectory.to_tensors`
  puts rewards and masks on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from transferlab.platform.config import BaseConfig

if TYPE_CHECKING:
    import torch

__all__ = [
    "LoraOptions",
    "PolicyOutputs",
    "ValueHead",
    "enable_gradient_checkpointing",
    "forward_policy",
    "load_trainable_state",
    "trainable_state",
]


class LoraOptions(BaseConfig):
    """LoRA through peft: low-rank adapters on the linear layers; the base weights stay frozen."""

    r: int = Field(default=8, ge=1, le=1024, description="Adapter rank.")
    alpha: int = Field(default=16, gt=0, description="Scaling numerator (scale = alpha / r).")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] | str = Field(
        default="all-linear",
        description="Modules to adapt: 'all-linear' (every linear layer but the output head) or names.",
    )
    seed: int = Field(default=0, ge=0, description="Seeds the adapters' initialisation.")

    def apply(self, model: Any) -> Any:
        """``model`` wrapped as a peft model with fresh adapters (same seed, same adapters)."""
        import torch
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules,
            task_type="CAUSAL_LM",
        )
        state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)
        try:
            return get_peft_model(model, config)
        finally:
            torch.random.set_rng_state(state)


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute each block's activations in the backward pass instead of keeping them.

    Only forward passes in training mode checkpoint; generation runs in eval mode and keeps its KV
    cache. Non-reentrant checkpointing, so gradients reach LoRA adapters even though the frozen
    embeddings' outputs need none; with peft the input embeddings' outputs are marked as needing a
    gradient too (what peft asks for with reentrant checkpointing).
    """
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # the name since transformers 5
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if hasattr(model, "peft_config"):
        model.enable_input_require_grads()


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """Detached CPU copies of the parameters that train (all of them without LoRA, only the adapters
    with), whatever device and dtype the model is on: what a checkpoint stores and workers receive."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (from :func:`trainable_state` of an identically built model) into ``model``.

    Each tensor is converted to its parameter's device and dtype (a CPU float32 state loads into a
    bfloat16 model on a GPU)."""
    import torch

    params = dict(model.named_parameters())
    missing = [n for n in state if n not in params]
    if missing:
        raise ValueError(
            f"{len(missing)} tensor(s) have no parameter in this model (first: {missing[0]!r}); the "
            "worker's model must be built like the learner's (same policy, same LoRA options)"
        )
    wrong = [n for n, t in state.items() if params[n].shape != t.shape]
    if wrong:
        n = wrong[0]
        raise ValueError(
            f"{len(wrong)} tensor(s) have another shape than this model's parameter (first: {n!r}, "
            f"{tuple(state[n].shape)} vs {tuple(params[n].shape)}); the worker's model must be built like "
            "the learner's (same policy, same LoRA options)"
        )
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor)


def _hidden_size(model: Any) -> int:
    config = model.config
    for name in ("hidden_size", "n_embd", "d_model"):
        if hasattr(config, name):
            return int(getattr(config, name))
    raise ValueError(f"cannot tell the hidden size of a {type(model).__name__}; pass it to ValueHead")


def _value_head_class() -> type:
    import torch

    class _ValueHead(torch.nn.Module):
        """A linear map from the last hidden state to one value, initialised to zero output."""

        def __init__(self, hidden_size: int) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(hidden_size, 1)
            torch.nn.init.zeros_(self.linear.weight)
            torch.nn.init.zeros_(self.linear.bias)

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            return self.linear(hidden.float()).squeeze(-1)

    return _ValueHead


def ValueHead(model_or_size: Any) -> Any:
    """A value head sized for ``model`` (or a hidden size); starts predicting 0 everywhere."""
    size = model_or_size if isinstance(model_or_size, int) else _hidden_size(model_or_size)
    return _value_head_class()(size)


@dataclass
class PolicyOutputs:
    """Per-token outputs of one forward pass, each B×T, aligned with ``input_ids`` (position 0 is 0)."""

    logprobs: torch.Tensor
    """``log π(ids[t] | ids[:t])`` (untempered), with gradient."""
    entropy: torch.Tensor
    """Entropy of the policy's distribution at position t (the one ``ids[t]`` was drawn from)."""
    values: torch.Tensor | None
    """``V(ids[:t])``, the value of the state before token t; None without a value head."""


def forward_policy(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    value_head: Any = None,
    detach_value: bool = False,
    temperature: float = 1.0,
) -> PolicyOutputs:
    """One teacher-forced forward pass: token log-probs, entropies and (optionally) values.

    With ``detach_value`` the value head reads detached hidden states: the value loss trains only the
    head, never the policy's weights. ``temperature`` divides the logits first: the log-probs and
    entropies are then those of the tempered distribution the rollout sampled from (no top-k/top-p).
    """
    import torch

    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=False,
        output_hidden_states=value_head is not None,
    )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    logits = out.logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1) - logz
    probs = torch.softmax(logits, dim=-1)
    entropy = logz - (probs * logits).sum(-1)
    pad = torch.zeros(input_ids.shape[0], 1, dtype=torch.float32, device=input_ids.device)
    values = None
    if value_head is not None:
        hidden = out.hidden_states[-1][:, :-1]
        hidden = hidden.detach() if detach_value else hidden
        values = torch.cat([pad, value_head(hidden)], dim=1)
    return PolicyOutputs(
        logprobs=torch.cat([pad, picked], dim=1), entropy=torch.cat([pad, entropy], dim=1), values=values
    )
