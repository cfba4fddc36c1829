"""Randomly initialised checkpoints of real model families, built here from configs (no download).

:func:`init_checkpoint` writes a standard Hugging Face checkpoint — ``config.json``, safetensors
weights, ``generation_config.json`` and a tokenizer with the family's special tokens and chat
template — that ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained`` (and
:func:`~transferlab.agent_rl.policies.model.load_policy`) load like a downloaded one. The trainer,
the CLI and the tests use them to exercise the code paths a real checkpoint takes:

* ``qwen2``: ``Qwen2ForCausalLM`` (grouped-query attention, tied embeddings), a ChatML template
  without a bos token: ``<|im_start|>role\\n...<|im_end|>\\n``, a default system message, tool results
  as a user turn wrapped in ``<tool_response>`` (as Qwen2.5's template does); eos ``<|im_end|>``,
  pad ``<|endoftext|>``;
* ``llama``: ``LlamaForCausalLM`` with Llama 3's template: ``<|begin_of_text|>`` then
  ``<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>``, tool results as ``ipython``; no pad
  token (loaders use eos);
* ``gpt2``: ``GPT2LMHeadModel`` whose only special token is ``<|endoftext|>`` (bos = eos), with a
  plain-text template (``role: content<|endoftext|>\\n``) that refuses a ``tool`` role.

Sizes (:data:`SIZES`): ``tiny`` (about 0.1-0.3M parameters: CPU tests, seconds per step), ``small``
(10-30M: CPU benchmarks) and ``0.5b`` (Qwen2.5-0.5B's layer shapes with a small vocabulary, about
0.36B parameters: the GPU check). The tokenizer is a byte-level BPE trained on ``texts`` (default:
the coding agent's tokenizer corpus on the toy tasks); the weights come from ``torch.manual_seed``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from transferlab.platform.io import temp_directory

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = [
    "FAMILIES",
    "SIZES",
    "FamilySpec",
    "family_tokenizer",
    "init_checkpoint",
    "init_model",
]

FAMILIES: Final = ("qwen2", "llama", "gpt2")
SIZES: Final = ("tiny", "small", "0.5b")

QWEN2_TEMPLATE: Final = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first %}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5's ChatML layout (no bos; a default system message; tool results as a wrapped user turn)."""

LLAMA3_TEMPLATE: Final = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- set role = 'ipython' if message['role'] == 'tool' else message['role'] %}"
    "{{- '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
"""Llama 3's header layout (tool results in the ``ipython`` role, contents trimmed)."""

GPT2_TEMPLATE: Final = (
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('roles are system, user and assistant') }}{%- endif %}"
    "{{- message['role'] + ': ' + message['content'] + eos_token + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'assistant: ' }}{%- endif %}"
)
"""A plain-text layout: turns end with ``<|endoftext|>``; no tool role (tool results go as user)."""


@dataclass(frozen=True)
class FamilySpec:
    """A family's special tokens (in id order), their roles, and its chat template."""

    special_tokens: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str | None
    end_of_turn: str
    chat_template: str


SPECS: Final = {
    "qwen2": FamilySpec(
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        None,
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_end|>",
        QWEN2_TEMPLATE,
    ),
    "llama": FamilySpec(
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        "<|begin_of_text|>",
        "<|eot_id|>",
        None,
        "<|eot_id|>",
        LLAMA3_TEMPLATE,
    ),
    "gpt2": FamilySpec(
        ("<|endoftext|>",), "<|endoftext|>", "<|endoftext|>", None, "<|endoftext|>", GPT2_TEMPLATE
    ),
}

# (hidden, layers, heads, kv heads, MLP width, max positions, vocab size)
_SHAPES: Final = {
    "tiny": (64, 2, 4, 2, 176, 2048, 1024),
    "small": (384, 8, 6, 2, 1024, 2048, 2048),
    "0.5b": (896, 24, 14, 2, 4864, 32768, 8192),
}


def _check(family: str, size: str = "tiny") -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; use one of {list(FAMILIES)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; use one of {list(SIZES)}")


def family_tokenizer(family: str, texts: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """A byte-level BPE with ``family``'s special tokens, roles and chat template (see the module)."""
    from transformers import PreTrainedTokenizerFast

    from transferlab.agent_rl.policies.tokenizer import train_bpe

    _check(family)
    spec = SPECS[family]
    raw = train_bpe(texts, vocab_size, spec.special_tokens)
    named = {spec.bos, spec.eos, spec.pad}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=spec.bos,
        eos_token=spec.eos,
        pad_token=spec.pad,
        unk_token=spec.eos if family == "gpt2" else None,
        extra_special_tokens=[t for t in spec.special_tokens if t not in named],
        clean_up_tokenization_spaces=False,
        model_max_length=_SHAPES["0.5b"][5],
    )
    fast.chat_template = spec.chat_template
    return fast


def _hf_config(family: str, size: str, tokenizer: Any) -> Any:
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    hidden, layers, heads, kv, mlp, positions, _ = _SHAPES[size]
    vocab = -(-len(tokenizer) // 64) * 64  # rounded up to a multiple of 64, as real checkpoints do
    spec = SPECS[family]
    ids = {
        "bos_token_id": tokenizer.convert_tokens_to_ids(spec.bos) if spec.bos else None,
        "eos_token_id": tokenizer.convert_tokens_to_ids(spec.eos),
        "pad_token_id": tokenizer.convert_tokens_to_ids(spec.pad) if spec.pad else None,
    }
    if family == "gpt2":
        width = {"tiny": 64, "small": 384, "0.5b": 1024}[size]
        return GPT2Config(
            vocab_size=vocab,
            n_positions=min(positions, 2048),
            n_embd=width,
            n_layer=layers,
            n_head=width // 64 if size != "tiny" else 4,
            **ids,
        )
    cls = Qwen2Config if family == "qwen2" else LlamaConfig
    return cls(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=positions,
        tie_word_embeddings=size != "0.5b" or family == "qwen2",
        **ids,
    )


def init_model(family: str, size: str, tokenizer: Any, seed: int = 0) -> PreTrainedModel:
    """A ``family`` model of ``size`` with random weights from ``torch.manual_seed(seed)`` (eval mode).

    Its generation config stops on the tokenizer's eos and the template's end-of-turn token. The
    caller's global torch RNG state is left as it was.
    """
    import torch
    from transformers import AutoModelForCausalLM

    _check(family, size)
    config = _hf_config(family, size, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    spec = SPECS[family]
    stops = sorted({int(tokenizer.convert_tokens_to_ids(t)) for t in (spec.eos, spec.end_of_turn)})
    model.generation_config.eos_token_id = stops if len(stops) > 1 else stops[0]
    model.generation_config.bos_token_id = config.bos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.eval()
    return model


def init_checkpoint(
    family: str,
    out_dir: str | os.PathLike[str],
    size: str = "tiny",
    seed: int = 0,
    *,
    texts: Iterable[str],
) -> Path:
    """Write a randomly initialised ``family`` checkpoint of ``size`` to ``out_dir``; returns it.

    The directory is written whole or not at all (built next to it, then renamed). Raises
    ``ValueError`` for an unknown family or size and ``FileExistsError`` when ``out_dir`` exists and
    is not empty.
    """
    from transformers.utils import logging as hf_logging

    _check(family, size)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(
            f"{out} already exists and is not empty; pass a new directory for the checkpoint"
        )
    tokenizer = family_tokenizer(family, texts, vocab_size=_SHAPES[size][6])
    model = init_model(family, size, tokenizer, seed)
    hf_logging.disable_progress_bar()
    staging = temp_directory(out.parent, f".{out.name}-")
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
