"""``transferlab ops``: the ops-side experiments that train the coding trainer's policies on ops.

    transferlab ops experiment learn     [--preset cpu|smoke] [--config F] [--seeds 0,1,2] [--jobs N]
                                         [--runs-root DIR] [--report-dir DIR] [--resume RUN_DIR]
                                         [--model PATH]
    transferlab ops train                [--preset cpu|smoke] [--seed N] [--init-from DIR] [--run-dir DIR]
                                         [--runs-root DIR]
    transferlab ops probes               [--split validation|test|train] [--tasks N] [--json] [--out DIR]
    transferlab ops experiment transfer  [--preset cpu|smoke] [--config F] [--runs-root DIR]
                                         [--report-dir DIR] [--resume RUN_DIR] [--model PATH]
                                         [--only-seeds 0,2]

``probes``: the rubric attacked by agents that skip the analysis (:mod:`transferlab.simulator.ops.probes`).
``train``: ops SFT + multi-turn GRPO alone, one seed, as a run (:mod:`transferlab.comparison.ops_training`).
``learn``: SFT vs SFT + multi-turn GRPO and SFT + rejection-sampling fine-tuning on held-out
OpsAnalysis-v0 scenarios (:mod:`transferlab.comparison.ops_learn`; ``arms`` in a config picks them).
``transfer``: a coding-trained policy vs one from scratch, both trained on ops
(:mod:`transferlab.comparison.transfer`). Exit codes: 0 done, 2 bad input.

Only typer is imported at module level; the experiments import torch inside the commands.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from transferlab.coding_rl.experiments.cli import (
    ConfigOption,
    ModelOption,
    Preset,
    PresetOption,
    ReportDirOption,
    ResumeOption,
    RunsRootOption,
    SeedsOption,
    _config,
    _main_guard,
    _run_owned,
    _seeds,
)
from transferlab.platform.cli_kit import fail

app = typer.Typer(
    name="ops",
    help="Ops experiments: does agent RL learn on OpsAnalysis-v0, does coding transfer to it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
experiment_app = typer.Typer(
    name="experiment",
    help="learn: SFT vs SFT + RL on ops; transfer: coding-pretrained vs scratch on ops.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(experiment_app, name="experiment")


class TransferPreset(StrEnum):
    cpu = "cpu"
    smoke = "smoke"


@app.command("train")
def train(
    preset: Annotated[
        TransferPreset, typer.Option("--preset", help="cpu: the committed settings; smoke: a quick check.")
    ] = TransferPreset.cpu,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the policy, the data order and sampling.")] = 0,
    init_from: Annotated[
        Path | None,
        typer.Option(
            "--init-from",
            help="A policy directory to fine-tune (e.g. a coding policy's policy/); default: a fresh policy.",
            show_default=False,
        ),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir", help="The run directory (default: a new one under --runs-root).", show_default=False
        ),
    ] = None,
    runs_root: RunsRootOption = Path("runs"),
) -> None:
    """Ops SFT + multi-turn GRPO alone, one seed: the held-out success and rubric curve, as a run."""
    from transferlab.comparison.ops_training import PRESETS, train_ops
    from transferlab.platform.runstore import new_run_id, recorded_run

    if init_from is not None and not (init_from / "config.json").is_file():
        fail(f"--init-from {init_from} is not a saved policy (no config.json): pass a run's policy/ folder")
    directory = run_dir or runs_root / "ops-train" / new_run_id()
    if (directory / "result.json").is_file():
        fail(f"--run-dir {directory} already holds a finished ops training; pick a new directory")
    _main_guard()
    import torch

    torch.set_num_threads(1)
    config = PRESETS[preset.value]().model_copy(update={"seed": seed})
    with recorded_run(directory, "ops-train", config):
        res = train_ops(config, directory, init_from)
    for p in res.curve:
        typer.echo(
            f"{p['stage']:>5} step {p['step']:>3}: "
            f"held-out success {p['success']:.2f}, rubric {p['rubric']:.2f}"
        )
    typer.echo(f"{res.seconds:.0f} s; run directory {directory}")


class ProbeSplit(StrEnum):
    train = "train"
    validation = "validation"
    test = "test"


@app.command("probes")
def probes(
    split: Annotated[
        ProbeSplit, typer.Option("--split", help="The scenarios attacked: train, validation or test.")
    ] = ProbeSplit.validation,
    tasks: Annotated[int, typer.Option("--tasks", min=1, help="Scenarios of the split (the first N).")] = 60,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the rows as JSON instead of a table.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Also write result.json and README.md into this new (or empty) directory.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Attack the ops rubric: agents that try to pass without the analysis, and honest controls.

    Exit 0 when every degenerate probe passes at most 5% of the scenarios and every honest one at
    least 95%; 1 when one does not (the table says which). Scenarios take about a second each to build
    the first time.
    """
    import json
    import shlex
    import sys
    import time

    from transferlab.platform.cli_kit import EXIT_FAILED, echo_progress
    from transferlab.platform.io import atomic_directory, atomic_write_json, atomic_write_text
    from transferlab.platform.provenance import provenance
    from transferlab.simulator.ops.probes import LIMITS, probe_table, run_probes

    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        fail(f"--out {out} already exists and is not empty: choose a new directory or remove it")
    t0 = time.perf_counter()
    say = echo_progress if sys.stderr.isatty() else None
    results = run_probes(split.value, tasks, progress=say)
    table = probe_table(results)
    rows = [r.row() for r in results]
    ok = all(r.held is not False for r in results)
    typer.echo(json.dumps(rows, indent=2) if as_json else table)
    if out is not None:
        args = ["ops", "probes", "--split", split.value, "--tasks", str(tasks), "--out", str(out)]
        command = "transferlab " + shlex.join(args)
        result: dict[str, Any] = {
            "experiment": "ops-probes",
            "command": command,
            "scored_split": split.value,
            "tuned_on": "validation",  # the rubric and the scenario ranges were fixed on validation runs
            "tasks": tasks,
            "limits": {k: {"op": op, "rate": v} for k, (op, v) in LIMITS.items()},
            "held": ok,
            "probes": rows,
            "provenance": provenance(command, time.perf_counter() - t0),
        }
        with atomic_directory(out) as tmp:
            atomic_write_json(tmp / "result.json", result)
            atomic_write_text(tmp / "README.md", _probes_readme(result, table))
        typer.echo(f"wrote {out}/result.json and README.md")
    if not ok:
        failed = ", ".join(r.name for r in results if r.held is False)
        typer.echo(f"not held on {split.value}: {failed}", err=True)
        raise typer.Exit(EXIT_FAILED)


def _probes_readme(result: dict[str, Any], table: str) -> str:
    prov = result["provenance"]
    verdict = "holds" if result["held"] else "does NOT hold"
    return "\n".join(
        [
            f"# Probes of the ops rubric ({result['scored_split']} split, {result['tasks']} scenarios)",
            "",
            "Scripted agents that try to pass OpsAnalysis-v0 without the analysis, and honest controls "
            "(`transferlab.simulator.ops.probes`). Limits: a degenerate probe passes at most 5% of the "
            "scenarios, an honest one at least 95%; a *chance* probe (one cause always, after the "
            "expert's queries) passes at most on its cause's family (a fifth of the split), the floor of any "
            "per-report grader "
            f"that checks the cause. The suite {verdict}.",
            "",
            table,
            "",
            f"Made by `{prov['command']}` at commit `{prov['git_commit']}` (dirty: {prov['git_dirty']}) "
            f"in {prov['wall_s']} s; written from result.json.",
            "",
        ]
    )


@experiment_app.command("learn")
def learn(
    preset: PresetOption = None,
    config: ConfigOption = None,
    seeds: SeedsOption = None,
    runs_root: RunsRootOption = Path("runs"),
    report_dir: ReportDirOption = None,
    resume: ResumeOption = None,
    model: ModelOption = None,
    jobs: Annotated[
        int,
        typer.Option("--jobs", min=1, help="Seeds run in this many processes at once (same result as 1)."),
    ] = 1,
) -> None:
    """SFT vs SFT + multi-turn GRPO and SFT + RFT on held-out OpsAnalysis-v0 scenarios, seed-clustered."""
    from transferlab.comparison.ops_learn import OPS_LEARN_PRESETS, OpsLearnConfig, run_ops_learn

    _main_guard()
    cfg = _config(
        OpsLearnConfig, OPS_LEARN_PRESETS, preset, config, resume, seeds=_seeds(seeds), model_path=model
    )
    summary = _run_owned(lambda: run_ops_learn(cfg, runs_root, report_dir, resume, jobs=jobs), resume)
    for line in summary["verdicts"].values():
        typer.echo(line)


@experiment_app.command("transfer")
def transfer(
    preset: Annotated[
        TransferPreset | None,
        typer.Option(
            "--preset",
            help="cpu: the committed settings (hours); smoke: a quick check. One of --preset, --config or "
            "--resume is required.",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    runs_root: RunsRootOption = Path("runs"),
    report_dir: ReportDirOption = None,
    resume: ResumeOption = None,
    model: ModelOption = None,
    only_seeds: Annotated[
        str | None,
        typer.Option(
            "--only-seeds",
            help="Comma-separated seeds this process computes (run a second process with --resume).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Coding-pretrained vs from-scratch policies trained on ops: held-out success, episodes, habits."""
    import json

    from transferlab.comparison.transfer import PRESETS, TransferConfig, run_transfer

    _main_guard()
    presets = {name: make() for name, make in PRESETS.items()}
    cfg = _config(
        TransferConfig, presets, Preset(preset.value) if preset else None, config, resume, model_path=model
    )
    picked = _seeds(only_seeds)
    if picked is not None and not set(picked) <= set(cfg.seeds):
        fail(f"--only-seeds {only_seeds}: the run's seeds are {cfg.seeds}; pick among them")
    summary = _run_owned(lambda: run_transfer(cfg, runs_root, report_dir, resume, only_seeds=picked), resume)
    if summary:
        typer.echo(json.dumps({arm: row["episodes_to_threshold"] for arm, row in summary["arms"].items()}))
