"""Policies for the coding agent: a tiny causal LM made here, or any local Hugging Face causal LM.

* :mod:`.tokenizer`: a byte-level BPE tokenizer trained locally on the task corpus and the tool-call
  language (:func:`train_tokenizer`; the coding corpus is
  :func:`transferlab.coding_rl.tokenizer_corpus.corpus_texts`), its chat format and exact-id helpers;
* :mod:`.model`: :class:`TinyPolicyConfig` (a small Llama / GPT-2 from scratch), :func:`load_policy`
  (any causal LM from a local directory; nothing is downloaded) and :func:`save_policy`;
* :mod:`.chat`: :class:`ChatFormat`, exact-id chat turns from any tokenizer's chat template (ChatML,
  Llama 3, plain text): the prompt, the end-of-turn stop token, the observation turns;
* :mod:`.families`: :func:`init_checkpoint`, randomly initialised Qwen2 / Llama / GPT-2 checkpoints
  with their families' tokenizers and templates (tests, benchmarks, the GPU check);
* :mod:`.generation`: :func:`generate` (batched sampling with the KV cache, per-token log-probs, exact
  sampled ids) and :func:`sequence_logprobs` (teacher-forced log-probs for the trainers).

Torch and transformers are imported lazily, inside the functions that need them.
"""

from transferlab.agent_rl.policies.chat import ChatFormat, ChatTemplateError
from transferlab.agent_rl.policies.families import FAMILIES, init_checkpoint
from transferlab.agent_rl.policies.generation import (
    Sample,
    SamplingConfig,
    StopReason,
    generate,
    sequence_logprobs,
    stop_token_ids,
)
from transferlab.agent_rl.policies.model import (
    TINY_PARAM_RANGE,
    PolicyNotFoundError,
    TinyPolicyConfig,
    count_parameters,
    load_policy,
    save_policy,
)
from transferlab.agent_rl.policies.tokenizer import (
    BOS,
    CHAT_TEMPLATE,
    EOS,
    IM_END,
    IM_START,
    PAD,
    ROLES,
    SPECIAL_TOKENS,
    encode_chat,
    observation_ids,
    train_tokenizer,
)

__all__ = [
    "BOS",
    "CHAT_TEMPLATE",
    "EOS",
    "FAMILIES",
    "IM_END",
    "IM_START",
    "PAD",
    "ROLES",
    "SPECIAL_TOKENS",
    "TINY_PARAM_RANGE",
    "ChatFormat",
    "ChatTemplateError",
    "PolicyNotFoundError",
    "Sample",
    "SamplingConfig",
    "StopReason",
    "TinyPolicyConfig",
    "count_parameters",
    "encode_chat",
    "generate",
    "init_checkpoint",
    "load_policy",
    "observation_ids",
    "save_policy",
    "sequence_logprobs",
    "stop_token_ids",
    "train_tokenizer",
]
