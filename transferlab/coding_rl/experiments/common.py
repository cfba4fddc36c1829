"""What the coding experiments share: their tokenizer, sandboxes and evaluation.

The starting policy (:mod:`transferlab.agent_rl.start`), the held-out comparisons and result.json
(:mod:`transferlab.platform.held_out`) and the skeleton (:mod:`transferlab.platform.harness`) are the
same for every experiment of both domains; what is coding's is here.

Evaluation is on held-out tasks and counts the verifier's verdict only (every developer *and* hidden
test passes). Single-step tasks are scored two ways: *sampled* success (the share of ``samples``
completions at temperature 1 that pass — what the policy does when it acts, and what RL optimises)
and *greedy* success (one argmax completion per task). Multi-turn tasks run whole CodeRepair-v0
episodes with the policy and count the ones whose ``submit`` passed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from transferlab.agent_rl.policies.generation import SamplingConfig, generate
from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import candidate_source, code_prompt_ids
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.repo_task import RepoTask


@contextlib.contextmanager
def opened_sandbox(backend: str = "forkserver", workers: int = 1) -> Iterator[SandboxBackend]:
    """A sandbox backend for evaluation (forkserver, or subprocess where it cannot run), closed after."""
    sandbox, _, _ = open_backend(SandboxConfig(backend=backend, workers=workers))
    try:
        yield sandbox
    finally:
        sandbox.close()


def toy_tokenizer(
    code_tasks: Sequence[CodeTask],
    repo_tasks: Sequence[RepoTask],
    vocab_size: int = 512,
    split: str = "identifiers",
) -> Any:
    """A BPE tokenizer trained here on the toy tasks' texts and the tool-call language (no download);
    ``split``: see :data:`~transferlab.agent_rl.policies.tokenizer.SPLITS`."""
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer
    from transferlab.coding_rl.tasks.toy import toy_solution
    from transferlab.coding_rl.tokenizer_corpus import corpus_texts

    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in code_tasks] * 10
    texts += list(corpus_texts(repo_tasks)) * 3
    return train_tokenizer(texts, vocab_size=vocab_size, seed=0, split=split)


@dataclass(frozen=True)
class CodeScores:
    """Per-task held-out scores of one policy on single-step tasks."""

    task_ids: list[str]
    sampled: list[float]
    """Share of the task's sampled completions that pass every test."""
    greedy: list[float]
    """1.0 if the greedy completion passes every test, else 0.0."""


def evaluate_code(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[CodeTask],
    verifier: Verifier,
    *,
    samples: int = 8,
    temperature: float = 1.0,
    max_new_tokens: int = 24,
    seed: int = 12_345,
) -> CodeScores:
    """Sampled and greedy success per task (the verifier's verdict: all tests, hidden included)."""
    prompts = [code_prompt_ids(tokenizer, t) for t in tasks]
    flat = [t for t in tasks for _ in range(samples)]
    drawn = generate(
        model,
        tokenizer,
        [p for p in prompts for _ in range(samples)],
        SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed),
    )
    greedy = generate(
        model, tokenizer, prompts, SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens)
    )
    grades = verifier.grade_many([(t, candidate_source(t, s.text)) for t, s in zip(flat, drawn, strict=True)])
    greedy_grades = verifier.grade_many(
        [(t, candidate_source(t, s.text)) for t, s in zip(tasks, greedy, strict=True)]
    )
    passed = [g.status == "passed" for g in grades]
    return CodeScores(
        task_ids=[t.task_id for t in tasks],
        sampled=[sum(passed[i * samples : (i + 1) * samples]) / samples for i in range(len(tasks))],
        greedy=[float(g.status == "passed") for g in greedy_grades],
    )


def evaluate_agent(
    model: Any,
    tokenizer: Any,
    tasks: Sequence[RepoTask],
    sandbox: SandboxBackend,
    *,
    episodes_per_task: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 48,
    max_context: int = 512,
    max_steps: int = 6,
    seed: int = 12_345,
) -> list[float]:
    """Per task: the share of the policy's CodeRepair-v0 episodes whose submit passed the verifier."""
    from transferlab.agent_rl.episodes import policy_episodes
    from transferlab.coding_rl.env.code_repair import CodeRepairEnv

    flat = [t for t in tasks for _ in range(episodes_per_task)]
    envs = [CodeRepairEnv(list(tasks), max_steps=max_steps, sandbox=sandbox) for _ in flat]
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    trajs = policy_episodes(model, tokenizer, envs, flat, sampling, max_context)
    wins = [bool(t.steps[-1].info.get("success")) for t in trajs]
    n = episodes_per_task
    return [sum(wins[i * n : (i + 1) * n]) / n for i in range(len(tasks))]


# ------------------------------------------------------------------------------------ result.json
