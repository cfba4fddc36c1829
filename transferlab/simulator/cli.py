"""`transferlab sim ...`: the ecommerce market — ground-truth world, logs, learned simulator, real data.

Commands::

    transferlab sim generate-logs --out DIR [--days 365] [--customers 2000] [--seed 0] [--epsilon 0.1]
    transferlab sim fit LOGS --out DIR [--config FILE] [--seed N] [--json]
    transferlab sim cdnow-forecast FILE [--calibration-end 1997-09-30] [--holdout-end 1998-06-30]
        [--plot PNG] [--json]
    transferlab sim train --simulator SIM_DIR --logs LOGS_DIR [--config FILE] [--seed N]
        [--minutes M | --episodes N] [--run-dir DIR | --runs-root runs] [--json]
    transferlab sim obd-ctr --train RANDOM_CSV --eval BTS_CSV [--item-context CSV] [--json]

Exit codes: 0 done; 2 bad input (a file that is missing or malformed, a bad option).

Only typer and the standard library are imported at module level, so ``transferlab --help`` stays
fast; numpy, pandas, scikit-learn and the simulator are imported inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from transferlab.platform.cli_kit import echo_progress, fail, fraction_progress, progress_bar

app = typer.Typer(
    name="sim",
    help="The ecommerce market: ground-truth world, historical logs, learned simulator, real data.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


# ---------------------------------------------------------------------------------------------- logs


@app.command("generate-logs")
def generate_logs_command(
    out: Annotated[Path, typer.Option("--out", help="New directory for the Parquet logs.")],
    days: Annotated[int, typer.Option("--days", help="Days of history (at least 7).")] = 365,
    customers: Annotated[int, typer.Option("--customers", help="Customers in the world.")] = 2000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the world and the marketer.")] = 0,
    epsilon: Annotated[
        float,
        typer.Option(
            "--epsilon",
            min=0.0,
            max=1.0,
            help="Share of the marketer's choices made uniformly at random (0 to 1).",
        ),
    ] = 0.1,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Run the ground-truth world under the marketer's behaviour policy and write the logs as Parquet."""
    import json

    from transferlab.platform.config import ConfigError
    from transferlab.simulator.logs import LogError, LogSpec, generate_logs, write_logs
    from transferlab.simulator.world_config import WorldConfig

    try:
        spec = LogSpec(days=days, epsilon=epsilon, world=WorldConfig.build(n_customers=customers, seed=seed))
        if out.exists() and any(out.iterdir()):
            raise LogError(f"{out} already exists and is not empty: choose a new --out or remove it")
    except (ConfigError, LogError, ValueError) as exc:
        fail(str(exc))
    with progress_bar(f"simulating {days} days", total=days, quiet=as_json) as advance:
        logs = generate_logs(spec, progress=lambda done, total: advance())
    write_logs(logs, out)
    summary = {
        "out": str(out),
        **logs.manifest["rows"],
        "campaigns_launched": int(logs.campaigns["launched"].sum()),
        "campaigns_matured": int(logs.campaigns["matured"].sum()),
    }
    if as_json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value}")


# ----------------------------------------------------------------------------------------------- fit


@app.command("fit")
def fit_command(
    logs: Annotated[Path, typer.Argument(help="Log directory made by `transferlab sim generate-logs`.")],
    out: Annotated[Path, typer.Option("--out", help="New directory for the fitted simulator.")],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="A JSON/YAML SimFitConfig (a simulator's config.json works).", show_default=False
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the fit.", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fit report as JSON.")] = False,
) -> None:
    """Fit the learned simulator on logs only; save it with its config and fit report."""
    import json

    from transferlab.platform.config import ConfigError
    from transferlab.simulator.learned import LearnedSimulator, SimFitConfig, SimulatorError
    from transferlab.simulator.logs import LogError, read_logs

    try:
        cfg = SimFitConfig.from_file(config) if config is not None else SimFitConfig()
        if seed is not None:
            cfg = SimFitConfig.from_dict({**cfg.to_dict(), "seed": seed})
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise SimulatorError(f"{out} already exists and is not empty: choose a new --out or remove it")
        sim = LearnedSimulator.fit(read_logs(logs), cfg)
        sim.save(out)
    except (ConfigError, LogError, SimulatorError) as exc:
        fail(str(exc))
    summary = json.loads((out / "fit_report.json").read_text())
    if as_json:
        print(json.dumps({"out": str(out), **summary}))
    else:
        print((out / "fit_report.md").read_text())
        print(f"simulator directory: {out}")


# --------------------------------------------------------------------------------------------- train


@app.command("train")
def train_command(
    simulator: Annotated[
        Path, typer.Option("--simulator", help="Directory of a simulator made by `transferlab sim fit`.")
    ],
    logs: Annotated[Path, typer.Option("--logs", help="The log directory the simulator was fitted on.")],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="A JSON/YAML SimTrainConfig (a run's config.json works).", show_default=False
        ),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed of the run.", show_default=False)] = None,
    minutes: Annotated[
        float | None, typer.Option("--minutes", help="Training wall-time budget.", show_default=False)
    ] = None,
    episodes: Annotated[
        int | None,
        typer.Option("--episodes", help="Training budget in episodes (reproducible).", show_default=False),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            help="The run directory (default: a new one under --runs-root); if it holds an unfinished "
            "run, that run resumes from its checkpoint with its saved config.",
            show_default=False,
        ),
    ] = None,
    runs_root: Annotated[Path, typer.Option("--runs-root", help="Root of the run store.")] = Path("runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Train a policy with PPO in the learned simulator; value it in the simulator and in the world."""
    import json

    from transferlab.platform.config import ConfigError
    from transferlab.platform.runstore import RunInUseError
    from transferlab.simulator.learned import LearnedSimulator
    from transferlab.simulator.logs import LogError, read_logs
    from transferlab.simulator.train import SimTrainConfig, open_train_run, train_in_simulator

    overrides: dict[str, object] = {} if seed is None else {"seed": seed}
    if minutes is not None or episodes is not None:  # a budget flag replaces both budgets
        overrides.update(max_minutes=minutes, max_episodes=episodes)
    given = bool(overrides) or config is not None
    try:
        base = SimTrainConfig.from_file(config) if config is not None else SimTrainConfig()
        cfg = SimTrainConfig.from_dict({**base.to_dict(), **overrides})
        sim = LearnedSimulator.load(simulator)  # inputs first: a bad one leaves no run behind
        log_tables = read_logs(logs)
        run, resume = open_train_run(cfg, run_dir, runs_root, options_given=given)
    except (ConfigError, LogError, ValueError, FileExistsError, FileNotFoundError, RunInUseError) as exc:
        fail(str(exc))
    cfg = run.load_config(SimTrainConfig)
    with run, fraction_progress(quiet=as_json) as progress:
        result = train_in_simulator(
            sim, log_tables, cfg, run_dir=run.dir, logger=run.logger, progress=progress, resume=resume
        )
    if as_json:
        print(json.dumps({"run_dir": str(run.dir), **result.to_dict()}))
    else:
        print(result.format_table())
        print(f"run directory: {run.dir}")


# ------------------------------------------------------------------------------------ cdnow-forecast


@app.command("cdnow-forecast")
def cdnow_forecast_command(
    file: Annotated[Path, typer.Argument(help="CDNOW transactions: 4 or 5 whitespace-separated columns.")],
    calibration_end: Annotated[
        str, typer.Option("--calibration-end", help="Last day of the calibration period (YYYY-MM-DD).")
    ] = "1997-09-30",
    holdout_end: Annotated[
        str, typer.Option("--holdout-end", help="Last day of the holdout period (YYYY-MM-DD).")
    ] = "1998-06-30",
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Write a PNG of the cumulative holdout curve.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fit our purchase model and BG/NBD on the calibration period; forecast each customer's holdout."""
    import json
    from datetime import date

    from transferlab.simulator.realdata.cdnow import (
        CdnowError,
        forecast,
        load_transactions,
        plot_curve,
        summarise,
    )

    def parse_day(flag: str, text: str) -> date:
        try:
            return date.fromisoformat(text)
        except ValueError:
            fail(f"{flag} {text!r} is not a date; write it as YYYY-MM-DD, e.g. 1997-09-30")

    cal, hold = parse_day("--calibration-end", calibration_end), parse_day("--holdout-end", holdout_end)
    try:
        report = forecast(summarise(load_transactions(file), cal, hold))
    except CdnowError as exc:
        fail(str(exc))
    summary = {"file": str(file), **report.to_dict()}
    if plot is not None:
        plot_curve(report, plot)
        summary["plot"] = str(plot)
    if as_json:
        print(json.dumps(summary))
    else:
        _print_cdnow_table(summary)


def _print_cdnow_table(summary: dict[str, object]) -> None:
    """Both models' holdout figures side by side as a rich table."""
    from rich.console import Console
    from rich.table import Table

    ours, base = summary["model"], summary["bgnbd"]
    assert isinstance(ours, dict) and isinstance(base, dict)
    title = (
        f"{summary['customers']} customers; calibration to {summary['calibration_end']}, "
        f"holdout to {summary['holdout_end']}: {summary['holdout_actual_repeat']} actual repeat purchases"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column(f"ours ({ours['name']})", justify="right")
    table.add_column("BG/NBD", justify="right")
    table.add_row("holdout predicted repeat", *(f"{m['holdout_predicted_repeat']:.1f}" for m in (ours, base)))
    table.add_row("relative error", *(f"{m['relative_error']:.4f}" for m in (ours, base)))
    table.add_row("per-customer MAE", *(f"{m['per_customer_mae']:.4f}" for m in (ours, base)))
    table.add_row("log-likelihood (calibration)", *(f"{m['log_likelihood']:.2f}" for m in (ours, base)))
    table.add_row(
        "parameters", *(", ".join(f"{k}={v:.4g}" for k, v in m["params"].items()) for m in (ours, base))
    )
    Console().print(table)


# ------------------------------------------------------------------------------------------- obd-ctr


@app.command("obd-ctr")
def obd_ctr_command(
    train: Annotated[Path, typer.Option("--train", help="OBD log to fit on, e.g. obd/random/men/men.csv.")],
    eval_log: Annotated[Path, typer.Option("--eval", help="Another policy's OBD log to predict.")],
    item_context: Annotated[
        Path | None, typer.Option("--item-context", help="The campaign's item_context.csv (item features).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the CV split and the bootstraps.")] = 0,
    ipw: Annotated[
        bool, typer.Option("--ipw", help="Weight training impressions by 1/propensity (non-uniform logs).")
    ] = False,
    user_features: Annotated[
        bool, typer.Option("--user-features", help="Also use the hashed user features.")
    ] = False,
    refit_boot: Annotated[
        int, typer.Option("--refit-boot", help="Refits on bootstrap resamples of --train for a CI (0: off).")
    ] = 0,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a calibration plot (PNG) of predicted vs observed.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fit the click model on one policy's OBD log and predict another policy's click rate."""
    import json

    from transferlab.simulator.realdata.click_model import ClickModelConfig, obd_ctr

    if refit_boot < 0:
        fail(f"--refit-boot must be 0 (off) or a positive number of refits, got {refit_boot}")
    try:
        config = ClickModelConfig(user_features=user_features, ipw=ipw, seed=seed)
        summary = obd_ctr(train, eval_log, item_context, config, refit_boot=refit_boot, plot=plot)
    except ValueError as exc:
        fail(str(exc))
    train_info = summary["train"]
    if isinstance(train_info, dict) and not train_info["uniform_propensity"] and not ipw:
        print("note: --train's propensities are not uniform; --ipw reweights them", file=sys.stderr)
    if as_json:
        print(json.dumps(summary))
    else:
        _print_obd_table(summary)


def _print_obd_table(summary: dict[str, object]) -> None:
    """The headline figures of ``obd-ctr`` as a rich table."""
    from rich.console import Console
    from rich.table import Table

    def ci(key: str, digits: int = 4) -> str:
        value = summary.get(key)
        return f"[{value[0]:.{digits}f}, {value[1]:.{digits}f}]" if isinstance(value, list) else ""

    auc = summary["auc"]
    table = Table(title="click model: fitted on --train, evaluated on --eval", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    table.add_row("predicted CTR", f"{summary['predicted_ctr']:.4f}", ci("predicted_ctr_ci"))
    if "predicted_ctr_refit_ci" in summary:
        table.add_row("predicted CTR (refits of --train)", "", ci("predicted_ctr_refit_ci"))
    table.add_row("actual CTR", f"{summary['actual_ctr']:.4f}", ci("actual_ctr_ci"))
    table.add_row("relative error", f"{summary['relative_error']:.3f}", "")
    table.add_row("AUC", "n/a" if auc is None else f"{auc:.3f}", "")
    table.add_row("log loss", f"{summary['log_loss']:.5f}", "")
    table.add_row("baseline log loss (constant rate)", f"{summary['baseline_log_loss']:.5f}", "")
    diff = f"{summary['log_loss_diff']:+.5f}"
    table.add_row("log loss, ours minus baseline", diff, ci("log_loss_diff_ci", 5))
    Console().print(table)


# ------------------------------------------------------------------------------------------ fidelity


def _trained_policy(path: Path) -> Any:
    """The greedy actor of a `sim train` policy (a run directory or its policy.pt); one error line if
    it cannot be read."""
    from transferlab.simulator.train import POLICY_FILE, CampaignPolicy, PolicyActor

    file = path / POLICY_FILE if path.is_dir() else path
    if not file.is_file():
        fail(
            f"--policy {path}: no {POLICY_FILE} there; give a `sim train` run directory or its {POLICY_FILE}"
        )
    try:
        return PolicyActor(CampaignPolicy.load(file), greedy=True)
    except Exception as exc:  # torch raises many kinds for a file that is not a saved policy
        fail(f"--policy {file} is not a policy saved by `sim train` ({type(exc).__name__}: {exc})")


@app.command("fidelity")
def fidelity_command(
    simulator: Annotated[Path, typer.Option("--simulator", help="A directory written by `sim fit`.")],
    logs: Annotated[Path, typer.Option("--logs", help="The log directory the simulator was fitted on.")],
    out: Annotated[
        Path, typer.Option("--out", help="New directory for the report and calibrated simulator.")
    ],
    episodes: Annotated[int, typer.Option("--episodes", min=2, help="Evaluation episodes per policy.")] = 16,
    deploy_episodes: Annotated[
        int,
        typer.Option("--deploy-episodes", min=1, help="World episodes per policy whose results calibrate."),
    ] = 64,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every evaluation and deployment.")] = 0,
    policy: Annotated[
        list[Path] | None,
        typer.Option(
            "--policy",
            help="A policy trained by `sim train` (its run directory or policy.pt) to add to the "
            "evaluation panel; repeatable.",
            show_default=False,
        ),
    ] = None,
    offer_shrinkage: Annotated[
        float | None,
        typer.Option(
            "--offer-shrinkage",
            min=0,
            help="Campaigns the simulator's own response to an action is worth against that action's "
            "deployed campaigns when calibrating it (default: calibration.OFFER_SHRINKAGE, 5); inf = "
            "calibrate only the shop-wide level and economics (with --calibration campaigns).",
        ),
    ] = None,
    calibration: Annotated[
        str,
        typer.Option(
            "--calibration",
            help="policies: fit the simulator's structural shifts (purchase level, offer response by "
            "segment and discount depth, fatigue, complaints, spend, cost) to each deployed policy's "
            "return, orders and complaints; campaigns: shift each action's offer by its campaigns' "
            "orders, then match the shop's GMV and profit.",
        ),
    ] = "policies",
    calibration_fits: Annotated[
        int,
        typer.Option(
            "--calibration-fits",
            min=1,
            help="With --calibration policies: fit this many times on other simulation seeds and "
            "average the shifts (one fit carries its own simulation noise; 4 is a good choice).",
        ),
    ] = 1,
    calibration_episodes: Annotated[
        int,
        typer.Option(
            "--calibration-episodes",
            min=1,
            help="With --calibration policies: simulated episodes per policy each time a fit evaluates "
            "the simulator (fewer: faster and noisier).",
        ),
    ] = 48,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Rank policies in the learned simulator and in the world, calibrate on one panel's deployment, and
    score both before and after on a disjoint panel (with the world's own split-half noise ceiling)."""
    import json

    from transferlab.simulator.fidelity_report import CALIBRATION_METHODS, run_fidelity
    from transferlab.simulator.learned import LearnedSimulator, SimulatorError
    from transferlab.simulator.logs import LogError, read_logs

    if calibration not in CALIBRATION_METHODS:
        fail(f"--calibration {calibration!r} is not one of {', '.join(CALIBRATION_METHODS)}")
    if offer_shrinkage is not None and calibration != "campaigns":
        fail("--offer-shrinkage applies to --calibration campaigns only: add it or drop --offer-shrinkage")
    if calibration_fits != 1 and calibration != "policies":
        fail("--calibration-fits applies to --calibration policies only: drop it or use policies")
    if calibration_episodes != 48 and calibration != "policies":
        fail("--calibration-episodes applies to --calibration policies only: drop it or use policies")
    if out.exists() and any(out.iterdir()):
        fail(f"{out} already exists and is not empty: choose a new --out or remove it")
    try:
        sim = LearnedSimulator.load(simulator)
        log_tables = read_logs(logs)
    except (SimulatorError, LogError) as exc:
        fail(str(exc))
    from transferlab.simulator.policies import evaluation_panel

    evaluation = evaluation_panel()
    for path in policy or []:
        evaluation[f"trained:{path.name}"] = _trained_policy(path)
    say = (lambda _m: None) if as_json else echo_progress
    command = (
        f"transferlab sim fidelity --simulator {simulator} --logs {logs} --out {out} --episodes {episodes} "
        f"--deploy-episodes {deploy_episodes} --seed {seed}"
        + "".join(f" --policy {path}" for path in policy or [])
        + (f" --calibration {calibration}" if calibration != "policies" else "")
        + (f" --offer-shrinkage {offer_shrinkage:g}" if offer_shrinkage is not None else "")
        + (f" --calibration-fits {calibration_fits}" if calibration_fits != 1 else "")
        + (f" --calibration-episodes {calibration_episodes}" if calibration_episodes != 48 else "")
    )
    summary = run_fidelity(
        sim,
        log_tables,
        out,
        episodes=episodes,
        deploy_episodes=deploy_episodes,
        seed=seed,
        progress=say,
        command=command,
        evaluation=evaluation,
        offer_shrinkage=offer_shrinkage,
        method=calibration,
        fits=calibration_fits,
        calibration_episodes=calibration_episodes,
    )
    if as_json:
        print(json.dumps(summary))
        return
    print(f"held-out panel ({len(summary['panels']['evaluation'])} policies no calibration saw):")
    for when in ("before", "after"):
        s = summary[when]
        lo, hi = summary["tau_ci"][when]
        print(
            f"{when:>6} calibration: Kendall tau {s['kendall_tau']:+.3f} [{lo:+.3f}, {hi:+.3f}], "
            f"median |error| orders {s['median_abs_rel_error']['orders']:.1%}, "
            f"profit {s['median_abs_rel_error']['profit']:.1%}"
        )
    lo, hi = summary["tau_ceiling_ci"]
    print(f"noise ceiling (the world's split-half tau): {summary['tau_ceiling']:+.3f} [{lo:+.3f}, {hi:+.3f}]")
    print(f"report: {out / 'report.md'}")
