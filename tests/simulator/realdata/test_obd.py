"""Open Bandit Dataset loader, click model and ``transferlab sim obd-ctr``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.simulator.realdata.click_model import (
    ClickModelConfig,
    calibration_bins,
    evaluate_ctr,
    ipw_weights,
    refit_bootstrap_ctr,
)
from transferlab.simulator.realdata.obd import ObdFormatError, ObdLog, load_obd

runner = CliRunner()

# ------------------------------------------------------------------------------------------ helpers


def small_log() -> pd.DataFrame:
    """Four impressions of three items at two positions, as an OBD ``men.csv`` reads."""
    return pd.DataFrame(
        {
            "timestamp": [f"2019-11-24 00:0{i}:00.000000+00:00" for i in range(4)],
            "item_id": [0, 2, 1, 2],
            "position": [1, 2, 1, 2],
            "click": [0, 1, 0, 0],
            "propensity_score": [1 / 3, 1 / 3, 1 / 3, 1 / 3],
            "user_feature_0": ["a", "b", "a", "c"],
            "user_feature_1": ["x", "x", "y", "y"],
            "user-item_affinity_0": [0.0, 0.5, 0.0, 0.0],
            "user-item_affinity_1": [0.0, 0.0, 2.0, 0.0],
            "user-item_affinity_2": [1.0, 0.25, 0.0, 0.0],
        }
    )


def small_items() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "item_id": [2, 0, 1],
            "item_feature_0": [0.5, -1.0, 0.0],
            "item_feature_1": ["h1", "h2", "h1"],
        }
    )


def write(frame: pd.DataFrame, path: Path) -> Path:
    """``frame`` as an OBD CSV (with the unnamed index column first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=True)
    return path


def synthetic_log(
    item_ctr: list[float], n: int, seed: int, propensity: np.ndarray | None = None
) -> pd.DataFrame:
    """``n`` impressions; item ``i`` is clicked with probability ``item_ctr[i]`` whatever the user."""
    rng = np.random.default_rng(seed)
    k = len(item_ctr)
    probs = np.full(k, 1.0 / k) if propensity is None else propensity
    item = rng.choice(k, size=n, p=probs)
    frame = pd.DataFrame(
        {
            "timestamp": pd.Timestamp("2019-11-24", tz="UTC") + pd.to_timedelta(np.arange(n), unit="s"),
            "item_id": item,
            "position": rng.integers(1, 4, size=n),
            "click": (rng.random(n) < np.asarray(item_ctr)[item]).astype(int),
            "propensity_score": probs[item],
            "user_feature_0": rng.choice(["u0", "u1", "u2"], size=n),
        }
    )
    for i in range(k):
        frame[f"user-item_affinity_{i}"] = 0.0
    return frame


# ------------------------------------------------------------------------------------------- loader


def test_load_reads_the_layout_and_infers_counts(tmp_path: Path) -> None:
    path = write(small_log(), tmp_path / "random" / "men" / "men.csv")
    items = write(small_items(), tmp_path / "random" / "men" / "item_context.csv")
    log = load_obd(path, item_context=items)
    assert (log.n_items, log.n_positions, log.policy, len(log)) == (3, 2, "random", 4)
    assert log.click.tolist() == [0, 1, 0, 0]
    assert log.shown_affinity.tolist() == [0.0, 0.25, 2.0, 0.0]
    assert log.ctr == 0.25 and log.uniform_propensity
    assert log.user_feature_columns == ["user_feature_0", "user_feature_1"]
    assert log.frame["timestamp"].dt.tz is not None
    assert log.item_context is not None and log.item_context["item_id"].tolist() == [0, 1, 2]
    assert log.item_context["item_feature_0"].tolist() == [-1.0, 0.0, 0.5]
    assert log.item_context["item_feature_1"].tolist() == ["h2", "h1", "h1"]


def test_load_accepts_action_prob_and_unknown_layout(tmp_path: Path) -> None:
    path = write(small_log().rename(columns={"propensity_score": "action_prob"}), tmp_path / "log.csv")
    log = load_obd(path)
    assert log.policy is None and log.item_context is None
    assert np.allclose(log.propensity, 1 / 3)


def _drop(*cols: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    return lambda f: f.drop(columns=list(cols))


def _set(col: str, row: int, value: str | float) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.astype({col: object})
        frame.loc[row, col] = value
        return frame

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_drop("click", "propensity_score"), r"missing column\(s\) click, propensity_score"),
        (_drop("user-item_affinity_0", "user-item_affinity_1", "user-item_affinity_2"), "user-item_affinity"),
        (_drop("user-item_affinity_1"), r"not numbered 0\.\.2 \(missing \[1\]\)"),
        (_set("propensity_score", 1, 0.0), r"propensity_score outside \(0, 1\]"),
        (
            _set("propensity_score", 2, 1.5),
            r"1 row\(s\) \(first at data row 3\) have propensity_score outside",
        ),
        (_set("click", 0, 2), "click not 0 or 1"),
        (_set("click", 0, "yes"), "click value that is not an integer"),
        (_set("item_id", 3, 3), r"item_id outside 0\.\.2"),
        (_set("item_id", 3, -1), r"item_id outside 0\.\.2"),
        (_set("position", 0, 0), "position below 1"),
        (_set("user-item_affinity_0", 0, "nan"), "not a finite number"),
        (_set("timestamp", 0, "not a time"), "timestamp is not a date-time"),
    ],
)
def test_load_rejects_bad_logs(
    tmp_path: Path, edit: Callable[[pd.DataFrame], pd.DataFrame], message: str
) -> None:
    path = write(edit(small_log()), tmp_path / "men.csv")
    with pytest.raises(ObdFormatError, match=message):
        load_obd(path)


def test_load_rejects_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(ObdFormatError, match="not found; check the path"):
        load_obd(tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ObdFormatError, match="is empty"):
        load_obd(tmp_path / "empty.csv")
    write(small_log().iloc[:0], tmp_path / "header.csv")
    with pytest.raises(ObdFormatError, match="no rows"):
        load_obd(tmp_path / "header.csv")


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (small_items().iloc[:2], r"do not match the log's 3 items \(0\.\.2\): extra \[\], missing \[1\]"),
        (small_items().assign(item_id=[2, 0, 7]), r"extra \[7\], missing \[1\]"),
        (small_items().assign(item_id=[2, 0, 0]), r"item_id \[0\] listed more than once"),
        (small_items().drop(columns=["item_id"]), r"missing column\(s\) item_id"),
    ],
)
def test_load_rejects_item_context_that_does_not_match(
    tmp_path: Path, items: pd.DataFrame, message: str
) -> None:
    path = write(small_log(), tmp_path / "men.csv")
    with pytest.raises(ObdFormatError, match=message):
        load_obd(path, item_context=write(items, tmp_path / "item_context.csv"))


# ----------------------------------------------------------------------------------- bandit feedback


def test_bandit_feedback_arrays(tmp_path: Path) -> None:
    path = write(small_log(), tmp_path / "men.csv")
    log = load_obd(path, item_context=write(small_items(), tmp_path / "item_context.csv"))
    fb = log.to_bandit_feedback()
    assert fb.n_rounds == 4 and (fb.n_actions, fb.n_positions) == (3, 2)
    assert fb.action.tolist() == [0, 2, 1, 2]
    assert fb.position.tolist() == [0, 1, 0, 1]  # 0-based
    assert fb.reward.tolist() == [0, 1, 0, 0]
    assert np.allclose(fb.pscore, 1 / 3)
    # one-hot user_feature_0 (a, b, c), user_feature_1 (x, y), then the three affinities
    assert fb.context.shape == (4, 3 + 2 + 3)
    assert fb.context_columns[:5] == (
        "user_feature_0=a",
        "user_feature_0=b",
        "user_feature_0=c",
        "user_feature_1=x",
        "user_feature_1=y",
    )
    assert fb.context[1].tolist() == [0, 1, 0, 1, 0, 0.5, 0.0, 0.25]
    assert fb.action_context is not None
    assert fb.action_context.tolist() == [[-1.0, 0, 1], [0.0, 1, 0], [0.5, 1, 0]]  # feature_0, h1, h2


def test_bandit_feedback_with_shared_categories(tmp_path: Path) -> None:
    log = load_obd(write(small_log(), tmp_path / "men.csv"))
    cats = {"user_feature_0": ["a", "z"], "user_feature_1": ["y"]}
    fb = log.to_bandit_feedback(categories=cats)
    assert fb.context_columns[:3] == ("user_feature_0=a", "user_feature_0=z", "user_feature_1=y")
    assert fb.context[:, :3].tolist() == [[1, 0, 0], [0, 0, 0], [1, 0, 1], [0, 0, 1]]  # b, c unknown: zeros
    assert fb.action_context is None


# --------------------------------------------------------------------------------------- click model


def _synthetic(tmp_path: Path, name: str, **kwargs: object) -> ObdLog:
    return load_obd(write(synthetic_log(**kwargs), tmp_path / name))  # type: ignore[arg-type]


def test_click_model_recovers_per_item_click_rates(tmp_path: Path) -> None:
    ctr = [0.01, 0.04, 0.12]
    train = _synthetic(tmp_path, "train.csv", item_ctr=ctr, n=12_000, seed=1)
    test = _synthetic(tmp_path, "test.csv", item_ctr=ctr, n=12_000, seed=2)
    model = ClickModelConfig(item_encoding="id", affinity=False).create().fit(train)
    pred = model.predict_proba(test)
    per_item = [float(pred[test.item_id == i].mean()) for i in range(3)]
    assert per_item == pytest.approx(ctr, abs=0.01)
    assert model.c_ in model.config.c_grid
    assert model.cv_log_loss_[model.c_] < model.cv_log_loss_["constant"]
    report = evaluate_ctr(model, train, test, seed=0, n_boot=200)
    assert report.relative_error < 0.1 and report.auc is not None and report.auc > 0.65
    assert report.log_loss < report.baseline_log_loss and report.log_loss_diff_ci.high < 0


def test_ipw_weights_and_a_non_uniform_training_log(tmp_path: Path) -> None:
    assert np.allclose(ipw_weights(np.full(5, 0.2)), 1.0)
    assert ipw_weights(np.array([0.5, 0.25])).tolist() == pytest.approx([2 / 3, 4 / 3])
    ctr, skewed = [0.02, 0.1], np.array([0.9, 0.1])
    train = _synthetic(tmp_path, "train.csv", item_ctr=ctr, n=8000, seed=3, propensity=skewed)
    assert not train.uniform_propensity
    config = ClickModelConfig(item_encoding="id", affinity=False, ipw=True, c=1.0)
    pred = config.create().fit(train).predict_proba(train)
    assert [float(pred[train.item_id == i].mean()) for i in range(2)] == pytest.approx(ctr, abs=0.02)


def test_evaluate_ctr_by_hand(tmp_path: Path) -> None:
    train = _synthetic(tmp_path, "train.csv", item_ctr=[0.05, 0.2], n=2000, seed=4)
    test = _synthetic(tmp_path, "test.csv", item_ctr=[0.05, 0.2], n=500, seed=5)
    model = ClickModelConfig(item_encoding="id", affinity=False, c=1.0).create().fit(train)
    report = evaluate_ctr(model, train, test, seed=0, n_boot=100)
    pred, y, rate = model.predict_proba(test), test.click, train.ctr
    assert report.predicted_ctr == pytest.approx(pred.mean())
    assert report.actual_ctr == pytest.approx(y.mean())
    assert report.relative_error == pytest.approx(abs(pred.mean() - y.mean()) / y.mean())
    baseline = -np.mean(y * np.log(rate) + (1 - y) * np.log(1 - rate))
    assert report.baseline_log_loss == pytest.approx(baseline)
    assert report.actual_ctr_ci.low <= report.actual_ctr <= report.actual_ctr_ci.high
    assert set(report.to_dict()) >= {"predicted_ctr", "auc", "log_loss", "baseline_log_loss"}


def test_refit_bootstrap_interval_covers_the_fit(tmp_path: Path) -> None:
    train = _synthetic(tmp_path, "train.csv", item_ctr=[0.03, 0.1], n=2000, seed=10)
    test = _synthetic(tmp_path, "test.csv", item_ctr=[0.03, 0.1], n=500, seed=11)
    config = ClickModelConfig(item_encoding="id", affinity=False, cv_folds=3)
    ci = refit_bootstrap_ctr(config, train, test, n_boot=20, seed=0)
    assert ci.low < ci.estimate < ci.high and ci.n == 2000
    assert ci == refit_bootstrap_ctr(config, train, test, n_boot=20, seed=0)  # seeded


def test_calibration_bins() -> None:
    pred = np.linspace(0.0, 0.5, 100)
    click = (np.arange(100) % 4 == 0).astype(np.int64)
    bins = calibration_bins(pred, click, n_bins=4)
    assert bins["n"].tolist() == [25] * 4 and int(bins["clicks"].sum()) == 25
    assert bins["predicted"].is_monotonic_increasing


def test_click_model_errors(tmp_path: Path) -> None:
    log = load_obd(write(small_log(), tmp_path / "men.csv"))
    with pytest.raises(ValueError, match="too few for 5-fold"):
        ClickModelConfig().create().fit(log)
    with pytest.raises(ValueError, match="--item-context"):
        ClickModelConfig(item_encoding="context").create().fit(log)
    with pytest.raises(RuntimeError, match="before fit"):
        ClickModelConfig().create().predict_proba(log)
    with pytest.raises(ValueError, match="c must be positive"):
        ClickModelConfig(c=0.0)


# ----------------------------------------------------------------------------------------------- CLI

KEYS = {"predicted_ctr", "actual_ctr", "relative_error", "auc", "log_loss", "baseline_log_loss"}


def test_cli_json_on_synthetic_logs(tmp_path: Path) -> None:
    train = write(synthetic_log([0.02, 0.06, 0.1], n=3000, seed=6), tmp_path / "random" / "men" / "men.csv")
    test = write(synthetic_log([0.02, 0.06, 0.1], n=1000, seed=7), tmp_path / "bts" / "men" / "men.csv")
    plot = tmp_path / "cal.png"
    args = ["sim", "obd-ctr", "--train", str(train), "--eval", str(test), "--json", "--plot", str(plot)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(summary) >= KEYS | {"predicted_ctr_ci", "actual_ctr_ci", "log_loss_diff_ci", "calibration"}
    assert summary["n_items"] == 3 and summary["train"]["policy"] == "random"
    assert summary["eval"]["impressions"] == 1000 and plot.stat().st_size > 0
    assert summary["relative_error"] < 0.5
    table = runner.invoke(app, ["sim", "obd-ctr", "--train", str(train), "--eval", str(test)])
    assert table.exit_code == 0 and "relative error" in table.stdout


def test_cli_notes_non_uniform_training_propensities(tmp_path: Path) -> None:
    skewed = np.array([0.7, 0.2, 0.1])
    train = write(synthetic_log([0.02, 0.06, 0.1], n=3000, seed=6, propensity=skewed), tmp_path / "bts.csv")
    test = write(synthetic_log([0.02, 0.06, 0.1], n=1000, seed=7), tmp_path / "random.csv")
    base = ["sim", "obd-ctr", "--train", str(train), "--eval", str(test), "--json"]
    plain, weighted = runner.invoke(app, base), runner.invoke(app, [*base, "--ipw"])
    assert plain.exit_code == weighted.exit_code == 0
    assert "--ipw reweights them" in plain.stderr and weighted.stderr == ""
    assert json.loads(weighted.stdout)["model"]["config"]["ipw"] is True


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "not found"),
        ("bad_propensity", "propensity_score outside"),
        ("other_campaign", "--train has 3 items but --eval has 2"),
        ("bad_item_context", "item context item ids do not match"),
        ("negative_refit", "--refit-boot must be"),
    ],
)
def test_cli_exits_2_on_bad_input(tmp_path: Path, case: str, message: str) -> None:
    train = write(synthetic_log([0.05, 0.1, 0.2], n=600, seed=8), tmp_path / "train.csv")
    test = tmp_path / "eval.csv"
    extra: list[str] = []
    if case == "bad_propensity":
        write(_set("propensity_score", 0, -0.1)(small_log()), test)
    elif case == "other_campaign":
        write(synthetic_log([0.05, 0.1], n=100, seed=9), test)
    elif case == "bad_item_context":
        write(small_log(), test)
        extra = ["--item-context", str(write(small_items().iloc[:2], tmp_path / "items.csv"))]
    elif case == "negative_refit":
        write(small_log(), test)
        extra = ["--refit-boot", "-1"]
    result = runner.invoke(app, ["sim", "obd-ctr", "--train", str(train), "--eval", str(test), *extra])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and message in result.stderr


# ----------------------------------------------------------------------------------------- real data


def test_real_logs_load(shared_data: Callable[[str], Path]) -> None:
    random = load_obd(shared_data("obd/random/men/men.csv"), shared_data("obd/random/men/item_context.csv"))
    bts = load_obd(shared_data("obd/bts/men/men.csv"))
    assert (random.n_items, random.n_positions, random.policy, len(random)) == (34, 3, "random", 10_000)
    assert random.uniform_propensity and np.allclose(random.propensity, 1 / 34)
    assert bts.policy == "bts" and not bts.uniform_propensity
    assert (int(random.click.sum()), int(bts.click.sum())) == (46, 69)
    fb = bts.to_bandit_feedback()
    assert fb.context.shape == (10_000, 3 + 5 + 9 + 9 + 34) and fb.action.max() <= 33


def test_real_random_to_bts(shared_data: Callable[[str], Path]) -> None:
    args = [
        "sim",
        "obd-ctr",
        "--train",
        str(shared_data("obd/random/men/men.csv")),
        "--eval",
        str(shared_data("obd/bts/men/men.csv")),
        "--item-context",
        str(shared_data("obd/random/men/item_context.csv")),
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(summary) >= KEYS and summary["n_items"] == 34
    assert summary["actual_ctr"] == pytest.approx(0.0069) and summary["train_ctr"] == pytest.approx(0.0046)
    assert summary["auc"] > 0.5
    assert summary["log_loss"] <= summary["baseline_log_loss"]
    # the honest finding: the model predicts about the random log's rate, well under BTS's observed one
    assert summary["predicted_ctr"] < summary["actual_ctr_ci"][0]
