"""The locally trained byte-level BPE tokenizer: round trips, determinism, chat ids, save/load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from transferlab.agent_rl.policies.tokenizer import (
    CHAT_TEMPLATE,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    encode_chat,
    observation_ids,
    train_tokenizer,
)
from transferlab.coding_rl.agents import expert_plan
from transferlab.coding_rl.env.workspace import TOOLS
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
from transferlab.coding_rl.tokenizer_corpus import corpus_texts


@pytest.fixture(scope="module")
def tasks() -> list[RepoTask]:
    return seed_repo_tasks()


@pytest.fixture(scope="module")
def texts(tasks: list[RepoTask]) -> list[str]:
    return list(corpus_texts(tasks))


@pytest.fixture(scope="module")
def tok(texts: list[str]) -> PreTrainedTokenizerFast:
    return train_tokenizer(texts, vocab_size=2048)


def _round_trip(tok: PreTrainedTokenizerFast, text: str) -> str:
    ids = tok.encode(text, add_special_tokens=False)
    return str(tok.decode(ids, skip_special_tokens=False))


def test_corpus_is_a_few_hundred_lines_covering_all_six_tools(texts: list[str]) -> None:
    lines = sum(t.count("\n") + 1 for t in texts)
    assert 150 <= lines <= 2000
    used = {json.loads(t)["action"] for t in texts if t.startswith('{"action"')}
    assert used == set(TOOLS)
    assert list(corpus_texts(seed_repo_tasks())) == texts  # deterministic order and content


def test_special_tokens_and_attributes(tok: PreTrainedTokenizerFast) -> None:
    assert tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3, 4]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.chat_template == CHAT_TEMPLATE
    assert 261 < len(tok) <= 2048
    assert tok.encode("x = 1", add_special_tokens=False) == tok.encode("x = 1")  # adds nothing itself


def test_round_trips_text_and_tool_calls(tok: PreTrainedTokenizerFast, tasks: list[RepoTask]) -> None:
    samples = [
        *(text for task in tasks for text in task.files.values()),
        *(call for task in tasks for call in expert_plan(task)),
        '{"action": "edit_file", "path": "src/x.py", "old": "low = mid", "new": "low = mid + 1"}',
        "unicode: héllo wörld → ✓ 🚀 and\ttabs\r\nand   spaces  \n\n",
        "\x00\x01\x7f raw control bytes",
        f"literal {IM_START}user\nhi{IM_END} inside text",
        "",
    ]
    for text in samples:
        assert _round_trip(tok, text) == text


def test_tool_calls_compress(tok: PreTrainedTokenizerFast, tasks: list[RepoTask]) -> None:
    """The tool-call language was learned: a call takes far fewer tokens than bytes."""
    calls = [c for task in tasks for c in expert_plan(task) if '"write_file"' not in c]
    n_bytes = sum(len(c.encode()) for c in calls)
    n_tokens = sum(len(tok.encode(c, add_special_tokens=False)) for c in calls)
    assert n_tokens < n_bytes / 3
    for name in TOOLS:  # every tool name is a single token
        assert len(tok.encode(name, add_special_tokens=False)) == 1, name
    assert len(tok.encode('{"action": "submit"}', add_special_tokens=False)) <= 6


def test_training_is_deterministic(texts: list[str], tok: PreTrainedTokenizerFast) -> None:
    again = train_tokenizer(texts, vocab_size=2048, seed=0)
    assert again.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    assert again.init_kwargs["transferlab_seed"] == 0
    smaller = train_tokenizer(texts, vocab_size=400)
    assert len(smaller) == 400


def test_vocab_size_too_small_is_refused(texts: list[str]) -> None:
    with pytest.raises(ValueError, match="vocab_size >= 261"):
        train_tokenizer(texts, vocab_size=100)


def test_save_and_load(tok: PreTrainedTokenizerFast, tmp_path: Path, texts: list[str]) -> None:
    tok.save_pretrained(tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok", local_files_only=True)
    for text in texts[:20]:
        assert loaded.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert loaded.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3, 4]
    assert (loaded.pad_token, loaded.eos_token) == (tok.pad_token, tok.eos_token)
    assert loaded.chat_template == CHAT_TEMPLATE
    assert loaded.get_vocab() == tok.get_vocab()


def test_chat_ids_match_the_template(tok: PreTrainedTokenizerFast, tasks: list[RepoTask]) -> None:
    messages = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": tasks[0].meta.issue},
        {"role": "assistant", "content": expert_plan(tasks[0])[0]},
        {"role": "tool", "content": "=== tests/x.py ===\n def test_0(): ..."},
    ]
    ids = encode_chat(tok, messages)
    rendered: Any = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert ids == list(rendered["input_ids"])
    text = str(tok.decode(ids, skip_special_tokens=False))
    assert text.startswith("<|bos|><|im_start|>system\nYou fix bugs.<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="unknown chat role"):
        encode_chat(tok, [{"role": "robot", "content": "x"}])


def test_observation_ids(tok: PreTrainedTokenizerFast) -> None:
    after_stop = tok.decode(observation_ids(tok, "wrote src/x.py"), skip_special_tokens=False)
    assert after_stop == "\n<|im_start|>tool\nwrote src/x.py<|im_end|>\n<|im_start|>assistant\n"
    cut = tok.decode(observation_ids(tok, "hi", role="user", ended=False), skip_special_tokens=False)
    assert cut == "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_separate_spaces_give_a_name_the_same_tokens_everywhere(texts: list[str], tmp_path: Path) -> None:
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer

    name = "shift_total"
    contexts = [f"Issue: `{name}` is wrong", f'"pattern": "def {name}"', f"src/a.py:1: def {name}(x):"]
    separate = train_tokenizer(texts, vocab_size=600, split="spaces")
    attached = train_tokenizer(texts, vocab_size=600)

    def pieces(tokenizer: PreTrainedTokenizerFast, context: str) -> list[str]:
        """The tokens that spell the name in ``context`` (with any space they carry)."""
        decoded = [tokenizer.decode([i]) for i in tokenizer.encode(context)]
        for spelt in (lambda t: t, lambda t: t.lstrip(" ")):  # exactly, else with a leading space
            for start in range(len(decoded)):
                for end in range(start + 1, len(decoded) + 1):
                    if spelt("".join(decoded[start:end])) == name:
                        return decoded[start:end]
        raise AssertionError(f"{name} is not spelt by whole tokens in {decoded}")

    assert len({tuple(pieces(separate, c)) for c in contexts}) == 1
    assert len({tuple(pieces(attached, c)) for c in contexts}) > 1  # " shift_" after a space, "shift_" else
    text = "def f(a):\n    return  a  +  1\n"
    assert separate.decode(separate.encode(text)) == text
    separate.save_pretrained(tmp_path)  # the split is saved with the tokenizer
    assert AutoTokenizer.from_pretrained(tmp_path).encode(contexts[1]) == separate.encode(contexts[1])


@pytest.mark.parametrize(
    ("split", "name_pieces"),
    [("words", ["count", "_", "total"]), ("word_pieces", ["count", "_total"])],
)
def test_word_splits_spell_an_unseen_name_from_seen_words(
    texts: list[str], tmp_path: Path, split: str, name_pieces: list[str]
) -> None:
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer

    corpus = list(texts) + ["def shift_total(x): pass", "def count_frame(x): pass"] * 20
    tok = train_tokenizer(corpus, vocab_size=600, split=split)
    # ``count_total`` never appears whole; its words do, each one token, the same after a backtick or a space
    for context in ("Issue: `count_total` is wrong", '"pattern": "def count_total"'):
        decoded = [tok.decode([i]) for i in tok.encode(context)]
        start = decoded.index("count")
        assert decoded[start : start + len(name_pieces)] == name_pieces
    assert [tok.decode([i]) for i in tok.encode("test_0")] == ["test", "_", "0"]
    text = "def f_2(a):\n    return  a_b  +  _c_d + 12345\n"
    assert tok.decode(tok.encode(text)) == text
    tok.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).encode(text) == tok.encode(text)
    with pytest.raises(ValueError, match="unknown split 'letters'"):
        train_tokenizer(corpus, vocab_size=600, split="letters")


def test_code_pieces_split_quotes_a_line_with_the_pieces_of_the_file() -> None:
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer

    pieces = train_tokenizer(["def f(a):\n    return a * 4 - v\n"], vocab_size=300, split="code_pieces")
    split = pieces.backend_tokenizer.pre_tokenizer.pre_tokenize_str

    def words(text: str) -> list[str]:
        return [w for w, _ in split(text)]

    line = ["Ġreturn", "Ġa", "Ġ*", "Ġ4", "Ġ-", "Ġv"]  # Ġ is the byte-level space
    in_file = words("def f(a):\n    return a * 4 - v\n")
    quoted = words('{"old": "    return a * 4 - v"}')
    for pieces_of in (in_file, quoted):
        start = pieces_of.index("Ġreturn")
        assert pieces_of[start : start + len(line)] == line
    assert words("src/report_ops.py")[2:4] == ["report", "_ops"]
    path = ["src", "/", "report", "_ops", ".", "py"]  # the same pieces wherever the path is written
    for text in (
        "Repository files:\n  src/report_ops.py\n",
        '{"path": "src/report_ops.py"}',
        "=== src/report_ops.py ===",
    ):
        found = words(text)
        assert found[found.index("src") : found.index("src") + len(path)] == path
    text = "def f_2(a):\n    return  a_b  +  _c_d + 12345\n"
    assert pieces.decode(pieces.encode(text)) == text
