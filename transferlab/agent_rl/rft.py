"""Expert iteration: model v1 makes the training data for v2, v2 for v3, and so on.

This is the iterative data generation of the project's founding design note.

Each round::

    episodes  = the current policy on every training task, ``samples_per_task`` times
    verified  = the episodes the verifier passed (every developer and hidden test), deduplicated
    data     += verified                          # the SFT set grows with the policy's own successes
    policy    = SFT(policy, data)                 # loss only on the policy's tokens, as always

Successes are *validated* before they join: single-step completions are graded by the sandbox
verifier on hidden tests, agent episodes count only when their ``submit`` passed the verifier, and
the trajectory itself is re-checked (:meth:`~transferlab.platform.trajectory.Trajectory.validate`).

With a ``checkpoint`` directory every finished round is saved (the trained tensors, the kept episodes,
the rounds' stats); a later call with the same arguments continues after the last saved round and ends
with the model an uninterrupted run would have (each round's sampling and SFT seeds depend only on the
config's seed and the round).
"""

from __future__ import annotations

import dataclasses
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import Field, model_validator

from transferlab.agent_rl.policies.generation import SamplingConfig
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.rollout_worker import (
    Chunk,
    Mode,
    RolloutWorker,
    WorkerSpec,
    episode_success,
)
from transferlab.agent_rl.sft import SFTConfig, train_sft
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_bytes
from transferlab.platform.metrics import MetricsLogger, drop_logged_after
from transferlab.platform.trajectory import Trajectory, read_trajectories, write_trajectories


class ExpertIterationConfig(BaseConfig):
    """Rounds of: sample, keep verified successes, fine-tune on the growing set."""

    rounds: int = Field(default=3, ge=1, description="Sample-filter-train rounds.")
    samples_per_task: int = Field(default=4, ge=1, description="Episodes per training task per round.")
    mode: Mode = Field(default="code", description="'code' one-turn episodes or 'agent' multi-turn ones.")
    env_factory: str | None = Field(
        default=None,
        description="'module:function' building one episode's env (as RLConfig.env_factory); needed unless "
        "a worker is handed in. Coding runs get theirs from transferlab.coding_rl.training.",
    )
    env_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Keyword options for env_factory besides rewards and max_steps."
    )
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature.")
    max_new_tokens: int = Field(default=24, ge=1, description="Tokens per completion (per turn for agents).")
    max_context: int = Field(default=1024, ge=16, description="Agent: context limit.")
    max_steps: int = Field(default=6, ge=1, description="Agent: tool calls per episode.")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=100, batch_size=16, lr=1e-3), description="SFT per round."
    )
    seed: int = Field(default=0, ge=0, description="Seeds sampling (with the round) and SFT batches.")


@dataclass(frozen=True)
class RoundStats:
    """One round: the policy's success when sampling, what joined the data, the data's size."""

    round: int
    success_rate: float
    new_trajectories: int
    data_size: int
    sft_loss: float


def _key(traj: Trajectory) -> tuple[str, tuple[int, ...]]:
    return traj.steps[0].task_id, tuple(i for rec in traj.steps for i in rec.action_ids)


def verified_successes(trajs: Sequence[Trajectory]) -> list[Trajectory]:
    """Episodes the verifier passed whose records are valid; each distinct (task, actions) once."""
    seen: set[tuple[str, tuple[int, ...]]] = set()
    kept = []
    for traj in trajs:
        if not episode_success(traj):
            continue
        traj.validate()
        key = _key(traj)
        if key not in seen:
            seen.add(key)
            kept.append(traj)
    return kept


def expert_iteration(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[Any],
    demos: Sequence[Trajectory],
    config: ExpertIterationConfig,
    worker: RolloutWorker | None = None,
    logger: MetricsLogger | None = None,
    checkpoint: Path | None = None,
) -> list[RoundStats]:
    """Run the rounds in place on ``model``, on its device and in its dtype; ``demos`` seed the data
    (may be empty). With ``checkpoint`` (a directory), resume after its last saved round and save
    each round that finishes; ``logger`` should then keep an interrupted attempt's rows (its rows
    after the saved rounds are dropped)."""
    if not tasks:
        raise ValueError("expert iteration needs training tasks")
    from transferlab.agent_rl.policies.devices import model_device

    owns = worker is None
    spec = WorkerSpec(
        policy_dir="",
        max_steps=config.max_steps,
        threads=0,
        device=str(model_device(model)),
        env_factory=config.env_factory,
        env_options=dict(config.env_options),
    )
    worker = worker or RolloutWorker(model, tokenizer, spec)  # samples with the model, where it is
    kept, stats = _load_rounds(checkpoint, model) if checkpoint is not None else ([], [])
    drop_logged_after(logger, len(stats) - 1)  # the rounds after the saved ones are done again
    data = list(demos) + kept
    seen = {_key(t) for t in data}
    try:
        for r in range(len(stats), config.rounds):
            flat = [t for t in tasks for _ in range(config.samples_per_task)]
            sampling = SamplingConfig(
                temperature=config.temperature,
                max_new_tokens=config.max_new_tokens,
                seed=config.seed * 1_000_003 + r * 7_919,
            )
            chunk = Chunk(
                tasks=flat,
                groups=list(range(len(flat))),
                sampling=sampling,
                max_context=config.max_context,
            )
            trajs = worker.run(chunk)
            new = [t for t in verified_successes(trajs) if _key(t) not in seen]
            seen.update(_key(t) for t in new)
            data.extend(new)
            kept.extend(new)
            losses = (
                train_sft(model, tokenizer, data, config.sft.model_copy(update={"seed": config.seed + r}))
                if data
                else [float("nan")]
            )
            stat = RoundStats(
                round=r,
                success_rate=sum(episode_success(t) for t in trajs) / len(trajs),
                new_trajectories=len(new),
                data_size=len(data),
                sft_loss=losses[-1],
            )
            stats.append(stat)
            if logger is not None:
                logger.log(
                    r,
                    {
                        "expert_iteration/success_rate": stat.success_rate,
                        "expert_iteration/new_trajectories": float(stat.new_trajectories),
                        "expert_iteration/data_size": float(stat.data_size),
                        "expert_iteration/sft_loss": stat.sft_loss,
                    },
                )
            if checkpoint is not None:
                _save_round(checkpoint, model, kept, stats)
    finally:
        if owns:
            worker.close()
    return stats


def _save_round(directory: Path, model: Any, kept: Sequence[Trajectory], stats: Sequence[RoundStats]) -> None:
    """Save the finished rounds: the kept episodes first, then ``rounds.pt`` (which marks them done)."""
    from transferlab.agent_rl.policies.adapters import trainable_state

    directory.mkdir(parents=True, exist_ok=True)
    write_trajectories(directory / "kept.parquet", kept)
    state = {
        "model": trainable_state(model),
        "stats": [dataclasses.astuple(s) for s in stats],
        "kept": len(kept),
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(directory / "rounds.pt", buffer.getvalue())


def _load_rounds(directory: Path, model: Any) -> tuple[list[Trajectory], list[RoundStats]]:
    """The kept episodes and stats of the rounds saved in ``directory`` (none if it holds no
    ``rounds.pt``), loading the model's trained tensors after the last of them."""
    from transferlab.agent_rl.policies.adapters import load_trainable_state

    path = directory / "rounds.pt"
    if not path.exists():
        return [], []
    state = torch.load(path, weights_only=True, map_location="cpu")
    kept = read_trajectories(directory / "kept.parquet")[: int(state["kept"])]
    load_trainable_state(model, state["model"])
    return kept, [RoundStats(int(r), float(a), int(n), int(d), float(x)) for r, a, n, d, x in state["stats"]]


class RFTSettings(BaseConfig):
    """Rejection-sampling fine-tuning (expert iteration) settings; its episode budget is RL's."""

    rounds: int = Field(default=4, ge=1, description="Sample-filter-train rounds.")
    samples_per_task: int = Field(default=4, ge=1, description="Episodes per drawn task per round.")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=50, batch_size=8, lr=1e-3),
        description="The fine-tuning of each round (on the verified successes so far, plus the anchor).",
    )
    demo_anchor: int = Field(
        default=0,
        ge=0,
        description="Demonstrations kept in every round's data as a fixed anchor (a seeded draw of this "
        "many; 0 = the policy's own verified successes only). RFT is fine-tuning on the policy's own "
        "successes: an anchor, if any, stays small next to them.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_keep_demos(cls, data: Any) -> Any:
        if isinstance(data, dict) and "keep_demos" in data:
            raise ValueError(
                "rft.keep_demos was replaced by rft.demo_anchor (how many demonstrations stay in every "
                "round's data; 0 = only the policy's own successes): set demo_anchor instead"
            )
        return data


def expert_iteration_config(rft: RFTSettings, rl: RLConfig, seed: int) -> ExpertIterationConfig:
    """The :class:`ExpertIterationConfig` of an RFT arm:
    its rounds, samples and fine-tuning, with the RL arm's episode settings (temperature, tokens per
    turn, context, tool calls) so that both arms sample the same kind of episode."""
    return ExpertIterationConfig(
        rounds=rft.rounds,
        samples_per_task=rft.samples_per_task,
        mode="agent",
        temperature=rl.temperature,
        max_new_tokens=rl.max_new_tokens,
        max_context=rl.max_context,
        max_steps=rl.max_steps,
        sft=rft.sft,
        seed=seed,
    )


_T = TypeVar("_T")


def demo_anchor(demos: Sequence[_T], n: int, seed: int) -> list[_T]:
    """The RFT arm's fixed anchor: a seeded draw of ``n`` of the demonstrations (all when fewer), in
    their order.

    >>> demo_anchor(list("abcdef"), 2, seed=0) == demo_anchor(list("abcdef"), 2, seed=0)
    True
    >>> demo_anchor(list("abc"), 5, seed=1), demo_anchor(list("abc"), 0, seed=1)
    (['a', 'b', 'c'], [])
    """
    if n >= len(demos):
        return list(demos)
    picked = sorted(random.Random(f"rft-anchor:{seed}").sample(range(len(demos)), n))
    return [demos[i] for i in picked]


def rft_round_tasks(rl: RLConfig, rft: RFTSettings) -> int:
    """Tasks an RFT arm samples each round so that its episodes equal RL's; a ValueError naming the fix
    when ``rft.rounds x rft.samples_per_task`` does not divide RL's episodes."""
    per_round = rft.rounds * rft.samples_per_task
    if rl.total_episodes % per_round:
        raise ValueError(
            f"the RFT arm must run as many episodes as RL ({rl.total_episodes} = rl.steps x "
            f"rl.tasks_per_step x rl.group_size), but rft.rounds x rft.samples_per_task = {per_round} "
            "does not divide it: change rft.rounds or rft.samples_per_task"
        )
    return rl.total_episodes // per_round


def rft_tasks(train: Sequence[_T], n: int, seed: int) -> list[_T]:
    """``n`` training tasks for RFT: a seeded shuffle of ``train``, repeated when ``n`` is larger."""
    order = list(train)
    random.Random(f"rft:{seed}").shuffle(order)
    return [order[i % len(order)] for i in range(n)]
