"""The RL loop for coding policies: GRPO or PPO, single-step code tasks or multi-turn agent episodes.

One loop, top to bottom (cleanrl style), for both task kinds and both algorithms::

    for step in range(start, config.steps):
        tasks  = draw(seed, step)                     # the same tasks on a resumed run
        trajs  = rollouts(pool, weights, tasks x G)   # workers sample with exact ids + log-probs, grade
        batch  = to_tensors(trajs)                    # loss mask = the policy's own tokens only
        adv    = GRPO: group-relative returns         # broadcast to every action token
                 PPO:  GAE over each turn's reward on its last token, values from a value head
        update(clipped ratio, KL to the frozen reference, value loss for PPO)
        log, checkpoint

Only the policy's parameters train (the adapters with LoRA; plus the value head for PPO); tools,
sandbox and verifier are outside the gradient. Randomness is a function of ``(seed, step)`` and the
checkpoint holds the model, value head and optimizer, so a killed run resumed from its last
checkpoint continues exactly as if it had not stopped (:func:`train_rl` with ``resume=True``).

The loss math lives in :mod:`.losses`; rollouts in :mod:`.rollout_worker` hosted by :mod:`.workers`.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

import torch
from pydantic import Field, model_validator

from transferlab.agent_rl.losses import (
    discounted_returns,
    gae,
    group_advantages,
    group_weights,
    grpo_loss,
    masked_mean,
    ppo_loss,
    step_group_advantages,
)
from transferlab.agent_rl.policies.adapters import (
    LoraOptions,
    ValueHead,
    enable_gradient_checkpointing,
    forward_policy,
    trainable_state,
)
from transferlab.agent_rl.policies.devices import (
    DEVICE_PATTERN,
    context_limit,
    place_model,
    resolve_device,
    resolve_dtype,
)
from transferlab.agent_rl.policies.generation import SamplingConfig
from transferlab.agent_rl.rollout_worker import (
    Chunk,
    Mode,
    RolloutWorker,
    WorkerSpec,
    episode_success,
)
from transferlab.agent_rl.workers import Backend, ChunkResult, WorkerPool, make_pool
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_bytes
from transferlab.platform.metrics import MetricsLogger, drop_logged_after
from transferlab.platform.trajectory import Trajectory, to_tensors

if TYPE_CHECKING:
    from transferlab.platform.agent_env import Task

_log = logging.getLogger(__name__)

CHECKPOINT_FILE = "checkpoint.pt"


class RLConfig(BaseConfig):
    """One RL run on the episodes of a tool env (saved as the run's config.json).

    The single-step trainer's :class:`~transferlab.coding_rl.single_step.GRPOConfig` derives
    from it."""

    algo: Literal["grpo", "ppo"] = Field(default="grpo", description="GRPO (no critic) or PPO (value head).")
    mode: Mode = Field(
        default="code",
        description="'code': one-turn episodes (single-step tasks); 'agent': multi-turn tool-environment "
        "episodes. Which env plays them is env_factory's.",
    )
    steps: int = Field(default=50, ge=1, description="Training iterations (roll out, score, update).")
    tasks_per_step: int = Field(default=8, ge=1, description="Distinct tasks per iteration.")
    task_sampling: Literal["uniform", "informative"] = Field(
        default="uniform",
        description="How each iteration draws its tasks: 'uniform', or 'informative' (DAPO's dynamic "
        "sampling within the episode budget: a task whose last group was flat - every episode solved "
        "or every one failed, so GRPO learns nothing from it - is drawn with weight flat_task_weight, "
        "an unseen or mixed one with weight 1; no episode is run only to be filtered out).",
    )
    flat_task_weight: float = Field(
        default=0.1, ge=0, le=1, description="'informative' sampling: the weight of a task last seen flat."
    )
    group_size: int = Field(default=4, ge=1, description="Episodes per task (G); GRPO needs >= 2.")
    epochs: int = Field(default=1, ge=1, description="Optimizer passes over each iteration's episodes.")
    lr: float = Field(default=1e-3, gt=0, description="AdamW learning rate.")
    clip_low: float = Field(default=0.2, ge=0, description="Ratio clip below 1 (epsilon_low).")
    clip_high: float = Field(default=0.28, ge=0, description="Ratio clip above 1 (epsilon_high, clip-high).")
    kl_coef: float = Field(
        default=0.0, ge=0, description="Weight of KL(policy || frozen reference); 0 = none."
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(default="k3", description="KL estimator.")
    scale_by_std: bool = Field(default=True, description="GRPO: divide group advantages by the group std.")
    zero_std: Literal["drop", "keep"] | float = Field(
        default="drop", description="GRPO groups whose returns are all equal: drop, keep, or a weight."
    )
    advantage: Literal["episode", "gigpo"] = Field(
        default="episode",
        description="GRPO: 'episode', one group-relative advantage per episode on all its tokens; or "
        "'gigpo' (agent mode), each turn's tokens also get step_weight x the turn's step-level advantage "
        "(GiGPO: turns of the iteration's episodes that acted from the same state, i.e. the same prompt, "
        "actions and observations so far, compared on their discounted return-to-go). Episodes of a flat "
        "group still carry zero_std's weight, so their step advantages count only as far as it allows.",
    )
    step_weight: float = Field(
        default=1.0, ge=0, description="'gigpo': weight (omega) of the step-level advantage."
    )
    step_gamma: float = Field(
        default=0.95, ge=0, le=1, description="'gigpo': discount per turn of the step-level return-to-go."
    )
    gamma: float = Field(default=1.0, ge=0, le=1, description="PPO discount per turn.")
    lam: float = Field(default=0.95, ge=0, le=1, description="PPO GAE lambda.")
    vf_coef: float = Field(default=0.5, ge=0, description="PPO value-loss weight.")
    value_lr: float = Field(default=1e-2, gt=0, description="PPO: learning rate of the value head.")
    detach_value: bool = Field(
        default=True,
        description="PPO: the value head reads detached hidden states, so the value loss cannot pull the "
        "policy's weights (a shared trunk trained on a large value loss forgets the policy).",
    )
    value_clip: float | None = Field(default=None, description="PPO value clip (reward units) or None.")
    whiten_advantages: bool = Field(default=True, description="PPO: whiten advantages over the batch.")
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"] = Field(
        default="token_mean",
        description="How per-token losses become one number: over all policy tokens of the batch, or per "
        "episode first (long failing episodes then weigh no more than short ones).",
    )
    mask_observations: bool = Field(
        default=True,
        description="Loss only on the policy's own tokens (correct). False reproduces the bug of training "
        "on prompt and tool-observation tokens too (the masking ablation).",
    )
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    loss_temperature: Literal["one", "sampling"] = Field(
        default="one",
        description="The distribution the loss's log-probs (ratio, KL, entropy) are taken from: 'one', "
        "the untempered policy; or 'sampling', the logits divided by `temperature`, the distribution "
        "the episodes were drawn from (as TRL's GRPO does). They differ only when temperature != 1.",
    )
    max_new_tokens: int = Field(default=24, ge=1, description="Tokens per completion (per turn for agents).")
    max_context: int = Field(default=1024, ge=16, description="Agent: context limit of an episode.")
    rewards: Literal["dense", "sparse"] = Field(default="dense", description="Agent: reward table.")
    max_steps: int = Field(default=6, ge=1, description="Agent: tool calls per episode.")
    env_factory: str | None = Field(
        default=None,
        description="'module:function' building one episode's tool env as f(tasks, rewards=, "
        "max_steps=, **env_options) (e.g. the OpsAnalysis-v0 factory); required to train. Coding runs get "
        "theirs from transferlab.coding_rl.training (CodeRepair-v0 or the single-step env, by mode).",
    )
    env_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Keyword options for env_factory besides rewards and max_steps (e.g. a coding env's "
        "sandbox_backend).",
    )
    grad_clip: float = Field(default=1.0, gt=0, description="Gradient-norm clip.")
    lora: LoraOptions | None = Field(default=None, description="Train LoRA adapters instead of all weights.")
    rollout_backend: Backend = Field(
        default="local", description="Rollout workers: 'local' processes, 'ray' actors, or 'inline'."
    )
    rollout_workers: int = Field(default=2, ge=1, le=64, description="Parallel rollout workers.")
    episode_timeout_s: float = Field(
        default=60.0, gt=0, description="Wall bound per episode; a chunk past it is dropped, not waited for."
    )
    sandbox_backend: Literal["forkserver", "subprocess", "docker"] = Field(
        default="forkserver",
        description="Coding envs: where the workers grade code (transferlab.coding_rl.training passes it to "
        "the coding env factories as env_options['sandbox_backend']).",
    )
    checkpoint_every: int = Field(default=10, ge=0, description="Steps between checkpoints; 0 = only at end.")
    seed: int = Field(default=0, ge=0, description="Seeds task draws and sampling (with the step number).")
    device: str = Field(
        default="auto",
        pattern=DEVICE_PATTERN,
        description="Where the learner, the reference and the rollout workers run: 'auto' (CUDA when "
        "torch sees a GPU, else the CPU), 'cpu', 'cuda', 'cuda:N' or 'mps'.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="Weights' precision: 'auto' (bfloat16 on a CUDA GPU that supports it, else float16 "
        "there; float32 on the CPU), 'float32', 'bfloat16' or 'float16'. The value head stays float32.",
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass instead of storing them (less memory, "
        "about a third more compute); generation keeps its KV cache.",
    )
    gpus_per_worker: float = Field(
        default=1.0,
        gt=0,
        le=8,
        description="Ray backend on CUDA: GPUs each rollout actor reserves. 1 = a GPU per actor (a "
        "cluster of GPU nodes); a fraction such as 0.25 lets several actors (and the learner) share one GPU.",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster for the 'ray' rollout backend: the head's HOST:PORT as `ray start --head` "
        "prints it (e.g. '10.0.0.5:6379') or 'auto' (the cluster started on this machine); None = the "
        "RAY_ADDRESS environment variable, or a local Ray started for the run.",
    )

    @model_validator(mode="after")
    def _check_advantage(self) -> Self:
        if self.advantage == "gigpo" and (self.algo != "grpo" or self.mode != "agent"):
            raise ValueError(
                f"advantage='gigpo' needs algo='grpo' and mode='agent' (got algo={self.algo!r}, "
                f"mode={self.mode!r}): step-level advantages compare the turns of multi-turn episodes; "
                "use advantage='episode' otherwise"
            )
        return self

    @property
    def total_episodes(self) -> int:
        """Episodes a run samples: steps x tasks_per_step x group_size."""
        return self.steps * self.tasks_per_step * self.group_size


# --------------------------------------------------------------------------------------------- rollouts


class Rollouts:
    """Parallel episode collection: fixed chunks of whole groups over a worker pool."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        config: RLConfig,
        run_dir: Path,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        self.config = config
        self.max_context = episode_context(config, model)
        self.spec = WorkerSpec(
            policy_dir=str(run_dir / "policy-base"),
            lora=config.lora,
            rewards=config.rewards,
            max_steps=config.max_steps,
            env_factory=config.env_factory,
            env_options=dict(config.env_options),
            # a Ray actor sees only the GPU it was given, as device 0: name the type, not the index
            device=device.type if config.rollout_backend == "ray" else str(device),
            dtype=str(dtype).removeprefix("torch."),
        )
        self._inline = config.rollout_backend == "inline"
        if self._inline:  # the learner's own model, on the learner's device
            shared = RolloutWorker(model, tokenizer, WorkerSpec(**{**self.spec.__dict__, "threads": 0}))
            self.pool: WorkerPool = make_pool("inline", lambda: shared)
        else:
            self.pool = make_pool(
                config.rollout_backend,
                self.spec,
                size=config.rollout_workers,
                ray_address=config.ray_address,
                num_gpus=config.gpus_per_worker if device.type == "cuda" else 0.0,
            )

    def sync(self, model: Any) -> None:
        """Send the learner's trained tensors to every worker (replayed on replacements)."""
        if not self._inline:
            self.pool.broadcast("set_weights", trainable_state(model), sticky=True)

    def collect(self, tasks: Sequence[Any], seed: int) -> tuple[list[Trajectory | None], int]:
        """``G`` episodes of each task, in order (None where a chunk was lost); and the lost count."""
        cfg = self.config
        groups = [g for g in range(len(tasks)) for _ in range(cfg.group_size)]
        flat = [tasks[g] for g in groups]
        n_chunks = 1 if self._inline else min(self.pool.size, len(tasks))
        bounds = [round(i * len(tasks) / n_chunks) * cfg.group_size for i in range(n_chunks + 1)]
        sampling = SamplingConfig(temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=seed)
        chunks = [
            Chunk(
                tasks=flat[a:b],
                groups=groups[a:b],
                sampling=sampling,
                first_row=a,
                max_context=self.max_context,
                episode_timeout_s=cfg.episode_timeout_s,
            )
            for a, b in itertools.pairwise(bounds)
            if b > a
        ]
        timeout = cfg.episode_timeout_s * 1.5 + 30.0
        results: list[ChunkResult] = self.pool.map("run", chunks, timeout_s=timeout)
        _raise_if_all_failed(results)
        out: list[Trajectory | None] = []
        lost = 0
        for chunk, res in zip(chunks, results, strict=True):
            if res.ok:
                out.extend(res.value)
            else:
                _log.warning("lost a rollout chunk of %d episodes: %s", len(chunk.tasks), res.error)
                out.extend([None] * len(chunk.tasks))
                lost += len(chunk.tasks)
        return out, lost

    def close(self) -> None:
        self.pool.close()


def episode_context(config: RLConfig, model: Any) -> int:
    """Agent episodes' context limit: ``config.max_context``, capped at the model's own position limit
    (from its config) with a warning; an episode reaching it ends as truncated, which is recorded."""
    limit = context_limit(model)
    if limit is None or config.max_context <= limit or config.mode != "agent":
        return config.max_context
    _log.warning(
        "max_context=%d is beyond the model's limit of %d positions (its config); episodes stop at %d",
        config.max_context,
        limit,
        limit,
    )
    return limit


def _raise_if_all_failed(results: list[ChunkResult]) -> None:
    """Every chunk raised inside its worker: a bad setting, not a straggler; stop with the worker's error."""
    errors = [r.error or "" for r in results]
    crashed = [e for e in errors if e and not e.startswith(("timeout", "worker died"))]
    if results and len(crashed) == len(results):
        raise ValueError(
            "every rollout chunk of this step failed inside its worker, so nothing can be trained; the "
            f"first worker's error:\n{crashed[0]}"
        )


# -------------------------------------------------------------------------------------------- the loop


@dataclass
class StepBatch:
    """One iteration's usable episodes as tensors, with per-episode returns and GRPO group ids."""

    trajs: list[Trajectory]
    groups: torch.Tensor
    returns: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    logprob_mask: torch.Tensor
    token_rewards: torch.Tensor

    def to(self, device: torch.device) -> StepBatch:
        """The same batch with every tensor on ``device``."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **moved)


def _complete_groups(trajs: list[Trajectory | None], group_size: int) -> list[Trajectory]:
    """Keep only groups whose every episode came back (a lost chunk never leaves half a group)."""
    kept: list[Trajectory] = []
    for i in range(0, len(trajs), group_size):
        group = trajs[i : i + group_size]
        if all(t is not None for t in group):
            kept.extend(t for t in group if t is not None)
    return kept


def build_batch(trajs: list[Trajectory], pad_id: int, mask_observations: bool = True) -> StepBatch:
    """Pad episodes; the loss mask covers the policy's tokens (or, for the ablation, every real token)."""
    packed = to_tensors(trajs, pad_id=pad_id, validate=False)
    loss_mask = packed["loss_mask"].bool()
    if not mask_observations:
        loss_mask = packed["attention_mask"].bool().clone()
        loss_mask[:, 0] = False  # position 0 has no context, so no log-prob
    groups = torch.tensor([int(t.steps[-1].info["group"]) for t in trajs])
    returns = torch.tensor([t.total_reward for t in trajs], dtype=torch.float32)
    return StepBatch(
        trajs=trajs,
        groups=groups,
        returns=returns,
        input_ids=packed["input_ids"],
        attention_mask=packed["attention_mask"],
        loss_mask=loss_mask,
        old_logprobs=packed["old_logprobs"],
        logprob_mask=packed["logprob_mask"].bool(),
        token_rewards=packed["token_rewards"],
    )


def _grpo_advantages(batch: StepBatch, config: RLConfig) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Per-episode group-relative advantages, sequence weights, and the share of flat groups."""
    adv = group_advantages(batch.returns, config.group_size, scale_by_std=config.scale_by_std)
    weights = group_weights(adv.zero_std_groups, config.group_size, config.zero_std)
    weights = weights.to(batch.returns.device)  # group_weights builds them on the CPU
    return adv.advantages, weights, float(adv.frac_zero_std)


def anchor_keys(traj: Trajectory) -> list[bytes]:
    """The state each turn of ``traj`` acted from: the bytes of every token before the turn's action
    (prompt, earlier actions and observations). Equal keys mean the same state in a deterministic env."""
    ids = traj.ids_array()
    return [ids[:start].tobytes() for start, _ in traj.action_spans()]


def gigpo_token_advantages(
    batch: StepBatch, seq_adv: torch.Tensor, config: RLConfig
) -> tuple[torch.Tensor, dict[str, float]]:
    """B×T advantages: each turn's action tokens get the episode's ``seq_adv`` plus ``step_weight`` x the
    turn's :func:`~transferlab.agent_rl.losses.step_group_advantages`; and its metrics."""
    trajs = batch.trajs
    step = step_group_advantages(
        [anchor_keys(t) for t in trajs],
        [discounted_returns([r.reward for r in t.steps], config.step_gamma) for t in trajs],
        scale_by_std=config.scale_by_std,
    )
    width = batch.input_ids.shape[1]
    tok = seq_adv.detach().to(torch.float32)[:, None].repeat(1, width)
    for i, traj in enumerate(trajs):
        for (start, end), a_s in zip(traj.action_spans(), step.advantages[i], strict=True):
            if start < width:
                tok[i, start : min(end, width)] += config.step_weight * a_s
    nonzero = sum(a != 0.0 for row in step.advantages for a in row)
    turns = sum(len(row) for row in step.advantages)
    metrics = {
        "train/step_shared_share": step.shared_share,
        "train/step_groups": float(step.n_groups),
        "train/step_signal_share": nonzero / turns if turns else 0.0,
    }
    return tok.to(seq_adv.device), metrics


def loss_temperature(config: RLConfig) -> float:
    """The temperature the loss's log-probs are taken at (1 unless ``loss_temperature='sampling'``)."""
    return config.temperature if config.loss_temperature == "sampling" else 1.0


def _ref_logprobs(reference: Any, batch: StepBatch, temperature: float = 1.0) -> torch.Tensor | None:
    if reference is None:
        return None
    with torch.no_grad():
        return forward_policy(
            reference, batch.input_ids, batch.attention_mask, temperature=temperature
        ).logprobs


def _old_logprobs(current: torch.Tensor, batch: StepBatch, config: RLConfig) -> torch.Tensor:
    """Sampling log-probs on action tokens; where the mask also covers other tokens (ablation), the
    current policy's own log-probs ``current`` (ratio 1 on the first epoch). The rollout records
    untempered log-probs, so with a tempered loss the first epoch's own (same weights) are used."""
    if loss_temperature(config) != 1.0:
        return current.detach()
    if config.mask_observations:
        return batch.old_logprobs
    return torch.where(batch.logprob_mask, batch.old_logprobs, current.detach())


def update(
    model: Any,
    value_head: Any,
    reference: Any,
    optimizer: torch.optim.Optimizer,
    batch: StepBatch,
    config: RLConfig,
) -> dict[str, float]:
    """The optimizer passes of one iteration (GRPO or PPO); returns the update's metrics."""
    mask = batch.loss_mask
    temp = loss_temperature(config)
    ref_logp = _ref_logprobs(reference, batch, temp)
    metrics: dict[str, float] = {}
    params = [p for p in model.parameters() if p.requires_grad]
    value_params = list(value_head.parameters()) if value_head is not None else []
    if config.algo == "grpo":
        seq_adv, weights, frac_flat = _grpo_advantages(batch, config)
        metrics["train/frac_reward_zero_std"] = frac_flat
        if config.advantage == "gigpo":
            seq_adv, step_metrics = gigpo_token_advantages(batch, seq_adv, config)
            metrics.update(step_metrics)
        if float(weights.sum()) == 0.0:
            metrics["train/skipped_update"] = 1.0
            return metrics
    model.train()
    # the first epoch's forward pass also gives the rollout-time values and log-probs (same weights)
    out = forward_policy(model, batch.input_ids, batch.attention_mask, value_head, config.detach_value, temp)
    old_logp = _old_logprobs(out.logprobs, batch, config)
    if config.algo == "ppo":
        assert out.values is not None
        old_values = out.values.detach()
        rewards = torch.where(batch.loss_mask, batch.token_rewards, torch.zeros_like(batch.token_rewards))
        tok_adv, tok_ret = gae(rewards, old_values, batch.loss_mask, config.gamma, config.lam, None, "turn")
    for epoch in range(config.epochs):
        if epoch > 0:
            out = forward_policy(
                model, batch.input_ids, batch.attention_mask, value_head, config.detach_value, temp
            )
        if config.algo == "grpo":
            terms: Any = grpo_loss(
                out.logprobs,
                old_logp,
                ref_logp,
                seq_adv,
                mask,
                kl_coef=config.kl_coef,
                clip_low=config.clip_low,
                clip_high=config.clip_high,
                kl_kind=config.kl_kind,
                seq_weights=weights,
                loss_agg=config.loss_agg,
            )
        else:
            assert out.values is not None
            terms = ppo_loss(
                out.logprobs,
                old_logp,
                tok_adv,
                out.values,
                old_values,
                tok_ret,
                mask,
                entropy=out.entropy,
                ref_logp=ref_logp,
                clip_low=config.clip_low,
                clip_high=config.clip_high,
                value_clip=config.value_clip,
                vf_coef=config.vf_coef,
                kl_coef=config.kl_coef,
                kl_kind=config.kl_kind,
                whiten_advantages=config.whiten_advantages,
                loss_agg=config.loss_agg,
            )
        optimizer.zero_grad()
        terms.loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        if value_params:  # clipped apart, so large value errors never shrink the policy's step
            torch.nn.utils.clip_grad_norm_(value_params, config.grad_clip)
        optimizer.step()
    model.eval()
    with torch.no_grad():
        entropy = masked_mean(out.entropy, mask)
    metrics.update(
        {
            "loss/total": terms.loss.item(),
            "loss/policy": terms.policy_loss.item(),
            "kl/ref": terms.kl.item(),
            "train/clip_frac": terms.clip_frac.item(),
            "train/entropy": float(entropy),
            "train/grad_norm": float(grad_norm),
        }
    )
    if config.algo == "ppo":
        metrics["loss/value"] = terms.value_loss.item()
    return metrics


def rollout_metrics(trajs: list[Trajectory], lost: int) -> dict[str, float]:
    """Success rate, return and its named components, episode length, lost episodes."""
    if not trajs:
        return {"rollout/lost_episodes": float(lost)}
    n = len(trajs)
    components: dict[str, float] = {}
    for t in trajs:
        for rec in t.steps:
            for name, value in rec.reward_components.items():
                components[name] = components.get(name, 0.0) + value
    metrics = {
        "rollout/success_rate": sum(episode_success(t) for t in trajs) / n,
        "rollout/return": sum(t.total_reward for t in trajs) / n,
        "rollout/steps": sum(len(t.steps) for t in trajs) / n,
        "rollout/episodes": float(n),
        "rollout/lost_episodes": float(lost),
        "rollout/action_tokens": float(sum(len(r.action_ids) for t in trajs for r in t.steps)),
    }
    metrics.update({f"reward/{k}": v / n for k, v in sorted(components.items())})
    return metrics


def draw_task_indices(n: int, config: RLConfig, step: int, flat: Mapping[int, bool]) -> list[int]:
    """Indices of the iteration's tasks among ``n``: uniform, a function of (seed, step) only (a resumed
    run draws the same ones); or 'informative', weighting a task whose last group was flat
    (``flat[i]``, restored from the checkpoint on resume) by ``flat_task_weight``."""
    rng = random.Random(config.seed * 1_000_003 + step)
    if config.task_sampling == "uniform" or not any(flat.values()):
        return [rng.randrange(n) for _ in range(config.tasks_per_step)]
    weights = [config.flat_task_weight if flat.get(i, False) else 1.0 for i in range(n)]
    if sum(weights) == 0.0:  # every task flat and weight 0: nothing is informative, draw uniformly
        weights = [1.0] * n
    return rng.choices(range(n), weights=weights, k=config.tasks_per_step)


def flat_groups(
    trajs: Sequence[Trajectory | None], indices: Sequence[int], group_size: int
) -> dict[int, bool]:
    """Per drawn task index, whether its group came back whole with equal returns (later draws win)."""
    out: dict[int, bool] = {}
    for g, task in enumerate(indices):
        group = trajs[g * group_size : (g + 1) * group_size]
        if all(t is not None for t in group):
            returns = {t.total_reward for t in group if t is not None}
            out[task] = len(returns) == 1
    return out


def step_seed(config: RLConfig, step: int) -> int:
    """The sampling seed of an iteration (rows add their index; agent turns add more)."""
    return (config.seed * 7_919 + step * 104_729) % (2**31 - 1)


# ---------------------------------------------------------------------------------------- checkpoints


def save_checkpoint(
    path: Path, step: int, model: Any, value_head: Any, optimizer: Any, flat: Mapping[int, bool] | None = None
) -> None:
    """Atomically write what exact resume needs: trained tensors, value head, optimizer, step, and the
    'informative' sampler's record of flat tasks."""
    import io

    state = {
        "step": step,
        "flat_tasks": dict(flat or {}),
        "model": trainable_state(model),
        "value_head": value_head.state_dict() if value_head is not None else None,
        "optimizer": optimizer.state_dict(),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(
    path: Path, model: Any, value_head: Any, optimizer: Any, flat: dict[int, bool] | None = None
) -> int:
    """Restore a checkpoint written by :func:`save_checkpoint` (the flat-task record into ``flat``);
    returns the last finished step."""
    from transferlab.agent_rl.policies.adapters import load_trainable_state

    state = torch.load(path, weights_only=True, map_location="cpu")  # copied onto the model's device
    load_trainable_state(model, state["model"])
    if value_head is not None:
        if state["value_head"] is None:
            raise ValueError(f"{path} has no value head; it was written by a GRPO run, not PPO")
        value_head.load_state_dict(state["value_head"])
    optimizer.load_state_dict(state["optimizer"])
    if flat is not None:
        flat.update({int(k): bool(v) for k, v in state.get("flat_tasks", {}).items()})
    return int(state["step"])


# ---------------------------------------------------------------------------------------------- train


@dataclass
class RLResult:
    """What :func:`train_rl` returns: the trained model (peft-wrapped with LoRA) and per-step metrics."""

    model: Any
    value_head: Any
    history: list[dict[str, float]]
    start_step: int


StepHook = Callable[[int, Any], dict[str, float] | None]


def _prepare(
    model: Any, tokenizer: Any, config: RLConfig, run_dir: Path, device: torch.device, dtype: torch.dtype
) -> tuple[Any, Any, Any]:
    """Save the base policy for the workers; move the model to the device and dtype; freeze a reference
    (only with a KL term); add LoRA (its adapters stay float32, as peft makes them), gradient
    checkpointing and, for PPO, a float32 value head on the device."""
    from transferlab.agent_rl.policies.model import save_policy

    if not (run_dir / "policy-base" / "config.json").exists():
        save_policy(model, tokenizer, run_dir / "policy-base")
    place_model(model, device, dtype)
    reference = copy.deepcopy(model).eval() if config.kl_coef > 0 else None
    if reference is not None:
        for p in reference.parameters():
            p.requires_grad_(False)
    if config.lora is not None:
        model = config.lora.apply(model)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    value_head = ValueHead(model).to(device) if config.algo == "ppo" else None
    return model, value_head, reference


def train_rl(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Task],
    config: RLConfig,
    run_dir: str | Path,
    logger: MetricsLogger | None = None,
    *,
    resume: bool = False,
    on_step: StepHook | None = None,
    step_offset: int = 0,
    stop_after: int | None = None,
) -> RLResult:
    """Train ``model`` with GRPO or PPO on ``tasks``, the tasks of ``config.env_factory``'s env (RepoTasks
    for CodeRepair-v0, CodeTasks for the single-step code env, ops scenarios for OpsAnalysis-v0).

    ``run_dir`` receives ``policy-base/`` (what the workers load) and ``checkpoint.pt``. With
    ``resume=True`` and a checkpoint there, training continues after its step — same tasks, same
    samples, same updates as an uninterrupted run. ``on_step(step, model)`` runs after each update
    (e.g. a held-out evaluation) and its metrics are logged. ``stop_after`` ends the call after that
    many iterations (to simulate a kill in tests). Metrics are logged at ``step_offset + step``.

    ``model`` is moved in place to ``config.device`` and cast to ``config.dtype`` (with the frozen
    reference, which exists only when ``kl_coef > 0``); every batch goes there, and so do the rollout
    workers (inline: the learner's model itself; local and Ray: the saved base loaded there).

    Raises:
        DeviceError: ``config.device`` is not available here (e.g. 'cuda' without CUDA).
    """
    if config.algo == "grpo" and config.group_size < 2:
        raise ValueError("GRPO compares episodes within a group: set group_size >= 2")
    if not tasks:
        raise ValueError("no tasks to train on")
    if config.env_factory is None:
        raise ValueError(
            "RLConfig.env_factory is None: name the env the episodes play as 'module:function' (coding runs: "
            "train with transferlab.coding_rl.training.train_rl, which picks the coding env by mode)"
        )
    device = resolve_device(config.device)  # before anything is written: no CUDA is a DeviceError
    dtype = resolve_dtype(config.dtype, device)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    model, value_head, reference = _prepare(model, tokenizer, config, run_dir, device, dtype)
    groups: list[dict[str, Any]] = [{"params": [p for p in model.parameters() if p.requires_grad]}]
    if value_head is not None:
        groups.append({"params": list(value_head.parameters()), "lr": config.value_lr})
    optimizer = torch.optim.AdamW(groups, lr=config.lr)
    start = 0
    ckpt = run_dir / CHECKPOINT_FILE
    flat: dict[int, bool] = {}  # task index -> its last group was flat ('informative' sampling)
    if resume and ckpt.exists():
        start = load_checkpoint(ckpt, model, value_head, optimizer, flat) + 1
        _log.info("resuming from %s after step %d", ckpt, start - 1)
    if resume:  # rows after the checkpoint (from step_offset on, without one) are logged again below
        drop_logged_after(logger, step_offset + start - 1)
    history: list[dict[str, float]] = []
    rollouts = Rollouts(model, tokenizer, config, run_dir, device, dtype)
    model.eval()
    try:
        end = config.steps if stop_after is None else min(config.steps, start + stop_after)
        for step in range(start, end):
            t0 = time.perf_counter()
            # 1. rollouts in the workers, on the current weights
            rollouts.sync(model)
            drawn = draw_task_indices(len(tasks), config, step, flat)
            raw, lost = rollouts.collect([tasks[i] for i in drawn], step_seed(config, step))
            if config.task_sampling == "informative":
                flat.update(flat_groups(raw, drawn, config.group_size))
            t_roll = time.perf_counter()
            trajs = _complete_groups(raw, config.group_size)
            metrics = rollout_metrics(trajs, lost)
            # 2. advantages and the clipped update, loss only on the policy's tokens
            if trajs:
                batch = build_batch(trajs, tokenizer.pad_token_id, config.mask_observations).to(device)
                metrics.update(update(model, value_head, reference, optimizer, batch, config))
            t_end = time.perf_counter()
            policy_s = sum(r.timings.get("policy_s", 0.0) for t in trajs for r in t.steps)
            sandbox_s = sum(r.timings.get("sandbox_s", 0.0) for t in trajs for r in t.steps)
            metrics.update(
                {
                    "time/step_s": t_end - t0,
                    "time/rollout_s": t_roll - t0,
                    "time/update_s": t_end - t_roll,
                    "time/generation_share": policy_s / max(policy_s + sandbox_s, 1e-9),
                    "time/sandbox_share": sandbox_s / max(policy_s + sandbox_s, 1e-9),
                    "time/tokens_per_s": metrics.get("rollout/action_tokens", 0.0) / max(t_end - t0, 1e-9),
                    "time/episodes_per_s": len(trajs) / max(t_end - t0, 1e-9),
                }
            )
            if on_step is not None:
                metrics.update(on_step(step, model) or {})
            history.append(metrics)
            if logger is not None:
                logger.log(step_offset + step, {k: v for k, v in metrics.items() if math.isfinite(v)})
            every = config.checkpoint_every
            if (every and (step + 1) % every == 0) or step + 1 == end:
                if logger is not None:  # metrics first: a kill between the two only repeats a tail
                    logger.flush()
                save_checkpoint(ckpt, step, model, value_head, optimizer, flat)
    finally:
        rollouts.close()
    return RLResult(model=model, value_head=value_head, history=history, start_step=start)
