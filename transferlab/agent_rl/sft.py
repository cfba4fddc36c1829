"""Demonstrations as trajectories, and SFT on them with the loss only on the policy's tokens.

A demonstration is stored exactly like a rollout (:class:`~transferlab.platform.trajectory.Trajectory`):
the prompt and observation ids are what the policy would see, the action ids are what it should
write. :func:`train_sft` packs them with :func:`~transferlab.platform.trajectory.to_tensors` and
trains on ``loss_mask`` — action tokens only, never the issue, the file contents or the test output —
unless ``SFTConfig.context_weight`` > 0 also weighs those in (a from-scratch policy then learns to copy
from many more tokens).

* :func:`one_turn_demonstration` — one turn: a prompt, then the answer and ``<|im_end|>`` (single-step
  code tasks build theirs with :func:`transferlab.coding_rl.single_step.code_demonstration`);
* :func:`scripted_demonstration` — multi-turn: a plan of tool calls played through a tool
  environment (:class:`~transferlab.platform.agent_env.ToolEnv`), each observation tokenised with
  :func:`~transferlab.agent_rl.policies.tokenizer.observation_ids` as the rollouts do.

``SFTConfig.copy_weight`` adds a copy term to every SFT step for a policy trained from scratch: random
token sequences written twice, the loss on the second copy (:func:`copy_batch`, :func:`copy_loss`). A
tiny transformer learns to copy (forms induction heads) on such data in about a hundred steps; on
demonstrations alone it can take a thousand or more, and until then it cannot copy a path, a name or a
line number from what it read. Kept in every step, not only as a warm-up before SFT: a warm-up alone
was measured to be forgotten.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Collection, Sequence
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor

from transferlab.agent_rl.losses import sft_loss
from transferlab.agent_rl.policies.chat import action_ids
from transferlab.agent_rl.policies.tokenizer import observation_ids, prompt_ids
from transferlab.platform.agent_env import Task, ToolEnv
from transferlab.platform.config import BaseConfig
from transferlab.platform.metrics import MetricsLogger
from transferlab.platform.trajectory import StepRecord, Trajectory, to_tensors


def _action_ids(tokenizer: Any, text: str) -> list[int]:
    """The action's ids as the policy would sample them, ending with the template's end-of-turn token."""
    return action_ids(tokenizer, text)


def _demo_id(*parts: object) -> str:
    return hashlib.sha1("|".join(map(str, parts)).encode()).hexdigest()[:16]


def one_turn_demonstration(
    tokenizer: Any, task_id: str, domain: Any, prompt: str, answer: str, index: int = 0
) -> Trajectory:
    """One single-turn demonstration: ``prompt`` as the user turn and ``answer`` as the policy's reply
    (the ids a one-turn episode of :func:`~transferlab.agent_rl.episodes.one_turn_episodes` holds)."""
    step = StepRecord(
        episode_id=_demo_id(task_id, answer, index),
        step=0,
        task_id=task_id,
        domain=domain,
        action_text=answer,
        action_ids=_action_ids(tokenizer, answer),
        observation_text="",
        observation_ids=[],
        reward=0.0,
        terminated=True,
        info={"source": "demonstration"},
        prompt_text=prompt,
        prompt_ids=prompt_ids(tokenizer, prompt),
    )
    return Trajectory([step]).validate()


def scripted_demonstration(
    env: ToolEnv, task: Task, plan: Sequence[str], tokenizer: Any, mistakes: Collection[int] = ()
) -> Trajectory:
    """Play ``plan`` (tool-call texts) in ``env`` on ``task``; record it as the policy would have.

    The calls at the indices in ``mistakes`` are demonstrated mistakes (info ``imitate`` False):
    :func:`train_sft` keeps them in the context but does not train the policy to make them.
    """
    intro, _ = env.reset(seed=0, options={"task": task})
    steps: list[StepRecord] = []
    for k, action in enumerate(plan):
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append(
            StepRecord(
                episode_id=_demo_id(task.task_id, *plan),
                step=k,
                task_id=task.task_id,
                domain=env.domain,
                action_text=action,
                action_ids=_action_ids(tokenizer, action),
                observation_text=obs,
                observation_ids=observation_ids(tokenizer, obs, role="tool", ended=True),
                reward=float(reward),
                reward_components=dict(info["components"]),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info={
                    "source": "demonstration",
                    "success": info.get("success"),
                    "tool_ok": info.get("tool_ok"),
                    "imitate": k not in mistakes,
                },
                prompt_text=intro if k == 0 else "",
                prompt_ids=(prompt_ids(tokenizer, intro) if k == 0 else []),
            )
        )
        if terminated or truncated:
            break
    return Trajectory(steps).validate()


def mistakes_mask(trajectories: Sequence[Trajectory], width: int) -> torch.Tensor:
    """(B, width) 1 on the action tokens of steps whose info says ``imitate`` False, else 0."""
    mask = torch.zeros((len(trajectories), width), dtype=torch.long)
    for i, traj in enumerate(trajectories):
        for rec, (start, end) in zip(traj.steps, traj.action_spans(), strict=True):
            if rec.info.get("imitate") is False:
                mask[i, start : min(end, width)] = 1
    return mask


class SFTConfig(BaseConfig):
    """Supervised fine-tuning on demonstrations, loss only on the policy's tokens."""

    steps: int = Field(default=200, ge=1, description="Optimizer steps.")
    batch_size: int = Field(default=16, ge=1, description="Demonstrations per step.")
    lr: float = Field(default=3e-3, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(default=1.0, gt=0, description="Gradient-norm clip.")
    seed: int = Field(default=0, ge=0, description="Seeds batch sampling.")
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass instead of storing them (less memory, "
        "about a third more compute).",
    )
    schedule: Literal["constant", "cosine"] = Field(
        default="constant",
        description="Learning-rate schedule after warm-up: constant, or cosine decay to lr_min_ratio x lr "
        "at the last step.",
    )
    warmup_steps: int = Field(
        default=0, ge=0, description="Steps of linear warm-up from lr/warmup_steps to lr."
    )
    lr_min_ratio: float = Field(default=0.1, ge=0, le=1, description="Cosine: final lr as a share of lr.")
    context_weight: float = Field(
        default=0.0,
        ge=0,
        description="Loss weight of the tokens the policy did not write (issue, tool output) against 1 for "
        "its own: 0 trains only on the policy's tokens; > 0 also has it predict the context, which gives "
        "a policy trained from scratch far more tokens from which to learn to copy names and lines.",
    )
    copy_weight: float = Field(
        default=0.0,
        ge=0,
        description="Weight of a copy term added to every step's loss: a batch of random sequences written "
        "twice (:func:`copy_batch`), the loss on the second copy. A policy trained from scratch then "
        "learns to copy within a few hundred steps and keeps the skill while it learns the demonstrations; "
        "0 = none.",
    )
    copy_length: int = Field(default=32, ge=2, description="Copy term: tokens of each random sequence.")
    copy_batch_size: int = Field(default=8, ge=1, description="Copy term: sequences per step.")


def lr_factor(step: int, config: SFTConfig) -> float:
    """The learning-rate multiplier of 0-based ``step``: linear warm-up, then constant or cosine.

    Warm-up gives ``(step + 1) / warmup_steps`` for ``step < warmup_steps``; cosine then goes from 1 at
    the first step after warm-up to ``lr_min_ratio`` at the last step (``steps - 1``).
    """
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    span = max(1, config.steps - 1 - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.lr_min_ratio + (1 - config.lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def copy_batch(token_ids: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
    """(batch_size, 2 x length) rows: ``length`` tokens drawn uniformly from ``token_ids``, then the
    same tokens again."""
    picks = torch.randint(len(token_ids), (batch_size, length), generator=generator)
    first = token_ids[picks]
    return torch.cat([first, first], dim=1)


def copy_loss(logits: Tensor, ids: Tensor, length: int) -> tuple[Tensor, float]:
    """Cross-entropy of predicting the second copy (positions ``length..2 x length - 1``) and the share
    of those tokens the argmax gets right."""
    pred = logits[:, length - 1 : -1]
    target = ids[:, length:]
    loss = torch.nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1))
    return loss, float((pred.argmax(-1) == target).float().mean())


def ordinary_token_ids(tokenizer: Any) -> torch.Tensor:
    """The vocabulary's ids without its special tokens (what the copy term's :func:`copy_batch` draws
    from)."""
    special = set(tokenizer.all_special_ids)
    return torch.tensor([i for i in range(len(tokenizer)) if i not in special], dtype=torch.long)


def train_sft(
    model: Any,
    tokenizer: Any,
    demos: Sequence[Trajectory],
    config: SFTConfig,
    logger: MetricsLogger | None = None,
    step_offset: int = 0,
) -> list[float]:
    """SFT on demonstration trajectories (single- or multi-turn); returns the demonstrations' loss per
    step (without the copy term of ``config.copy_weight``, logged apart as ``sft/copy_loss`` and
    ``sft/copy_accuracy``).

    Trains ``model`` where it is (its device and dtype); each batch is moved there."""
    from transferlab.agent_rl.policies.adapters import enable_gradient_checkpointing
    from transferlab.agent_rl.policies.devices import model_device

    if not demos:
        raise ValueError("no demonstrations to train on")
    rng = random.Random(config.seed)
    device = model_device(model)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    model.train()
    losses = []
    generator = torch.Generator().manual_seed(config.seed)
    vocab = ordinary_token_ids(tokenizer) if config.copy_weight > 0 else None
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if vocab is not None and isinstance(limit, int) and 2 * config.copy_length > limit:
        raise ValueError(
            f"the copy term's sequences are 2 x copy_length = {2 * config.copy_length} tokens, beyond the "
            f"model's {limit} positions: set copy_length <= {limit // 2}"
        )
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = config.lr * lr_factor(step, config)
        chosen = [demos[rng.randrange(len(demos))] for _ in range(config.batch_size)]
        packed = to_tensors(chosen, pad_id=tokenizer.pad_token_id, validate=False)
        batch = {k: packed[k].to(device) for k in ("input_ids", "attention_mask", "loss_mask")}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        terms = sft_loss(
            logits,
            batch["input_ids"],
            batch["loss_mask"],
            batch["attention_mask"],
            config.context_weight,
            mistakes_mask(chosen, batch["input_ids"].shape[1]).to(device),
        )
        loss, extra = terms.loss, dict[str, float]()
        if vocab is not None:
            ids = copy_batch(vocab, config.copy_batch_size, config.copy_length, generator).to(device)
            copy_term, accuracy = copy_loss(model(input_ids=ids).logits, ids, config.copy_length)
            loss = loss + config.copy_weight * copy_term
            extra = {"sft/copy_loss": copy_term.item(), "sft/copy_accuracy": accuracy}
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        optimizer.step()
        losses.append(terms.loss.item())
        if logger is not None:
            logger.log(
                step_offset + step,
                {
                    "sft/loss": losses[-1],
                    "sft/grad_norm": float(grad_norm),
                    "sft/lr": optimizer.param_groups[0]["lr"],
                    **extra,
                },
            )
    model.eval()
    return losses
