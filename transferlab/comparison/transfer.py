"""The transfer experiment: does a tool-use policy trained on coding learn ops analysis faster?

Per seed, two arms with the same architecture, tokenizer and ops budget (the same
:class:`~transferlab.comparison.ops_training.OpsTrainingConfig`: SFT examples and steps,
GRPO steps x tasks x group size; in the ``cpu`` preset, ops-learn's recipe field for field):

* **transfer (A)**: a policy trained on `transferlab/CodeRepair-v0` toy repositories (SFT on the
  coding expert's read / edit / test / submit episodes of every training repository, then multi-turn
  GRPO with sparse rewards: the coding experiments' pieces), then fine-tuned on
  `transferlab/OpsAnalysis-v0` with :func:`train_ops`;
* **scratch (B)**: a freshly initialised policy trained on OpsAnalysis-v0 with :func:`train_ops`.

Both arms start from the tiny from-scratch policy (``ops.policy``) on one BPE trained here on coding
and ops texts (the CPU default), or, with ``model_path`` (``--model PATH``), from that local Hugging
Face causal LM and its own tokenizer: arm A fine-tunes a copy of it on coding first, arm B is the
model itself trained on ops ("scratch" then means: without the coding stage).

Measured: held-out success curves (rubric >= 8) against ops GRPO episodes with 95% bootstrap
intervals over seeds x episodes (:mod:`transferlab.platform.stats`); GRPO episodes each seed needs to
reach ``threshold`` held-out success (:func:`~transferlab.platform.stats.first_crossing`; 0 when the
SFT policy is already there); and the workflow habits, from the trajectories:

=======================  ==========================  ===========================================
coding habit             ops habit                   ops measure (:func:`ops_habits`)
=======================  ==========================  ===========================================
read before write        query before concluding     a successful query precedes the report
test after modify        check before reporting      every cause named was checked first
=======================  ==========================  ===========================================

shown as the share of held-out episodes with each habit before ops training, after ops SFT (early in
ops fine-tuning), after the first GRPO evaluation and at the end, for A vs B; the coding policy's own
habits (:func:`coding_habits`) are reported too.

``result.json`` (:mod:`transferlab.platform.results`) holds both arms' held-out success after ops SFT
and at the end with intervals clustered by seed, and ``transfer - scratch`` at each, paired on seeds and
scenarios, clustered by seed and by (seed, scenario), each with its minimum detectable effect; the
coding policy's habits over all its episodes and over the episodes where it changed a file
(:func:`habits_when_writing`) are in its settings. The report (Markdown + HTML, with plots) is written
from it to the run directory and optionally copied to ``--report-dir``.

    transferlab ops experiment transfer --preset cpu --report-dir docs/results/transfer
    transferlab ops experiment transfer --preset cpu --model PATH   # a local HF model
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from rich.console import Console

from transferlab.agent_rl.policies.model import save_policy
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.sft import SFTConfig
from transferlab.agent_rl.start import ModelChoice, StartModel, fit_context, model_record, open_experiment
from transferlab.coding_rl.experiments.common import opened_sandbox
from transferlab.coding_rl.tasks.toy import OPERATIONS
from transferlab.comparison.ops_learn import OpsLearnConfig, per_task
from transferlab.comparison.ops_training import (
    OpsTrainingConfig,
    PrefixLogger,
    fresh_policy,
    ops_tasks,
    ops_test_config,
    shared_tokenizer,
    train_ops,
)
from transferlab.platform.config import BaseConfig, EvalSplit, eval_split_field
from transferlab.platform.held_out import (
    HeldOut,
    compare,
    comparison_rows,
    mean,
    seed_estimate,
    write_results,
)
from transferlab.platform.io import atomic_write_json
from transferlab.platform.reports import Curve, Report, plot_bars, plot_curves
from transferlab.platform.results import Arm, Comparison, Result
from transferlab.platform.stats import Interval, bootstrap_ci, bootstrap_diff_ci, first_crossing
from transferlab.platform.trajectory import Trajectory

ARMS = ("transfer", "scratch")
HABIT_PAIRS = (
    ("read_before_write", "query_before_concluding"),
    ("test_after_modify", "check_before_reporting"),
)
STAGES = ("start", "sft", "first_rl", "end")


def _coding_rl() -> RLConfig:
    """The dense-vs-sparse experiment's GRPO settings with sparse rewards, rollouts inline and no
    checkpoints. Sparse, because from the SFT policy below dense rewards took seed 0's held-out
    coding success from 0.25 to 0.00 in 30 steps (docs/pilots/transfer_source.md)."""
    from transferlab.coding_rl.experiments.agent import AgentExperimentConfig

    return AgentExperimentConfig().rl.model_copy(
        update={"checkpoint_every": 0, "rollout_backend": "inline", "rollout_workers": 1, "rewards": "sparse"}
    )


def _coding_sft() -> SFTConfig:
    """Ops-learn's SFT recipe (cosine schedule, the copy and context terms a from-scratch policy needs
    to quote the file it read): on every training repository it took seed 0's held-out coding success
    from 0.25 (150 constant-lr steps on 20 demos) to 0.96 (docs/pilots/transfer_source.md)."""
    return SFTConfig(steps=400, batch_size=8, lr=3e-3, schedule="cosine", context_weight=0.5, copy_weight=0.5)


class CodingPretrainConfig(BaseConfig):
    """Arm A's coding stage: SFT on expert repairs of every training toy repository, then GRPO
    (sparse rewards) on CodeRepair-v0 toy repos."""

    operations: list[str] = Field(default=sorted(OPERATIONS), min_length=1, description="Toy operations.")
    held_out_fraction: float = Field(
        default=0.25,
        gt=0,
        lt=1,
        description="Share of coding tasks outside training: half validation, half test.",
    )
    eval_split: EvalSplit = eval_split_field("the source policy is")
    demo_tasks: int = Field(
        default=38,
        ge=1,
        description="Coding training tasks with an expert demo (38: every training toy repository; "
        "validation and test hold one operation's each).",
    )
    sft: SFTConfig = Field(default_factory=_coding_sft, description="Coding SFT.")
    rl: RLConfig = Field(default_factory=_coding_rl, description="Coding GRPO (sparse rewards).")
    eval_episodes: int = Field(default=2, ge=1, description="Held-out coding episodes per task.")
    backend: str = Field(default="forkserver", description="Sandbox backend.")


def _transfer_ops() -> OpsTrainingConfig:
    """The ops budget of the CPU preset: the ops-learn recipe (``transferlab ops experiment learn
    --preset cpu``: SFT on 40 compact expert reports, GRPO with GiGPO step credit on 160 undemonstrated
    scenarios, 1,024 episodes), scored on its 60 held-out scenarios (120 episodes per arm and seed, the
    same sampling seed and temperature) so that a 10-point difference is within reach of the
    seed-clustered interval; held-out points before training, after SFT, after 16 GRPO steps and at
    the end. Only ``checkpoint_every`` differs (0: an ops arm is redone whole on resume)."""
    recipe = OpsLearnConfig()
    return OpsTrainingConfig(
        train_tasks=recipe.train_tasks,
        sft_tasks=recipe.sft_tasks,
        held_out_tasks=recipe.held_out_tasks,
        eval_split=recipe.eval_split,
        compact_reports=recipe.compact_reports,
        practice="undemonstrated",
        policy=recipe.policy,
        vocab_size=recipe.vocab_size,
        sft=recipe.sft,
        rl=recipe.rl.model_copy(update={"checkpoint_every": 0}),
        eval_every=recipe.curve_every,
        eval_episodes=recipe.eval_episodes,
        eval_temperature=recipe.eval_temperature,
    )


class TransferConfig(ModelChoice):
    """The transfer experiment (the CPU preset is the default)."""

    seeds: list[int] = Field(
        default=[0, 1, 2, 3, 4],
        min_length=1,
        description="One A/B pair per seed; five, fixed before the run (a headline result).",
    )
    ops: OpsTrainingConfig = Field(
        default_factory=_transfer_ops, description="The ops budget, identical for both arms."
    )
    coding: CodingPretrainConfig = Field(
        default_factory=CodingPretrainConfig, description="Arm A's coding stage."
    )
    threshold: float = Field(
        default=0.3, gt=0, le=1, description="Held-out success rate whose first crossing is compared."
    )


def transfer_test_config() -> TransferConfig:
    """The test preset: one seed, every stage for a step or two (its numbers mean nothing)."""
    return TransferConfig(
        seeds=[0],
        ops=ops_test_config(),
        coding=CodingPretrainConfig(
            operations=["add", "mul", "sub"],  # three distinct edits: train, validation, test
            demo_tasks=2,
            sft=SFTConfig(steps=3, batch_size=2),
            rl=_coding_rl().model_copy(
                update={
                    "steps": 1,
                    "tasks_per_step": 2,
                    "group_size": 2,
                    "max_new_tokens": 16,
                    "max_steps": 3,
                }
            ),
            eval_episodes=1,
        ),
    )


PRESETS: dict[str, Any] = {"cpu": TransferConfig, "smoke": transfer_test_config, "test": transfer_test_config}
"""``test`` is ``smoke``'s earlier name."""


# ------------------------------------------------------------------------------------------ habits


def coding_habits(traj: Trajectory) -> dict[str, bool]:
    """The coding workflow habits of one CodeRepair-v0 episode, from its actions and observations.

    * ``read_before_write``: the episode changed a file, and read that file before its first change;
    * ``test_after_modify``: the episode changed a file and ran the tests after its last change.
    """
    read: set[str] = set()
    first_write_read: bool | None = None
    tested_after_write = False
    for step in traj.steps:
        try:
            call = json.loads(step.action_text)
        except json.JSONDecodeError:
            continue
        if not isinstance(call, dict):
            continue
        action, path = call.get("action"), str(call.get("path", ""))
        if action == "read_file" and step.observation_text.startswith("==="):
            read.add(path)
        elif action in ("write_file", "edit_file") and step.observation_text.startswith("wrote"):
            if first_write_read is None:
                first_write_read = path in read
            tested_after_write = False
        elif action == "run_tests" and first_write_read is not None:
            tested_after_write = True
    return {
        "read_before_write": bool(first_write_read),
        "test_after_modify": first_write_read is not None and tested_after_write,
    }


def habit_shares(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Share of coding episodes showing each coding habit."""
    rows = [coding_habits(t) for t in trajs]
    n = max(len(rows), 1)
    return {k: sum(r[k] for r in rows) / n for k in ("read_before_write", "test_after_modify")}


def wrote(traj: Trajectory) -> bool:
    """Whether the episode changed a file (a write or edit the env answered with ``wrote``)."""
    for step in traj.steps:
        try:
            call = json.loads(step.action_text)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(call, dict)
            and call.get("action") in ("write_file", "edit_file")
            and step.observation_text.startswith("wrote")
        ):
            return True
    return False


def habits_when_writing(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The habits among the episodes that changed a file (the habit is what the policy does when it
    writes: read that file first, test after its last change), and the share of episodes that wrote.
    A policy that writes in 30% of its episodes and always reads first has 30% and 100% here."""
    writing = [t for t in trajs if wrote(t)]
    out = {"wrote": len(writing) / max(len(trajs), 1)}
    if writing:
        out.update(habit_shares(writing))
    return out


# ------------------------------------------------------------------------------------------- arms


def coding_tasks(cc: CodingPretrainConfig) -> tuple[list[Any], list[Any]]:
    """The coding stage's training toy repositories and those of ``cc.eval_split``."""
    from transferlab.coding_rl.tasks.toy import toy_repo_splits

    half = cc.held_out_fraction / 2
    splits = toy_repo_splits(0, tuple(cc.operations), validation_fraction=half, test_fraction=half)
    return splits.scored(cc.eval_split)


def coding_demos(cc: CodingPretrainConfig, train: list[Any], tokenizer: Any, sandbox: Any) -> list[Any]:
    """The expert's repairs of the first ``cc.demo_tasks`` training repositories (SFT examples)."""
    from transferlab.agent_rl.sft import scripted_demonstration
    from transferlab.coding_rl.env.code_repair import CodeRepairEnv
    from transferlab.coding_rl.tasks.toy import toy_repo_plan

    env = CodeRepairEnv(train, sandbox=sandbox, max_steps=cc.rl.max_steps)
    return [scripted_demonstration(env, t, toy_repo_plan(t), tokenizer) for t in train[: cc.demo_tasks]]


def coding_scores(
    model: Any, tokenizer: Any, held: list[Any], cc: CodingPretrainConfig, sandbox: Any
) -> dict[str, Any]:
    """Held-out coding episodes (``cc.eval_episodes`` per repository, T=1, sampling seed 12,345):
    success per episode, the habit shares and the habits among episodes that changed a file."""
    from transferlab.agent_rl.episodes import policy_episodes
    from transferlab.agent_rl.policies.generation import SamplingConfig
    from transferlab.coding_rl.env.code_repair import CodeRepairEnv

    rl = cc.rl
    flat = [t for t in held for _ in range(cc.eval_episodes)]
    envs = [CodeRepairEnv(held, max_steps=rl.max_steps, sandbox=sandbox) for _ in flat]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=rl.max_new_tokens, seed=12_345)
    trajs = policy_episodes(model, tokenizer, envs, flat, sampling, rl.max_context)
    return {
        "held_out": [float(bool(t.steps[-1].info.get("success"))) for t in trajs],
        "habits": habit_shares(trajs),
        "habits_when_writing": habits_when_writing(trajs),
    }


def coding_arm(
    exp: Any,
    config: TransferConfig,
    tokenizer: Any,
    sandbox: Any,
    seed: int,
    start: StartModel | None = None,
) -> dict[str, Any]:
    """Arm A's coding stage: SFT on expert repairs, GRPO on CodeRepair-v0; held-out success, habits.

    It trains a copy of ``start`` when given, else a fresh tiny ``config.ops.policy`` seeded by ``seed``.
    """
    from transferlab.agent_rl.sft import train_sft
    from transferlab.coding_rl.training import train_rl

    cc, arm = config.coding, f"coding-seed{seed}"
    train, held = coding_tasks(cc)
    if start is not None:
        model = start.fresh()
    else:
        model = config.ops.policy.model_copy(update={"seed": seed}).create(tokenizer)
    rl = cc.rl.model_copy(update={"seed": seed, "sandbox_backend": cc.backend})
    demos = coding_demos(cc, train, tokenizer, sandbox)
    with exp.arm_logger(arm) as logger:
        log = PrefixLogger(logger, "coding/")
        train_sft(model, tokenizer, demos, cc.sft.model_copy(update={"seed": seed}), log)
        result = train_rl(model, tokenizer, train, rl, exp.arm_dir(arm) / "rl", log, step_offset=cc.sft.steps)
    save_policy(result.model, tokenizer, exp.arm_dir(arm) / "policy")
    return {
        **coding_scores(result.model, tokenizer, held, cc, sandbox),
        "train_success": [h.get("rollout/success_rate", float("nan")) for h in result.history],
        "policy": str(exp.arm_dir(arm) / "policy"),
    }


def ops_arm(exp: Any, config: TransferConfig, arm: str, seed: int, init_from: Path) -> dict[str, Any]:
    """Train on OpsAnalysis-v0 from ``init_from`` with the shared ops budget; the result as JSON."""
    with exp.arm_logger(arm) as logger:
        res = train_ops(config.ops.model_copy(update={"seed": seed}), exp.arm_dir(arm), init_from, logger)
    return res.to_dict()


def run_transfer(
    config: TransferConfig,
    runs_root: Path = Path("runs"),
    report_dir: Path | None = None,
    resume: Path | None = None,
    console: Console | None = None,
    only_seeds: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Per seed: the coding policy, then the transfer and scratch ops arms; summary and report.

    ``only_seeds`` computes just those of the config's seeds, so two processes can share one run
    directory (start the second with ``resume`` once the first has saved ``tokenizer/``). The summary
    and report are written by whichever process finds every arm finished; the others return ``{}``.
    """
    exp, config, start = open_experiment(
        "transfer", config, runs_root, resume, console, only_seeds is not None
    )
    config = _fit_contexts(config, start, lambda line: exp.console.print(line, highlight=False))
    torch.set_num_threads(1)
    results: dict[str, dict[str, Any]] = {}
    with exp.run, opened_sandbox(config.coding.backend) as sandbox, exp.progress:
        tokenizer = start.tokenizer if start is not None else _tokenizer(exp.run.dir / "tokenizer", config)
        mine = [s for s in config.seeds if only_seeds is None or s in only_seeds]
        bar = exp.progress.add_task("transfer", total=3 * len(mine))
        for seed in mine:
            exp.progress.update(bar, description=f"coding seed {seed}")
            coding = exp.arm(
                f"coding-seed{seed}",
                functools.partial(coding_arm, exp, config, tokenizer, sandbox, seed, start),
            )
            results[f"coding-seed{seed}"] = coding
            exp.progress.advance(bar)
            exp.progress.update(bar, description=f"ops transfer seed {seed}")
            results[f"transfer-seed{seed}"] = exp.arm(
                f"transfer-seed{seed}",
                functools.partial(ops_arm, exp, config, f"transfer-seed{seed}", seed, Path(coding["policy"])),
            )
            exp.progress.advance(bar)
            exp.progress.update(bar, description=f"ops scratch seed {seed}")
            init = Path(start.path) if start is not None else exp.arm_dir(f"scratch-seed{seed}") / "init"
            if start is None and not (init / "config.json").exists():
                fresh_policy(config.ops.model_copy(update={"seed": seed}), tokenizer, init)
            results[f"scratch-seed{seed}"] = exp.arm(
                f"scratch-seed{seed}",
                functools.partial(ops_arm, exp, config, f"scratch-seed{seed}", seed, init),
            )
            exp.progress.advance(bar)
        for seed in config.seeds:
            for arm in ("coding", *ARMS):
                done = results.get(f"{arm}-seed{seed}") or exp.result(f"{arm}-seed{seed}")
                if done is None:
                    exp.console.print(
                        f"{arm} seed {seed} is not finished yet: resume {exp.run.dir} to finish"
                    )
                    return {}
                results[f"{arm}-seed{seed}"] = done
        flat = {
            f"{arm}-seed{s}": f
            for arm in ARMS
            for s in config.seeds
            if (f := flat_group_share(exp.run.dir / "arms" / f"{arm}-seed{s}" / "metrics.parquet"))
            is not None
        }
        summary = summarise(config, results, exp.elapsed_s(), flat)
        summary["run_dir"] = str(exp.run.dir)
        summary["model"] = model_record(config.ops.policy, start)
        result = build_result(config, results, transfer_command(config, report_dir, exp.run.dir))
        summary["verdicts"] = {c.name: c.sentence() for c in result.comparisons if c.cluster == "seed"}
        exp.run.write_artifact_json("summary.json", summary)
        write_results(exp, result, report_dir)
        report = transfer_report(config, results, summary, exp.run.dir, start, result)
        exp.write_report(report, report_dir)
        if report_dir is not None:  # `transferlab compare` reads the committed summary
            atomic_write_json(Path(report_dir) / "summary.json", summary)
    return summary


def _fit_contexts(
    config: TransferConfig, start: StartModel | None, say: Callable[[str], None]
) -> TransferConfig:
    """Both stages' ``max_context`` clipped to the starting model's context limit (warning lines)."""
    coding = config.coding.model_copy(update={"rl": fit_context(config.coding.rl, start, say)})
    ops = config.ops.model_copy(update={"rl": fit_context(config.ops.rl, start, say)})
    return config.model_copy(update={"coding": coding, "ops": ops})


def _tokenizer(directory: Path, config: TransferConfig) -> Any:
    """The shared coding + ops tokenizer, trained once per run and saved with it."""
    from transformers import PreTrainedTokenizerFast

    if (directory / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(str(directory))
    train, _ = ops_tasks(config.ops.train_tasks, config.ops.held_out_tasks)
    tokenizer = shared_tokenizer(
        train[: config.ops.sft_tasks], config.ops.vocab_size, config.coding.operations
    )
    tokenizer.save_pretrained(str(directory))
    return tokenizer


# ---------------------------------------------------------------------------------------- summary


def flat_group_share(metrics: Path) -> float | None:
    """Mean of the trainer's ``train/frac_reward_zero_std`` over an arm's GRPO steps, or None."""
    import pandas as pd

    if not metrics.exists():
        return None
    frame = pd.read_parquet(metrics)
    values = frame.loc[frame["key"].str.endswith("train/frac_reward_zero_std"), "value"]
    return float(values.mean()) if len(values) else None


def _stage_point(curve: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    if stage == "first_rl":
        rl = [p for p in curve if p["stage"] == "rl"]
        return rl[0] if rl else None
    if stage == "end":
        return curve[-1]
    return next((p for p in curve if p["stage"] == stage), None)


def _iv(values: Sequence[float]) -> dict[str, Any]:
    return bootstrap_ci(list(values), seed=0).__dict__ if values else {}


def _arm_summary(config: TransferConfig, rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"stages": {}, "episodes_to_threshold": []}
    for stage in STAGES:
        points = [p for r in rows if (p := _stage_point(r["curve"], stage)) is not None]
        if not points:
            continue
        out["stages"][stage] = {
            "success": _iv([v for p in points for v in p["per_episode"]]),
            "rubric": sum(p["rubric"] for p in points) / len(points),
            "habits": {
                h: _iv([v for p in points for v in p["habit_episodes"][h]])
                for h in points[0]["habit_episodes"]
            },
        }
    for r in rows:
        pts = [p for p in r["curve"] if p["stage"] != "start"]
        x, y = [p["episodes"] for p in pts], [p["success"] for p in pts]
        out["episodes_to_threshold"].append(first_crossing(x, y, config.threshold) if x else None)
    return out


def summarise(
    config: TransferConfig,
    results: dict[str, dict[str, Any]],
    seconds: float,
    flat: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Per arm: held-out success, rubric and habits per stage, episodes to the threshold; A - B.

    Also per arm: the RL gain (end minus after-SFT held-out success, paired by episode), the ops
    training CPU-hours (one thread per process) and, from ``flat`` (arm-seed -> mean share of GRPO
    groups with zero reward variance, :func:`flat_group_share`), the share of non-flat groups.
    """
    out: dict[str, Any] = {"seconds": seconds, "threshold": config.threshold, "arms": {}}
    for arm in ARMS:
        out["arms"][arm] = _arm_summary(config, [results[f"{arm}-seed{s}"] for s in config.seeds])
    coding = [results[f"coding-seed{s}"] for s in config.seeds]
    out["coding"] = {
        "held_out": _iv([v for c in coding for v in c["held_out"]]),
        "habits": {k: sum(c["habits"][k] for c in coding) / len(coding) for k in coding[0]["habits"]},
    }
    final = {
        arm: [v for s in config.seeds for v in results[f"{arm}-seed{s}"]["curve"][-1]["per_episode"]]
        for arm in ARMS
    }
    for arm in ARMS:
        rows = [results[f"{arm}-seed{s}"] for s in config.seeds]
        sft = [
            v for r in rows for v in (_stage_point(r["curve"], "sft") or {"per_episode": []})["per_episode"]
        ]
        if len(sft) == len(final[arm]) and sft:
            out["arms"][arm]["rl_gain"] = bootstrap_diff_ci(sft, final[arm], paired=True, seed=0).__dict__
        out["arms"][arm]["rubric_gain_per_seed"] = [
            r["curve"][-1]["rubric"] - (_stage_point(r["curve"], "sft") or {"rubric": float("nan")})["rubric"]
            for r in rows
        ]
        out["arms"][arm]["ops_cpu_hours"] = sum(float(r.get("seconds", 0.0)) for r in rows) / 3600
        shares = [f for s in config.seeds if (f := (flat or {}).get(f"{arm}-seed{s}")) is not None]
        if shares:
            out["arms"][arm]["nonflat_group_share"] = 1.0 - sum(shares) / len(shares)
    out["transfer_minus_scratch"] = bootstrap_diff_ci(
        final["scratch"], final["transfer"], paired=True, seed=0
    ).__dict__
    return out


# ------------------------------------------------------------------------------------------ result

RESULT_STAGES = {"sft": "after ops SFT", "end": "after ops GRPO"}
"""The held-out points result.json compares the arms at (``end`` is the last point of the curve)."""


def _held(config: TransferConfig, results: dict[str, dict[str, Any]], arm: str, stage: str) -> HeldOut:
    """One arm's held-out success at ``stage``: one value per (seed, scenario), the episodes averaged."""
    values: list[float] = []
    seeds: list[int] = []
    pairs: list[tuple[int, int]] = []
    for s in config.seeds:
        point = _stage_point(results[f"{arm}-seed{s}"]["curve"], stage)
        if point is None:
            raise ValueError(f"{arm} seed {s} has no held-out point at stage {stage!r}")
        per_scenario = per_task(point["per_episode"], config.ops.eval_episodes)
        values += per_scenario
        seeds += [s] * len(per_scenario)
        pairs += [(s, i) for i in range(len(per_scenario))]
    return HeldOut(values, seeds, pairs)


def _source(config: TransferConfig, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Arm A's coding policies: held-out coding success, the habits over all episodes and among the
    episodes that wrote a file (mean over seeds)."""
    rows = [results[f"coding-seed{s}"] for s in config.seeds]
    when = [r["habits_when_writing"] for r in rows if "habits_when_writing" in r]
    keys = sorted({k for w in when for k in w})
    return {
        "held_out_success": mean([v for r in rows for v in r["held_out"]]),
        "per_seed": [mean(r["held_out"]) for r in rows],
        "habits": {k: mean([r["habits"][k] for r in rows]) for k in rows[0]["habits"]},
        "habits_when_writing": {k: mean([w[k] for w in when if k in w]) for k in keys},
    }


def build_result(config: TransferConfig, results: dict[str, dict[str, Any]], command: str) -> Result:
    """Both arms' held-out success after ops SFT (``*_sft``) and at the end, with intervals clustered by
    seed; ``transfer - scratch`` at each, paired on the same seeds and scenarios, clustered by seed
    (primary) and by (seed, scenario), each with its MDE; the coding source in the settings."""
    arms: dict[str, Arm] = {}
    comparisons: list[Comparison] = []
    for stage, words in RESULT_STAGES.items():
        data = {arm: _held(config, results, arm, stage) for arm in ARMS}
        for arm, d in data.items():
            points = [_stage_point(results[f"{arm}-seed{s}"]["curve"], stage) or {} for s in config.seeds]
            arms[arm if stage == "end" else f"{arm}_sft"] = Arm.model_validate(
                {
                    "held_out_success": seed_estimate(d),
                    "n_episodes": len(d.values) * config.ops.eval_episodes,
                    "stage": words,
                    "per_seed": [p["success"] for p in points],
                    "rubric": mean([p["rubric"] for p in points]),
                    "habits": {k: mean([p["habits"][k] for p in points]) for k in points[0]["habits"]},
                }
            )
        name = "transfer - scratch" if stage == "end" else "transfer - scratch after sft"
        comparisons += compare(name, data["scratch"], data["transfer"], ("seed", "seed+task"))
    settings = config.model_dump(mode="json")
    settings["source"] = _source(config, results)
    return Result(
        experiment="transfer",
        command=command,
        seeds=list(config.seeds),
        settings=settings,
        arms=arms,
        comparisons=comparisons,
        scored_split=f"ops: {config.ops.eval_split}; coding source: {config.coding.eval_split}",
        tuned_on="validation",
    )


def transfer_command(config: TransferConfig, report_dir: Path | None, run_dir: Path) -> str:
    """The ``transferlab ops experiment transfer`` line that makes this result: a preset's name when the
    settings are a preset's, else ``--config RUN_DIR/config.json`` (the settings the run saved)."""
    preset = next(
        (
            name
            for name in ("cpu", "smoke")
            if PRESETS[name]().model_copy(update={"model_path": config.model_path}) == config
        ),
        None,
    )  # --model is its own flag: a preset with another model is still that preset
    words = ["transferlab ops experiment transfer"]
    words.append(f"--preset {preset}" if preset else f"--config {run_dir / 'config.json'}")
    if config.model_path is not None and preset:
        words.insert(1, f"--model {config.model_path}")
    if report_dir is not None:
        words.append(f"--report-dir {report_dir}")
    return " ".join(words)


# ----------------------------------------------------------------------------------------- report


def _interval(d: dict[str, Any]) -> Interval:
    return Interval(d["estimate"], d["low"], d["high"], d["level"], d["n"])


def _rl_line(arm: str, row: dict[str, Any]) -> str:
    gain = _interval(row["rl_gain"]).format("+.2f") if "rl_gain" in row else "—"
    flat = f", non-flat {row['nonflat_group_share']:.2f}" if "nonflat_group_share" in row else ""
    rubric = ", ".join(f"{g:+.2f}" for g in row.get("rubric_gain_per_seed", []))
    hours = row.get("ops_cpu_hours", float("nan"))
    return f"{arm} {gain} (mean rubric per seed {rubric}) over {hours:.2f} CPU-hours{flat}"


def _fmt_eps(values: list[float | None]) -> str:
    return ", ".join("never" if v is None else f"{v:.0f}" for v in values)


def _success_curves(config: TransferConfig, results: dict[str, dict[str, Any]]) -> dict[str, Curve]:
    curves = {}
    for arm in ARMS:
        per_seed = [
            [p for p in results[f"{arm}-seed{s}"]["curve"] if p["stage"] != "start"] for s in config.seeds
        ]
        n = min(len(c) for c in per_seed)
        ivs = [bootstrap_ci([v for c in per_seed for v in c[i]["per_episode"]], seed=0) for i in range(n)]
        x = [per_seed[0][i]["episodes"] for i in range(n)]
        curves[arm] = Curve(x, [iv.estimate for iv in ivs], [iv.low for iv in ivs], [iv.high for iv in ivs])
    return curves


def transfer_report(
    config: TransferConfig,
    results: dict[str, dict[str, Any]],
    summary: dict[str, Any],
    run_dir: Path,
    start: StartModel | None = None,
    result: Result | None = None,
) -> Report:
    """The Markdown + HTML report: the clustered comparisons (from ``result``), curves, episodes to the
    threshold, habits, settings."""
    arms = summary["arms"]
    report = Report("Transfer from coding to ops analysis: coding-pretrained vs from scratch")
    if result is not None:
        _result_section(report, result)

    def stage(arm: str, name: str) -> str:
        st = arms[arm]["stages"].get(name)
        return _interval(st["success"]).format(".2f") if st else "—"

    report.paragraph(
        "Held-out success on OpsAnalysis-v0 (rubric >= 8): transfer (coding-pretrained) "
        f"{stage('transfer', 'start')} before ops training, {stage('transfer', 'sft')} after ops SFT, "
        f"{stage('transfer', 'end')} after GRPO; scratch {stage('scratch', 'start')}, "
        f"{stage('scratch', 'sft')}, "
        f"{stage('scratch', 'end')}. Transfer - scratch at the end: "
        f"{_interval(summary['transfer_minus_scratch']).format('+.2f')} (95% bootstrap interval over "
        "episodes pooled across seeds, not clustered; the seed-clustered comparisons are above)."
    )
    report.paragraph(
        f"GRPO episodes to reach {config.threshold:.0%} held-out success (0 = already after SFT; per seed): "
        f"transfer {_fmt_eps(arms['transfer']['episodes_to_threshold'])}; "
        f"scratch {_fmt_eps(arms['scratch']['episodes_to_threshold'])}."
    )
    report.paragraph(
        "What GRPO added on top of ops SFT (end minus after-SFT held-out success, paired by episode; "
        "non-flat = share of GRPO groups whose rewards differ, so that the group has a gradient): "
        + "; ".join(_rl_line(arm, arms[arm]) for arm in ARMS)
        + "."
    )
    coding = summary["coding"]
    when = result.settings["source"]["habits_when_writing"] if result is not None else {}
    report.paragraph(
        "Arm A's coding policy: held-out CodeRepair-v0 success "
        f"{_interval(coding['held_out']).format('.2f')}; "
        + ", ".join(f"{k.replace('_', ' ')} in {v:.0%} of its episodes" for k, v in coding["habits"].items())
        + (
            f"; it changed a file in {when['wrote']:.0%} of its episodes, and of those it "
            + ", ".join(f"{k.replace('_', ' ')} in {when[k]:.0%}" for k in coding["habits"] if k in when)
            if "wrote" in when
            else ""
        )
        + "."
    )
    report.heading("Workflow habits")
    rows = []
    for code_habit, ops_habit in HABIT_PAIRS:
        for arm in ARMS:
            row: dict[str, Any] = {"habit (coding -> ops)": f"{code_habit} -> {ops_habit}", "arm": arm}
            for st in STAGES:
                s = arms[arm]["stages"].get(st)
                row[st] = _interval(s["habits"][ops_habit]) if s else None
            rows.append(row)
    report.table(rows)
    report.paragraph(
        "Share of held-out ops episodes showing each habit (95% bootstrap intervals): before ops training "
        "(start), after ops SFT (early in ops fine-tuning), after the first GRPO evaluation and at the end."
    )
    report.figure(
        plot_curves(_success_curves(config, results), xlabel="ops GRPO episodes", ylabel="held-out success"),
        "success_curves",
        "Held-out success against ops GRPO episodes (0 = after SFT); band = 95% bootstrap interval over "
        "seeds x episodes.",
    )
    early = {
        f"{arm}: {habit.split('_')[0]}": _interval(arms[arm]["stages"]["sft"]["habits"][habit])
        for arm in ARMS
        for _, habit in HABIT_PAIRS
        if "sft" in arms[arm]["stages"]
    }
    report.figure(
        plot_bars(early, ylabel="share of held-out episodes"),
        "habits_early",
        "Habits after ops SFT: query before concluding ('query') and check before reporting ('check').",
    )
    _settings(report, config, summary, run_dir, start)
    return report


def _result_section(report: Report, result: Result) -> None:
    """The arms' held-out success with seed-clustered intervals and the comparisons with their MDE."""
    rows = [
        {
            "arm": name,
            "stage": arm.model_extra.get("stage", "") if arm.model_extra else "",
            "held-out success": f"{arm.held_out_success.estimate:.3f} "
            f"[{arm.held_out_success.ci[0]:.3f}, {arm.held_out_success.ci[1]:.3f}]",
            "held-out episodes": arm.n_episodes,
        }
        for name, arm in result.arms.items()
    ]
    report.table(rows)
    report.bullets([c.sentence() for c in result.comparisons if c.cluster == "seed"])
    report.heading("Comparisons")
    report.paragraph(
        "transfer - scratch on held-out success, paired on the same seeds and held-out scenarios; 95% "
        "two-stage bootstrap intervals clustered by seed (primary) and by (seed, scenario); MDE = the "
        "smallest true difference the interval's width would detect with 80% power. A difference whose "
        "interval includes zero is 'pipeline ran, no detectable change'; it is a powered null only where "
        "the MDE is at most the effect that matters (10 points). Every figure is in result.json."
    )
    report.table(comparison_rows(result))


def _settings(
    report: Report,
    config: TransferConfig,
    summary: dict[str, Any],
    run_dir: Path,
    start: StartModel | None = None,
) -> None:
    ops, cc = config.ops, config.coding
    practice = "the undemonstrated" if ops.practice == "undemonstrated" else "all"
    policy = (
        f"policy: {start.describe()} with its own tokenizer and chat template, the start of both arms"
        if start is not None
        else f"policy: {ops.policy.n_layer} layers, width {ops.policy.d_model}; one byte-level BPE "
        f"({ops.vocab_size} tokens) trained on coding and ops texts, shared by both arms"
    )
    report.heading("Settings")
    report.bullets(
        [
            policy,
            f"coding stage (arm A only): toy repositories ({', '.join(cc.operations)}), "
            f"SFT on {cc.demo_tasks} "
            f"expert episodes x {cc.sft.steps} steps ({cc.sft.schedule} lr), GRPO {cc.rl.steps} steps x "
            f"{cc.rl.tasks_per_step} tasks x G={cc.rl.group_size} ({cc.rl.rewards} rewards)",
            f"ops budget (both arms): {ops.train_tasks} training / {ops.held_out_tasks} held-out scenarios; "
            f"SFT on {ops.sft_tasks} {'compact ' if ops.compact_reports else ''}expert episodes, "
            f"{ops.sft.steps} steps x {ops.sft.batch_size}; GRPO {ops.rl.steps} steps x "
            f"{ops.rl.tasks_per_step} tasks x G={ops.rl.group_size} ({ops.rl.rewards} rewards, "
            f"{ops.rl.advantage} advantage) on {practice} training scenarios, "
            f"{ops.eval_episodes} held-out episodes per task at T={ops.eval_temperature}",
            f"seeds: {', '.join(map(str, config.seeds))}",
            f"wall time: {summary['seconds'] / 60:.1f} min on this machine",
            f"run directory: {run_dir}",
        ]
    )
    model = f" --model {start.path}" if start is not None else ""
    report.code(
        f"transferlab ops experiment transfer --preset cpu{model} "
        "--report-dir docs/results/transfer\n"
        "# or one process per seed on one run directory (the committed run: 3 processes, 2 cores):\n"
        "transferlab ops experiment transfer --preset cpu --only-seeds 0\n"
        "transferlab ops experiment transfer --resume RUN --only-seeds 1   # and 2\n"
        "transferlab ops experiment transfer --resume RUN --report-dir docs/results/transfer"
    )


def _refuse_other_settings(resume: Path, given: TransferConfig) -> None:
    """Exit with one error when ``--preset``/``--config``/``--model`` given with ``--resume`` differ from
    the run's saved settings (a resume always continues with those)."""
    from transferlab.coding_rl.experiments.cli import resume_mismatch
    from transferlab.platform.config import ConfigError

    try:
        saved = TransferConfig.from_file(resume / "config.json")
    except (ConfigError, FileNotFoundError, ValueError):
        return  # not a transfer run: opening it says so
    message = resume_mismatch(resume, saved, given)
    if message:
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m transferlab.comparison.transfer --preset cpu [--config F] [--model PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None, help="The settings' preset (default: cpu)."
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="A JSON/YAML config file (overrides the preset)."
    )
    parser.add_argument("--runs-root", type=Path, default=Path("runs"))
    parser.add_argument("--report-dir", type=Path, default=None)
    parser.add_argument("--resume", type=Path, default=None, help="A run directory to continue.")
    parser.add_argument(
        "--model",
        default=None,
        help="A local Hugging Face causal LM directory both arms start from (its own tokenizer and chat "
        "template); default: the tiny from-scratch policy. A resumed run keeps its saved model.",
    )
    parser.add_argument(
        "--only-seeds",
        type=lambda text: [int(x) for x in text.split(",")],
        default=None,
        help="Comma-separated seeds this process computes (run a second process with --resume).",
    )
    args = parser.parse_args(argv)
    from transferlab.agent_rl.policies.model import PolicyNotFoundError
    from transferlab.platform.config import ConfigError
    from transferlab.platform.runstore import RunInUseError

    if args.resume is not None and not (args.resume / "meta.json").is_file():
        print(f"error: --resume {args.resume} is not a run directory (no meta.json)", file=sys.stderr)
        raise SystemExit(2)
    try:
        config = (
            TransferConfig.from_file(args.config)
            if args.config is not None
            else PRESETS[args.preset or "cpu"]()
        )
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.model is not None:
        config = config.model_copy(update={"model_path": args.model})
    if args.resume is not None and (args.preset, args.config, args.model) != (None, None, None):
        _refuse_other_settings(args.resume, config)
    try:
        summary = run_transfer(
            config, args.runs_root, args.report_dir, args.resume, only_seeds=args.only_seeds
        )
    except (RunInUseError, PolicyNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if not summary:
        return
    print(json.dumps({arm: row["episodes_to_threshold"] for arm, row in summary["arms"].items()}))


if __name__ == "__main__":
    main()
