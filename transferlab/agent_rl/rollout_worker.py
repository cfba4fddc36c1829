"""What a rollout worker does: hold a copy of the policy, build tool envs, and turn tasks into episodes.

The learner never generates or grades itself. Each training step it sends the trained tensors
(:func:`~transferlab.agent_rl.policies.adapters.trainable_state`) to every worker, then hands each
one a :class:`Chunk` — whole GRPO groups, so a lost chunk never leaves half a group. A worker builds
one env per episode with the factory its :class:`WorkerSpec` names (``'module:function'``, a
:class:`~transferlab.platform.agent_env.ToolEnvFactory`: CodeRepair-v0, the single-step code env,
OpsAnalysis-v0, the identity env) and answers with
:class:`~transferlab.platform.trajectory.Trajectory` objects carrying the exact sampled ids and
their log-probs; the learner packs them with :func:`~transferlab.platform.trajectory.to_tensors`.
Episodes of one-turn envs (``max_steps == 1``) are sampled in one batch (:func:`.episodes.one_turn_episodes`),
the others turn by turn (:func:`.episodes.policy_episodes`); both come back in the same schema, so one
loop trains every env.

Workers live in processes or Ray actors (:mod:`.workers`); :class:`RolloutWorker` itself is plain
Python, built by :class:`WorkerSpec` (picklable) in whichever process hosts it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from transferlab.agent_rl.policies.adapters import LoraOptions, load_trainable_state
from transferlab.agent_rl.policies.generation import SamplingConfig
from transferlab.platform.agent_env import Task, ToolEnv, ToolEnvFactory
from transferlab.platform.trajectory import Trajectory

if TYPE_CHECKING:
    import torch

Mode = Literal["code", "agent"]
"""A config's episodes: 'code', one turn (single-step tasks); 'agent', multi-turn tool episodes."""


@dataclass(frozen=True)
class WorkerSpec:
    """How to build a worker: the policy directory, LoRA options and the env factory it plays."""

    policy_dir: str
    lora: LoraOptions | None = None
    rewards: str = "dense"
    max_steps: int = 10
    threads: int = 1
    env_factory: str | None = None
    """'module:function' building one episode's env (``f(tasks, rewards=, max_steps=, **env_options)``);
    required to run episodes."""
    env_options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword options the factory takes besides ``rewards`` and ``max_steps`` (e.g. a coding env's
    ``sandbox_backend``); plain values, so the spec stays picklable."""
    device: str = "cpu"
    """Where the worker's policy runs ('cpu', 'cuda', 'cuda:N', 'mps' or 'auto'), in its own process."""
    dtype: str | None = None
    """The policy's dtype ('float32', 'bfloat16', ...; 'auto' = the device's); None = as saved. The
    learner's, so worker and learner compute the same log-probs (LoRA adapters stay float32 in both)."""

    def __call__(self) -> RolloutWorker:
        """Build the worker (what a pool's factory calls inside the worker process)."""
        from transferlab.agent_rl.policies.model import load_policy

        model, tokenizer = load_policy(self.policy_dir, device=self.device, dtype=self.dtype)
        if self.lora is not None:
            model = self.lora.apply(model)
        return RolloutWorker(model, tokenizer, self)


@dataclass
class Chunk:
    """Episodes one worker runs in one call: ``tasks[i]`` is episode ``first_row + i`` of the step."""

    tasks: list[Any]
    groups: list[int]
    sampling: SamplingConfig
    first_row: int = 0
    max_context: int = 1024
    episode_timeout_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def episode_id(task_id: str, seed: int, row: int) -> str:
    """Stable id of episode ``row`` of a step sampled with ``seed`` (one-turn episodes)."""
    return hashlib.sha1(f"{task_id}|{seed}|{row}".encode()).hexdigest()[:16]


class RolloutWorker:
    """A policy copy plus an env factory; :meth:`run` turns a :class:`Chunk` into trajectories.

    ``env_kwargs`` go to the factory with the spec's ``env_options``: live objects of the caller's
    process, such as an open sandbox (``{"sandbox": backend}``), for a worker built in that process.
    """

    def __init__(
        self, model: Any, tokenizer: Any, spec: WorkerSpec, env_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        self.env_kwargs = dict(env_kwargs or {})
        if spec.threads > 0:
            import torch

            torch.set_num_threads(spec.threads)

    def set_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Follow the learner: copy its trained tensors (CPU copies) into this policy, on its device and
        in its dtype."""
        load_trainable_state(self.model, state)

    def pid(self) -> int:
        """The hosting process (for tests and logs)."""
        import os

        return os.getpid()

    def make_env(self, tasks: list[Any]) -> ToolEnv:
        """One episode's env from the spec's factory."""
        if self.spec.env_factory is None:
            raise ValueError(
                "WorkerSpec.env_factory is None: name the env the episodes play as 'module:function' "
                "(e.g. transferlab.coding_rl.env.single_step:code_repair_env)"
            )
        factory = _import_factory(self.spec.env_factory)
        options = {**self.spec.env_options, **self.env_kwargs}
        return factory(tasks, rewards=self.spec.rewards, max_steps=self.spec.max_steps, **options)

    def run(self, chunk: Chunk) -> list[Trajectory]:
        """The chunk's episodes, in order (one trajectory per task)."""
        from transferlab.agent_rl.episodes import one_turn_episodes, policy_episodes

        tasks: list[Task] = chunk.tasks
        envs = [self.make_env(tasks) for _ in tasks]
        sampling = chunk.sampling.model_copy(update={"seed": chunk.sampling.seed + chunk.first_row})
        try:
            if envs and all(env.max_steps == 1 for env in envs):
                ids = [
                    episode_id(t.task_id, chunk.sampling.seed, chunk.first_row + i)
                    for i, t in enumerate(tasks)
                ]
                trajs = one_turn_episodes(self.model, self.tokenizer, envs, tasks, sampling, ids)
            else:
                trajs = policy_episodes(
                    self.model,
                    self.tokenizer,
                    envs,
                    tasks,
                    sampling,
                    chunk.max_context,
                    episode_timeout_s=chunk.episode_timeout_s,
                )
        finally:
            for env in envs:
                env.close()
        for i, traj in enumerate(trajs):
            traj.steps[-1].info.update({"group": chunk.groups[i], "row": chunk.first_row + i})
        return trajs

    def close(self) -> None:
        """Nothing to release: envs are closed after each chunk, sandboxes belong to their process."""


def _import_factory(path: str) -> ToolEnvFactory:
    """The env factory named by ``'module:function'``."""
    import importlib

    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"env_factory must look like 'package.module:function', got {path!r}")
    return getattr(importlib.import_module(module), name)


def episode_success(traj: Trajectory) -> bool:
    """Whether the episode solved its task (the verifier's verdict on submit, or the code grade)."""
    return bool(traj.steps[-1].info.get("success"))
