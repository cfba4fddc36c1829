"""Rollouts of scripted agents on `transferlab/CodeRepair-v0`, many episodes at once.

The batched runner gives each worker thread its own environment; all of them share one sandbox
backend with as many warm sandboxes as workers. Environment work is light Python; the tests run in
sandbox processes, so the sandboxes keep the cores busy while the threads wait on them.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from transferlab.coding_rl.agents import make_agent
from transferlab.coding_rl.env.code_repair import CodeRepairEnv
from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.platform.config import BaseConfig
from transferlab.platform.trajectory import StepRecord, Trajectory


class RolloutConfig(BaseConfig):
    """What `transferlab coding rollout` runs."""

    agent: Literal["expert", "naive", "random"] = Field(default="expert", description="Scripted agent.")
    tasks: Literal["train", "held-out", "seed", "all"] = Field(
        default="held-out", description="Which tasks: a corpus split, the seed repositories, or all."
    )
    episodes: int = Field(default=20, ge=1, le=1_000_000, description="Episodes to run (tasks cycle).")
    workers: int = Field(default=2, ge=1, le=64, description="Environments stepped in parallel.")
    rewards: Literal["dense", "sparse"] = Field(default="dense", description="Reward table.")
    max_steps: int = Field(default=10, ge=1, le=200, description="Step limit per episode.")
    seed: int = Field(default=0, ge=0, description="Seeds task order and the random agent.")
    corpus_dir: str = Field(default="data/coding_tasks", description="Task corpus (built if missing).")
    backend: Literal["forkserver", "subprocess", "docker"] = Field(
        default="forkserver", description="Sandbox backend (forkserver falls back to subprocess)."
    )


@dataclass
class RolloutSummary:
    """Aggregate figures of a rollout."""

    episodes: int
    successes: int
    mean_return: float
    mean_steps: float
    wall_s: float
    env_steps: int
    sandbox_s: float
    busy_s: float  # time inside env.step and the agent, summed over steps (sandbox time included)

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_s if self.wall_s else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.wall_s if self.wall_s else 0.0

    def as_metrics(self) -> dict[str, float]:
        return {
            "rollout/success_rate": self.success_rate,
            "rollout/mean_return": self.mean_return,
            "rollout/mean_steps": self.mean_steps,
            "time/episodes_per_s": self.episodes_per_s,
            "time/env_steps_per_s": self.steps_per_s,
            "time/sandbox_share": self.sandbox_share,
        }

    @property
    def sandbox_share(self) -> float:
        """Share of the episodes' step time spent waiting on the sandbox."""
        return self.sandbox_s / self.busy_s if self.busy_s else 0.0


def open_sandbox(backend: str, workers: int) -> SandboxBackend:
    """The requested backend, or subprocess where the fork server cannot run (said on stderr)."""
    sandbox, _, reason = open_backend(SandboxConfig(backend=backend, workers=workers))
    if reason is not None:
        print(f"note: {reason}\nnote: falling back to the subprocess backend", file=sys.stderr)
    return sandbox


def byte_ids(text: str) -> list[int]:
    """Scripted agents sample no tokens; their text is recorded as UTF-8 bytes (a byte-level tokenizer)."""
    return list(text.encode("utf-8"))


def run_episode(env: CodeRepairEnv, agent_name: str, task: RepoTask, seed: int) -> Trajectory:
    """One episode of a scripted agent; every step recorded, token ids as bytes (see `byte_ids`)."""
    agent = make_agent(agent_name)
    agent.begin(task, seed)
    obs, _ = env.reset(seed=seed, options={"task": task})
    episode_id = hashlib.sha1(f"{task.task_id}|{seed}|{agent_name}".encode()).hexdigest()[:16]
    steps: list[StepRecord] = []
    for k in range(env.max_steps):
        t0 = time.perf_counter()
        action = agent.act(obs)
        policy_s = time.perf_counter() - t0
        next_obs, reward, term, trunc, info = env.step(action)
        steps.append(
            StepRecord(
                episode_id=episode_id,
                step=k,
                task_id=task.task_id,
                domain="coding",
                action_text=action,
                action_ids=byte_ids(action),
                observation_text=next_obs,
                observation_ids=byte_ids(next_obs),
                reward=reward,
                reward_components=dict(info["components"]),
                terminated=term,
                truncated=trunc,
                info={"tool": info["tool"], "tool_ok": info["tool_ok"], "success": info["success"]},
                timings={"policy_s": policy_s, **env.last_timings},
                prompt_text=obs if k == 0 else "",
                prompt_ids=byte_ids(obs) if k == 0 else [],
            )
        )
        obs = next_obs
        if term or trunc:
            break
    return Trajectory(steps)


def run_batched(
    tasks: Sequence[RepoTask],
    agent_name: str,
    episodes: int,
    workers: int,
    sandbox: SandboxBackend,
    rewards: str = "dense",
    max_steps: int = 10,
    seed: int = 0,
    on_episode: Callable[[Trajectory], None] | None = None,
) -> tuple[list[Trajectory], RolloutSummary]:
    """Run `episodes` episodes over `tasks` (cycling) with `workers` environments in parallel."""
    if not tasks:
        raise ValueError("no tasks to run")
    local = threading.local()
    envs: list[CodeRepairEnv] = []
    lock = threading.Lock()

    def env_of_thread() -> CodeRepairEnv:
        if not hasattr(local, "env"):
            local.env = CodeRepairEnv(
                tasks=list(tasks), rewards=rewards, max_steps=max_steps, sandbox=sandbox
            )
            with lock:
                envs.append(local.env)
        return local.env

    def one(i: int) -> Trajectory:
        traj = run_episode(env_of_thread(), agent_name, tasks[i % len(tasks)], seed + i)
        if on_episode is not None:
            with lock:
                on_episode(traj)
        return traj

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        trajectories = list(pool.map(one, range(episodes)))
    wall = time.perf_counter() - t0
    for env in envs:
        env.close()
    return trajectories, summarize(trajectories, wall)


def summarize(trajectories: Sequence[Trajectory], wall_s: float) -> RolloutSummary:
    n = len(trajectories)
    successes = sum(1 for t in trajectories if t.steps[-1].info.get("success") is True)
    steps = sum(len(t) for t in trajectories)
    sandbox = sum(s.timings.get("sandbox_s", 0.0) for t in trajectories for s in t.steps)
    busy = sum(
        s.timings.get("env_s", 0.0) + s.timings.get("policy_s", 0.0) for t in trajectories for s in t.steps
    )
    return RolloutSummary(
        episodes=n,
        successes=successes,
        mean_return=sum(t.total_reward for t in trajectories) / n if n else 0.0,
        mean_steps=steps / n if n else 0.0,
        wall_s=wall_s,
        env_steps=steps,
        sandbox_s=sandbox,
        busy_s=busy,
    )


def load_tasks(which: str, corpus_dir: Path, build_if_missing: bool = True) -> list[RepoTask]:
    """Tasks of a split (building the corpus first when it is missing), the seed repos, or all."""
    from transferlab.coding_rl.tasks.repo_task import load_corpus
    from transferlab.coding_rl.tasks.seed_repos import seed_repo_tasks

    if which == "seed":
        return seed_repo_tasks()
    if not (corpus_dir / "corpus.json").is_file():
        if not build_if_missing:
            raise FileNotFoundError(f"no task corpus at {corpus_dir}; run `transferlab coding tasks build`")
        from transferlab.coding_rl.tasks.corpus import build_corpus

        build_corpus(corpus_dir)
    split = None if which == "all" else which
    return load_corpus(corpus_dir, split=split)  # type: ignore[arg-type]


def episode_digest(traj: Trajectory) -> str:
    """A one-line JSON summary (for logs)."""
    return json.dumps(
        {
            "task": traj.task_id,
            "return": traj.total_reward,
            "steps": len(traj),
            "success": traj.steps[-1].info.get("success"),
        }
    )
