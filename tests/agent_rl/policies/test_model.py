"""The tiny policy made from scratch, and loading / saving local checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from transferlab.agent_rl.policies.model import (
    TINY_PARAM_RANGE,
    PolicyNotFoundError,
    TinyPolicyConfig,
    count_parameters,
    load_policy,
    save_policy,
)
from transferlab.agent_rl.policies.tokenizer import train_tokenizer
from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
from transferlab.coding_rl.tokenizer_corpus import corpus_texts
from transferlab.platform.config import ConfigError


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return train_tokenizer(corpus_texts(seed_repo_tasks()), vocab_size=2048)


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_same_seed_same_parameters(tok: PreTrainedTokenizerFast, architecture: str) -> None:
    cfg = TinyPolicyConfig(architecture=architecture, seed=7)
    before = torch.random.get_rng_state()
    a, b = cfg.create(tok), cfg.create(tok)
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's RNG is left alone
    assert _same_params(a, b)
    assert not _same_params(a, TinyPolicyConfig(architecture=architecture, seed=8).create(tok))
    assert a.config.vocab_size == len(tok) and not a.training
    assert a.config.eos_token_id == tok.eos_token_id and a.config.pad_token_id == tok.pad_token_id


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
@pytest.mark.parametrize("vocab", [None, 2048, 4096])
def test_default_size_is_in_the_documented_range(
    tok: PreTrainedTokenizerFast, architecture: str, vocab: int | None
) -> None:
    model = TinyPolicyConfig(architecture=architecture, vocab_size=vocab).create(tok)
    low, high = TINY_PARAM_RANGE
    assert low <= count_parameters(model) <= high


def test_config_is_validated(tok: PreTrainedTokenizerFast) -> None:
    with pytest.raises(ConfigError, match="not a multiple of n_head"):
        TinyPolicyConfig(d_model=100, n_head=3)
    with pytest.raises(ConfigError, match="architecture"):
        TinyPolicyConfig(architecture="mamba")
    with pytest.raises(ValueError, match="smaller than the tokenizer"):
        TinyPolicyConfig(vocab_size=300).create(tok)
    assert all(row[3] for row in TinyPolicyConfig.help_table())  # every field has help text


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_save_and_load_back(tok: PreTrainedTokenizerFast, tmp_path: Path, architecture: str) -> None:
    model = TinyPolicyConfig(architecture=architecture, n_layer=2, d_model=64).create(tok)
    out = save_policy(model, tok, tmp_path / "policy")
    assert (out / "config.json").is_file()
    loaded, loaded_tok = load_policy(out)
    assert _same_params(model, loaded) and not loaded.training
    assert loaded_tok.get_vocab() == tok.get_vocab() and loaded_tok.chat_template == tok.chat_template
    ids = torch.tensor([tok.encode('{"action": "submit"}')])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    half, _ = load_policy(out, dtype="bfloat16")
    assert half.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        load_policy(out, dtype="float7")


def test_load_policy_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(PolicyNotFoundError, match=r"does not exist\. fix: pass a local directory"):
        load_policy(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        load_policy(tmp_path)
    (tmp_path / "file.bin").write_bytes(b"")
    with pytest.raises(PolicyNotFoundError, match="is a file"):
        load_policy(tmp_path / "file.bin")
    with pytest.raises(PolicyNotFoundError, match="looks like a Hugging Face Hub id"):
        load_policy("some-org/some-model-that-is-not-here")
