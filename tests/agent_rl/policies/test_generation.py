"""Sampling with the KV cache: determinism, stopping, exact ids and log-probs that match teacher forcing."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from transferlab.agent_rl.policies.generation import (
    Sample,
    SamplingConfig,
    generate,
    sequence_logprobs,
    stop_token_ids,
)
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.policies.tokenizer import IM_END, encode_chat, train_tokenizer
from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks
from transferlab.coding_rl.tokenizer_corpus import corpus_texts
from transferlab.platform.trajectory import StepRecord

SMALL = {"n_layer": 2, "d_model": 64, "n_head": 4}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return train_tokenizer(corpus_texts(seed_repo_tasks()), vocab_size=2048)


@pytest.fixture(scope="module")
def model(tok: PreTrainedTokenizerFast) -> PreTrainedModel:
    return TinyPolicyConfig(**SMALL).create(tok)


@pytest.fixture(scope="module")
def prompts(tok: PreTrainedTokenizerFast) -> list[list[int]]:
    """Three chat prompts of different lengths."""
    issues = [t.meta.issue for t in seed_repo_tasks()]
    return [
        encode_chat(tok, [{"role": "user", "content": text}]) for text in ("fix it", issues[0], issues[1])
    ]


def _eos_model(tok: PreTrainedTokenizerFast, p_eos: float) -> PreTrainedModel:
    """A model whose next-token distribution is fixed: eos with p_eos, the rest uniform."""
    model = TinyPolicyConfig(architecture="gpt2", tie_embeddings=False, **SMALL).create(tok)
    vocab = model.config.vocab_size
    head = torch.nn.Linear(model.config.n_embd, vocab, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[tok.eos_token_id] = math.log(p_eos / (1 - p_eos) * (vocab - 1))
    model.lm_head = head
    return model


def _teacher_forced(model: PreTrainedModel, samples: list[Sample], left: bool) -> list[torch.Tensor]:
    """Log-probs of each sample's completion by teacher forcing, all in one padded batch."""
    seqs = [s.prompt_ids + s.completion_ids for s in samples]
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    attention, completion = torch.zeros_like(ids), torch.zeros_like(ids)
    spans = []
    for i, (seq, s) in enumerate(zip(seqs, samples, strict=True)):
        start = width - len(seq) if left else 0
        ids[i, start : start + len(seq)] = torch.tensor(seq)
        attention[i, start : start + len(seq)] = 1
        first = start + len(s.prompt_ids)
        completion[i, first : first + len(s.completion_ids)] = 1
        spans.append((first, first + len(s.completion_ids)))
    with torch.no_grad():
        lp = sequence_logprobs(model, ids, attention, completion)
    assert torch.all(lp[completion == 0] == 0)
    return [lp[i, a:b] for i, (a, b) in enumerate(spans)]


def test_same_seed_same_ids_different_seed_different(
    model: PreTrainedModel, tok: PreTrainedTokenizerFast, prompts: list[list[int]]
) -> None:
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=16, seed=5)
    a, b = generate(model, tok, prompts, cfg), generate(model, tok, prompts, cfg)
    assert [s.completion_ids for s in a] == [s.completion_ids for s in b]
    assert [s.logprobs for s in a] == [s.logprobs for s in b]
    other = generate(model, tok, prompts, SamplingConfig(temperature=1.0, max_new_tokens=16, seed=6))
    assert all(x.completion_ids != y.completion_ids for x, y in zip(a, other, strict=True))
    for s, p in zip(a, prompts, strict=True):
        assert s.prompt_ids == p
        assert len(s.completion_ids) == len(s.logprobs) == len(s.sampling_logprobs) >= 1
        assert all(lp <= 0 for lp in s.logprobs)
        assert s.logprobs == pytest.approx(s.sampling_logprobs, abs=1e-5)  # temperature 1, no truncation


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_kv_cache_log_probs_equal_teacher_forcing(
    tok: PreTrainedTokenizerFast, prompts: list[list[int]], architecture: str
) -> None:
    model = TinyPolicyConfig(architecture=architecture).create(tok)  # the default tiny model
    cfg = SamplingConfig(temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=24, seed=1)
    samples = generate(model, tok, prompts, cfg)
    for left in (True, False):  # left padding as at sampling, right padding as in to_tensors
        for s, lp in zip(samples, _teacher_forced(model, samples, left), strict=True):
            assert torch.allclose(lp, torch.tensor(s.logprobs), atol=1e-5, rtol=0)
    for s in samples:  # the sampling distribution is sharper than the policy's
        assert sum(s.sampling_logprobs) > sum(s.logprobs)


def test_batch_rows_equal_generating_each_alone(
    model: PreTrainedModel, tok: PreTrainedTokenizerFast, prompts: list[list[int]]
) -> None:
    cfg = SamplingConfig(max_new_tokens=20, seed=11)
    batch = generate(model, tok, prompts, cfg)
    assert len({len(p) for p in prompts}) == len(prompts)  # really different lengths: left padding
    for i, prompt in enumerate(prompts):
        alone = generate(model, tok, [prompt], cfg.model_copy(update={"seed": cfg.seed + i}))[0]
        assert alone.completion_ids == batch[i].completion_ids
        assert alone.logprobs == pytest.approx(batch[i].logprobs, abs=1e-5)
        assert alone.finished == batch[i].finished


def _reference_ids(model: PreTrainedModel, prompt: list[int], seed: int, n: int) -> list[int]:
    """Sampling without the KV cache: the full sequence again at every step, same random draws."""
    gen = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            cdf = torch.log_softmax(logits, -1).double().exp().cumsum(-1)
            u = torch.rand((), generator=gen, dtype=torch.float64)
            ids.append(int(torch.searchsorted(cdf, (u * cdf[-1]).reshape(1), right=True)))
    return ids[len(prompt) :]


def test_recorded_ids_are_the_sampled_ids(
    model: PreTrainedModel, tok: PreTrainedTokenizerFast, prompts: list[list[int]]
) -> None:
    cfg = SamplingConfig(max_new_tokens=12, stop_at_eos=False, seed=3)
    samples = generate(model, tok, prompts, cfg)
    for i, s in enumerate(samples):
        assert s.completion_ids == _reference_ids(model, prompts[i], cfg.seed + i, 12)
        assert s.text == tok.decode(s.completion_ids, skip_special_tokens=False)
    # a random policy's tokens do not survive decode -> encode: the ids are kept, never re-tokenised
    assert any(tok.encode(s.text, add_special_tokens=False) != s.completion_ids for s in samples)
    record = StepRecord(
        episode_id="ep",
        step=0,
        task_id="t",
        domain="coding",
        action_text=samples[0].text,
        action_ids=samples[0].completion_ids,
        action_logprobs=samples[0].logprobs,
        observation_text="",
        observation_ids=[],
        reward=0.0,
        prompt_ids=samples[0].prompt_ids,
    )
    record.validate()


def test_stops_at_eos_and_records_untempered_log_probs(tok: PreTrainedTokenizerFast) -> None:
    model = _eos_model(tok, p_eos=0.5)
    vocab = model.config.vocab_size
    prompt = [encode_chat(tok, [{"role": "user", "content": "go"}])] * 4
    temperature = 1.25  # P(eos) drops to about 0.2 per token when sampling
    samples = generate(model, tok, prompt, SamplingConfig(max_new_tokens=60, temperature=temperature))
    assert len({tuple(s.completion_ids) for s in samples}) > 1  # rows are seeded apart
    odds = math.exp(math.log(vocab - 1) / temperature)
    for s in samples:
        assert s.finished and s.stop_reason == "stop_token"
        assert s.completion_ids[-1] == tok.eos_token_id
        assert tok.eos_token_id not in s.completion_ids[:-1]
        assert s.text == tok.decode(s.completion_ids[:-1], skip_special_tokens=False)
        # recorded log-probs are the policy's (temperature 1), not the tempered sampling distribution
        assert s.logprobs[-1] == pytest.approx(math.log(0.5), abs=1e-5)
        assert s.logprobs[:-1] == pytest.approx([math.log(0.5 / (vocab - 1))] * (len(s.logprobs) - 1))
        assert s.sampling_logprobs[-1] == pytest.approx(math.log(odds / (odds + vocab - 1)), abs=1e-5)
        assert s.sampling_logprobs[:-1] == pytest.approx(
            [-math.log(odds + vocab - 1)] * (len(s.logprobs) - 1)
        )
    nucleus = generate(model, tok, prompt[:1], SamplingConfig(top_p=0.4, max_new_tokens=5))[0]
    assert nucleus.completion_ids == [tok.eos_token_id] and nucleus.sampling_logprobs == [0.0]
    greedy = generate(model, tok, prompt[:1], SamplingConfig(temperature=0.0, max_new_tokens=5))[0]
    assert greedy.completion_ids == [tok.eos_token_id] and greedy.text == ""
    no_eos = generate(
        model, tok, prompt[:1], SamplingConfig(temperature=0.0, stop_at_eos=False, max_new_tokens=3)
    )
    assert no_eos[0].completion_ids == [tok.eos_token_id] * 3 and not no_eos[0].finished


def test_stop_token_ids_im_end_and_length(
    model: PreTrainedModel, tok: PreTrainedTokenizerFast, prompts: list[list[int]]
) -> None:
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8, stop_at_eos=False)
    long = generate(model, tok, prompts[:1], greedy)[0]
    assert len(long.completion_ids) == 8 and not long.finished and long.stop_reason == "length"
    assert long.sampling_logprobs == [0.0] * 8
    target = long.completion_ids[3]
    first = long.completion_ids.index(target)
    stopped = generate(model, tok, prompts[:1], greedy.model_copy(update={"stop_token_ids": [target]}))[0]
    assert stopped.completion_ids == long.completion_ids[: first + 1]
    assert stopped.finished and stopped.stop_reason == "stop_token"
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert {tok.eos_token_id, im_end} == stop_token_ids(tok, SamplingConfig())
    assert stop_token_ids(tok, SamplingConfig(stop_at_eos=False, stop_token_ids=[7])) == {7}


def test_stop_strings(model: PreTrainedModel, tok: PreTrainedTokenizerFast, prompts: list[list[int]]) -> None:
    cfg = SamplingConfig(max_new_tokens=16, stop_at_eos=False, seed=2)
    long = generate(model, tok, prompts[:1], cfg)[0]
    piece = next(
        text
        for k in range(2, 13)
        for n in (1, 2, 3)
        if (text := str(tok.decode(long.completion_ids[k : k + n]))).strip() and "\ufffd" not in text
    )
    cut = generate(model, tok, prompts[:1], cfg.model_copy(update={"stop_strings": ["@@never@@", piece]}))[0]
    assert cut.finished and cut.stop_reason == "stop_string"
    assert cut.completion_ids == long.completion_ids[: len(cut.completion_ids)]  # same draws up to the stop
    assert len(cut.completion_ids) < len(long.completion_ids)
    decoded = str(tok.decode(cut.completion_ids))
    assert piece not in cut.text and piece in decoded and decoded.startswith(cut.text)


def test_position_limit_and_bad_prompts(tok: PreTrainedTokenizerFast) -> None:
    model = TinyPolicyConfig(architecture="gpt2", max_positions=32, **SMALL).create(tok)
    cfg = SamplingConfig(max_new_tokens=50, stop_at_eos=False)
    out = generate(model, tok, [[1] * 30, [1] * 10], cfg)
    assert [len(s.completion_ids) for s in out] == [2, 22]
    assert all(s.stop_reason == "length" for s in out)
    with pytest.raises(ValueError, match="no room"):
        generate(model, tok, [[1] * 32], cfg)
    with pytest.raises(ValueError, match="empty"):
        generate(model, tok, [[]], cfg)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        generate(model, tok, [[1, 10**6]], cfg)


def test_training_mode_is_restored(model: PreTrainedModel, tok: PreTrainedTokenizerFast) -> None:
    model.train()
    try:
        generate(model, tok, [[1, 2]], SamplingConfig(max_new_tokens=2))
        assert model.training
    finally:
        model.eval()
