"""Exact-id chat turns for any tokenizer with a chat template (ChatML, Llama 3, plain-text ones).

A multi-turn episode's context is built from ids, never by re-tokenising the rendered conversation:
``prompt_ids + action_ids[0] + observation_ids[0] + action_ids[1] + ...`` where ``action_ids`` are
the ids the policy sampled (ending with the template's end-of-turn token when it stopped on its
own). :class:`ChatFormat` reads what it needs from the tokenizer's own chat template
(``tokenizer.apply_chat_template``), so nothing assumes a bos token, a pad token or particular
special-token ids:

* :meth:`ChatFormat.prompt_ids` is the template's rendering of the first messages with the
  generation prompt, tokenised as the template's text (``apply_chat_template(..., tokenize=True)``
  gives the same ids);
* :attr:`ChatFormat.end_of_turn` is the special token the template writes right after an
  assistant message (``<|im_end|>`` for ChatML, ``<|eot_id|>`` for Llama 3, ``<|endoftext|>`` for a
  plain-text template that ends turns with eos); sampling stops on it;
* :meth:`ChatFormat.observation_ids` is the text the template writes between the end of an
  assistant turn and the next generation prompt when a tool message follows (found by rendering a
  probe conversation with and without the tool message), tokenised on its own. It starts right
  after a special token, so its ids do not depend on what came before.

Templates that have no ``tool`` role (they raise, or drop the message) get the observation as a
``user`` message instead (:attr:`ChatFormat.tool_role`). A tokenizer without a chat template raises
:class:`ChatTemplateError`, naming the fix.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["ChatFormat", "ChatTemplateError", "action_ids"]

_PROBE_USER: Final = "Probe question 7q1?"
_PROBE_ASSISTANT: Final = "Probe answer 3k9."
_PROBE_TOOL: Final = "Probe observation 5x2."
_CACHE_ATTR: Final = "_transferlab_chat_format"


class ChatTemplateError(ValueError):
    """The tokenizer has no usable chat template; the message names the fix."""


def _render(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, str]], gen: bool) -> str:
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=gen, tokenize=False
    )
    if not isinstance(text, str):  # pragma: no cover - transformers returns str for tokenize=False
        raise ChatTemplateError(f"the chat template rendered a {type(text).__name__}, not text")
    return text


def _special_tokens(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Every special / added token string, longest first (so the longest match wins)."""
    found = set(tokenizer.all_special_tokens)
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    found.update(str(tok) for tok in decoder.values())
    return sorted((t for t in found if t), key=len, reverse=True)


def _end_of_turn(tokenizer: PreTrainedTokenizerBase, after: str) -> str | None:
    """The special token the template writes right after an assistant message's content."""
    stripped = after.lstrip(" ")
    for token in _special_tokens(tokenizer):
        if stripped.startswith(token):
            return token
    return None


@dataclass(frozen=True)
class ChatFormat:
    """What a tokenizer's chat template writes around turns; see the module docstring."""

    tokenizer: Any
    end_of_turn: str | None
    """The special token ending an assistant turn (the policy's stop token), or None if the
    template writes none (then only eos stops a turn)."""
    end_of_turn_ids: tuple[int, ...]
    """Its ids (one id for a special token)."""
    tool_role: str
    """The role observations are sent as: ``tool`` when the template renders it, else ``user``."""
    _between: str
    """Template text after an assistant content and before its end-of-turn token (often empty)."""

    @classmethod
    def for_tokenizer(cls, tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
        """The format of ``tokenizer``'s chat template (cached on the tokenizer, per template)."""
        template = getattr(tokenizer, "chat_template", None)
        cached = getattr(tokenizer, _CACHE_ATTR, None)
        if cached is not None and cached[0] == template:
            return cached[1]
        fmt = cls._probe(tokenizer)
        with contextlib.suppress(AttributeError):  # a tokenizer that refuses attributes: no cache
            setattr(tokenizer, _CACHE_ATTR, (template, fmt))
        return fmt

    @classmethod
    def _probe(cls, tokenizer: PreTrainedTokenizerBase) -> ChatFormat:
        if not getattr(tokenizer, "chat_template", None):
            name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
            raise ChatTemplateError(
                f"the tokenizer {name!r} has no chat template, so prompts cannot be built the way the model "
                "was trained to read them. fix: use a chat/instruct checkpoint (its tokenizer_config.json "
                "or chat_template.jinja holds the template), or set tokenizer.chat_template and save it "
                "with tokenizer.save_pretrained(DIR)"
            )
        user = {"role": "user", "content": _PROBE_USER}
        assistant = {"role": "assistant", "content": _PROBE_ASSISTANT}
        try:
            base = _render(tokenizer, [user, assistant], False)
        except Exception as exc:
            raise ChatTemplateError(
                f"the tokenizer's chat template cannot render a conversation: {exc}"
            ) from exc
        at = base.find(_PROBE_ASSISTANT)
        if at < 0:
            raise ChatTemplateError(
                "the tokenizer's chat template does not write the assistant's message into the text; "
                "exact-id multi-turn rollouts need a template that renders assistant turns"
            )
        after = base[at + len(_PROBE_ASSISTANT) :]
        eot = _end_of_turn(tokenizer, after)
        between = after[: after.find(eot)] if eot is not None else ""
        eot_ids = tuple(tokenizer.encode(eot, add_special_tokens=False)) if eot is not None else ()
        tool_role = cls._tool_role(tokenizer, user, assistant)
        return cls(tokenizer, eot, eot_ids, tool_role, between)

    @staticmethod
    def _tool_role(
        tokenizer: PreTrainedTokenizerBase, user: Mapping[str, str], assistant: Mapping[str, str]
    ) -> str:
        try:
            text = _render(tokenizer, [user, assistant, {"role": "tool", "content": _PROBE_TOOL}], True)
        except Exception:
            return "user"
        return "tool" if _PROBE_TOOL in text else "user"

    # ------------------------------------------------------------------------------------------- ids

    def encode(self, text: str) -> list[int]:
        """Ids of template text (special tokens in it become their ids; nothing is added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> list[int]:
        """The template's rendering of ``messages`` as ids (with the generation prompt by default)."""
        return self.encode(_render(self.tokenizer, messages, add_generation_prompt))

    def action_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn's content as the policy would sample it, ending the turn."""
        return [*self.encode(text + self._between), *self.end_of_turn_ids]

    def observation_text(self, text: str, role: str | None = None) -> str:
        """The template text between an ended assistant turn and the next generation prompt."""
        role = role or self.tool_role
        if role == "tool":
            role = self.tool_role
        user = {"role": "user", "content": _PROBE_USER}
        assistant = {"role": "assistant", "content": _PROBE_ASSISTANT}
        full = _render(self.tokenizer, [user, assistant, {"role": role, "content": text}], True)
        base = _render(self.tokenizer, [user, assistant], False)
        head = base[: base.find(_PROBE_ASSISTANT) + len(_PROBE_ASSISTANT)]
        head += self._between + (self.end_of_turn or "")
        if not full.startswith(head):
            raise ChatTemplateError(
                "the chat template renders an earlier assistant turn differently once more messages follow "
                "it, so a multi-turn context cannot be extended id by id; use a template that keeps past "
                "turns verbatim"
            )
        return full[len(head) :]

    def observation_ids(self, text: str, role: str = "tool", ended: bool = True) -> list[int]:
        """Ids fed to the policy after its action: the observation turn and the next generation prompt.

        With ``ended`` the action's ids end with the sampled end-of-turn token; without it (the action
        was cut by the token limit) the turn is closed first with the end-of-turn ids.
        """
        head = [] if ended else list(self.end_of_turn_ids)
        return [*head, *self.encode(self.observation_text(text, role))]


def action_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """:meth:`ChatFormat.action_ids` of ``tokenizer``'s format (a demonstration's action)."""
    return ChatFormat.for_tokenizer(tokenizer).action_ids(text)
