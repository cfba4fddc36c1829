"""Single-step code RL in one process, with rewards as plain functions (TRL's shape).

- :func:`train_sft` — supervised fine-tuning on (task, body) pairs, loss only on the body's tokens
  (a thin front to :func:`transferlab.agent_rl.sft.train_sft`);
- :func:`train_grpo` — G completions per task, ``reward_fn`` scores them (by default the sandbox:
  :func:`sandbox_reward`), group-relative advantages, clipped objective with separate low/high clip,
  optional KL to a frozen reference. No worker processes, no checkpoints: the smallest GRPO step,
  and the one ``benchmarks/trainer_throughput.py`` compares with TRL's ``GRPOTrainer``. The full
  trainer — PPO, multi-turn agents, parallel rollout workers, LoRA, resume — is
  :func:`transferlab.agent_rl.rl.train_rl`.

I/O is injected: a metrics logger, and optionally a run directory for checkpoints. The math lives in
:mod:`transferlab.agent_rl.losses`.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, model_validator

from transferlab.agent_rl.losses import group_advantages, group_weights, grpo_loss
from transferlab.agent_rl.policies.generation import Sample, SamplingConfig, generate
from transferlab.agent_rl.policies.prefix import packed_logprobs
from transferlab.agent_rl.policies.tokenizer import prompt_ids
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.sft import SFTConfig, one_turn_demonstration
from transferlab.agent_rl.sft import train_sft as train_trajectories
from transferlab.coding_rl.env.single_step import candidate_source, prompt_text
from transferlab.coding_rl.sandbox.verifier import GradeResult, Verifier
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.platform.metrics import MetricsLogger
from transferlab.platform.trajectory import Trajectory


@dataclass
class Batch:
    """Prompt + completion ids, right-padded, with the completion mask and the sampled log-probs."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    old_logprobs: torch.Tensor


def pack(
    prompts: Sequence[list[int]],
    completions: Sequence[list[int]],
    logprobs: Sequence[list[float]] | None,
    pad_id: int,
) -> Batch:
    """Concatenate each prompt with its exact sampled ids; mask 1 only on completion positions."""
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros(ids.shape, dtype=torch.bool)
    old = torch.zeros(ids.shape, dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        n = len(p) + len(c)
        ids[i, :n] = torch.tensor(list(p) + list(c))
        attn[i, :n] = 1
        mask[i, len(p) : n] = True
        if logprobs is not None:
            old[i, len(p) : n] = torch.tensor(logprobs[i], dtype=torch.float32)
    return Batch(ids, attn, mask, old)


def _to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(*(getattr(batch, f.name).to(device) for f in dataclasses.fields(batch)))


# --------------------------------------------------------------------------------------------------- SFT


def code_prompt_ids(tokenizer: Any, task: CodeTask) -> list[int]:
    """The prompt: the description and signature as a user turn, then the assistant's turn opens."""
    return prompt_ids(tokenizer, prompt_text(task))


def code_demonstration(tokenizer: Any, task: CodeTask, body: str, index: int = 0) -> Trajectory:
    """One single-step demonstration: the prompt of ``task`` and ``body`` as the policy's answer."""
    return one_turn_demonstration(tokenizer, task.task_id, "coding", prompt_text(task), body, index)


def train_sft(
    model: Any,
    tokenizer: Any,
    demos: Sequence[tuple[CodeTask, str]],
    config: SFTConfig,
    logger: MetricsLogger | None = None,
    step_offset: int = 0,
) -> list[float]:
    """SFT on (task, body) pairs; the loss counts only the body's tokens (and the closing <|im_end|>)."""
    trajectories = [code_demonstration(tokenizer, t, body, i) for i, (t, body) in enumerate(demos)]
    return train_trajectories(model, tokenizer, trajectories, config, logger, step_offset)


# -------------------------------------------------------------------------------------------------- GRPO


class GRPOConfig(RLConfig):
    """Single-step code GRPO in one process (:func:`train_grpo`): the RL settings, plus two of its own.

    :func:`train_grpo` reads the shared optimisation and sampling fields (steps, tasks_per_step,
    group_size, epochs, lr, the clips, the KL, the group advantages, temperature, max_new_tokens,
    grad_clip, loss_agg, seed) and where to train (device, dtype, gradient_checkpointing); the PPO,
    agent, rollout-worker and checkpoint fields are :func:`~transferlab.agent_rl.rl.train_rl`'s.
    """

    leave_one_out: bool = Field(default=False, description="Baseline = mean of the other G-1 rewards.")
    success_reward: float = Field(
        default=12.0,
        description="Reward at or above which a rollout counts as a success (12 = the code reward "
        "when every test passes within the efficiency budget: runs 1 + pass rate 10 + fast 1).",
    )

    @model_validator(mode="after")
    def _single_step_grpo(self) -> GRPOConfig:
        if self.algo != "grpo" or self.mode != "code":
            raise ValueError(
                f"train_grpo runs GRPO on single-step code tasks, got algo={self.algo!r} mode={self.mode!r}; "
                "use train_rl with an RLConfig for PPO or agent episodes"
            )
        if self.group_size < 2:
            raise ValueError(
                f"GRPO compares completions within a group: set group_size >= 2, got {self.group_size}"
            )
        return self


RewardFn = Callable[[Sequence[CodeTask], Sequence[Sample]], list[float]]


def sandbox_reward(verifier: Verifier) -> RewardFn:
    """The code reward (runs +1, pass rate x 10, fast +1) from the sandbox, for each (task, completion)."""

    def reward(tasks: Sequence[CodeTask], samples: Sequence[Sample]) -> list[float]:
        grades: list[GradeResult] = verifier.grade_many(
            [(t, candidate_source(t, s.text)) for t, s in zip(tasks, samples, strict=True)]
        )
        return [g.reward for g in grades]

    return reward


def train_grpo(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[CodeTask],
    reward_fn: RewardFn,
    config: GRPOConfig,
    logger: MetricsLogger | None = None,
    step_offset: int = 0,
    checkpoint: Callable[[int], None] | None = None,
) -> list[dict[str, float]]:
    """GRPO: sample G bodies per task, grade them, update on group-relative advantages.

    ``model`` is moved in place to ``config.device`` and cast to ``config.dtype`` (as in
    :func:`~transferlab.agent_rl.rl.train_rl`); the reference (only with ``kl_coef > 0``),
    rewards and batches follow it. Raises DeviceError when the device is not available here."""
    from transferlab.agent_rl.policies.adapters import enable_gradient_checkpointing
    from transferlab.agent_rl.policies.devices import place_model, resolve_device, resolve_dtype

    device = resolve_device(config.device)
    place_model(model, device, resolve_dtype(config.dtype, device))
    rng = random.Random(config.seed)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
    history = []
    for step in range(config.steps):
        t0 = time.perf_counter()
        # 1. rollouts: G samples per task, the exact sampled ids and their log-probs kept
        chosen = [tasks[rng.randrange(len(tasks))] for _ in range(config.tasks_per_step)]
        flat = [t for t in chosen for _ in range(config.group_size)]
        prompts = [code_prompt_ids(tokenizer, t) for t in flat]
        sampling = SamplingConfig(
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            seed=config.seed * 1_000_003 + step * 9973,
        )
        samples = generate(model, tokenizer, prompts, sampling)
        t_gen = time.perf_counter()
        # 2. rewards from the sandbox
        rewards = torch.tensor(reward_fn(flat, samples), dtype=torch.float32, device=device)
        t_reward = time.perf_counter()
        # 3. group-relative advantages; flat groups dropped or down-weighted
        adv = group_advantages(
            rewards, config.group_size, scale_by_std=config.scale_by_std, leave_one_out=config.leave_one_out
        )
        weights = group_weights(adv.zero_std_groups, config.group_size, config.zero_std).to(device)
        batch = _to_device(
            pack(
                prompts,
                [s.completion_ids for s in samples],
                [s.logprobs for s in samples],
                tokenizer.pad_token_id,
            ),
            device,
        )
        ref_logp = None
        if reference is not None:
            with torch.no_grad():
                ref_logp = packed_logprobs(
                    reference, prompts, [s.completion_ids for s in samples], tokenizer.pad_token_id
                )
        # 4. clipped policy-gradient update (loss only on completion tokens)
        model.train()
        for _ in range(config.epochs):
            # each group's prompt runs once (its keys and values shared by the G completions)
            logp = packed_logprobs(
                model, prompts, [s.completion_ids for s in samples], tokenizer.pad_token_id
            )
            terms = grpo_loss(
                logp,
                batch.old_logprobs,
                ref_logp,
                adv.advantages,
                batch.completion_mask,
                kl_coef=config.kl_coef,
                clip_low=config.clip_low,
                clip_high=config.clip_high,
                kl_kind=config.kl_kind,
                seq_weights=weights,
                loss_agg=config.loss_agg,
            )
            optimizer.zero_grad()
            terms.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
        model.eval()
        t_end = time.perf_counter()
        tokens = int(batch.completion_mask.sum())
        metrics = {
            "rollout/reward": float(rewards.mean()),
            "rollout/success_rate": float((rewards >= config.success_reward).float().mean()),
            "loss/policy": terms.policy_loss.item(),
            "kl/ref": terms.kl.item(),
            "train/clip_frac": terms.clip_frac.item(),
            "train/frac_reward_zero_std": float(adv.frac_zero_std),
            "time/tokens_per_s": tokens / max(t_end - t0, 1e-9),
            "time/generation_s": t_gen - t0,
            "time/sandbox_s": t_reward - t_gen,
            "time/update_s": t_end - t_reward,
        }
        history.append(metrics)
        if logger is not None:
            logger.log(step_offset + step, metrics)
        if checkpoint is not None:
            checkpoint(step_offset + step)
    return history


def evaluate(
    model: Any, tokenizer: Any, tasks: Sequence[CodeTask], verifier: Verifier, max_new_tokens: int = 24
) -> float:
    """Greedy success rate: the share of tasks whose body passes every test (hidden included)."""
    prompts = [code_prompt_ids(tokenizer, t) for t in tasks]
    samples = generate(
        model, tokenizer, prompts, SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens)
    )
    grades = verifier.grade_many(
        [(t, candidate_source(t, s.text)) for t, s in zip(tasks, samples, strict=True)]
    )
    return sum(g.status == "passed" for g in grades) / len(tasks)


def save_checkpoint(model: Any, tokenizer: Any, directory: Path) -> None:
    """Model + tokenizer in Hugging Face format (loadable with `load_policy`)."""
    from transferlab.agent_rl.policies.model import save_policy

    save_policy(model, tokenizer, directory)
