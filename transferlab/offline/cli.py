"""`transferlab offline ...`: offline RL and off-policy evaluation on logs.

Commands::

    transferlab offline ope-obd --behavior RANDOM_CSV --evaluation BTS_CSV [--json] [--seed N] [--n-boot N]
    transferlab offline train --logs DIR [--learner NAME|all ...] [--steps N] [--run-dir DIR] [--json]
    transferlab offline report --out DIR [--preset smoke|cpu] [--obd OBD_DIR] [--json]

Exit codes: 0 done; 2 bad input (a file that is missing or malformed, a bad option).

Only typer, the standard library and the platform's (equally light) CLI kit are imported at
module level, so ``transferlab --help`` stays fast; numpy, pandas and the estimators are imported
inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from transferlab.platform.cli_kit import fail, fraction_progress

app = typer.Typer(
    name="offline",
    help="Offline RL and off-policy evaluation on logs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


# ------------------------------------------------------------------------------------------- ope-obd


@app.command("ope-obd")
def ope_obd_command(
    behavior: Annotated[
        Path,
        typer.Option("--behavior", help="The uniform random policy's OBD log, e.g. obd/random/men/men.csv."),
    ],
    evaluation: Annotated[
        Path,
        typer.Option("--evaluation", help="The Bernoulli TS policy's OBD log, e.g. obd/bts/men/men.csv."),
    ],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap resamples.")] = 0,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Bootstrap resamples per interval.")] = 2000,
    as_json: Annotated[bool, typer.Option("--json", help="Print only one JSON object.")] = False,
) -> None:
    """Off-policy evaluation on the Open Bandit Dataset, both ways.

    Forward: Bernoulli TS's click rate estimated from the random log, against TS's own log. Reverse:
    the uniform random policy estimated from the TS log, against the random log (poor coverage: it is
    expected to be flagged UNTRUSTWORTHY).
    """
    import json

    from transferlab.offline.obd_ope import ope_obd
    from transferlab.simulator.realdata.obd import load_obd

    if n_boot < 1:
        fail(f"--n-boot must be a positive number of resamples (e.g. 2000), got {n_boot}")
    logs = []
    for option, path in (("--behavior", behavior), ("--evaluation", evaluation)):
        try:
            logs.append(load_obd(path))
        except ValueError as exc:
            fail(f"{option}: {exc}")
    random_log, bts_log = logs
    try:
        if not as_json:
            print(f"estimating both directions ({n_boot} bootstrap resamples each) ...", file=sys.stderr)
        summary = ope_obd(random_log, bts_log, seed=seed, n_boot=n_boot)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(summary))
        return
    titles = {
        "forward": "forward: Bernoulli TS estimated from the random log (--behavior)",
        "reverse": "reverse: uniform random estimated from the TS log (--evaluation)",
    }
    for direction, title in titles.items():
        _print_direction(title, summary[direction])


def _print_direction(title: str, d: dict[str, Any]) -> None:
    """One direction of ``ope-obd`` as a plain table, with a loud line when coverage fails."""
    print(title)
    print(f"  {'estimator':<10} {'estimate':>9}  {'95% CI':<20} {'rel. error':>10}")
    for name, est in d["estimates"].items():
        lo, hi = est["ci"]
        ci = f"[{lo:.5f}, {hi:.5f}]"
        print(f"  {name:<10} {est['value']:>9.5f}  {ci:<20} {est['relative_error']:>10.3f}")
    lo, hi = d["truth_ci"]
    truth_ci = f"[{lo:.5f}, {hi:.5f}]"
    print(f"  {'truth':<10} {d['truth']:>9.5f}  {truth_ci:<20} {'-':>10}")
    cov = d["coverage"]
    print(
        f"  coverage: ESS {cov['ess']:.0f} of n={d['n']} ({cov['ess_share']:.1%}), "
        f"max weight {cov['max_weight']:.2f}, unsupported mass {cov['unsupported_mass']:.1%}, "
        f"trusted={cov['trusted']}"
    )
    if not cov["trusted"]:
        print(f"  UNTRUSTWORTHY: {cov['reason']}")
    print()


# --------------------------------------------------------------------------------------------- train


@app.command("train")
def train_command(
    logs: Annotated[
        list[Path],
        typer.Option("--logs", help="Log directory from `transferlab sim generate-logs` (repeat for more)."),
    ],
    learner: Annotated[
        list[str] | None,
        typer.Option(
            "--learner",
            help="discrete_cql, discrete_bcq, discrete_bc, dqn, cql, iql, td3_plus_bc, or 'all' "
            "(repeat for several; default discrete_cql).",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Gradient steps per learner.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of learners and evaluation.")] = None,
    episodes: Annotated[
        int | None, typer.Option("--episodes", help="World/simulator evaluation episodes per policy.")
    ] = None,
    fqe_steps: Annotated[
        int | None, typer.Option("--fqe-steps", help="FQE gradient steps per policy (0 skips FQE).")
    ] = None,
    simulator: Annotated[
        bool, typer.Option("--simulator/--no-simulator", help="Also fit a simulator and evaluate in it.")
    ] = False,
    evaluate: Annotated[
        bool, typer.Option("--evaluate/--no-evaluate", help="Evaluate after training.")
    ] = True,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="A JSON/YAML OfflineTrainConfig (a run's config.json works).", show_default=False
        ),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            help="Run directory (default <runs-root>/offline-train/<run-id>); rerun with the same one to "
            "resume: learners already saved there are loaded, not retrained.",
            show_default=False,
        ),
    ] = None,
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Root of the run store.")] = Path("runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON summary.")] = False,
) -> None:
    """Train offline RL learners (d3rlpy) on campaign logs; value them in the world, by OPE and coverage."""
    import json

    from transferlab.offline.datasets import DatasetError
    from transferlab.offline.learners import LEARNERS
    from transferlab.offline.train import OfflineTrainConfig, train_offline
    from transferlab.platform.config import ConfigError
    from transferlab.platform.runstore import RunInUseError, RunLock, new_run_id, recorded_run
    from transferlab.simulator.logs import LogError, read_logs

    names = list(learner or [])
    if "all" in names:
        names = list(LEARNERS)
    try:
        base = OfflineTrainConfig.from_file(config) if config is not None else OfflineTrainConfig()
        data = base.to_dict()
        if names:
            data["learners"] = names
        if steps is not None:
            data["steps"] = steps
        if seed is not None:
            data["seed"] = seed
            data["evaluation"]["seed"] = seed
        if episodes is not None:
            data["evaluation"]["episodes"] = episodes
        if fqe_steps is not None:
            data["evaluation"]["fqe_steps"] = fqe_steps
        data["fit_simulator"] = simulator or base.fit_simulator
        data["evaluate"] = evaluate
        cfg = OfflineTrainConfig.from_dict(data)
        tables = [read_logs(p) for p in logs]
    except (ConfigError, LogError, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    out = run_dir or runs_root / "offline-train" / new_run_id()
    saved = out / "config.json"
    if saved.is_file() and json.loads(saved.read_text()) != cfg.to_dict():
        fail(f"{out} holds a run with another config: choose a new --run-dir, or rerun with the same options")
    lock = RunLock(out)
    try:
        lock.acquire()  # one process per run directory
        # `runs list` and the Experiments page see it
        with recorded_run(out, "offline-train", cfg), fraction_progress(quiet=as_json) as progress:
            result = train_offline(tables, cfg, run_dir=out, progress=progress)
    except (DatasetError, ValueError, RunInUseError) as exc:  # bad logs or options, each named with the fix
        fail(str(exc))
    finally:
        lock.release()
    summary: dict[str, Any] = {"run_dir": str(out), "train_seconds": round(result.train_seconds, 1)}
    if result.evaluation is not None:
        summary.update(result.evaluation.to_dict())
    if as_json:
        print(json.dumps(summary))
        return
    print(f"dataset: {len(result.dataset)} logged days in {result.dataset.n_episodes} episodes")
    if result.evaluation is not None:
        print(result.evaluation.format_table())
    print(f"run directory: {out} (report.md, result.json, learners/)")


# -------------------------------------------------------------------------------------------- report


@app.command("report")
def report_command(
    out: Annotated[Path, typer.Option("--out", help="Directory for result.json and report.md/html.")],
    preset: Annotated[
        str,
        typer.Option("--preset", help="smoke (about a minute, a check) or cpu (the committed report)."),
    ] = "cpu",
    seeds: Annotated[
        str | None,
        typer.Option(
            "--seeds",
            help="Training seeds of the main comparison, comma-separated (default: the preset's; cpu: "
            "0,1,2).",
            show_default=False,
        ),
    ] = None,
    obd: Annotated[
        Path | None,
        typer.Option(
            "--obd",
            help="An Open Bandit Dataset directory holding random/<campaign>/ and bts/<campaign>/ "
            "(e.g. ../shared/data/obd): adds the real-data OPE protocol to the report.",
            show_default=False,
        ),
    ] = None,
    campaign: Annotated[str, typer.Option("--campaign", help="The OBD campaign with --obd.")] = "men",
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON summary.")] = False,
) -> None:
    """Compare every learner on generated logs (world, simulator, OPE, coverage) and sweep exploration."""
    import json

    from transferlab.offline.experiments import PRESET_ALIASES, PRESETS, ComparisonConfig, run_comparison
    from transferlab.offline.experiments import preset as get_preset
    from transferlab.platform.cli_kit import canonical_preset
    from transferlab.platform.config import ConfigError

    try:
        preset = canonical_preset(preset, PRESETS, PRESET_ALIASES)
        cfg = get_preset(preset)
        if seeds is not None:
            try:
                parsed = [int(x) for x in seeds.split(",") if x.strip()]
            except ValueError:
                fail(f"--seeds must be comma-separated integers like 0,1,2, got {seeds!r}")
            cfg = ComparisonConfig.from_dict({**cfg.to_dict(), "seeds": parsed})
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    obd_files = None
    if obd is not None:
        obd_files = (
            obd / "random" / campaign / f"{campaign}.csv",
            obd / "bts" / campaign / f"{campaign}.csv",
        )
        missing = [str(p) for p in obd_files if not p.is_file()]
        if missing:
            fail(f"--obd: {', '.join(missing)} not found; give the folder holding random/ and bts/")
    with fraction_progress(quiet=as_json) as progress:
        command = f"transferlab offline report --preset {preset}" + (f" --seeds {seeds}" if seeds else "")
        command += (f" --obd {obd}" if obd is not None else "") + f" --out {out}"
        result = run_comparison(cfg, out, progress=progress, obd=obd_files, command=command)
    if as_json:
        print(json.dumps({"out": str(out), **result}))
        return
    from transferlab.platform.results import Comparison

    chosen = ", ".join(f"seed {k}: {v}" for k, v in result["selected_by_seed"].items())
    print(f"selected by the {result['main']['selection']['by']} rule: {chosen}")
    for raw in result["comparisons"]:
        c = Comparison.model_validate(raw)
        if c.name.startswith("selected - ") and c.cluster == "seed":
            print(c.sentence(unit="return", scale=1))
    print(f"report: {out / 'report.md'}")
