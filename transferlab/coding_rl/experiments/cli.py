"""`transferlab coding experiment ...`: the three coding experiments, each with a CPU preset.

Commands::

    transferlab coding experiment learn        [--preset cpu|smoke] [--config FILE] [--seeds 0,1,2]
                                               [--model PATH]
    transferlab coding experiment dense-sparse [same options]
    transferlab coding experiment ablations    [same options]
    transferlab coding experiment agent-learn  [same options]

Common options: ``--runs-root runs`` (where the run directory goes), ``--report-dir DIR`` (also copy
the Markdown + HTML report there, e.g. ``docs/results/coding_learn``), ``--resume RUN_DIR`` (finish
an interrupted run: finished arms are kept, the interrupted one resumes from its checkpoint),
``--rollout-backend local|ray|inline``, ``--model PATH`` (start every arm from this local Hugging Face
causal LM and its tokenizer instead of the tiny from-scratch policy, the default; a resumed run keeps
its saved model). ``--config`` reads a JSON/YAML file of the experiment's config
(``runs/<exp>/<id>/config.json`` of an earlier run works). Exit codes: 0 done, 2 bad input (a path
that holds no model included).

Only typer is imported at module level; the experiments import torch inside the commands.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from transferlab.platform.cli_kit import fail

app = typer.Typer(
    name="experiment",
    help="Experiments: does it learn, dense vs sparse rewards, KL and masking ablations.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


class Preset(StrEnum):
    cpu = "cpu"
    smoke = "smoke"


class RolloutBackend(StrEnum):
    local = "local"
    ray = "ray"
    inline = "inline"


PresetOption = Annotated[
    Preset | None,
    typer.Option(
        "--preset",
        help="smoke: a minutes-long pipeline check; cpu: the settings behind docs/results (hours). One of "
        "--preset, --config or --resume is required.",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="A JSON/YAML config file (overrides the preset).", show_default=False),
]
SeedsOption = Annotated[
    str | None, typer.Option("--seeds", help="Comma-separated seeds, e.g. 0,1,2.", show_default=False)
]
RunsRootOption = Annotated[Path, typer.Option("--runs-root", help="Root of the run store.")]
ReportDirOption = Annotated[
    Path | None, typer.Option("--report-dir", help="Also write the report here.", show_default=False)
]
ResumeOption = Annotated[
    Path | None, typer.Option("--resume", help="Finish this interrupted run directory.", show_default=False)
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="A local Hugging Face causal LM directory to start every arm from (its own tokenizer and "
        "chat template); default: the tiny from-scratch policy.",
        show_default=False,
    ),
]
BackendOption = Annotated[
    RolloutBackend | None,
    typer.Option("--rollout-backend", help="Rollout workers: local processes, ray actors, or inline."),
]


def _run_owned(run: Callable[[], dict[str, Any]], resume: Path | None) -> dict[str, Any]:
    """``run()`` the experiment; a bad ``--resume``, a run another process owns or a model that cannot be
    loaded is one ``error:`` line."""
    from transferlab.agent_rl.policies.model import PolicyNotFoundError
    from transferlab.platform.config import ConfigError
    from transferlab.platform.runstore import RunInUseError

    if resume is not None and not (resume / "meta.json").is_file():
        fail(f"--resume {resume} is not a run directory (no meta.json): pass the run's directory")
    try:
        return run()
    except (RunInUseError, ConfigError, PolicyNotFoundError) as exc:  # ConfigError: another experiment's run
        fail(str(exc))


def _seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        fail(f"--seeds must be comma-separated integers like 0,1,2, got {text!r}")
    if not seeds or any(s < 0 for s in seeds):
        fail(f"--seeds needs at least one non-negative integer, got {text!r}")
    return seeds


def _config(
    cls: type[Any],
    presets: dict[str, Any],
    preset: Preset | None,
    path: Path | None,
    resume: Path | None = None,
    **overrides: Any,
) -> Any:
    """The preset or the file, with command-line overrides applied; naming neither (nor ``--resume``) is
    one error line, so no experiment starts hours of work by default.

    With ``resume`` the run's saved config wins and is returned; settings named on the command line that
    differ from it are an error rather than silently ignored (naming none, or the same ones, resumes as
    saved).
    """
    from transferlab.platform.config import ConfigError

    if preset is None and path is None and resume is None:
        fail(
            "name the work to run: --preset smoke (a pipeline check, minutes), --preset cpu (the committed "
            "settings: hours on a 2-core machine), --config FILE, or --resume RUN_DIR"
        )
    try:
        config = cls.from_file(path) if path is not None else presets[(preset or Preset.cpu).value]
        updates = {k: v for k, v in overrides.items() if v is not None}
        named = preset is not None or path is not None or bool(updates)
        if "rollout_backend" in updates:
            config = config.model_copy(
                update={
                    "rl": config.rl.model_copy(update={"rollout_backend": updates.pop("rollout_backend")})
                }
            )
        config = cls.model_validate({**config.model_dump(), **updates}) if updates else config
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    if resume is None:
        return config
    try:
        saved = cls.from_file(resume / "config.json")
    except (ConfigError, FileNotFoundError, ValueError):
        return config  # not a run of this experiment: opening it says so
    if named:
        _check_resumed(resume, saved, config)
    return saved


def config_differences(saved: Any, given: Any, limit: int = 4) -> list[str]:
    """``field (saved X, given Y)`` for each setting (dotted for nested ones) where two configs differ.

    >>> from transferlab.agent_rl.rl import RLConfig
    >>> config_differences(RLConfig(lr=1e-4), RLConfig(lr=5e-5, steps=3))
    ['lr (saved 0.0001, given 5e-05)', 'steps (saved 50, given 3)']
    """

    def flat(value: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(value, dict):
            return {k: v for key, sub in value.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
        return {prefix.rstrip("."): value}

    a, b = flat(saved.model_dump(mode="json")), flat(given.model_dump(mode="json"))
    out = [
        f"{k} (saved {a.get(k)}, given {b.get(k)})"
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k)
    ]
    return out[:limit] + ([f"{len(out) - limit} more"] if len(out) > limit else [])


def resume_mismatch(resume: Path, saved: Any, given: Any) -> str | None:
    """The error for a resume whose command-line settings differ from the run's saved config (None: they
    agree). Shared by every experiment command that takes ``--resume``."""
    differ = config_differences(saved, given)
    if not differ:
        return None
    return (
        f"--resume {resume} continues with the settings it saved ({resume / 'config.json'}), which "
        f"differ from the ones given here in {'; '.join(differ)}: drop those options to resume as "
        "saved, or leave out --resume to start a new run with these settings"
    )


def _check_resumed(resume: Path, saved: Any, given: Any) -> None:
    """Refuse a resume whose command-line settings differ from the run's saved config."""
    message = resume_mismatch(resume, saved, given)
    if message:
        fail(message)


def _main_guard() -> None:
    """Workers are spawned processes; make sure torch in this process uses the cores sensibly."""
    import logging

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("transferlab").setLevel(logging.WARNING)


@app.command("learn")
def learn(
    preset: PresetOption = None,
    config: ConfigOption = None,
    seeds: SeedsOption = None,
    runs_root: RunsRootOption = Path("runs"),
    report_dir: ReportDirOption = None,
    resume: ResumeOption = None,
    rollout_backend: BackendOption = None,
    model: ModelOption = None,
) -> None:
    """Does it learn? Untrained vs SFT vs SFT + GRPO / PPO on held-out tasks, with 95% intervals."""
    from transferlab.coding_rl.experiments.learn import LearnConfig, run_learn
    from transferlab.coding_rl.experiments.presets import LEARN_PRESETS

    _main_guard()
    cfg = _config(
        LearnConfig,
        LEARN_PRESETS,
        preset,
        config,
        resume,
        seeds=_seeds(seeds),
        rollout_backend=rollout_backend.value if rollout_backend else None,
        model_path=model,
    )
    summary = _run_owned(lambda: run_learn(cfg, runs_root, report_dir, resume), resume)
    for algo in cfg.algos:
        typer.echo(summary["vs_sft"][algo]["verdict"])


def _agent(
    which: str,
    preset: Preset | None,
    config: Path | None,
    seeds: str | None,
    runs_root: Path,
    report_dir: Path | None,
    resume: Path | None,
    rollout_backend: RolloutBackend | None,
    model: str | None,
) -> dict[str, Any]:
    from transferlab.coding_rl.experiments.agent import AgentExperimentConfig, run_ablations, run_dense_sparse
    from transferlab.coding_rl.experiments.presets import AGENT_PRESETS

    _main_guard()
    cfg = _config(
        AgentExperimentConfig,
        AGENT_PRESETS,
        preset,
        config,
        resume,
        seeds=_seeds(seeds),
        rollout_backend=rollout_backend.value if rollout_backend else None,
        model_path=model,
    )
    run = run_dense_sparse if which == "dense-sparse" else run_ablations
    return _run_owned(lambda: run(cfg, runs_root, report_dir, resume), resume)


@app.command("dense-sparse")
def dense_sparse(
    preset: PresetOption = None,
    config: ConfigOption = None,
    seeds: SeedsOption = None,
    runs_root: RunsRootOption = Path("runs"),
    report_dir: ReportDirOption = None,
    resume: ResumeOption = None,
    rollout_backend: BackendOption = None,
    model: ModelOption = None,
) -> None:
    """Dense vs sparse rewards: success against episodes, and episodes to a fixed success rate."""
    summary = _agent(
        "dense-sparse", preset, config, seeds, runs_root, report_dir, resume, rollout_backend, model
    )
    for what, key in (("held-out", "held_out_ratio"), ("training", "ratio")):
        ratio = summary.get(key)
        shown = f"{ratio:.2f}x" if ratio is not None else "not reached in every seed by both arms"
        typer.echo(f"episodes to the {what} success threshold, sparse / dense: {shown}")


@app.command("ablations")
def ablations(
    preset: PresetOption = None,
    config: ConfigOption = None,
    seeds: SeedsOption = None,
    runs_root: RunsRootOption = Path("runs"),
    report_dir: ReportDirOption = None,
    resume: ResumeOption = None,
    rollout_backend: BackendOption = None,
    model: ModelOption = None,
) -> None:
    """KL coefficient 0 vs > 0, and observation tokens wrongly left in the loss."""
    summary = _agent(
        "ablations", preset, config, seeds, runs_root, report_dir, resume, rollout_backend, model
    )
    for arm, row in summary["arms"].items():
        typer.echo(f"{arm}: held-out success {row['held_out']['estimate']:.2f}")


@app.command("agent-learn")
def agent_learn(
    preset: PresetOption = None,
    config: ConfigOption = None,
    seeds: SeedsOption = None,
    runs_root: RunsRootOption = Path("runs"),
    report_dir: ReportDirOption = None,
    resume: ResumeOption = None,
    rollout_backend: BackendOption = None,
    model: ModelOption = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            min=1,
            help="Seeds run in this many processes at once (each with the config's torch_threads); "
            "the result is the same as with 1.",
        ),
    ] = 1,
) -> None:
    """SFT vs SFT + RL vs rejection-sampling fine-tuning (same episodes) on held-out CodeRepair-v0 tasks."""
    from transferlab.coding_rl.experiments.agent_learn import AgentLearnConfig, run_agent_learn
    from transferlab.coding_rl.experiments.presets import AGENT_LEARN_PRESETS

    _main_guard()
    cfg = _config(
        AgentLearnConfig,
        AGENT_LEARN_PRESETS,
        preset,
        config,
        resume,
        seeds=_seeds(seeds),
        rollout_backend=rollout_backend.value if rollout_backend else None,
        model_path=model,
    )
    summary = _run_owned(lambda: run_agent_learn(cfg, runs_root, report_dir, resume, jobs=jobs), resume)
    for line in summary["verdicts"].values():
        typer.echo(line)
