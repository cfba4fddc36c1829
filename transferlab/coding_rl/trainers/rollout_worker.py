"""What a rollout worker does: hold a copy of the policy and a sandbox, and turn tasks into episodes.

The learner never generates or grades itself. Each training step it sends the trained tensors
(:func:`~transferlab.coding_rl.policies.adapters.trainable_state`) to every worker, then hands each
one a :class:`Chunk` — whole GRPO groups, so a lost chunk never leaves half a group. A worker answers
with :class:`~transferlab.platform.trajectory.Trajectory` objects carrying the exact sampled ids and
their log-probs; the learner packs them with
:func:`~transferlab.platform.trajectory.to_tensors`. Single-step code tasks and multi-turn
tool-environment episodes (`transferlab/CodeRepair-v0`, or any
:class:`~transferlab.platform.agent_env.ToolEnv` an env factory builds) come back in the same schema,
so one loop trains both.

Workers live in processes or Ray actors (:mod:`.workers`); :class:`RolloutWorker` itself is plain
Python, built by :class:`WorkerSpec` (picklable) in whichever process hosts it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from transferlab.coding_rl.policies.adapters import LoraOptions, load_trainable_state
from transferlab.coding_rl.policies.generation import SamplingConfig, generate
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.platform.agent_env import Task, ToolEnv, ToolEnvFactory
from transferlab.platform.trajectory import StepRecord, Trajectory

if TYPE_CHECKING:
    import torch

    from transferlab.coding_rl.sandbox.backends import SandboxBackend
    from transferlab.coding_rl.sandbox.verifier import Verifier

Mode = Literal["code", "agent"]


@dataclass(frozen=True)
class WorkerSpec:
    """How to build a worker: the policy directory, LoRA options and the sandbox to grade in."""

    policy_dir: str
    lora: LoraOptions | None = None
    sandbox_backend: str = "forkserver"
    rewards: str = "dense"
    max_steps: int = 10
    threads: int = 1
    env_factory: str | None = None
    """Agent mode: 'module:function' building one episode's env (``f(tasks, rewards=, max_steps=)``);
    None = CodeRepair-v0 on the worker's sandbox."""
    device: str = "cpu"
    """Where the worker's policy runs ('cpu', 'cuda', 'cuda:N', 'mps' or 'auto'), in its own process."""
    dtype: str | None = None
    """The policy's dtype ('float32', 'bfloat16', ...; 'auto' = the device's); None = as saved. The
    learner's, so worker and learner compute the same log-probs (LoRA adapters stay float32 in both)."""

    def __call__(self) -> RolloutWorker:
        """Build the worker (what a pool's factory calls inside the worker process)."""
        from transferlab.coding_rl.policies.model import load_policy

        model, tokenizer = load_policy(self.policy_dir, device=self.device, dtype=self.dtype)
        if self.lora is not None:
            model = self.lora.apply(model)
        return RolloutWorker(model, tokenizer, self)


@dataclass
class Chunk:
    """Episodes one worker runs in one call: ``tasks[i]`` is episode ``first_row + i`` of the step."""

    mode: Mode
    tasks: list[Any]
    groups: list[int]
    sampling: SamplingConfig
    first_row: int = 0
    max_context: int = 1024
    episode_timeout_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def code_prompt_ids(tokenizer: Any, task: CodeTask) -> list[int]:
    """The prompt: the description and signature as a user turn, then the assistant's turn opens."""
    from transferlab.coding_rl.policies.tokenizer import encode_chat

    content = f"{task.task_description}\n{task.function_signature}"
    return encode_chat(tokenizer, [{"role": "user", "content": content}], add_generation_prompt=True)


def candidate_source(task: CodeTask, body: str) -> str:
    """What the sandbox runs: the signature followed by the policy's body."""
    return f"{task.function_signature}\n{body.rstrip()}\n"


def episode_id(task_id: str, seed: int, row: int) -> str:
    """Stable id of episode ``row`` of a step sampled with ``seed``."""
    return hashlib.sha1(f"{task_id}|{seed}|{row}".encode()).hexdigest()[:16]


class RolloutWorker:
    """A policy copy plus a sandbox; :meth:`run` turns a :class:`Chunk` into trajectories."""

    def __init__(self, model: Any, tokenizer: Any, spec: WorkerSpec, sandbox: SandboxBackend | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.spec = spec
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._verifier: Verifier | None = None
        if spec.threads > 0:
            import torch

            torch.set_num_threads(spec.threads)

    @property
    def verifier(self) -> Verifier:
        """The worker's verifier, opened on first use (forkserver, or subprocess where unavailable)."""
        if self._verifier is None:
            from transferlab.coding_rl.sandbox.backends import open_backend
            from transferlab.coding_rl.sandbox.config import SandboxConfig
            from transferlab.coding_rl.sandbox.verifier import Verifier

            if self._sandbox is None:
                self._sandbox, config, _ = open_backend(
                    SandboxConfig(backend=self.spec.sandbox_backend, workers=1)
                )
            else:
                config = None
            self._verifier = Verifier(self._sandbox, config)
        return self._verifier

    def set_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Follow the learner: copy its trained tensors (CPU copies) into this policy, on its device and
        in its dtype."""
        load_trainable_state(self.model, state)

    def pid(self) -> int:
        """The hosting process (for tests and logs)."""
        import os

        return os.getpid()

    def run(self, chunk: Chunk) -> list[Trajectory]:
        """The chunk's episodes, in order (one trajectory per task)."""
        if chunk.mode == "code":
            return self._code(chunk)
        if chunk.mode == "agent":
            return self._agent(chunk)
        raise ValueError(f"unknown rollout mode {chunk.mode!r}; use 'code' or 'agent'")

    def _code(self, chunk: Chunk) -> list[Trajectory]:
        tasks: list[CodeTask] = chunk.tasks
        prompts = [code_prompt_ids(self.tokenizer, t) for t in tasks]
        sampling = chunk.sampling.model_copy(update={"seed": chunk.sampling.seed + chunk.first_row})
        t0 = time.perf_counter()
        samples = generate(self.model, self.tokenizer, prompts, sampling)
        t1 = time.perf_counter()
        grades = self.verifier.grade_many(
            [(t, candidate_source(t, s.text)) for t, s in zip(tasks, samples, strict=True)]
        )
        t2 = time.perf_counter()
        out = []
        for i, (task, prompt, sample, grade) in enumerate(zip(tasks, prompts, samples, grades, strict=True)):
            row = chunk.first_row + i
            step = StepRecord(
                episode_id=episode_id(task.task_id, chunk.sampling.seed, row),
                step=0,
                task_id=task.task_id,
                domain="coding",
                action_text=sample.text,
                action_ids=list(sample.completion_ids),
                action_logprobs=list(sample.logprobs),
                observation_text=grade.status,
                observation_ids=[],
                reward=float(grade.reward),
                reward_components=dict(grade.reward_components),
                terminated=True,
                info={"success": grade.status == "passed", "group": chunk.groups[i], "row": row},
                timings={"policy_s": (t1 - t0) / len(tasks), "sandbox_s": (t2 - t1) / len(tasks)},
                prompt_text=f"{task.task_description}\n{task.function_signature}",
                prompt_ids=prompt,
            )
            out.append(Trajectory([step]).validate())
        return out

    def _agent(self, chunk: Chunk) -> list[Trajectory]:
        from transferlab.coding_rl.env.code_repair import code_repair_env
        from transferlab.coding_rl.trainers.agent_rollout import policy_episodes

        tasks: list[Task] = chunk.tasks
        envs: list[ToolEnv]
        if self.spec.env_factory is not None:
            factory = _import_factory(self.spec.env_factory)
            envs = [factory(tasks, rewards=self.spec.rewards, max_steps=self.spec.max_steps) for _ in tasks]
        else:
            sandbox = self.verifier.backend
            envs = [
                code_repair_env(
                    tasks, rewards=self.spec.rewards, max_steps=self.spec.max_steps, sandbox=sandbox
                )
                for _ in tasks
            ]
        sampling = chunk.sampling.model_copy(update={"seed": chunk.sampling.seed + chunk.first_row})
        try:
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
        """Close the sandbox if this worker opened it."""
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
            self._verifier = None


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
