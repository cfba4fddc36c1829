"""`transferlab offline ...`: offline RL and off-policy evaluation on logs.

Commands::

    transferlab offline ope-obd --behavior RANDOM_CSV --evaluation BTS_CSV [--json] [--seed N] [--n-boot N]

Exit codes: 0 done; 2 bad input (a file that is missing or malformed, a bad option).

Only typer and the standard library are imported at module level, so ``transferlab --help`` stays
fast; numpy, pandas and the estimators are imported inside the commands.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

EXIT_OK = 0
EXIT_BAD_INPUT = 2

app = typer.Typer(
    name="offline",
    help="Offline RL and off-policy evaluation on logs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


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
