"""Does it learn? Untrained vs SFT vs SFT + GRPO vs SFT + PPO on held-out tasks.

The project's readiness checklist asks to tell "the pipeline runs" apart from "the model really got
better". Per seed, a tiny policy is built from scratch (or, with ``model_path``, a copy of that local
Hugging Face model is taken); it is fine-tuned on demonstrations from an
*imperfect* demonstrator (a share of its bodies carry a plausible bug — wrong operator, constant off
by one — as real history does); then copies of the SFT policy are trained with GRPO and with PPO
against the sandbox verifier on the training tasks. Every stage is scored on held-out tasks the
policy never trained on.

The verdict compares RL with SFT on held-out sampled success, paired on the same seeds and tasks,
with a 95% bootstrap interval clustered by seed (:mod:`transferlab.platform.results`): "improved"
only when the interval excludes zero, otherwise "pipeline ran, no detectable change" with the minimum
detectable effect. Every figure of the report comes from the run's ``result.json``.
"""

from __future__ import annotations

import copy
import functools
import time
from pathlib import Path
from typing import Any

from pydantic import Field
from rich.console import Console

from transferlab.agent_rl.policies.model import TinyPolicyConfig
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.sft import SFTConfig, train_sft
from transferlab.agent_rl.start import (
    ModelChoice,
    StartModel,
    fit_context,
    model_record,
    open_experiment,
    policy_line,
)
from transferlab.coding_rl.experiments.common import CodeScores, evaluate_code, opened_sandbox, toy_tokenizer
from transferlab.coding_rl.sandbox.verifier import Verifier
from transferlab.coding_rl.single_step import code_demonstration
from transferlab.coding_rl.tasks.toy import OPERATIONS, noisy_demonstrations, toy_repo_tasks, toy_tasks
from transferlab.coding_rl.training import train_rl
from transferlab.platform.harness import Experiment, experiment_command
from transferlab.platform.held_out import (
    compare,
    comparison_rows,
    held_out,
    held_out_interval,
    mean,
    seed_estimate,
    write_results,
)
from transferlab.platform.reports import Curve, Report, plot_bars, plot_curves
from transferlab.platform.results import Arm, Comparison, Result
from transferlab.platform.stats import Interval

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

    from transferlab.coding_rl.experiments.presets import LEARN_PRESETS

    exp, config, start = open_experiment(EXPERIMENT, config, runs_root, resume, console)
    command = experiment_command(
        "transferlab coding experiment learn", config, LEARN_PRESETS, exp.run.dir, runs_root, report_dir
    )
    config = config.model_copy(
        update={"rl": fit_context(config.rl, start, lambda line: exp.console.print(line, highlight=False))}
    )
    ops = tuple(config.operations)
    train, held = toy_tasks(config.held_out_fraction, 0, ops)
    if start is not None:
        tokenizer = start.tokenizer
    else:
        repo_train, _ = toy_repo_tasks(config.held_out_fraction, 0, ops)
        tokenizer = toy_tokenizer(train, repo_train)  # training text only
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
                from transferlab.agent_rl.policies.model import load_policy

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
                from transferlab.agent_rl.policies.model import save_policy

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
        result = build_result(config, results, command)
        summary = summarise(result, exp.elapsed_s())
        summary.update(
            {
                "held_out_tasks": len(held),
                "run_dir": str(exp.run.dir),
                "model": model_record(config.policy, start),
            }
        )
        exp.run.write_artifact_json("summary.json", summary)
        write_results(exp, result, report_dir)
        exp.write_report(build_report(config, results, result, summary["seconds"], exp, start), report_dir)
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


def build_result(config: LearnConfig, results: dict[str, dict[str, Any]], command: str) -> Result:
    """The run's result.json: per stage, held-out sampled success clustered by seed; RL - SFT paired.

    Each RL - SFT comparison comes clustered by seed (the primary one) and by (seed, task); the greedy
    difference is given clustered by seed. SFT - untrained shows whether fine-tuning taught anything.
    """
    seeds = config.seeds
    sampled = {
        stage: held_out(results, stage, seeds, "sampled") for stage in ["untrained", "sft", *config.algos]
    }
    arms: dict[str, Arm] = {}
    for stage, data in sampled.items():
        greedy = held_out(results, stage, seeds, "greedy")
        arms[stage] = Arm.model_validate(
            {
                "held_out_success": seed_estimate(data),
                "n_episodes": len(data.values) * config.eval_samples,
                "held_out_success_greedy": seed_estimate(greedy).model_dump(),
                "per_seed": [mean(results[f"{stage}-seed{s}"]["sampled"]) for s in seeds],
                "held_out_tasks": len(data.values) // len(seeds),
            }
        )
    comparisons = compare("sft - untrained", sampled["untrained"], sampled["sft"])
    for algo in config.algos:
        comparisons += compare(f"{algo} - sft", sampled["sft"], sampled[algo], ("seed", "seed+task"))
        comparisons += compare(
            f"{algo} - sft (greedy)",
            held_out(results, "sft", seeds, "greedy"),
            held_out(results, algo, seeds, "greedy"),
        )
    return Result(
        experiment=EXPERIMENT,
        command=command,
        seeds=list(seeds),
        settings=config.model_dump(mode="json"),
        arms=arms,
        comparisons=comparisons,
    )


def summarise(result: Result, seconds: float) -> dict[str, Any]:
    """The summary.json figures: the result, and per algorithm its seed-clustered verdict on RL - SFT."""
    return {
        "seconds": seconds,
        "result": result.model_dump(mode="json"),
        "stages": {stage: _stage(arm) for stage, arm in result.arms.items()},
        "vs_sft": {
            algo: {**primary(result, algo).model_dump(mode="json"), "verdict": verdict(primary(result, algo))}
            for algo in result.settings["algos"]
        },
    }


def _stage(arm: Arm) -> dict[str, Any]:
    """One stage's summary.json entry: sampled and greedy success as estimate/low/high, per seed."""
    extra = arm.model_extra or {}
    greedy = extra["held_out_success_greedy"]
    return {
        "sampled": {
            "estimate": arm.held_out_success.estimate,
            "low": arm.held_out_success.ci[0],
            "high": arm.held_out_success.ci[1],
        },
        "greedy": {"estimate": greedy["estimate"], "low": greedy["ci"][0], "high": greedy["ci"][1]},
        "per_seed": extra["per_seed"],
    }


def primary(result: Result, algo: str) -> Comparison:
    """``{algo} - sft`` on held-out sampled success, clustered by seed (the comparison the verdict uses)."""
    return next(c for c in result.comparisons if c.name == f"{algo} - sft" and c.cluster == "seed")


def verdict(comparison: Comparison) -> str:
    """The sentence the report leads with: "improved" only when the interval excludes zero, else
    "pipeline ran, no detectable change" with the minimum detectable effect (:func:`stats.verdict`)."""
    return f"Held-out sampled success, {comparison.sentence()}."


def build_report(
    config: LearnConfig,
    results: dict[str, dict[str, Any]],
    result: Result,
    seconds: float,
    exp: Experiment,
    start: StartModel | None = None,
) -> Report:
    """Markdown + HTML from ``result``: the verdicts, the tables, bars with intervals, held-out curves."""
    n_held = result.arms["sft"].model_extra["held_out_tasks"] if result.arms["sft"].model_extra else 0
    report = Report("Does it learn? SFT vs SFT + RL on held-out coding tasks")
    for algo in config.algos:
        report.paragraph(verdict(primary(result, algo)))
    report.paragraph(
        f"{len(config.seeds)} seeds x {n_held} held-out toy tasks ({', '.join(config.operations)}; "
        f"constants 0-9; split by operation and constant). Success = the verifier passes every developer "
        f"and hidden test. Sampled success: {config.eval_samples} completions per task at temperature 1; "
        "greedy: one argmax completion. Intervals: 95% two-stage bootstrap clustered by seed (seeds "
        "resampled, then tasks within each drawn seed); differences are paired on the same seeds, and "
        "RL - SFT is also given with (seed, task) pairs as clusters. MDE: the smallest true difference "
        "the interval's width would detect with 80% power. With few seeds a percentile interval is too "
        "narrow, and so is its MDE."
    )
    rows = []
    for stage, arm in result.arms.items():
        extra = arm.model_extra or {}
        greedy = extra["held_out_success_greedy"]
        rows.append(
            {
                "stage": stage,
                "held-out success (sampled)": held_out_interval(result, stage),
                "held-out success (greedy)": Interval(
                    greedy["estimate"], greedy["ci"][0], greedy["ci"][1], 0.95, arm.n_episodes
                ),
                "per seed (sampled)": ", ".join(f"{v:.2f}" for v in extra["per_seed"]),
            }
        )
    report.table(rows)
    report.table(comparison_rows(result))
    report.figure(
        plot_bars(
            {stage: held_out_interval(result, stage) for stage in result.arms},
            ylabel="held-out success (sampled)",
            title="Held-out success by stage",
        ),
        "stages",
        "Held-out sampled success per stage, 95% bootstrap intervals clustered by seed.",
    )
    curves = {}
    sft0 = result.arms["sft"].held_out_success.estimate
    for algo in config.algos:
        points = [results[f"{algo}-seed{s}"]["curve"] for s in config.seeds]
        if points and all(points):
            steps = [p[0] for p in points[0]]
            ys = [mean([pts[i][1] for pts in points]) for i in range(len(steps))]
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
            f"wall time: {seconds / 60:.1f} min on this machine (2 cores)",
            f"run directory: {exp.run.dir}",
            "figures: result.json (written with this report)",
        ]
    )
    report.code(result.command)
    return report
