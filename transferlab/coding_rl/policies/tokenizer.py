"""A byte-level BPE tokenizer trained locally on the task corpus and the tool-call language.

Nothing is downloaded: :func:`train_tokenizer` trains a byte-level BPE (the ``tokenizers`` library)
on any texts (for the coding agent, :func:`transferlab.coding_rl.tokenizer_corpus.corpus_texts`:
issues, repository files and tests, the scripted expert's tool calls and synthetic calls of all six
tools) and wraps it as a
:class:`transformers.PreTrainedTokenizerFast`, which saves and loads with ``save_pretrained`` /
``from_pretrained`` like any Hugging Face tokenizer.

**Byte level.** Every string encodes (no unknown token) and ``decode(encode(text)) == text`` exactly
(no normaliser, no prefix space, no clean-up of spaces). Text is split before BPE by
:data:`PRETOKENIZE_PATTERN` (GPT-2's split, but ``read_file`` or ``test_calculator`` stay one piece),
so every tool name is a single token. Training is deterministic: the same texts give the same
vocabulary and merges (checked across processes).

**Special tokens** (ids ``0..4``, in this order): ``<|pad|>`` (padding, never trained on),
``<|bos|>``, ``<|eos|>``, ``<|im_start|>`` and ``<|im_end|>`` (chat turns). The tokenizer does not
add any of them on its own; :func:`encode_chat` / the chat template do.

**Chat format** (:data:`CHAT_TEMPLATE`, also set as ``tokenizer.chat_template``)::

    <|bos|><|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{issue}<|im_end|>\\n
    <|im_start|>assistant\\n{tool call}<|im_end|>\\n<|im_start|>tool\\n{tool result}<|im_end|>\\n
    <|im_start|>assistant\\n...

Roles are ``system``, ``user``, ``assistant`` and ``tool``; a generation prompt ends with
``<|im_start|>assistant\\n``, and the policy ends its turn by sampling ``<|im_end|>`` (the stop token).
For exact-id trajectories, build ids turn by turn with :func:`encode_chat` (the prompt) and
:func:`observation_ids` (what follows a sampled ``<|im_end|>``) rather than re-tokenising a rendered
conversation: each turn's content is encoded on its own, so the ids never depend on what came
before (see :mod:`transferlab.platform.trajectory`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

__all__ = [
    "BOS",
    "CHAT_TEMPLATE",
    "EOS",
    "IM_END",
    "IM_START",
    "PAD",
    "PRETOKENIZE_PATTERN",
    "ROLES",
    "SPECIAL_TOKENS",
    "encode_chat",
    "observation_ids",
    "train_tokenizer",
]

PAD: Final = "<|pad|>"
BOS: Final = "<|bos|>"
EOS: Final = "<|eos|>"
IM_START: Final = "<|im_start|>"
IM_END: Final = "<|im_end|>"
SPECIAL_TOKENS: Final = (PAD, BOS, EOS, IM_START, IM_END)
"""The special tokens, in id order (``<|pad|>`` is id 0)."""

ROLES: Final = ("system", "user", "assistant", "tool")
"""Chat roles the template knows."""

CHAT_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""Jinja chat template (``tokenizer.apply_chat_template``): ``<|bos|>`` then one
``<|im_start|>{role}\\n{content}<|im_end|>\\n`` block per message, then ``<|im_start|>assistant\\n`` when
a generation prompt is asked for."""

PRETOKENIZE_PATTERN: Final = (
    r"'(?:s|t|re|ve|m|ll|d)| ?[\p{L}_][\p{L}\p{N}_]*| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}_]+|\s+(?!\S)|\s+"
)
"""How text is split before BPE: GPT-2's pattern, but an identifier with underscores (``read_file``,
``test_calculator``) is one piece, and numbers split into groups of at most three digits."""


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048, seed: int = 0) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts``; deterministic for the same texts.

    ``vocab_size`` counts the 256 byte tokens, the merges and the five :data:`SPECIAL_TOKENS`; it is
    an upper bound (a small corpus may support fewer merges). BPE training has no randomness:
    ``seed`` is recorded in the tokenizer's ``init_kwargs`` (and saved with it) so a run's
    configuration is complete, and different seeds give the same tokenizer. The texts are consumed
    once, in order.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    minimum = len(alphabet) + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {minimum} tokens "
            f"({len(alphabet)} bytes + {len(SPECIAL_TOKENS)} special tokens); pass vocab_size >= {minimum}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator((t for t in texts if t), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        extra_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=1_000_000,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.init_kwargs["transferlab_seed"] = int(seed)
    return fast


# ------------------------------------------------------------------------------------------ chat ids


def _special_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int) or tid == tokenizer.unk_token_id or tid is None:
        raise ValueError(
            f"the tokenizer has no {token!r} token; encode_chat/observation_ids need the chat tokens of "
            "train_tokenizer (for another tokenizer use tokenizer.apply_chat_template)"
        )
    return tid


def _content_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _turn_ids(tokenizer: PreTrainedTokenizerBase, role: str, content: str) -> list[int]:
    if role not in ROLES:
        raise ValueError(f"unknown chat role {role!r}; use one of {list(ROLES)}")
    return [
        _special_id(tokenizer, IM_START),
        *_content_ids(tokenizer, f"{role}\n{content}"),
        _special_id(tokenizer, IM_END),
        *_content_ids(tokenizer, "\n"),
    ]


def encode_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool = True,
) -> list[int]:
    """Ids of a conversation in the :data:`CHAT_TEMPLATE` format, built turn by turn.

    Each message is ``{"role": ..., "content": ...}``; each turn (``"{role}\\n{content}"``) is encoded on
    its own, so the ids of a turn never depend on the turns around it; the result equals
    ``tokenizer.apply_chat_template(messages, add_generation_prompt=...)`` token for token. With
    ``add_generation_prompt`` the ids end with ``<|im_start|>assistant\\n``.
    """
    ids = [_special_id(tokenizer, BOS)]
    for message in messages:
        ids += _turn_ids(tokenizer, message["role"], message["content"])
    if add_generation_prompt:
        ids += [_special_id(tokenizer, IM_START), *_content_ids(tokenizer, "assistant\n")]
    return ids


def observation_ids(
    tokenizer: PreTrainedTokenizerBase, text: str, role: str = "tool", ended: bool = True
) -> list[int]:
    """Ids fed to the policy after its action: the observation turn and the next generation prompt.

    With ``ended`` (the action's ids end with a sampled ``<|im_end|>``) this is
    ``\\n<|im_start|>{role}\\n{text}<|im_end|>\\n<|im_start|>assistant\\n``; without it (the action was
    cut by the token limit) the assistant turn is closed first with ``<|im_end|>``.
    """
    head = [] if ended else [_special_id(tokenizer, IM_END)]
    return [
        *head,
        *_content_ids(tokenizer, "\n"),
        *_turn_ids(tokenizer, role, text),
        _special_id(tokenizer, IM_START),
        *_content_ids(tokenizer, "assistant\n"),
    ]
