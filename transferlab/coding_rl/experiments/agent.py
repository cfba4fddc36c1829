"""Experiments 2 and 3 — multi-turn agent RL on CodeRepair-v0: dense vs sparse, KL and masking.

Both start like the agent of the project's founding design note: a tiny policy (or, with
``model_path``, a copy of that local Hugging Face model) fine-tuned on a few expert demonstrations of
the toy repositories (read the source, fix the line, run the tests, submit), then RL in the
environment.

* **Dense vs sparse** (:func:`run_dense_sparse`): the same SFT policy, budget and seeds, trained with
  the dense table (a reward at every step) and with the sparse one (+20 / -5 at the end only).
  Held-out success is measured every ``curve_every`` RL steps (step 0 = the SFT policy) and plotted
  against training episodes; the episodes each arm needs to reach a fixed held-out success
  (``held_out_threshold``) are compared with the design note's account (15% success with sparse
  rewards vs 45% with dense after 1000 rounds). The same figures on training success (a moving
  average of the rollouts' success) are kept beside them, labelled as training.
* **Ablations** (:func:`run_ablations`): KL coefficient 0 vs > 0, and the masking bug — observation
  (tool output) and prompt tokens left in the loss. Besides held-out success, each arm reports how
  far it drifted from the SFT policy (KL on its own held-out episodes) and how well it learned to
  predict the tools' output (negative log-likelihood of observation tokens), which is what a policy
  should never be trained to do.

Each run writes ``result.json`` (:mod:`transferlab.platform.results`) in its run directory and next to
the report: held-out success per arm with 95% intervals clustered by seed, and every comparison
paired on the same seeds and tasks with its number of clusters and minimum detectable effect. The
report's figures and verdict lines are written from it.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from rich.console import Console

from transferlab.agent_rl.policies.model import TinyPolicyConfig, load_policy, save_policy
from transferlab.agent_rl.rl import RLConfig
from transferlab.agent_rl.sft import SFTConfig, scripted_demonstration, train_sft
from transferlab.agent_rl.start import (
    ModelChoice,
    StartModel,
    fit_context,
    model_record,
    open_experiment,
    policy_line,
)
from transferlab.coding_rl.experiments.common import evaluate_agent, opened_sandbox, toy_tokenizer
from transferlab.coding_rl.sandbox.backends import SandboxBackend
from transferlab.coding_rl.tasks.repo_task import RepoTask
from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_repo_plan, toy_repo_splits, toy_tasks
from transferlab.coding_rl.training import train_rl
from transferlab.platform.config import EvalSplit, eval_split_field
from transferlab.platform.harness import Experiment, experiment_command
from transferlab.platform.held_out import (
    HeldOut,
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
from transferlab.platform.stats import first_crossing
from transferlab.platform.trajectory import Trajectory, to_tensors


class AgentExperimentConfig(ModelChoice):
    """Settings shared by the agent experiments (the CPU preset is the default)."""

    seeds: list[int] = Field(default=[0, 1, 2], min_length=1, description="One SFT + RL pipeline per seed.")
    operations: list[str] = Field(default=sorted(OPERATIONS), min_length=1, description="Toy operations.")
    held_out_fraction: float = Field(
        default=0.25, gt=0, lt=1, description="Share of tasks outside training: half validation, half test."
    )
    eval_split: EvalSplit = eval_split_field()
    demo_tasks: int = Field(
        default=20, ge=1, description="Training tasks with an expert demonstration (the rest have none)."
    )
    policy: TinyPolicyConfig = Field(
        default_factory=lambda: TinyPolicyConfig(n_layer=2, d_model=128, n_head=4, max_positions=512),
        description="The tiny policy (its seed is replaced by each run's seed).",
    )
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=150, batch_size=8, lr=3e-3), description="SFT settings."
    )
    rl: RLConfig = Field(
        default_factory=lambda: RLConfig(
            mode="agent",
            steps=30,
            tasks_per_step=8,
            group_size=4,
            lr=5e-4,
            max_new_tokens=48,
            max_context=512,
            max_steps=6,
            checkpoint_every=10,
        ),
        description="RL settings shared by every arm (rewards / KL / masking and seed set per arm).",
    )
    threshold: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Dense vs sparse: training success (moving average) whose first crossing is compared.",
    )
    smooth: int = Field(default=5, ge=1, description="Steps in the moving average of training success.")
    curve_every: int = Field(
        default=5,
        ge=0,
        description=(
            "Dense vs sparse: RL steps between held-out evaluations during RL (the held-out success "
            "curve; step 0 is the SFT policy's held-out value); 0 = none. The ablations measure none."
        ),
    )
    held_out_threshold: float = Field(
        default=0.4,
        gt=0,
        le=1,
        description=(
            "Dense vs sparse: held-out success whose first crossing on the held-out curve is compared "
            "(episodes to reach it, per arm and seed). Above the SFT start (about 0.28 on the cpu preset), "
            "or both arms cross at 0 episodes."
        ),
    )
    eval_episodes: int = Field(default=4, ge=1, description="Held-out episodes per task.")
    kl_coef: float = Field(default=0.1, gt=0, description="Ablations: the KL coefficient of the 'kl' arm.")
    backend: str = Field(default="forkserver", description="Sandbox backend.")


# ----------------------------------------------------------------------------------------- shared


class Setup:
    """Tasks, tokenizer and sandbox of an agent experiment, and the per-seed SFT policy."""

    def __init__(
        self,
        exp: Experiment,
        config: AgentExperimentConfig,
        sandbox: SandboxBackend,
        start: StartModel | None = None,
    ) -> None:
        ops = tuple(config.operations)
        self.exp, self.config, self.sandbox, self.start = exp, config, sandbox, start
        half = config.held_out_fraction / 2
        splits = toy_repo_splits(0, ops, validation_fraction=half, test_fraction=half)
        self.train, self.held = splits.scored(config.eval_split)
        if start is not None:
            self.tokenizer = start.tokenizer
        else:
            code_train, _ = toy_tasks(config.held_out_fraction, 0, ops)
            self.tokenizer = toy_tokenizer(code_train, self.train)  # training text only

    def sft_policy(self, seed: int) -> Any:
        """The seed's SFT policy (trained once, then loaded from ``arms/sft-seed<seed>/policy``)."""
        from transferlab.coding_rl.env.code_repair import CodeRepairEnv

        directory = self.exp.arm_dir(f"sft-seed{seed}") / "policy"
        if (directory / "config.json").exists():
            return load_policy(directory, device="cpu", dtype="float32")[0]
        cfg = self.config
        if self.start is not None:
            model = self.start.fresh()
        else:
            model = cfg.policy.model_copy(update={"seed": seed}).create(self.tokenizer)
        env = CodeRepairEnv(self.train, sandbox=self.sandbox, max_steps=cfg.rl.max_steps)
        demos = [
            scripted_demonstration(env, t, toy_repo_plan(t), self.tokenizer)
            for t in self.train[: cfg.demo_tasks]
        ]
        with self.exp.arm_logger(f"sft-seed{seed}") as logger:
            train_sft(model, self.tokenizer, demos, cfg.sft.model_copy(update={"seed": seed}), logger)
        save_policy(model, self.tokenizer, directory)
        return model

    def held_out(self, model: Any) -> list[float]:
        cfg = self.config
        return evaluate_agent(
            model,
            self.tokenizer,
            self.held,
            self.sandbox,
            episodes_per_task=cfg.eval_episodes,
            max_new_tokens=cfg.rl.max_new_tokens,
            max_context=cfg.rl.max_context,
            max_steps=cfg.rl.max_steps,
        )

    def held_out_result(self, model: Any) -> dict[str, Any]:
        return {"held_out": self.held_out(model)}

    def rl_arm(
        self, arm: str, seed: int, sft_model: Any, curve_every: int = 0, **rl_updates: Any
    ) -> dict[str, Any]:
        """Train a copy of the SFT policy with the shared RL settings plus ``rl_updates``; with
        ``curve_every``, the held-out evaluation runs every that many RL steps (logged as
        ``eval/held_out_success``, returned as ``held_out_curve``: [training episodes, success])."""
        cfg = self.config
        rl = cfg.rl.model_copy(update={"seed": seed, "sandbox_backend": cfg.backend, **rl_updates})
        t0 = time.perf_counter()

        def on_step(step: int, model: Any) -> dict[str, float]:
            if not curve_every or (step + 1) % curve_every:
                return {}
            return {HELD_OUT_KEY: mean(self.held_out(model))}

        with self.exp.arm_logger(arm, resume=True) as logger:
            result = train_rl(
                copy.deepcopy(sft_model),
                self.tokenizer,
                self.train,
                rl,
                self.exp.arm_dir(arm),
                logger,
                resume=True,
                on_step=on_step,
            )
        metrics_path = self.exp.run.dir / "arms" / arm / "metrics.parquet"
        history = _history(metrics_path)
        out: dict[str, Any] = {
            "held_out": self.held_out(result.model),
            "held_out_curve": _held_out_points(metrics_path),
            "train_success": history.get("rollout/success_rate", []),
            "episodes": history.get("rollout/episodes", []),
            "kl_ref": history.get("kl/ref", []),
            "frac_zero_std": history.get("train/frac_reward_zero_std", []),
            "seconds": time.perf_counter() - t0,
        }
        out.update(drift(result.model, sft_model, self.tokenizer, self.held, self.sandbox, cfg))
        return out


HELD_OUT_KEY = "eval/held_out_success"


def _held_out_points(path: Path) -> list[list[float]]:
    """[cumulative training episodes, held-out success] at each step of an arm's metrics.parquet that
    logged a held-out evaluation (:data:`HELD_OUT_KEY`), in step order."""
    from transferlab.platform.metrics import read_metrics, wide_metrics

    df = read_metrics(path, missing_ok=True)
    if HELD_OUT_KEY not in set(df["key"]):
        return []
    wide = wide_metrics(df)
    episodes = wide["rollout/episodes"].fillna(0.0).cumsum()
    kept = wide[HELD_OUT_KEY].notna()
    return [[float(e), float(v)] for e, v in zip(episodes[kept], wide[HELD_OUT_KEY][kept], strict=True)]


def _history(path: Path) -> dict[str, list[float]]:
    """Per metric key, its values by step (from an arm's metrics.parquet)."""
    from transferlab.platform.metrics import read_metrics

    df = read_metrics(path, missing_ok=True)
    out: dict[str, list[float]] = {}
    for key, group in df.groupby("key"):
        out[str(key)] = group.sort_values("step")["value"].astype(float).tolist()
    return out


def drift(
    model: Any,
    reference: Any,
    tokenizer: Any,
    tasks: list[RepoTask],
    sandbox: SandboxBackend,
    config: AgentExperimentConfig,
) -> dict[str, float]:
    """KL(model || reference) on the model's own held-out episodes (per action token, k1), and the
    negative log-likelihood of observation tokens under both (what the masking bug trains)."""
    from transferlab.agent_rl.episodes import policy_episodes
    from transferlab.agent_rl.policies.adapters import forward_policy
    from transferlab.agent_rl.policies.generation import SamplingConfig
    from transferlab.coding_rl.env.code_repair import CodeRepairEnv

    envs = [CodeRepairEnv(tasks, max_steps=config.rl.max_steps, sandbox=sandbox) for _ in tasks]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=config.rl.max_new_tokens, seed=4242)
    trajs: list[Trajectory] = policy_episodes(model, tokenizer, envs, tasks, sampling, config.rl.max_context)
    batch = to_tensors(trajs, pad_id=tokenizer.pad_token_id, validate=False)
    action = batch["loss_mask"].bool()
    observation = batch["attention_mask"].bool() & ~action
    observation[:, 0] = False
    with torch.no_grad():
        logp = forward_policy(model, batch["input_ids"], batch["attention_mask"]).logprobs
        ref = forward_policy(reference, batch["input_ids"], batch["attention_mask"]).logprobs
    return {
        "kl_to_sft": float((logp - ref)[action].mean()),
        "observation_nll": float(-logp[observation].mean()),
        "observation_nll_sft": float(-ref[observation].mean()),
    }


def _smoothed(values: list[float], window: int) -> list[float]:
    return [mean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def _cumulative(episodes: list[float]) -> list[float]:
    total, out = 0.0, []
    for e in episodes:
        total += e
        out.append(total)
    return out


def _finite(value: float) -> float | None:
    """``value``, or None for NaN (result.json holds no NaN)."""
    return None if math.isnan(value) else value


Results = dict[str, dict[str, Any]]
BuildResult = Callable[[AgentExperimentConfig, Results, str], Result]
Summarise = Callable[[Result, float], dict[str, Any]]
BuildReport = Callable[[AgentExperimentConfig, Results, Result, float, Experiment, StartModel | None], Report]


def run_agent_experiment(
    name: str,
    variants: dict[str, dict[str, Any]],
    steps: tuple[BuildResult, Summarise, BuildReport],
    config: AgentExperimentConfig,
    runs_root: Path,
    report_dir: Path | None,
    resume: Path | None,
    console: Console | None,
    curve_every: int = 0,
) -> dict[str, Any]:
    """Per seed: the SFT policy (arm ``sft-seed<s>``), then one RL arm per variant (RLConfig updates),
    each with a held-out evaluation every ``curve_every`` RL steps (0 = none).

    ``steps`` turn the arms' results into the run's :class:`Result` (written as result.json in the run
    directory and next to the report), the summary.json figures, and the report written from the result.
    """
    from transferlab.coding_rl.experiments.presets import AGENT_PRESETS

    build_result, summarise, build_report = steps
    exp, config, start = open_experiment(name, config, runs_root, resume, console)
    subcommand = name.removeprefix("coding-")
    command = experiment_command(
        f"transferlab coding experiment {subcommand}",
        config,
        AGENT_PRESETS,
        exp.run.dir,
        runs_root,
        report_dir,
    )
    config = config.model_copy(
        update={"rl": fit_context(config.rl, start, lambda line: exp.console.print(line, highlight=False))}
    )
    torch.set_num_threads(1)
    results: Results = {}
    with exp.run, opened_sandbox(config.backend) as sandbox, exp.progress:
        setup = Setup(exp, config, sandbox, start)
        bar = exp.progress.add_task(name, total=len(config.seeds) * (1 + len(variants)))
        for seed in config.seeds:
            exp.progress.update(bar, description=f"SFT seed {seed}")
            sft = setup.sft_policy(seed)
            results[f"sft-seed{seed}"] = exp.arm(
                f"sft-seed{seed}", functools.partial(setup.held_out_result, sft)
            )
            exp.progress.advance(bar)
            for variant, updates in variants.items():
                arm = f"{variant}-seed{seed}"
                exp.progress.update(bar, description=f"RL {variant} seed {seed}")
                compute = functools.partial(setup.rl_arm, arm, seed, sft, curve_every, **updates)
                results[arm] = exp.arm(arm, compute)
                exp.progress.advance(bar)
        result = build_result(config, results, command)
        summary = summarise(result, exp.elapsed_s())
        summary["run_dir"] = str(exp.run.dir)
        summary["model"] = model_record(config.policy, start)
        exp.run.write_artifact_json("summary.json", summary)
        write_results(exp, result, report_dir)
        exp.write_report(build_report(config, results, result, summary["seconds"], exp, start), report_dir)
    return summary


def _arm_entry(config: AgentExperimentConfig, results: Results, arm: str, data: HeldOut) -> dict[str, Any]:
    """The result.json figures every agent arm has: held-out success clustered by seed, per seed."""
    return {
        "held_out_success": seed_estimate(data),
        "n_episodes": len(data.values) * config.eval_episodes,
        "per_seed": [mean(results[f"{arm}-seed{s}"]["held_out"]) for s in config.seeds],
    }


def summarise(result: Result, seconds: float) -> dict[str, Any]:
    """summary.json: the result, and per arm its figures with ``held_out`` = held-out success."""
    dumped = result.model_dump(mode="json")
    arms = {name: {**row, "held_out": row["held_out_success"]} for name, row in dumped["arms"].items()}
    return {"seconds": seconds, "result": dumped, "arms": arms, "comparisons": dumped["comparisons"]}


def _primary(result: Result, name: str) -> Comparison:
    """The comparison ``name`` clustered by seed."""
    return next(c for c in result.comparisons if c.name == name and c.cluster == "seed")


def _comparison_paragraph(report: Report, result: Result) -> None:
    report.paragraph(
        "Differences on held-out success, paired on the same seeds and tasks; 95% t-intervals over the "
        "seeds' paired differences (docs/guide/methods.md; a (seed, task) interval, where given, is "
        "conditional on the trained policies and carries no verdict); MDE = the smallest true difference "
        "the interval would detect with 80% power. Every figure here is in result.json next to this report."
    )
    report.table(comparison_rows(result))


def _result(
    name: str,
    config: AgentExperimentConfig,
    arms: dict[str, Arm],
    comparisons: list[Comparison],
    command: str,
) -> Result:
    return Result(
        experiment=name,
        command=command,
        seeds=list(config.seeds),
        settings=config.model_dump(mode="json"),
        arms=arms,
        comparisons=comparisons,
        scored_split=config.eval_split,
        tuned_on="validation",
    )


# ------------------------------------------------------------------------------------ dense vs sparse


def run_dense_sparse(
    config: AgentExperimentConfig,
    runs_root: Path = Path("runs"),
    report_dir: Path | None = None,
    resume: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """SFT once per seed, then RL with the dense and with the sparse table; report and summary."""
    variants = {"dense": {"rewards": "dense"}, "sparse": {"rewards": "sparse"}}
    return run_agent_experiment(
        "coding-dense-sparse",
        variants,
        (result_dense_sparse, summarise_dense_sparse, dense_sparse_report),
        config,
        runs_root,
        report_dir,
        resume,
        console,
        curve_every=config.curve_every,
    )


def _training_figures(config: AgentExperimentConfig, results: Results, arm: str) -> dict[str, Any]:
    """On training success: episodes to ``threshold`` (per seed), final smoothed training success;
    the budget and the share of flat GRPO groups."""
    crossings: list[float | None] = []
    finals: list[float | None] = []
    for s in config.seeds:
        r = results[f"{arm}-seed{s}"]
        x = _cumulative(r["episodes"])
        y = _smoothed(r["train_success"], config.smooth)
        crossings.append(first_crossing(x, y, config.threshold) if x else None)
        finals.append(y[-1] if y else None)
    return {
        "episodes_to_threshold": crossings,
        "final_train_success": finals,
        "episodes": int(sum(results[f"{arm}-seed{config.seeds[0]}"]["episodes"])),
        "frac_zero_std": _finite(
            mean([mean(results[f"{arm}-seed{s}"]["frac_zero_std"]) for s in config.seeds])
        ),
    }


def _held_out_figures(config: AgentExperimentConfig, results: Results, arm: str) -> dict[str, Any]:
    """Per seed, the held-out curve — [0, the SFT policy's held-out success], then the arm's
    [training episodes, held-out success] points — and the episodes to ``held_out_threshold`` on it
    (None when the arm measured no curve or never reached it)."""
    curves: list[list[list[float]]] = []
    crossings: list[float | None] = []
    for s in config.seeds:
        points = [list(map(float, p)) for p in results[f"{arm}-seed{s}"].get("held_out_curve", [])]
        curve = [[0.0, mean(results[f"sft-seed{s}"]["held_out"])], *points]
        curves.append(curve)
        x, y = [p[0] for p in curve], [p[1] for p in curve]
        crossings.append(first_crossing(x, y, config.held_out_threshold) if points else None)
    return {"held_out_curve": curves, "episodes_to_held_out_threshold": crossings}


def episodes_ratio(dense: list[float | None], sparse: list[float | None]) -> tuple[float | None, str]:
    """Mean episodes to a threshold, sparse / dense; or None and why (an arm did not reach it in every
    seed, or dense started there, at 0 episodes).

    >>> episodes_ratio([10.0, 30.0], [60.0, 60.0])
    (3.0, '')
    >>> episodes_ratio([10.0, 30.0], [60.0, None])
    (None, 'sparse did not reach it in every seed')
    """
    missing = [arm for arm, values in (("dense", dense), ("sparse", sparse)) if None in values or not values]
    if len(missing) == 2:
        return None, "neither arm reached it in every seed"
    if missing:
        return None, f"{missing[0]} did not reach it in every seed"
    d, sp = mean([v for v in dense if v is not None]), mean([v for v in sparse if v is not None])
    if d == 0:
        return None, "dense was there from the start (0 episodes)"
    return sp / d, ""


def result_dense_sparse(config: AgentExperimentConfig, results: Results, command: str) -> Result:
    """Held-out success per arm; on dense and sparse, the held-out curve per seed, the episodes to
    ``held_out_threshold`` on it per seed and their ratio (on the sparse arm:
    ``held_out_episodes_ratio_to_dense``), and the same on training success (``episodes_to_threshold``,
    ``episodes_ratio_to_dense``); ratios are None unless both arms reached the threshold in every seed.
    Comparisons: dense - sparse, and each RL arm - SFT."""
    data = {arm: held_out(results, arm, config.seeds, "held_out") for arm in ("sft", "dense", "sparse")}
    entries = {arm: _arm_entry(config, results, arm, d) for arm, d in data.items()}
    for arm in ("dense", "sparse"):
        entries[arm].update(_held_out_figures(config, results, arm))
        entries[arm].update(_training_figures(config, results, arm))
    dense, sparse = entries["dense"], entries["sparse"]
    sparse["held_out_episodes_ratio_to_dense"] = episodes_ratio(
        dense["episodes_to_held_out_threshold"], sparse["episodes_to_held_out_threshold"]
    )[0]
    sparse["episodes_ratio_to_dense"] = episodes_ratio(
        dense["episodes_to_threshold"], sparse["episodes_to_threshold"]
    )[0]
    comparisons = [
        *compare("dense - sparse", data["sparse"], data["dense"], ("seed", "seed+task")),
        *compare("dense - sft", data["sft"], data["dense"]),
        *compare("sparse - sft", data["sft"], data["sparse"]),
    ]
    arms = {arm: Arm.model_validate(entry) for arm, entry in entries.items()}
    return _result("coding-dense-sparse", config, arms, comparisons, command)


def summarise_dense_sparse(result: Result, seconds: float) -> dict[str, Any]:
    """:func:`summarise` plus the sparse / dense ratios of episodes to the thresholds: ``ratio`` on
    training success, ``held_out_ratio`` on the held-out curve."""
    extra = result.arms["sparse"].model_extra or {}
    return {
        **summarise(result, seconds),
        "ratio": extra.get("episodes_ratio_to_dense"),
        "held_out_ratio": extra.get("held_out_episodes_ratio_to_dense"),
    }


def _fmt_eps(values: list[float | None]) -> str:
    return ", ".join("never" if v is None else f"{v:.0f}" for v in values)


def _fmt_values(values: list[float | None] | None) -> str:
    return ", ".join("—" if v is None else f"{v:.2f}" for v in values) if values else "—"


SEED_000 = "Seed 000's account: after 1000 rounds, 15% success with sparse rewards vs 45% with dense (3x)."


def _every(steps: int) -> str:
    return "after every RL step" if steps == 1 else f"every {steps} RL steps"


def _ratio_sentence(dense: list[float | None], sparse: list[float | None]) -> str:
    ratio, why = episodes_ratio(dense, sparse)
    if ratio is None:
        return f"No ratio sparse / dense: {why}. "
    return f"Measured ratio sparse / dense: {ratio:.2f}x. "


def _threshold_paragraphs(report: Report, config: AgentExperimentConfig, result: Result) -> None:
    """Episodes to the held-out threshold (the comparison) and, labelled as such, to the training one."""
    dense, sparse = (result.arms[a].model_extra or {} for a in ("dense", "sparse"))
    if config.curve_every:
        report.paragraph(
            f"Episodes to reach {config.held_out_threshold:.0%} held-out success, on the held-out curve "
            f"(held-out success {_every(config.curve_every)} against training episodes, linearly "
            f"interpolated; episode 0 = the SFT policy, {held_out_interval(result, 'sft').estimate:.2f}): "
            f"dense {_fmt_eps(dense['episodes_to_held_out_threshold'])}; sparse "
            f"{_fmt_eps(sparse['episodes_to_held_out_threshold'])} (per seed). "
            + _ratio_sentence(
                dense["episodes_to_held_out_threshold"], sparse["episodes_to_held_out_threshold"]
            )
            + SEED_000
        )
    else:
        report.paragraph(f"No held-out curve was measured (curve_every = 0). {SEED_000}")
    report.paragraph(
        f"On training success instead ({config.smooth}-step moving average of the rollouts' success, "
        f"which the policy is trained on), episodes to reach {config.threshold:.0%}: dense "
        f"{_fmt_eps(dense['episodes_to_threshold'])}; sparse {_fmt_eps(sparse['episodes_to_threshold'])} "
        "(per seed). " + _ratio_sentence(dense["episodes_to_threshold"], sparse["episodes_to_threshold"])
    )


def _band(points: list[list[list[float]]]) -> Curve | None:
    """Mean over seeds with a min-max band; ``points`` per seed as [x, y], x taken from the first seed."""
    n = min(len(p) for p in points)
    if not n:
        return None
    ys = [[p[i][1] for p in points] for i in range(n)]
    return Curve(
        [points[0][i][0] for i in range(n)], [mean(v) for v in ys], [min(v) for v in ys], [max(v) for v in ys]
    )


def _curve_figures(report: Report, config: AgentExperimentConfig, results: Results, result: Result) -> None:
    """Held-out success against training episodes, then training success against them."""
    held, train = {}, {}
    for arm in ("dense", "sparse"):
        per_seed = (result.arms[arm].model_extra or {})["held_out_curve"]
        curve = _band(per_seed) if config.curve_every else None
        if curve is not None and len(curve.x) > 1:
            held[arm] = curve
        rows = [results[f"{arm}-seed{s}"] for s in config.seeds]
        smoothed = [
            [
                [x, y]
                for x, y in zip(
                    _cumulative(r["episodes"]), _smoothed(r["train_success"], config.smooth), strict=False
                )
            ]
            for r in rows
        ]
        curve = _band(smoothed)
        if curve is not None:
            train[arm] = curve
    if held:
        report.figure(
            plot_curves(held, xlabel="training episodes", ylabel="held-out success"),
            "held_out_curves",
            f"Held-out success against training episodes ({_every(config.curve_every)}; 0 = the SFT "
            f"policy; {config.eval_episodes} episodes per held-out task); line = mean over seeds, band = "
            "min-max.",
        )
    if train:
        report.figure(
            plot_curves(train, xlabel="training episodes", ylabel="training success (moving average)"),
            "curves",
            "Training success against episodes; line = mean over seeds, band = min-max.",
        )


def dense_sparse_report(
    config: AgentExperimentConfig,
    results: Results,
    result: Result,
    seconds: float,
    exp: Experiment,
    start: StartModel | None = None,
) -> Report:
    extras = {arm: row.model_extra or {} for arm, row in result.arms.items()}
    report = Report("Dense vs sparse rewards for multi-turn agent RL (CodeRepair-v0)")
    report.paragraph(
        "Held-out success after the same RL budget: dense "
        f"{held_out_interval(result, 'dense').format('.2f')}, "
        f"sparse {held_out_interval(result, 'sparse').format('.2f')} (SFT start "
        f"{held_out_interval(result, 'sft').format('.2f')}). "
        f"{_primary(result, 'dense - sparse').sentence()}."
    )
    _threshold_paragraphs(report, config, result)
    report.table(
        [
            {
                "arm": arm,
                "held-out success": held_out_interval(result, arm),
                "final training success": _fmt_values(extras[arm].get("final_train_success")),
                "share of flat GRPO groups": extras[arm].get("frac_zero_std"),
                "episodes": extras[arm].get("episodes"),
            }
            for arm in result.arms
        ]
    )
    _comparison_paragraph(report, result)
    _curve_figures(report, config, results, result)
    report.figure(
        plot_bars({a: held_out_interval(result, a) for a in result.arms}, ylabel="held-out success"),
        "held_out",
        "Held-out success (episodes whose submit passed the verifier), 95% bootstrap intervals clustered "
        "by seed.",
    )
    _settings(report, config, result, seconds, exp, start)
    return report


def _settings(
    report: Report,
    config: AgentExperimentConfig,
    result: Result,
    seconds: float,
    exp: Experiment,
    start: StartModel | None,
) -> None:
    rl = config.rl
    report.heading("Settings")
    report.bullets(
        [
            f"tasks: toy repositories ({', '.join(config.operations)}; constants 0-9), "
            f"{config.held_out_fraction:.0%} held out; expert demonstrations for {config.demo_tasks} "
            "training tasks",
            f"{policy_line(config.policy, start)}; SFT {config.sft.steps} steps x {config.sft.batch_size}",
            f"RL: {rl.algo.upper()}, {rl.steps} steps x {rl.tasks_per_step} tasks x G={rl.group_size}, "
            f"lr {rl.lr}, up to {rl.max_steps} tool calls per episode, {rl.max_new_tokens} tokens per call; "
            f"rollouts on {rl.rollout_backend} workers x {rl.rollout_workers}",
            f"seeds: {', '.join(map(str, config.seeds))}; held-out: {config.eval_episodes} episodes per task",
            f"wall time: {seconds / 60:.1f} min on this machine (2 cores)",
            f"run directory: {exp.run.dir}",
        ]
    )
    report.code(result.command)


# --------------------------------------------------------------------------------------- ablations

ABLATION_ARMS = ("baseline", "kl", "unmasked")


def run_ablations(
    config: AgentExperimentConfig,
    runs_root: Path = Path("runs"),
    report_dir: Path | None = None,
    resume: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Per seed: the SFT policy trained three ways — baseline, with KL > 0, and with the masking bug."""
    variants = {
        "baseline": {"kl_coef": 0.0},
        "kl": {"kl_coef": config.kl_coef},
        "unmasked": {"kl_coef": 0.0, "mask_observations": False},
    }
    return run_agent_experiment(
        "coding-ablations",
        variants,
        (result_ablations, summarise, ablations_report),
        config,
        runs_root,
        report_dir,
        resume,
        console,
    )


def result_ablations(config: AgentExperimentConfig, results: Results, command: str) -> Result:
    """Held-out success per arm with drift and observation NLL; kl / unmasked - baseline, baseline - SFT."""
    data = {arm: held_out(results, arm, config.seeds, "held_out") for arm in ("sft", *ABLATION_ARMS)}
    arms: dict[str, Arm] = {}
    for arm, d in data.items():
        entry = _arm_entry(config, results, arm, d)
        if arm != "sft":
            rows = [results[f"{arm}-seed{s}"] for s in config.seeds]
            finals = [r["train_success"][-1] for r in rows if r["train_success"]]
            entry.update(
                {
                    "kl_to_sft": mean([r["kl_to_sft"] for r in rows]),
                    "observation_nll": mean([r["observation_nll"] for r in rows]),
                    "observation_nll_sft": mean([r["observation_nll_sft"] for r in rows]),
                    "final_train_success": _finite(mean(finals)),
                }
            )
        arms[arm] = Arm.model_validate(entry)
    comparisons = [
        *compare("kl - baseline", data["baseline"], data["kl"], ("seed", "seed+task")),
        *compare("unmasked - baseline", data["baseline"], data["unmasked"], ("seed", "seed+task")),
        *compare("baseline - sft", data["sft"], data["baseline"]),
    ]
    return _result("coding-ablations", config, arms, comparisons, command)


def ablations_report(
    config: AgentExperimentConfig,
    results: Results,
    result: Result,
    seconds: float,
    exp: Experiment,
    start: StartModel | None = None,
) -> Report:
    extras = {arm: row.model_extra or {} for arm, row in result.arms.items()}
    report = Report("KL and masking ablations for multi-turn agent RL (CodeRepair-v0)")
    kl, unmasked, base = extras["kl"], extras["unmasked"], extras["baseline"]
    report.paragraph(
        f"KL: with kl_coef = {config.kl_coef} the policy ends {kl['kl_to_sft']:.3f} nats per action token "
        "from "
        f"the SFT policy, against {base['kl_to_sft']:.3f} without a KL term. Held-out success, "
        f"{_primary(result, 'kl - baseline').sentence()}."
    )
    learned = unmasked["observation_nll"] < base["observation_nll"]
    effect = (
        "the policy learns to predict the tools' output"
        if learned
        else "the advantages push the tools' output tokens up and down as if the policy had written them"
    )
    report.paragraph(
        f"Masking: with observation and prompt tokens wrongly left in the loss, {effect} (observation NLL "
        f"{unmasked['observation_nll']:.2f} vs {base['observation_nll']:.2f} with correct masking, "
        f"{base['observation_nll_sft']:.2f} after SFT), and the policy drifts {unmasked['kl_to_sft']:.2f} "
        f"nats per action token from SFT (vs {base['kl_to_sft']:.2f}). Held-out success against the "
        f"correctly masked baseline, {_primary(result, 'unmasked - baseline').sentence()}."
    )
    report.table(
        [
            {
                "arm": arm,
                "held-out success": held_out_interval(result, arm),
                "KL to SFT (nats/token)": extras[arm].get("kl_to_sft"),
                "observation NLL": extras[arm].get("observation_nll"),
                "final training success": extras[arm].get("final_train_success"),
            }
            for arm in result.arms
        ]
    )
    _comparison_paragraph(report, result)
    report.figure(
        plot_bars({a: held_out_interval(result, a) for a in result.arms}, ylabel="held-out success"),
        "held_out",
        "Held-out success per arm, 95% bootstrap intervals clustered by seed.",
    )
    curves = {}
    for arm in ABLATION_ARMS:
        per_seed = [results[f"{arm}-seed{s}"]["train_success"] for s in config.seeds]
        n = min(len(v) for v in per_seed)
        if n:
            curves[arm] = Curve(list(range(1, n + 1)), [mean([v[i] for v in per_seed]) for i in range(n)])
    if curves:
        report.figure(
            plot_curves(curves, xlabel="RL step", ylabel="training success"),
            "curves",
            "Training success per RL step, mean over seeds.",
        )
    _settings(report, config, result, seconds, exp, start)
    return report
