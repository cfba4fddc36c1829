"""Experiment 1 — does it learn? Untrained vs SFT vs SFT + GRPO vs SFT + PPO on held-out tasks.

The project's readiness checklist asks to tell "the pipeline runs" apart from "the model really got
better". Per seed, a tiny policy is built from scratch (or, with ``model_path``, a copy of that local
Hugging Face model is taken); it is fine-tuned on demonstrations from an
*imperfect* demonstrator (a share of its bodies carry a plausible bug — wrong operator, constant off
by one — as real history does); then copies of the SFT policy are trained with GRPO and with PPO
against the sandbox verifier on the training tasks. Every stage is scored on held-out tasks the
policy never trained on.

The verdict compares RL with SFT on held-out sampled success, paired by (seed, task), with a 95%
bootstrap interval: "RL improved held-out success beyond SFT" only when the interval excludes zero.
"""

from __future__ import annotations

import copy
import functools
import time
from pathlib import Path
from typing import Any

from pydantic import Field
from rich.console import Console

from transferlab.coding_rl.experiments.common import (
    CodeScores,
    ModelChoice,
    StartModel,
    evaluate_code,
    fit_context,
    mean,
    model_record,
    open_experiment,
    opened_sandbox,
    policy_line,
    toy_tokenizer,
)
from transferlab.coding_rl.policies.model import TinyPolicyConfig
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.tasks.toy import OPERATIONS, noisy_demonstrations, toy_repo_tasks, toy_tasks
from transferlab.coding_rl.trainers.demos import SFTConfig, code_demonstration, train_sft
from transferlab.coding_rl.trainers.rl import RLConfig, train_rl
from transferlab.platform.harness import Experiment
from transferlab.platform.reports import Curve, Report, plot_bars, plot_curves
from transferlab.platform.stats import Interval, bootstrap_ci, bootstrap_diff_ci

EXPERIMENT = "coding-learn"


class LearnConfig(ModelChoice):
    """Settings of the does-it-learn experiment (the CPU preset is the default)."""

    seeds: list[int] = Field(default=[0, 1, 2], min_length=1, description="One full pipeline per seed.")
    operations: list[str] = Field(
        default=sorted(OPERATIONS), min_length=1, description="Toy operations the tasks use."
    )
    held_out_fraction: float = Field(default=0.25, gt=0, lt=1, description="Share of tasks held out.")
    demos_per_task: int = Field(default=10, ge=1, description="Demonstrations per training task.")
    demo_error_rate: float = Field(
        default=0.25, ge=0, lt=1, description="Share of demonstrations with a plausible bug."
    )
    policy: TinyPolicyConfig = Field(
        default_factory=lambda: TinyPolicyConfig(n_layer=2, d_model=64, n_head=4, max_positions=128),
        description="The tiny policy (its seed is replaced by each run's seed).",
    )
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=400, batch_size=16, lr=3e-3), description="SFT settings."
    )
    rl: RLConfig = Field(
        default_factory=lambda: RLConfig(
            steps=100, tasks_per_step=8, group_size=4, lr=5e-4, max_new_tokens=24, checkpoint_every=10
        ),
        description="RL settings shared by both algorithms (algo and seed are set per arm).",
    )
    algos: list[str] = Field(default=["grpo", "ppo"], min_length=1, description="RL algorithms to compare.")
    eval_samples: int = Field(default=8, ge=1, description="Sampled completions per held-out task.")
    curve_every: int = Field(
        default=10, ge=0, description="RL steps between held-out curve points; 0 = none."
    )
    backend: str = Field(default="forkserver", description="Sandbox backend for evaluation and rollouts.")


def _scores_dict(scores: CodeScores) -> dict[str, Any]:
    return {"task_ids": scores.task_ids, "sampled": scores.sampled, "greedy": scores.greedy}


def _evaluate_arm(
    model: Any, tokenizer: Any, held: list[Any], verifier: Verifier, samples: int
) -> dict[str, Any]:
    return _scores_dict(evaluate_code(model, tokenizer, held, verifier, samples=samples))


def _build_policy(config: LearnConfig, start: StartModel | None, tokenizer: Any, seed: int) -> Any:
    """The seed's starting policy: a copy of the starting model, or a fresh tiny one seeded by it."""
    if start is not None:
        return start.fresh()
    return config.policy.model_copy(update={"seed": seed}).create(tokenizer)


def run_learn(
    config: LearnConfig,
    runs_root: Path = Path("runs"),
    report_dir: Path | None = None,
    resume: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Run every arm (resuming a previous run if given) and write the report; returns the summary."""
    import torch

    exp, config, start = open_experiment(EXPERIMENT, config, runs_root, resume, console)
    config = config.model_copy(
        update={"rl": fit_context(config.rl, start, lambda line: exp.console.print(line, highlight=False))}
    )
    ops = tuple(config.operations)
    train, held = toy_tasks(config.held_out_fraction, 0, ops)
    if start is not None:
        tokenizer = start.tokenizer
    else:
        repo_train, repo_held = toy_repo_tasks(config.held_out_fraction, 0, ops)
        tokenizer = toy_tokenizer(train + held, repo_train + repo_held)
    torch.set_num_threads(1)
    results: dict[str, dict[str, Any]] = {}
    with exp.run, opened_sandbox(config.backend) as sandbox, exp.progress:
        verifier = Verifier(sandbox)
        bar = exp.progress.add_task("does it learn", total=len(config.seeds) * (2 + len(config.algos)))
        for seed in config.seeds:
            model = _build_policy(config, start, tokenizer, seed)

            def untrained(model: Any = model) -> dict[str, Any]:
                return _scores_dict(
                    evaluate_code(model, tokenizer, held, verifier, samples=config.eval_samples)
                )

            results[f"untrained-seed{seed}"] = exp.arm(f"untrained-seed{seed}", untrained)
            exp.progress.advance(bar)
            sft_dir = exp.arm_dir(f"sft-seed{seed}")
            if (sft_dir / "policy" / "config.json").exists():
                from transferlab.coding_rl.policies.model import load_policy

                model, _ = load_policy(sft_dir / "policy", device="cpu", dtype="float32")
            else:
                demos = [
                    code_demonstration(tokenizer, t, body, i)
                    for i, (t, body) in enumerate(
                        noisy_demonstrations(train, config.demos_per_task, config.demo_error_rate, seed)
                    )
                ]
                exp.progress.update(bar, description=f"SFT seed {seed}")
                with exp.arm_logger(f"sft-seed{seed}") as logger:
                    train_sft(model, tokenizer, demos, config.sft.model_copy(update={"seed": seed}), logger)
                from transferlab.coding_rl.policies.model import save_policy

                save_policy(model, tokenizer, sft_dir / "policy")
            results[f"sft-seed{seed}"] = exp.arm(
                f"sft-seed{seed}",
                functools.partial(_evaluate_arm, model, tokenizer, held, verifier, config.eval_samples),
            )
            exp.progress.advance(bar)
            for algo in config.algos:
                arm = f"{algo}-seed{seed}"
                exp.progress.update(bar, description=f"{algo.upper()} seed {seed}")
                results[arm] = exp.arm(
                    arm,
                    functools.partial(
                        _rl_arm, exp, config, arm, algo, seed, model, tokenizer, train, held, verifier
                    ),
                )
                exp.progress.advance(bar)
        summary = summarise(config, results, exp.elapsed_s())
        summary.update(
            {
                "held_out_tasks": len(held),
                "run_dir": str(exp.run.dir),
                "model": model_record(config.policy, start),
            }
        )
        exp.run.write_artifact_json("summary.json", summary)
        exp.write_report(build_report(config, results, summary, exp, start), report_dir)
    return summary


def _rl_arm(
    exp: Experiment,
    config: LearnConfig,
    arm: str,
    algo: str,
    seed: int,
    sft_model: Any,
    tokenizer: Any,
    train: list[Any],
    held: list[Any],
    verifier: Verifier,
) -> dict[str, Any]:
    """Train a copy of the SFT policy with ``algo``; held-out curve points every ``curve_every`` steps."""
    rl = config.rl.model_copy(update={"algo": algo, "seed": seed, "sandbox_backend": config.backend})
    curve: list[tuple[int, float]] = []
    t0 = time.perf_counter()

    def on_step(step: int, model: Any) -> dict[str, float]:
        if not config.curve_every or (step + 1) % config.curve_every:
            return {}
        point = mean(evaluate_code(model, tokenizer, held, verifier, samples=4, seed=999).sampled)
        curve.append((step + 1, point))
        return {"eval/held_out_success": point}

    with exp.arm_logger(arm, resume=True) as logger:
        result = train_rl(
            copy.deepcopy(sft_model),
            tokenizer,
            train,
            rl,
            exp.arm_dir(arm),
            logger,
            resume=True,
            on_step=on_step,
        )
    scores = evaluate_code(result.model, tokenizer, held, verifier, samples=config.eval_samples)
    out = _scores_dict(scores)
    out.update(
        {
            "curve": curve,
            "train_success": [h.get("rollout/success_rate", float("nan")) for h in result.history],
            "seconds": time.perf_counter() - t0,
        }
    )
    return out


# ------------------------------------------------------------------------------------------- summary


def _pooled(results: dict[str, dict[str, Any]], stage: str, seeds: list[int], key: str) -> list[float]:
    return [v for s in seeds for v in results[f"{stage}-seed{s}"][key]]


def summarise(config: LearnConfig, results: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    """Per stage: held-out sampled and greedy success with 95% intervals; RL - SFT paired differences."""
    stages = ["untrained", "sft", *config.algos]
    out: dict[str, Any] = {"seconds": seconds, "stages": {}, "vs_sft": {}}
    for stage in stages:
        sampled = _pooled(results, stage, config.seeds, "sampled")
        greedy = _pooled(results, stage, config.seeds, "greedy")
        out["stages"][stage] = {
            "sampled": _iv(bootstrap_ci(sampled, seed=0)),
            "greedy": _iv(bootstrap_ci(greedy, seed=0)),
            "per_seed": [mean(results[f"{stage}-seed{s}"]["sampled"]) for s in config.seeds],
        }
    sft = _pooled(results, "sft", config.seeds, "sampled")
    for algo in config.algos:
        diff = bootstrap_diff_ci(sft, _pooled(results, algo, config.seeds, "sampled"), paired=True, seed=0)
        out["vs_sft"][algo] = {**_iv(diff), "verdict": verdict(algo, diff)}
    return out


def _iv(interval: Interval) -> dict[str, float]:
    return {"estimate": interval.estimate, "low": interval.low, "high": interval.high, "n": interval.n}


def verdict(algo: str, diff: Interval) -> str:
    """The sentence the report leads with, from the paired RL - SFT interval."""
    pts = f"{diff.estimate * 100:+.1f} points [{diff.low * 100:+.1f}, {diff.high * 100:+.1f}]"
    if diff.low > 0:
        return f"{algo.upper()} improved held-out success beyond SFT: {pts}; the 95% interval excludes zero."
    if diff.high < 0:
        return f"{algo.upper()} made held-out success worse than SFT: {pts}; the interval excludes zero."
    return (
        f"Only that the pipeline ran: {algo.upper()} vs SFT is {pts} on held-out tasks, and the interval "
        "includes zero, so this run does not show that the model got better."
    )


def _to_interval(d: dict[str, float]) -> Interval:
    return Interval(d["estimate"], d["low"], d["high"], 0.95, int(d["n"]))


def build_report(
    config: LearnConfig,
    results: dict[str, dict[str, Any]],
    summary: dict[str, Any],
    exp: Experiment,
    start: StartModel | None = None,
) -> Report:
    """Markdown + HTML: the verdict, the table, bars with intervals, and the held-out curves."""
    n_held = len(results[f"sft-seed{config.seeds[0]}"]["task_ids"])
    report = Report("Does it learn? SFT vs SFT + RL on held-out coding tasks")
    for algo in config.algos:
        report.paragraph(summary["vs_sft"][algo]["verdict"])
    report.paragraph(
        f"{len(config.seeds)} seeds x {n_held} held-out toy tasks ({', '.join(config.operations)}; "
        f"constants 0-9; split by operation and constant). Success = the verifier passes every developer "
        f"and hidden test. Sampled success: {config.eval_samples} completions per task at temperature 1; "
        "greedy: one argmax completion. Intervals: 95% percentile bootstrap over (seed, task) items; the "
        "RL - SFT difference is paired by (seed, task)."
    )
    rows = []
    for stage, s in summary["stages"].items():
        rows.append(
            {
                "stage": stage,
                "held-out success (sampled)": _to_interval(s["sampled"]),
                "held-out success (greedy)": _to_interval(s["greedy"]),
                "per seed (sampled)": ", ".join(f"{v:.2f}" for v in s["per_seed"]),
            }
        )
    report.table(rows)
    report.table(
        [
            {"comparison": f"{a} - sft", "difference (sampled)": _to_interval(summary["vs_sft"][a])}
            for a in config.algos
        ]
    )
    report.figure(
        plot_bars(
            {k: _to_interval(v["sampled"]) for k, v in summary["stages"].items()},
            ylabel="held-out success (sampled)",
            title="Held-out success by stage",
        ),
        "stages",
        "Held-out sampled success per stage, 95% bootstrap intervals.",
    )
    curves = {}
    for algo in config.algos:
        points = [results[f"{algo}-seed{s}"]["curve"] for s in config.seeds]
        if points and all(points):
            steps = [p[0] for p in points[0]]
            ys = [mean([pts[i][1] for pts in points]) for i in range(len(steps))]
            sft0 = mean(summary["stages"]["sft"]["per_seed"])
            curves[algo] = Curve([0, *steps], [sft0, *ys])
    if curves:
        report.figure(
            plot_curves(curves, xlabel="RL step", ylabel="held-out success (4 samples/task)"),
            "curves",
            "Held-out success during RL, mean over seeds (step 0 = the SFT policy).",
        )
    report.heading("Settings")
    report.bullets(
        [
            policy_line(config.policy, start),
            f"SFT: {config.sft.steps} steps x {config.sft.batch_size}, lr {config.sft.lr}; "
            f"{config.demos_per_task} demonstrations per training task, "
            f"{config.demo_error_rate:.0%} with a bug",
            f"RL: {config.rl.steps} steps x {config.rl.tasks_per_step} tasks x G={config.rl.group_size}, "
            f"lr {config.rl.lr}, clip {config.rl.clip_low}/{config.rl.clip_high}, KL {config.rl.kl_coef}, "
            f"rollouts on {config.rl.rollout_backend} workers x {config.rl.rollout_workers}",
            f"wall time: {summary['seconds'] / 60:.1f} min on this machine (2 cores)",
            f"run directory: {exp.run.dir}",
        ]
    )
    model = f" --model {start.path}" if start is not None else ""
    report.code(
        f"transferlab coding experiment learn --preset cpu{model} --report-dir docs/results/coding_learn"
    )
    return report
