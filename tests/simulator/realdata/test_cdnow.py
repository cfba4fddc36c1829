"""CDNOW: the loader, the BG/NBD and Pareto/NBD math, the holdout forecast, the world prior and the CLI."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import date, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats
from typer.testing import CliRunner, Result

from transferlab.cli import app
from transferlab.simulator.realdata import bgnbd, cdnow, cdnow_prior, purchase_model
from transferlab.simulator.realdata.bgnbd import BgNbdParams
from transferlab.simulator.realdata.cdnow import CdnowError, ForecastReport
from transferlab.simulator.realdata.purchase_model import ParetoNbdParams

SharedData = Callable[[str], Path]
runner = CliRunner()
CDNOW = "cdnow/CDNOW_sample.txt"


def write(tmp_path: Path, *lines: str, name: str = "tx.txt") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def invoke(*args: str | Path) -> Result:
    return runner.invoke(app, ["sim", "cdnow-forecast", *map(str, args)])


def assert_bad_input(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.stderr.startswith("error: ")
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert "Traceback" not in result.output


@cache
def real_report(path: Path) -> ForecastReport:
    """The 39/39-week forecast on the shared CDNOW sample, computed once per test session."""
    return cdnow.forecast(cdnow.summarise(cdnow.load_transactions(path)))


def synthetic_file(tmp_path: Path, customers: int = 300, seed: int = 0) -> Path:
    """A CDNOW-like file drawn from a BG/NBD world (first purchases in Q1 1997, until 1998-06-30)."""
    rng = np.random.default_rng(seed)
    start, end = date(1997, 1, 1), date(1998, 6, 30)
    lines = []
    for customer in range(1, customers + 1):
        rate, dropout = rng.gamma(0.5, 1 / 30), rng.beta(1.0, 3.0)  # per day
        day = start + timedelta(days=int(rng.integers(0, 90)))
        while day <= end:
            lines.append(f"{customer:05d} {day:%Y%m%d} {rng.integers(1, 4)} {rng.lognormal(3.2, 0.7):.2f}")
            if rng.random() < dropout:
                break
            day += timedelta(days=1 + int(rng.exponential(1 / rate)))
    return write(tmp_path, *lines)


# ----------------------------------------------------------------------------------------------- loader


def test_four_columns_with_a_header_and_same_day_purchases_merged(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "customer_id date cds dollars",
        "1 19970101 2 29.33",
        "1 19970101 1 10.00",  # same day: one transaction of 3 CDs and $39.33
        "1 19970115 1 5.00",
        "",
        "1 19970301 2 12.50",
        "1 19971001 1 9.99",  # holdout
        "2 19970110 1 20.00",
        "2 19980701 1 20.00",  # after the holdout end: ignored
        "3 19971005 1 15.00",  # first purchase after the calibration end: not in the cohort
    )
    tx = cdnow.load_transactions(path)
    assert len(tx) == 7
    assert tx.cds[0] == 3 and tx.dollars[0] == pytest.approx(39.33)
    data = cdnow.summarise(tx, date(1997, 9, 30), date(1998, 6, 30))
    assert list(data.customer) == ["1", "2"]
    assert list(data.x) == [2, 0]
    assert pytest.approx([59 / 7, 0.0]) == data.t_x  # 1 Jan to 1 Mar is 59 days
    assert pytest.approx([272 / 7, 263 / 7]) == data.T  # to 30 Sep 1997, from 1 Jan and from 10 Jan
    assert list(data.holdout) == [1, 0]
    assert list(data.holdout_days) == [1]


def test_five_columns_without_a_header_use_the_first_id(tmp_path: Path) -> None:
    five = write(tmp_path, "00004 0001 19970101 2 29.33", "00004 0001 19970118 2 29.73", name="five.txt")
    four = write(tmp_path, "00004 19970101 2 29.33", "00004 19970118 2 29.73", name="four.txt")
    a = cdnow.summarise(cdnow.load_transactions(five), date(1997, 1, 31), date(1997, 2, 28))
    b = cdnow.summarise(cdnow.load_transactions(four), date(1997, 1, 31), date(1997, 2, 28))
    assert list(a.customer) == list(b.customer) == ["00004"]
    assert (a.x[0], a.t_x[0], a.T[0]) == (b.x[0], b.t_x[0], b.T[0]) == (1, 17 / 7, 30 / 7)


@pytest.mark.parametrize(
    ("lines", "needles"),
    [
        ((), ("no transactions",)),
        (("id date cds dollars",), ("no transactions", "header")),
        (("1 19970101 2",), ("line 1", "3 columns")),
        (("1 19970101 2 3.0", "1 19970102 2 3.0 4 5"), ("line 2", "6 columns", "expected 4")),
        (("1 1997-01-01 2 3.0",), ("line 1", "unparseable date", "YYYYMMDD")),
        (("1 19970231 2 3.0",), ("line 1", "unparseable date")),
        (("1 19970101 2 -3.0",), ("line 1", "negative")),
        (("1 19970101 2 3.0", "1 19970102 two 3.0"), ("line 2", "must be numbers")),
        (("C1 19970101 2 3.0", "C1 1997011 1 3.0"), ("line 2", "unparseable date")),  # not 8 digits
    ],
)
def test_malformed_files_name_the_problem(
    tmp_path: Path, lines: tuple[str, ...], needles: tuple[str]
) -> None:
    with pytest.raises(CdnowError) as info:
        cdnow.load_transactions(write(tmp_path, *lines))
    for needle in needles:
        assert needle in str(info.value)


def test_missing_file_and_bad_periods_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(CdnowError, match="no such file"):
        cdnow.load_transactions(tmp_path / "absent.txt")
    tx = cdnow.load_transactions(write(tmp_path, "1 19970101 2 29.33", "1 19970201 1 9.0"))
    with pytest.raises(CdnowError, match="--calibration-end earlier than --holdout-end"):
        cdnow.summarise(tx, date(1998, 1, 1), date(1997, 1, 1))
    with pytest.raises(CdnowError, match=r"no customer made a first purchase.*1997-01-01.*later"):
        cdnow.summarise(tx, date(1996, 12, 1), date(1997, 6, 1))
    with pytest.raises(CdnowError, match="no repeat purchase"):
        cdnow.forecast(cdnow.summarise(tx, date(1997, 1, 15), date(1997, 6, 1)))


# ------------------------------------------------------------------------------------------------ BG/NBD


def test_bgnbd_likelihood_by_hand() -> None:
    """r = α = a = b = 1: L(x=0, T=1) = 1/2 and L(x=1, t_x=1, T=2) = B(1,2)/3² + B(2,1)/2² = 13/72."""
    ll = bgnbd.log_likelihood(
        BgNbdParams(1, 1, 1, 1), np.array([0, 1]), np.array([0.0, 1.0]), np.array([1.0, 2.0])
    )
    assert np.exp(ll) == pytest.approx([1 / 2, 13 / 72], rel=1e-12)


def bg_integrals(params: BgNbdParams, t: float, x: int, t_x: float, T: float) -> tuple[float, float]:
    """The likelihood and ``E[Y(t)]`` by integrating the individual-level BG/NBD over λ and p."""
    g = stats.gamma(params.r, scale=1 / params.alpha).pdf
    f = stats.beta(params.a, params.b).pdf

    def lik(p: float, lam: float, alive_only: bool = False) -> float:
        alive = (1 - p) ** x * lam**x * math.exp(-lam * T)
        dead = p * (1 - p) ** (x - 1) * lam**x * math.exp(-lam * t_x) if x > 0 and not alive_only else 0.0
        return (alive + dead) * g(lam) * f(p)

    total = integrate.dblquad(lik, 0, np.inf, 0, 1)[0]
    future = integrate.dblquad(
        lambda p, lam: lik(p, lam, True) * -math.expm1(-lam * p * t) / p, 0, np.inf, 0, 1
    )[0]
    return total, future / total


@pytest.mark.parametrize(("x", "t_x", "T"), [(0, 0.0, 20.0), (3, 12.0, 30.0)])
def test_bgnbd_formulas_match_numerical_integration(x: int, t_x: float, T: float) -> None:
    params = BgNbdParams(r=2.0, alpha=5.0, a=1.5, b=3.0)
    lik, expected = bg_integrals(params, 10.0, x, t_x, T)
    xs, txs, Ts = np.array([x]), np.array([t_x]), np.array([T])
    assert np.exp(bgnbd.log_likelihood(params, xs, txs, Ts))[0] == pytest.approx(lik, rel=1e-6)
    assert bgnbd.conditional_expected(params, 10.0, xs, txs, Ts)[0] == pytest.approx(expected, rel=1e-5)


# ------------------------------------------------------------------------------------------- Pareto/NBD


def pnbd_integrals(params: ParetoNbdParams, t: float, x: int, t_x: float, T: float) -> tuple[float, float]:
    """The likelihood and ``E[Y(t)]`` by integrating the individual-level Pareto/NBD over λ and μ."""
    g = stats.gamma(params.r, scale=1 / params.alpha).pdf
    h = stats.gamma(params.s, scale=1 / params.beta).pdf

    def lik(mu: float, lam: float, alive_only: bool = False) -> float:
        alive = lam**x * math.exp(-(lam + mu) * T)
        died = lam**x * mu / (lam + mu) * (math.exp(-(lam + mu) * t_x) - math.exp(-(lam + mu) * T))
        return (alive + (0.0 if alive_only else died)) * g(lam) * h(mu)

    total = integrate.dblquad(lik, 0, np.inf, 0, np.inf)[0]
    future = integrate.dblquad(
        lambda mu, lam: lik(mu, lam, True) * lam / mu * -math.expm1(-mu * t), 0, np.inf, 0, np.inf
    )[0]
    return total, future / total


@pytest.mark.parametrize(
    ("params", "x", "t_x", "T"),
    [
        (ParetoNbdParams(r=2.0, alpha=8.0, s=1.5, beta=12.0), 0, 0.0, 20.0),  # β > α
        (ParetoNbdParams(r=2.0, alpha=15.0, s=1.5, beta=6.0), 3, 12.0, 30.0),  # α > β
        (ParetoNbdParams(r=2.0, alpha=15.0, s=1.0, beta=6.0), 2, 5.0, 25.0),  # s = 1: the limit
    ],
)
def test_pareto_nbd_formulas_match_numerical_integration(
    params: ParetoNbdParams, x: int, t_x: float, T: float
) -> None:
    lik, expected = pnbd_integrals(params, 10.0, x, t_x, T)
    xs, txs, Ts = np.array([x]), np.array([t_x]), np.array([T])
    assert np.exp(purchase_model.log_likelihood(params, xs, txs, Ts))[0] == pytest.approx(lik, rel=1e-6)
    assert purchase_model.conditional_expected(params, 10.0, xs, txs, Ts)[0] == pytest.approx(
        expected, rel=1e-5
    )


def test_pareto_nbd_last_purchase_at_the_calibration_end() -> None:
    """t_x = T: the customer cannot have died between them, so P(alive) is 1."""
    params = ParetoNbdParams(r=0.55, alpha=10.6, s=0.61, beta=11.7)
    alive = purchase_model.probability_alive(params, np.array([2]), np.array([30.0]), np.array([30.0]))
    assert alive[0] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------- the real sample


def test_cdnow_summary_and_published_estimates(shared_data: SharedData) -> None:
    report = real_report(shared_data(CDNOW))
    data = report.data
    assert (len(data), int(data.x.sum()), int(data.holdout.sum())) == (2357, 2457, 1882)
    assert data.T.max() == pytest.approx(38.86, abs=0.01)  # first purchase 1 Jan 1997
    bg = report.baseline.params  # Fader, Hardie & Lee (2005)
    assert [bg["r"], bg["alpha"], bg["a"], bg["b"]] == pytest.approx([0.243, 4.414, 0.793, 2.426], abs=2e-3)
    assert report.baseline.log_likelihood == pytest.approx(-9582.4, abs=0.1)
    pn = report.model.params  # the Pareto/NBD estimates published with the same data
    assert [pn["r"], pn["alpha"], pn["s"], pn["beta"]] == pytest.approx(
        [0.553, 10.578, 0.606, 11.669], abs=2e-3
    )


def test_our_model_is_at_least_as_accurate_as_bgnbd(shared_data: SharedData) -> None:
    report = real_report(shared_data(CDNOW))
    actual = report.data.holdout
    ours, base = report.model.figures(actual), report.baseline.figures(actual)
    assert ours["relative_error"] <= base["relative_error"]
    assert ours["per_customer_mae"] <= base["per_customer_mae"]
    assert report.actual_curve[-1] == actual.sum() and len(report.weeks) == 39
    assert report.model.curve[-1] == pytest.approx(report.model.predicted.sum())
    assert np.all(np.diff(report.model.curve) > 0) and np.all(np.diff(report.baseline.curve) > 0)


def test_committed_world_prior_matches_a_recomputation(shared_data: SharedData) -> None:
    committed = json.loads(cdnow_prior.PRIOR_PATH.read_text())
    assert committed["made_by"] == cdnow_prior.MADE_BY
    fresh = cdnow_prior.world_prior(cdnow.load_transactions(shared_data(CDNOW))).to_dict()
    assert fresh.keys() <= committed.keys()
    for key, value in fresh.items():
        if isinstance(value, float):
            assert committed[key] == pytest.approx(value, rel=1e-5), key
        else:
            assert committed[key] == value, key
    assert committed["alpha_days"] == pytest.approx(7 * committed["alpha_weeks"])
    assert committed["customers"] == 2357 and committed["transactions"] == 2357 + 2457


def test_world_prior_by_hand(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "1 19970101 1 10.0",
        "1 19970111 1 40.0",  # gap 10 days
        "1 19970131 1 20.0",  # gap 20 days
        "2 19970105 1 10.0",
        "2 19971231 1 99.0",  # after the calibration end: not counted
        "3 19970301 1 80.0",
        "3 19970302 1 80.0",  # gap 1 day
    )
    prior = cdnow_prior.world_prior(cdnow.load_transactions(path), date(1997, 9, 30))
    spend = np.array([10.0, 40.0, 20.0, 10.0, 80.0, 80.0])
    assert (prior.customers, prior.transactions) == (3, 6)
    assert prior.repeat_rate == pytest.approx(2 / 3)
    assert (prior.inter_purchase_days_mean, prior.inter_purchase_days_median) == (31 / 3, 10.0)
    assert prior.spend_mean == pytest.approx(spend.mean())
    assert prior.spend_log_mu == pytest.approx(np.log(spend).mean())
    assert prior.spend_log_sigma == pytest.approx(np.log(spend).std())
    assert prior.alpha_days == pytest.approx(7 * prior.alpha_weeks)


# ----------------------------------------------------------------------------------------------- the CLI


def test_cli_json_and_plot(tmp_path: Path) -> None:
    path, png = synthetic_file(tmp_path), tmp_path / "plots" / "curve.png"
    result = invoke(path, "--json", "--plot", png)
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    figures = {"holdout_predicted_repeat", "relative_error", "per_customer_mae"}
    assert figures | {"customers", "holdout_actual_repeat", "model", "bgnbd", "curve"} <= out.keys()
    assert out["bgnbd"].keys() == out["model"].keys() == figures | {"name", "params", "log_likelihood"}
    assert out["bgnbd"]["params"].keys() == {"r", "alpha", "a", "b"}
    assert out["model"]["params"].keys() == {"r", "alpha", "s", "beta"}
    assert out["customers"] == 300 and out["relative_error"] == out["model"]["relative_error"]
    curve = out["curve"]
    assert len(curve["week"]) == len(curve["actual"]) == len(curve["bgnbd"]) == len(curve["pareto_nbd"]) == 39
    assert curve["actual"][-1] == out["holdout_actual_repeat"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_table(tmp_path: Path) -> None:
    result = invoke(synthetic_file(tmp_path), "--holdout-end", "1998-03-31")
    assert result.exit_code == 0, result.output
    assert "per-customer MAE" in result.stdout and "BG/NBD" in result.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("absent.txt",), ("no such file",)),
        (("bad.txt",), ("line 2", "unparseable date")),
        (("good.txt", "--calibration-end", "1997-13-01"), ("--calibration-end", "YYYY-MM-DD")),
        (("good.txt", "--calibration-end", "1998-09-30"), ("is not before holdout end",)),
        (("good.txt", "--calibration-end", "1996-01-01"), ("no customer made a first purchase",)),
    ],
)
def test_cli_bad_input_exits_2(tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    write(tmp_path, "1 19970101 2 29.33", "1 1997011 1 9.99", name="bad.txt")
    write(tmp_path, "1 19970101 2 29.33", "1 19970111 1 9.99", name="good.txt")
    assert_bad_input(invoke(tmp_path / args[0], *args[1:], "--json"), *needles)
