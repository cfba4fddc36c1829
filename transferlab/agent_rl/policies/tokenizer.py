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
:func:`observation_ids` (what follows a sampled end-of-turn token) rather than re-tokenising a
rendered conversation. Both work for **any** tokenizer with a chat template (ChatML, Llama 3, a
plain-text one): they read the template through
:class:`~transferlab.agent_rl.policies.chat.ChatFormat`; this module's template is just one of them.

"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

__all__ = [
    "BOS",
    "CHAT_TEMPLATE",
    "CODE_PIECES_PATTERN",
    "EOS",
    "IM_END",
    "IM_START",
    "PAD",
    "PRETOKENIZE_PATTERN",
    "ROLES",
    "SEPARATE_SPACES_PATTERN",
    "SPECIAL_TOKENS",
    "SPLITS",
    "WORDS_PATTERN",
    "WORD_PIECES_PATTERN",
    "encode_chat",
    "observation_ids",
    "train_bpe",
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

SEPARATE_SPACES_PATTERN: Final = (
    r"'(?:s|t|re|ve|m|ll|d)|[\p{L}_][\p{L}\p{N}_]*|\p{N}{1,3}|[^\s\p{L}\p{N}_]+|\s+"
)
"""Like :data:`PRETOKENIZE_PATTERN`, but whitespace is always a piece of its own: an identifier gets the
same tokens after a space, a quote, a slash or a backtick (``track_note`` in an issue, in
``"def track_note"`` and in a search hit), so a small policy can copy a name token by token instead of
learning a second spelling of every name."""

WORDS_PATTERN: Final = r"'(?:s|t|re|ve|m|ll|d)|\p{L}+|\p{N}{1,3}|_|[^\s\p{L}\p{N}_]+|\s+"
"""Like :data:`SEPARATE_SPACES_PATTERN`, but an identifier also splits at its underscores and digits:
``track_note`` is ``track``, ``_``, ``note``. A name never seen in training is then spelt from words
that were, so a small policy can copy it word by word."""

WORD_PIECES_PATTERN: Final = r"'(?:s|t|re|ve|m|ll|d)|_?\p{L}+|\p{N}{1,3}|_|[^\s\p{L}\p{N}_]+|\s+"
"""Like :data:`WORDS_PATTERN`, but each later word of a name keeps its underscore: ``report_ops`` is
``report``, ``_ops``. Copying a name's next piece then needs only the previous word to match
(``report`` is followed by ``_ops`` wherever the name appears) instead of the bare ``_``, which follows
almost every word of a repository's text (``read_file``, ``test_report_ops``, ...) and so points an
induction-style copy at the wrong one."""

CODE_PIECES_PATTERN: Final = (
    r"'(?:s|t|re|ve|m|ll|d)|\p{L}+(?=/)| ?\p{L}++(?!/)|_\p{L}+| ?\p{N}{1,3}|_| ?[^\s\p{L}\p{N}_]+"
    r"|\s+(?!\S)|\s+"
)
"""Like :data:`WORD_PIECES_PATTERN`, but a word, number or operator also keeps the one space before it
(GPT-2's way): ``return a * 4`` is ``return``, `` a``, `` *``, `` 4``. Every piece of a code line then
follows the same piece wherever the line is quoted, so copying it from a file needs only the previous
piece to match, not the bare space that precedes almost every piece of code.

A path's first directory (``src`` of ``src/pricing_helpers.py``) never takes the space: the path then
has the same pieces in the issue's file list, in a JSON argument (after ``"``) and in a tool's reply,
so a policy can copy it by exact match from its first piece on."""

SPLITS: Final[dict[str, str]] = {
    "identifiers": PRETOKENIZE_PATTERN,
    "spaces": SEPARATE_SPACES_PATTERN,
    "words": WORDS_PATTERN,
    "word_pieces": WORD_PIECES_PATTERN,
    "code_pieces": CODE_PIECES_PATTERN,
}
"""How :func:`train_tokenizer` may split text before BPE, by name."""


def train_bpe(
    texts: Iterable[str], vocab_size: int, special_tokens: Sequence[str], pattern: str = PRETOKENIZE_PATTERN
) -> Tokenizer:
    """The raw byte-level BPE (``tokenizers.Tokenizer``) behind :func:`train_tokenizer`.

    ``special_tokens`` get the first ids, in order; split by ``pattern`` (:data:`PRETOKENIZE_PATTERN`
    by default, or another of :data:`SPLITS`), no
    normaliser, deterministic for the same texts. Model families with other special tokens
    (:mod:`transferlab.agent_rl.policies.families`) wrap it their own way.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    minimum = len(alphabet) + len(special_tokens)
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {minimum} tokens "
            f"({len(alphabet)} bytes + {len(special_tokens)} special tokens); pass vocab_size >= {minimum}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator((t for t in texts if t), trainer=trainer)
    return tok


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 2048, seed: int = 0, split: str = "identifiers"
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts``; deterministic for the same texts.

    ``vocab_size`` counts the 256 byte tokens, the merges and the five :data:`SPECIAL_TOKENS`; it is
    an upper bound (a small corpus may support fewer merges). BPE training has no randomness:
    ``seed`` is recorded in the tokenizer's ``init_kwargs`` (and saved with it) so a run's
    configuration is complete, and different seeds give the same tokenizer. The texts are consumed
    once, in order. ``split`` names the pre-tokenizer (:data:`SPLITS`: ``identifiers``, ``spaces``,
    ``words``, ``word_pieces`` or ``code_pieces``; saved with the tokenizer, like the merges).
    """
    from transformers import PreTrainedTokenizerFast

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {sorted(SPLITS)}")
    pattern = SPLITS[split]
    tok = train_bpe(texts, vocab_size, SPECIAL_TOKENS, pattern)
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


def _check_roles(messages: Sequence[Mapping[str, str]]) -> None:
    for message in messages:
        if message["role"] not in ROLES:
            raise ValueError(f"unknown chat role {message['role']!r}; use one of {list(ROLES)}")


def encode_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, str]],
    add_generation_prompt: bool = True,
) -> list[int]:
    """Ids of a conversation in ``tokenizer``'s own chat template (any template, not only ours).

    Each message is ``{"role": ..., "content": ...}`` with a role in :data:`ROLES`; the result equals
    ``tokenizer.apply_chat_template(messages, add_generation_prompt=..., tokenize=True)`` token for
    token. With ``add_generation_prompt`` the ids end with the template's generation prompt
    (``<|im_start|>assistant\\n`` for :data:`CHAT_TEMPLATE`). A tokenizer without a chat template
    raises :class:`~transferlab.agent_rl.policies.chat.ChatTemplateError`.
    """
    from transferlab.agent_rl.policies.chat import ChatFormat

    _check_roles(messages)
    return ChatFormat.for_tokenizer(tokenizer).prompt_ids(messages, add_generation_prompt)


def prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """An episode's first prompt: ``text`` as the user's turn, then the assistant's turn opens."""
    return encode_chat(tokenizer, [{"role": "user", "content": text}], add_generation_prompt=True)


def observation_ids(
    tokenizer: PreTrainedTokenizerBase, text: str, role: str = "tool", ended: bool = True
) -> list[int]:
    """Ids fed to the policy after its action: the observation turn and the next generation prompt.

    Whatever ``tokenizer``'s chat template writes between an ended assistant turn and the next
    generation prompt (:meth:`~transferlab.agent_rl.policies.chat.ChatFormat.observation_ids`); for
    :data:`CHAT_TEMPLATE` and ``ended`` (the action's ids end with a sampled ``<|im_end|>``) this is
    ``\\n<|im_start|>{role}\\n{text}<|im_end|>\\n<|im_start|>assistant\\n``; without ``ended``
    (the action was cut by the token limit) the assistant turn is closed first with ``<|im_end|>``.
    A template without a ``tool`` role gets the observation as a ``user`` turn.
    """
    from transferlab.agent_rl.policies.chat import ChatFormat

    _check_roles([{"role": role, "content": text}])
    return ChatFormat.for_tokenizer(tokenizer).observation_ids(text, role=role, ended=ended)
