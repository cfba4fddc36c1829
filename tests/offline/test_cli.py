"""`transferlab offline ope-obd`: both OPE directions on the Open Bandit Dataset, from the command line."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.offline.learners import LEARNERS
from transferlab.offline.obd_ope import ESTIMATORS
from transferlab.simulator.logs import LogSpec, generate_logs, write_logs
from transferlab.simulator.world_config import WorldConfig

runner = CliRunner()

DIRECTION_KEYS = {"truth", "truth_ci", "estimates", "coverage", "n", "behaviour", "target"}
COVERAGE_KEYS = {"ess", "max_weight", "unsupported_mass", "trusted", "ess_share", "reason"}


def _csv(path: Path, propensity: list[float], n: int, seed: int) -> Path:
    """A small OBD-shaped log: item ``i`` shown with ``propensity[i]``, clicked with a per-item rate."""
    rng = np.random.default_rng(seed)
    probs = np.asarray(propensity)
    ctr = np.array([0.02, 0.30, 0.10, 0.20, 0.05])
    item = rng.choice(len(probs), size=n, p=probs)
    frame = pd.DataFrame(
        {
            "timestamp": pd.Timestamp("2019-11-24", tz="UTC") + pd.to_timedelta(np.arange(n), unit="s"),
            "item_id": item,
            "position": rng.integers(1, 4, size=n),
            "click": (rng.random(n) < ctr[item]).astype(int),
            "propensity_score": probs[item],
            "user_feature_0": rng.choice(["u0", "u1"], size=n),
        }
    )
    for i in range(len(probs)):
        frame[f"user-item_affinity_{i}"] = 0.0
    frame.to_csv(path, index=True)
    return path


def _check_shape(out: dict[str, dict[str, object]]) -> None:
    assert set(out) == {"forward", "reverse"}
    for direction in out.values():
        assert set(direction) == DIRECTION_KEYS
        estimates = direction["estimates"]
        assert isinstance(estimates, dict) and set(estimates) == set(ESTIMATORS)
        for est in estimates.values():
            assert set(est) == {"value", "ci", "relative_error"}
            assert len(est["ci"]) == 2
        coverage = direction["coverage"]
        assert isinstance(coverage, dict) and set(coverage) == COVERAGE_KEYS


def test_ope_obd_json_on_the_real_logs(shared_data: Callable[[str], Path]) -> None:
    random_csv = shared_data("obd/random/men/men.csv")
    bts_csv = shared_data("obd/bts/men/men.csv")
    result = runner.invoke(
        app,
        [
            "offline",
            "ope-obd",
            "--behavior",
            str(random_csv),
            "--evaluation",
            str(bts_csv),
            "--json",
            "--n-boot",
            "200",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    _check_shape(out)
    forward, reverse = out["forward"], out["reverse"]
    assert forward["coverage"]["trusted"] is True
    assert forward["coverage"]["reason"] is None
    for name, est in forward["estimates"].items():
        assert math.isfinite(est["relative_error"]), name
        assert est["ci"][0] <= est["value"] <= est["ci"][1], name
    assert 0.0 < forward["truth"] < 0.05
    assert reverse["coverage"]["trusted"] is False
    assert "effective sample size" in reverse["coverage"]["reason"]
    assert reverse["coverage"]["max_weight"] > 100.0


def test_ope_obd_table_flags_the_reverse_direction(tmp_path: Path) -> None:
    random_csv = _csv(tmp_path / "random.csv", [0.2] * 5, 3000, seed=1)
    bts_csv = _csv(tmp_path / "bts.csv", [0.96, 0.01, 0.01, 0.01, 0.01], 3000, seed=2)
    result = runner.invoke(
        app,
        [
            "offline",
            "ope-obd",
            "--behavior",
            str(random_csv),
            "--evaluation",
            str(bts_csv),
            "--n-boot",
            "100",
        ],
    )
    assert result.exit_code == 0, result.output
    forward, reverse = result.stdout.split("reverse:")
    assert "forward:" in forward and "UNTRUSTWORTHY" not in forward
    for name in (*ESTIMATORS, "truth"):
        assert name in forward and name in reverse
    assert "UNTRUSTWORTHY: effective sample size" in reverse


def test_ope_obd_json_is_the_only_stdout(tmp_path: Path) -> None:
    random_csv = _csv(tmp_path / "random.csv", [0.2] * 5, 1000, seed=1)
    bts_csv = _csv(tmp_path / "bts.csv", [0.3, 0.1, 0.2, 0.1, 0.3], 1000, seed=2)
    result = runner.invoke(
        app,
        [
            "offline",
            "ope-obd",
            "--behavior",
            str(random_csv),
            "--evaluation",
            str(bts_csv),
            "--json",
            "--n-boot",
            "50",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    _check_shape(out)
    assert out["reverse"]["coverage"]["trusted"] is True  # mild skew: every weight is in [0.67, 2]


def test_ope_obd_bad_path_exits_2_with_one_line(tmp_path: Path) -> None:
    good = _csv(tmp_path / "random.csv", [0.2] * 5, 100, seed=1)
    missing = tmp_path / "nope.csv"
    result = runner.invoke(
        app, ["offline", "ope-obd", "--behavior", str(good), "--evaluation", str(missing), "--json"]
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: --evaluation:") and "not found" in lines[0]


def test_ope_obd_malformed_file_and_bad_option_exit_2(tmp_path: Path) -> None:
    good = _csv(tmp_path / "random.csv", [0.2] * 5, 100, seed=1)
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    result = runner.invoke(app, ["offline", "ope-obd", "--behavior", str(junk), "--evaluation", str(good)])
    assert result.exit_code == 2
    assert "error: --behavior:" in result.stderr and "missing column" in result.stderr
    result = runner.invoke(
        app, ["offline", "ope-obd", "--behavior", str(good), "--evaluation", str(good), "--n-boot", "0"]
    )
    assert result.exit_code == 2
    assert "--n-boot must be a positive" in result.stderr


def test_offline_help_lists_the_command() -> None:
    result = runner.invoke(app, ["offline", "--help"])
    assert result.exit_code == 0
    assert "ope-obd" in result.stdout and "off-policy evaluation" in result.stdout


# --------------------------------------------------------------------------------------------- train


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = generate_logs(LogSpec(days=70, epsilon=0.3, world=WorldConfig(n_customers=200, seed=5)))
    return write_logs(logs, tmp_path_factory.mktemp("logs") / "logs")


@pytest.fixture(scope="module")
def small_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the command line has no options for: a short horizon and few bootstrap resamples."""
    path = tmp_path_factory.mktemp("config") / "offline.json"
    path.write_text(json.dumps({"dataset": {"horizon": 10}, "evaluation": {"n_boot": 100}}))
    return path


def _train(log_dir: Path, config: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "offline",
        "train",
        "--logs",
        str(log_dir),
        "--config",
        str(config),
        "--learner",
        "td3_plus_bc",
        "--episodes",
        "4",
        "--fqe-steps",
        "0",
        "--run-dir",
        str(run_dir),
        *extra,
    ]


@pytest.fixture(scope="module")
def train_run(log_dir: Path, small_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "run"
    result = runner.invoke(app, [*_train(log_dir, small_config, run_dir, "--steps", "20", "--json")])
    assert result.exit_code == 0, result.output
    (run_dir / "stdout.json").write_text(result.stdout)
    return run_dir


def test_train_json_summary(train_run: Path) -> None:
    out = json.loads((train_run / "stdout.json").read_text())
    assert out["run_dir"] == str(train_run)
    assert set(out["policies"]) == {"td3_plus_bc", "marketer", "no_campaign"}
    assert set(out["policies"]["td3_plus_bc"]["ope"]) == {"dm", "ips", "snips", "dr", "sndr", "switch_dr"}
    assert out["selection"]["by"] == "sndr"
    assert out["selection"]["chosen"] in {"td3_plus_bc", "marketer"}
    assert out["n_rows"] == 70 and out["unit"] == "10-day return (reward units)"
    saved = json.loads((train_run / "config.json").read_text())
    assert saved["learners"] == ["td3_plus_bc"] and saved["steps"] == 20
    assert saved["dataset"]["horizon"] == 10 and saved["evaluation"]["episodes"] == 4
    assert saved["evaluation"]["fqe_steps"] == 0 and saved["evaluation"]["n_boot"] == 100
    assert json.loads((train_run / "result.json").read_text())["selection"] == out["selection"]
    assert (train_run / "learners" / "td3_plus_bc" / "model.d3").is_file()


def test_train_writes_the_run_contract(train_run: Path) -> None:
    from transferlab.platform.runstore import RunInfo

    info = RunInfo.from_dir(train_run)
    assert info.experiment == "offline-train" and info.status == "finished" and info.finished_at
    listed = runner.invoke(app, ["runs", "list", "--runs-root", str(train_run.parent.parent)])
    assert listed.exit_code == 0, listed.output
    assert "offline-train" in listed.stdout and "finished" in listed.stdout


def test_train_rerun_with_another_config_exits_2(train_run: Path, log_dir: Path, small_config: Path) -> None:
    before = (train_run / "config.json").read_text()
    result = runner.invoke(app, _train(log_dir, small_config, train_run, "--steps", "21", "--json"))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "another config" in lines[0]
    assert (train_run / "config.json").read_text() == before


def test_train_rerun_with_the_same_options_resumes(
    train_run: Path, log_dir: Path, small_config: Path
) -> None:
    model = train_run / "learners" / "td3_plus_bc" / "model.d3"
    mtime = model.stat().st_mtime_ns
    result = runner.invoke(app, _train(log_dir, small_config, train_run, "--steps", "20"))
    assert result.exit_code == 0, result.output
    assert model.stat().st_mtime_ns == mtime  # loaded, not retrained
    assert "dataset: 70 logged days in 7 episodes" in result.stdout
    assert "selected by the sndr lower bound" in result.stdout
    assert f"run directory: {train_run}" in result.stdout
    meta = json.loads((train_run / "meta.json").read_text())
    assert meta["status"] == "finished" and len(meta["resumed_at"]) == 1


def test_train_missing_logs_exits_2_with_one_line(tmp_path: Path, small_config: Path) -> None:
    missing = tmp_path / "no-logs"
    result = runner.invoke(app, _train(missing, small_config, tmp_path / "run", "--json"))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not a log directory" in lines[0]
    assert not (tmp_path / "run").exists()


def test_train_unknown_learner_exits_2_naming_the_valid_ones(
    tmp_path: Path, log_dir: Path, small_config: Path
) -> None:
    result = runner.invoke(
        app, ["offline", "train", "--logs", str(log_dir), "--learner", "nope", "--run-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "nope" in result.stderr
    for name in LEARNERS:
        assert name in result.stderr
    assert not (tmp_path / "config.json").exists()


def test_train_refuses_a_run_directory_another_process_is_training(
    tmp_path: Path, log_dir: Path, small_config: Path
) -> None:
    import subprocess
    import sys

    hold = "import sys, time\nfrom transferlab.platform.runstore import RunLock\n"
    hold += "RunLock(sys.argv[1]).acquire()\nprint('holding', flush=True)\ntime.sleep(600)\n"
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", hold, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        result = runner.invoke(app, _train(log_dir, small_config, run_dir, "--steps", "20", "--json"))
    finally:
        proc.kill()
        proc.wait()
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"in use by pid {proc.pid}" in lines[0]
    assert not (run_dir / "learners").exists()
