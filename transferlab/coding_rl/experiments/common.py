"""What the coding experiments share: the starting policy and its tokenizer, sandboxes, evaluation.

Every arm starts either from the tiny from-scratch policy (``policy`` in the experiment's config, on
a tokenizer trained here: :func:`toy_tokenizer`; the CPU default) or, when the config's
``model_path`` names a local Hugging Face causal LM directory, from a copy of that model with its own
tokenizer and chat template (:class:`StartModel`, loaded once per run by :func:`open_experiment`).

Evaluation is on held-out tasks and counts the verifier's verdict only (every developer *and* hidden
test passes). Single-step tasks are scored two ways: *sampled* success (the share of ``samples``
completions at temperature 1 that pass — what the policy does when it acts, and what RL optimises)
and *greedy* success (one argmax completion per task). Multi-turn tasks run whole CodeRepair-v0
episodes with the policy and count the ones whose ``submit`` passed.
"""

from __future__ import annotations

import contextlib
import copy
import shlex
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field
from rich.console import Console

from transferlab.agent_rl.policies.devices import context_limit
from transferlab.agent_rl.policies.generation import SamplingConfig, generate
from transferlab.agent_rl.policies.model import TinyPolicyConfig, count_parameters, load_policy
from transferlab.agent_rl.rl import RLConfig
from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import candidate_source, code_prompt_ids
from transferlab.coding_rl.tasks.code_task import CodeTask
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.platform.config import BaseConfig
from transferlab.platform.harness import Experiment
from transferlab.platform.results import (
    Cluster,
    Comparison,
    Estimate,
    Result,
    comparison,
    estimate,
    write_result,
)
from transferlab.platform.stats import Interval


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


class ModelChoice(BaseConfig):
    """The ``model_path`` field every experiment config shares (a base class of those configs)."""

    model_path: str | None = Field(
        default=None,
        description="A local Hugging Face causal LM directory to start every arm from, with its own "
        "tokenizer and chat template; None = the tiny from-scratch policy built from `policy` with the "
        "locally trained tokenizer.",
    )


@dataclass(frozen=True)
class StartModel:
    """A local Hugging Face causal LM that every arm starts from (a deep copy each), and its tokenizer."""

    path: str
    model: Any
    tokenizer: Any

    @property
    def parameters(self) -> int:
        return count_parameters(self.model)

    @property
    def context_limit(self) -> int | None:
        """The longest sequence the model takes (from its config), or None when it names none."""
        return context_limit(self.model)

    def fresh(self) -> Any:
        """A copy of the starting model for one arm (the original is never trained)."""
        return copy.deepcopy(self.model)

    def describe(self) -> str:
        """The path as a code span and the parameter count, for reports: `` `PATH` (N.NNM parameters)``."""
        return f"`{self.path}` ({self.parameters / 1e6:.2f}M parameters)"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "parameters": self.parameters, "context_limit": self.context_limit}


def load_start_model(path: str | None) -> StartModel | None:
    """The model at ``path`` with its tokenizer, on the CPU in float32; None for no path.

    The trainers move it to their configured device and precision. Raises
    :class:`~transferlab.agent_rl.policies.model.PolicyNotFoundError` (naming the fix) when ``path``
    holds no loadable model.
    """
    if path is None:
        return None
    model, tokenizer = load_policy(path, device="cpu", dtype="float32")
    return StartModel(str(Path(path).expanduser()), model, tokenizer)


C = TypeVar("C", bound=ModelChoice)


def open_experiment(
    name: str,
    config: C,
    runs_root: Path,
    resume: Path | None,
    console: Console | None = None,
    shared: bool = False,
) -> tuple[Experiment, C, StartModel | None]:
    """:meth:`Experiment.open` plus the run's starting model (None = the tiny policy).

    A new run loads the model before its directory is created, so a bad ``model_path`` leaves no
    run behind; a resumed run loads the model its saved config names.
    """
    start = load_start_model(config.model_path) if resume is None else None
    exp, config = Experiment.open(name, config, runs_root, resume, console, shared)
    if resume is not None:
        try:
            start = load_start_model(config.model_path)
        except BaseException:
            exp.run.release()
            raise
    return exp, config, start


def fit_context(rl: RLConfig, start: StartModel | None, say: Callable[[str], None]) -> RLConfig:
    """``rl`` with ``max_context`` clipped to the starting model's context limit (with a warning line).

    Only agent mode has episodes whose context grows; single-step settings are returned as they are.
    """
    limit = start.context_limit if start is not None else None
    if start is None or limit is None or rl.max_context <= limit or rl.mode != "agent":
        return rl
    say(
        f"warning: max_context {rl.max_context} is longer than {start.path}'s {limit} positions; "
        f"clipped to {limit}"
    )
    return rl.model_copy(update={"max_context": limit})


def policy_line(policy: TinyPolicyConfig, start: StartModel | None) -> str:
    """The report's ``policy:`` settings line: the starting model, or the tiny policy's size."""
    if start is not None:
        return f"policy: {start.describe()}, with its own tokenizer and chat template"
    return (
        f"policy: {policy.n_layer} layers, width {policy.d_model}, trained from scratch; tokenizer "
        "trained here"
    )


def model_record(policy: TinyPolicyConfig, start: StartModel | None) -> dict[str, Any]:
    """What the summary records about the starting policy."""
    if start is not None:
        return start.to_dict()
    return {"path": None, "tiny": policy.model_dump()}


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


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean (NaN for no values)."""
    return sum(values) / len(values) if values else float("nan")


# ------------------------------------------------------------------------------------ result.json


@dataclass(frozen=True)
class HeldOut:
    """One arm's held-out values pooled over seeds, one per (seed, task), with both cluster labels."""

    values: list[float]
    seeds: list[int]
    pairs: list[tuple[int, int]]
    """(seed, index of the task in the held-out list) per value."""


def held_out(results: Mapping[str, Mapping[str, Any]], arm: str, seeds: Sequence[int], key: str) -> HeldOut:
    """``results[f"{arm}-seed{s}"][key]`` (per-task values) for every seed, with their labels."""
    values: list[float] = []
    labels: list[int] = []
    pairs: list[tuple[int, int]] = []
    for s in seeds:
        per_task = [float(v) for v in results[f"{arm}-seed{s}"][key]]
        values += per_task
        labels += [s] * len(per_task)
        pairs += [(s, i) for i in range(len(per_task))]
    return HeldOut(values, labels, pairs)


def seed_estimate(data: HeldOut) -> Estimate:
    """The mean of the seed means with a 95% t-interval over the seeds."""
    return estimate(data.values, data.seeds)


def compare(name: str, a: HeldOut, b: HeldOut, clusters: Sequence[Cluster] = ("seed",)) -> list[Comparison]:
    """``b - a`` paired on the same seeds and tasks, once per cluster kind (``"seed"`` first)."""
    out = []
    for kind in clusters:
        la: list[Hashable]
        lb: list[Hashable]
        if kind == "seed":
            la, lb = list(a.seeds), list(b.seeds)
        elif kind == "seed+task":
            la, lb = list(a.pairs), list(b.pairs)
        else:
            la, lb = [t for _, t in a.pairs], [t for _, t in b.pairs]
        out.append(comparison(name, a.values, la, b.values, lb, cluster=kind, paired=True))
    return out


_VERDICT_WORDS = {
    "improved": "improved",
    "worse": "worse",
    "no detectable change": "pipeline ran, no detectable change",
}


def comparison_rows(result: Result) -> list[dict[str, Any]]:
    """One report table row per comparison of ``result`` (points, its interval, MDE and verdict)."""
    return [
        {
            "comparison": c.name,
            "clusters": f"{c.n_clusters} x {c.cluster}",
            "difference (points)": f"{c.estimate * 100:+.1f} [{c.ci[0] * 100:+.1f}, {c.ci[1] * 100:+.1f}]",
            # a zero-width interval (every cluster equal) says nothing about the detectable size
            "MDE (points)": "-"
            if c.conditional
            else f"{c.mde * 100:.1f}"
            if c.ci[1] > c.ci[0]
            else "unknown",
            # an interval over (seed, task) pairs holds the trained policies fixed: no verdict on the method
            "verdict": "conditional on these policies" if c.conditional else _VERDICT_WORDS[c.verdict],
        }
        for c in result.comparisons
    ]


def held_out_interval(result: Result, arm: str) -> Interval:
    """``result``'s held-out success of ``arm`` as an Interval (for tables and bar plots)."""
    h = result.arms[arm].held_out_success
    return Interval(h.estimate, h.ci[0], h.ci[1], 0.95, result.arms[arm].n_episodes)


def experiment_command(
    subcommand: str,
    config: BaseConfig,
    presets: Mapping[str, BaseConfig],
    run_dir: Path,
    runs_root: Path,
    report_dir: Path | None,
) -> str:
    """The ``transferlab coding experiment ...`` line that makes this run again.

    ``--preset NAME`` (with ``--seeds``, ``--model`` and ``--rollout-backend`` where they differ from
    the preset) when the config is a preset's, else ``--config RUN_DIR/config.json`` (the config the
    run saved).
    """
    mine = _comparable(config.model_dump(mode="json"))
    args = ["transferlab", "coding", "experiment", subcommand]
    for name, preset in presets.items():
        theirs = preset.model_dump(mode="json")
        if _comparable(theirs) != mine:
            continue
        args += ["--preset", name]
        dumped = config.model_dump(mode="json")
        if dumped["seeds"] != theirs["seeds"]:
            args += ["--seeds", ",".join(map(str, dumped["seeds"]))]
        if dumped["model_path"] is not None:
            args += ["--model", dumped["model_path"]]
        if dumped["rl"]["rollout_backend"] != theirs["rl"]["rollout_backend"]:
            args += ["--rollout-backend", dumped["rl"]["rollout_backend"]]
        break
    else:
        args += ["--config", str(run_dir / "config.json")]
    if runs_root != Path("runs"):
        args += ["--runs-root", str(runs_root)]
    if report_dir is not None:
        args += ["--report-dir", str(report_dir)]
    return shlex.join(args)


def _comparable(dumped: dict[str, Any]) -> dict[str, Any]:
    """A config dump without the fields the command line sets (seeds, model, rollout backend)."""
    out = {k: v for k, v in dumped.items() if k not in ("seeds", "model_path")}
    out["rl"] = {k: v for k, v in dumped["rl"].items() if k != "rollout_backend"}
    return out


def write_results(exp: Experiment, result: Result, report_dir: Path | None) -> None:
    """``result.json`` in the run directory, and next to the report when there is a report directory,
    with its provenance (commit, dirty flag, command, machine, packages, threads, wall time)."""
    from transferlab.platform.provenance import provenance

    result = result.model_copy(update={"provenance": provenance(result.command, exp.elapsed_s())})
    write_result(exp.run.dir, result)
    if report_dir is not None:
        write_result(report_dir, result)
