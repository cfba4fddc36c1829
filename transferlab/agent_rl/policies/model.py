"""Policies: a tiny causal LM made here from scratch, or any Hugging Face causal LM from a local path.

* :class:`TinyPolicyConfig` ``.create(tokenizer)`` builds a small Llama- or GPT-2-style model with
  random weights (``torch.manual_seed(seed)``; the caller's global RNG state is left untouched). The
  defaults (4 layers, width 128, MLP 512, tied embeddings) give about 1.1–1.4M parameters for a
  vocabulary of up to 2048 tokens (:data:`TINY_PARAM_RANGE`), so a CPU training step is fast.
* :func:`load_policy` loads a model and its tokenizer from a **local** directory only
  (``local_files_only=True``): a user with a GPU points it at a real checkpoint, downloaded beforehand.
  Nothing is downloaded at run time.
* :func:`save_policy` writes both with ``save_pretrained`` (safetensors); :func:`load_policy` reads
  them back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Self, cast

from pydantic import Field, model_validator

from transferlab.platform.config import BaseConfig

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "TINY_PARAM_RANGE",
    "PolicyNotFoundError",
    "TinyPolicyConfig",
    "count_parameters",
    "load_policy",
    "save_policy",
]

TINY_PARAM_RANGE: Final = (1_000_000, 3_000_000)
"""Parameter count of the default :class:`TinyPolicyConfig` for vocabularies of 256–4096 tokens."""


class PolicyNotFoundError(FileNotFoundError):
    """:func:`load_policy` found no usable model at the path; the message names the fix."""


class TinyPolicyConfig(BaseConfig):
    """A small causal LM initialised from scratch (no download), sized for CPU tests and smoke runs."""

    architecture: Literal["llama", "gpt2"] = Field(
        default="llama",
        description="Model family: 'llama' (RMSNorm, rotary positions, SwiGLU MLP) or 'gpt2' "
        "(LayerNorm, learned positions, GELU MLP).",
    )
    n_layer: int = Field(default=4, ge=1, le=64, description="Number of transformer blocks.")
    n_head: int = Field(default=4, ge=1, le=64, description="Attention heads; must divide d_model.")
    d_model: int = Field(default=128, ge=8, le=8192, description="Hidden width (embedding size).")
    d_ff: int | None = Field(default=None, ge=8, description="MLP inner width; None means 4 * d_model.")
    max_positions: int = Field(
        default=2048,
        ge=16,
        le=131_072,
        description="Longest sequence (prompt + completion) in tokens; gpt2 learns one embedding per "
        "position, llama uses rotary positions up to this length.",
    )
    vocab_size: int | None = Field(
        default=None,
        ge=8,
        description="Vocabulary size; None means len(tokenizer) (the usual choice).",
    )
    tie_embeddings: bool = Field(
        default=True, description="Share the input embedding and the output projection (fewer parameters)."
    )
    dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Dropout on attention and residuals; keep 0 for RL so sampling and training "
        "log-probs agree.",
    )
    initializer_range: float = Field(default=0.02, gt=0.0, description="Std of the initial weights.")
    attn_implementation: Literal["sdpa", "eager"] = Field(
        default="sdpa", description="Attention kernel: torch's scaled_dot_product_attention or eager."
    )
    seed: int = Field(default=0, ge=0, description="torch.manual_seed used to initialise the weights.")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> Self:
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model={self.d_model} is not a multiple of n_head={self.n_head}; "
                "pick d_model = n_head * head_dim"
            )
        return self

    def hf_config(self, tokenizer: PreTrainedTokenizerBase) -> Any:
        """The ``transformers`` config (``LlamaConfig`` or ``GPT2Config``) this describes."""
        from transformers import GPT2Config, LlamaConfig

        vocab = self.vocab_size if self.vocab_size is not None else len(tokenizer)
        if vocab < len(tokenizer):
            raise ValueError(
                f"vocab_size={vocab} is smaller than the tokenizer's {len(tokenizer)} tokens; "
                "leave vocab_size=None to take it from the tokenizer"
            )
        d_ff = self.d_ff if self.d_ff is not None else 4 * self.d_model
        ids = {
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        }
        if self.architecture == "llama":
            return LlamaConfig(
                vocab_size=vocab,
                hidden_size=self.d_model,
                intermediate_size=d_ff,
                num_hidden_layers=self.n_layer,
                num_attention_heads=self.n_head,
                num_key_value_heads=self.n_head,
                max_position_embeddings=self.max_positions,
                attention_dropout=self.dropout,
                initializer_range=self.initializer_range,
                tie_word_embeddings=self.tie_embeddings,
                **ids,
            )
        return GPT2Config(
            vocab_size=vocab,
            n_positions=self.max_positions,
            n_embd=self.d_model,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_inner=d_ff,
            resid_pdrop=self.dropout,
            embd_pdrop=self.dropout,
            attn_pdrop=self.dropout,
            initializer_range=self.initializer_range,
            tie_word_embeddings=self.tie_embeddings,
            **ids,
        )

    def create(self, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
        """A new model with random weights from ``torch.manual_seed(seed)``, in eval mode, on the CPU.

        The same config and tokenizer give bit-identical parameters. The global torch RNG is restored
        afterwards.
        """
        import torch
        from transformers import AutoModelForCausalLM

        config = self.hf_config(tokenizer)
        config._attn_implementation = self.attn_implementation
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            model = AutoModelForCausalLM.from_config(config, attn_implementation=self.attn_implementation)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.bos_token_id = tokenizer.bos_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.eval()
        return model


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def _not_found(path: Path, what: str) -> PolicyNotFoundError:
    hub_like = not path.is_absolute() and len(path.parts) <= 2 and not str(path).startswith(".")
    hint = (
        f" {str(path)!r} looks like a Hugging Face Hub id: download it first on a machine with network "
        f"(`huggingface-cli download {path} --local-dir <dir>`) and pass that directory."
        if hub_like and not path.exists()
        else ""
    )
    return PolicyNotFoundError(
        f"cannot load a policy from {path}: {what}. fix: pass a local directory holding a Hugging Face "
        "causal LM (config.json, model weights and tokenizer files), e.g. one written by "
        "transferlab.agent_rl.policies.save_policy, or a checkpoint downloaded beforehand; nothing is "
        f"downloaded at run time.{hint}"
    )


def load_policy(
    path_or_dir: str | os.PathLike[str],
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local directory (never from the network).

    ``device`` is a :class:`torch.device` or a spec for
    :func:`~transferlab.agent_rl.policies.devices.resolve_device` (``"auto"`` = CUDA when present,
    else the CPU). ``dtype``: None keeps the dtype stored in the checkpoint; ``"auto"`` is the device's
    training dtype (bfloat16 on a CUDA GPU that supports it, float32 on the CPU, see
    :func:`~transferlab.agent_rl.policies.devices.resolve_dtype`); a name (``"float32"``,
    ``"bfloat16"``, ``"float16"``) or a :class:`torch.dtype` is taken as given. The model comes back in
    eval mode on the device. A tokenizer without a pad token gets its eos token as pad (generation masks
    padding anyway).

    Raises:
        PolicyNotFoundError: the path does not exist, is not a directory or has no ``config.json`` /
            weights / tokenizer (the message names the fix).
        DeviceError: the device is not available here, or the dtype is unknown.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from transferlab.agent_rl.policies.devices import resolve_device, resolve_dtype

    hf_logging.disable_progress_bar()  # a bar per load is noise for our small local checkpoints
    target = resolve_device(device)
    torch_dtype: Any = "auto" if dtype is None else resolve_dtype(dtype, target)  # HF "auto" = as stored
    path = Path(path_or_dir).expanduser()
    if not path.exists():
        raise _not_found(path, "the path does not exist")
    if not path.is_dir():
        raise _not_found(path, "it is a file, not a model directory")
    if not (path / "config.json").is_file():
        raise _not_found(path, "the directory has no config.json")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise _not_found(path, f"its tokenizer cannot be loaded ({exc})") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch_dtype)
    except OSError as exc:
        raise _not_found(path, f"its model weights cannot be loaded ({exc})") from None
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    cast(Any, model).to(target)  # (transformers' typing of .to confuses mypy)
    model.eval()
    return model, tokenizer


def save_policy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: str | os.PathLike[str]
) -> Path:
    """Write model (safetensors) and tokenizer to ``directory`` for :func:`load_policy`; returns it."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
