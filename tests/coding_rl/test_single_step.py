"""Single-step code RL: SFT lowers its loss, GRPO changes the policy, both through the real sandbox."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import torch

from transferlab.agent_rl.policies.devices import DeviceError
from transferlab.agent_rl.policies.generation import Sample
from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.policies.tokenizer import train_tokenizer
from transferlab.agent_rl.rl import RLConfig
from transferlab.coding_rl.sandbox.backends import open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import (
    GRPOConfig,
    SFTConfig,
    candidate_source,
    code_prompt_ids,
    pack,
    sandbox_reward,
    train_grpo,
    train_sft,
)
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.toy import toy_solution, toy_tasks
from transferlab.platform.config import ConfigError, load_config
from transferlab.platform.metrics import MemoryLogger


@pytest.fixture(scope="module")
def verifier() -> Iterator[Verifier]:
    backend, _, _ = open_backend(SandboxConfig(workers=2))
    yield Verifier(backend)
    backend.close()


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    train, held = toy_tasks()
    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in train + held] * 20
    return train_tokenizer(texts, vocab_size=300, seed=0)


def test_toy_tasks_are_solved_by_their_solutions(verifier: Verifier) -> None:
    train, held = toy_tasks()
    assert len(train) + len(held) == 30 and not {t.task_id for t in train} & {t.task_id for t in held}
    results = verifier.grade_many([(t, candidate_source(t, toy_solution(t))) for t in train + held])
    assert all(r.status == "passed" and r.reward == 12.0 for r in results)


def test_pack_masks_only_completion_tokens() -> None:
    batch = pack([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], [[-0.5, -0.25], [-1.0, -2.0, -3.0]], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 5, 6], [4, 7, 8, 9, 0]]
    assert batch.completion_mask.tolist() == [
        [False, False, False, True, True],
        [False, True, True, True, False],
    ]
    assert batch.old_logprobs[0, 3:].tolist() == [-0.5, -0.25] and batch.old_logprobs[1, 1:4].tolist() == [
        -1,
        -2,
        -3,
    ]


def test_sft_then_grpo_change_the_policy(tokenizer, verifier: Verifier) -> None:  # type: ignore[no-untyped-def]
    train, _ = toy_tasks()
    model = TinyPolicyConfig(n_layer=2, d_model=64, n_head=4, max_positions=128, seed=0).create(tokenizer)
    logger = MemoryLogger()
    losses = train_sft(
        model, tokenizer, [(t, toy_solution(t)) for t in train], SFTConfig(steps=40, batch_size=8), logger
    )
    assert losses[-1] < 0.5 * losses[0]
    before = [p.detach().clone() for p in model.parameters()]
    history = train_grpo(
        model,
        tokenizer,
        train,
        sandbox_reward(verifier),
        GRPOConfig(steps=2, tasks_per_step=4, group_size=4, kl_coef=0.05),
        logger,
    )
    changed = sum(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert changed > 0
    assert len(history) == 2
    for key in (
        "rollout/reward",
        "loss/policy",
        "kl/ref",
        "train/clip_frac",
        "train/frac_reward_zero_std",
        "time/sandbox_s",
        "time/tokens_per_s",
    ):
        assert key in history[0]
    assert len(logger.series("rollout/reward")) == 2
    assert code_prompt_ids(tokenizer, train[0])[-1] != tokenizer.pad_token_id


def test_grpo_config_is_the_rl_config_plus_its_own_two_fields() -> None:
    assert issubclass(GRPOConfig, RLConfig)
    assert set(GRPOConfig.model_fields) - set(RLConfig.model_fields) == {"leave_one_out", "success_reward"}
    shared, rl = GRPOConfig(), RLConfig()
    assert {k: getattr(shared, k) for k in RLConfig.model_fields} == rl.model_dump()
    with pytest.raises(ConfigError, match="group_size >= 2"):
        GRPOConfig(group_size=1)
    with pytest.raises(ConfigError, match="use train_rl with an RLConfig"):
        GRPOConfig(algo="ppo")
    with pytest.raises(ConfigError, match="use train_rl with an RLConfig"):
        GRPOConfig(mode="agent")


def test_a_grpo_config_saved_before_the_merge_still_loads(tmp_path: Path) -> None:
    """The fields the single-step config had on its own, saved with its class path, load unchanged."""
    saved = {
        "_config_class": "transferlab.coding_rl.single_step:GRPOConfig",
        "steps": 3,
        "tasks_per_step": 2,
        "group_size": 4,
        "epochs": 1,
        "lr": 0.0005,
        "clip_low": 0.2,
        "clip_high": 0.28,
        "kl_coef": 0.05,
        "kl_kind": "k3",
        "scale_by_std": True,
        "leave_one_out": True,
        "zero_std": "drop",
        "temperature": 1.0,
        "max_new_tokens": 24,
        "grad_clip": 1.0,
        "success_reward": 11.0,
        "seed": 7,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(saved))
    loaded = load_config(path)
    assert isinstance(loaded, GRPOConfig)
    assert loaded == GRPOConfig(**{k: v for k, v in saved.items() if not k.startswith("_")})
    assert loaded.leave_one_out and loaded.success_reward == 11.0 and loaded.seed == 7


def test_grpo_in_bfloat16_trains_in_place_and_cuda_without_cuda_is_refused(
    tokenizer,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reward that is a plain function of the sampled ids gives the groups a spread; in bfloat16 the
    weights stay bfloat16 and move, and the KL to the bfloat16 reference is finite."""
    train, _ = toy_tasks()
    model = TinyPolicyConfig(n_layer=1, d_model=32, n_head=2, max_positions=128, seed=0).create(tokenizer)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}

    def id_sum(tasks: Sequence[CodeTask], samples: Sequence[Sample]) -> list[float]:
        return [float(sum(s.completion_ids) % 7) for s in samples]

    settings = {"steps": 1, "tasks_per_step": 2, "group_size": 4, "max_new_tokens": 12, "kl_coef": 0.05}
    [metrics] = train_grpo(model, tokenizer, train, id_sum, GRPOConfig(**settings, dtype="bfloat16"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert any(not torch.equal(before[n], p.detach().float()) for n, p in model.named_parameters())
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert metrics["train/frac_reward_zero_std"] < 1.0  # a real policy-gradient step, not weight decay only
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="sees no CUDA device"):
        train_grpo(model, tokenizer, train, id_sum, GRPOConfig(**settings, device="cuda"))
