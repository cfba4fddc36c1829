"""Randomly initialised Qwen2 / Llama / GPT-2 checkpoints: standard files, reload, chat template kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from transferlab.agent_rl.policies.families import FAMILIES, init_checkpoint
from transferlab.agent_rl.policies.model import count_parameters, load_policy

TEXTS = ["def add(a, b):\n    return a + b\n", '{"action": "read_file", "path": "src/calc.py"}'] * 20
ARCH = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_loads_like_a_downloaded_one(family: str, tmp_path: Path) -> None:
    out = init_checkpoint(family, tmp_path / family, size="tiny", seed=1, texts=TEXTS)
    assert {"config.json", "model.safetensors", "generation_config.json"} <= {p.name for p in out.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == ARCH[family]
    assert tok.chat_template and 50_000 < count_parameters(model) < 1_000_000
    again = init_checkpoint(family, tmp_path / "again", size="tiny", seed=1, texts=TEXTS)
    twin, _ = load_policy(again)
    for (name, a), (_, b) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        assert torch.equal(a, b), name  # same seed, same weights
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_bad_family_size_and_occupied_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model family 'mistral'"):
        init_checkpoint("mistral", tmp_path / "x", texts=TEXTS)
    with pytest.raises(ValueError, match="unknown size '7b'"):
        init_checkpoint("qwen2", tmp_path / "x", size="7b", texts=TEXTS)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        init_checkpoint("qwen2", tmp_path / "full", texts=TEXTS)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
