"""`transferlab runs compare`: real runs made through RunStore, compared with the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field
from typer.testing import CliRunner

from transferlab.cli import app
from transferlab.platform.config import BaseConfig
from transferlab.platform.runstore import RunStore

runner = CliRunner()


class OptimConfig(BaseConfig):
    lr: float = Field(default=1e-3, description="Learning rate.")
    betas: list[float] = Field(default=[0.9, 0.999], description="Adam betas.")


class TrainConfig(BaseConfig):
    seed: int = Field(default=0, description="Random seed.")
    steps: int = Field(default=100, description="Training steps.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser settings.")


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    """Two cql runs that differ in seed and learning rate, plus a bc run sharing the id "same"."""
    store = RunStore(tmp_path / "runs")
    with store.create_run("cql", TrainConfig(seed=1), run_id="alpha") as run:
        for step, loss in [(0, 1.0), (10, 0.5), (20, 0.25), (30, 0.125)]:
            run.logger.log(step, {"train/loss": loss, "eval/success_rate": step / 100})
    with store.create_run("cql", TrainConfig(seed=2, optim=OptimConfig(lr=3e-4)), run_id="beta") as run:
        for step, loss in [(0, 2.0), (10, 1.0), (20, 0.75)]:
            run.logger.log(step, {"train/loss": loss})
        run.logger.log(20, {"train/loss": 0.7})  # logged again at the last step (a resume): this one wins
    store.create_run("cql", TrainConfig(), run_id="same").finish()
    store.create_run("bc", TrainConfig(), run_id="same").finish()
    return store


def _compare(store: RunStore, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["runs", "compare", *args, "--runs-root", str(store.root)])
    return result.exit_code, result.stdout, result.stderr


def test_shows_differing_config_hides_equal_config_and_last_values(store: RunStore) -> None:
    # One run by its directory, the other by its bare id.
    code, out, err = _compare(store, str(store.root / "cql" / "alpha"), "beta")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "alpha" in line)
    assert header.index("alpha") < header.index("beta")  # one column per run, in the order given
    assert "finished" in out and "cql" in out
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") == 4}
    assert "0.001" in lines["config.optim.lr"] and "0.0003" in lines["config.optim.lr"]
    assert "1" in lines["config.seed"] and "2" in lines["config.seed"]
    for hidden in ("config.steps", "config.optim.betas", "config._config_class"):
        assert hidden not in out
    assert "config: 2 keys differ; 3 equal in every run (hidden)" in out
    # train/loss is the only key both runs logged; alpha ends at 0.125 (step 30), beta at 0.7 (step 20).
    assert "0.125 @ 30" in lines["train/loss"] and "0.7 @ 20" in lines["train/loss"]
    assert "min 0.125 · max 1" in out and "min 0.7 · max 2" in out
    assert "eval/success_rate" not in out
    assert "metrics: the 1 key every run logged" in out


def test_metric_option_picks_keys_and_marks_missing_ones(store: RunStore) -> None:
    code, out, err = _compare(store, "cql/alpha", "cql/beta", "--metric", "eval/success_rate")
    assert code == 0, err
    row = next(line for line in out.splitlines() if "eval/success_rate" in line)
    assert "0.3 @ 30" in row and "—" in row  # beta never logged it
    assert "train/loss" not in out


def test_same_run_id_in_two_experiments_is_ambiguous(store: RunStore) -> None:
    code, _, err = _compare(store, "same", "alpha")
    assert code == 2
    assert "run id 'same' is ambiguous" in err
    assert "bc/same" in err and "cql/same" in err
    assert "<experiment>/<run-id>" in err
    code, out, err = _compare(store, "bc/same", "cql/same")  # spelled out, it works
    assert code == 0, err
    assert "bc/same" in out and "cql/same" in out  # equal ids: columns are labelled with the experiment


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("nope", "no experiment under"),
        ("cql/nope", "cql/nope is not a run directory"),
    ],
)
def test_missing_runs_are_reported(store: RunStore, ref: str, expected: str) -> None:
    code, _, err = _compare(store, "alpha", ref)
    assert code == 2
    assert f"no run {ref!r}" in err and expected in err
    assert "Traceback" not in err


def test_bad_metric_key_and_repeated_run_are_errors(store: RunStore) -> None:
    code, _, err = _compare(store, "alpha", "beta", "--metric", "Loss")
    assert (code, "invalid metric key 'Loss'" in err) == (2, True)
    code, _, err = _compare(store, "alpha", "cql/alpha")
    assert (code, "given more than once" in err) == (2, True)


def test_plot_writes_a_png(store: RunStore, tmp_path: Path) -> None:
    target = tmp_path / "plots" / "compare.png"
    code, out, err = _compare(
        store, "alpha", "beta", "--plot", str(target), "-m", "train/loss", "-m", "eval/success_rate"
    )
    assert code == 0, err
    data = target.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert f"wrote {target}" in out.replace("\n", "")


def test_plot_without_metrics_is_an_error(store: RunStore, tmp_path: Path) -> None:
    code, _, err = _compare(store, "cql/same", "bc/same", "--plot", str(tmp_path / "x.png"))
    assert code == 2
    assert "nothing to plot" in err
    assert not (tmp_path / "x.png").exists()


def test_an_experiments_arms_metrics_are_compared_and_plotted(tmp_path: Path) -> None:
    """An experiment run (the harness's arms/<arm>/metrics.parquet) shows its arms' metrics."""
    from transferlab.platform.harness import Experiment

    root = tmp_path / "runs"
    runs = []
    for seed in (1, 2):
        exp, _ = Experiment.open("tiny-exp", TrainConfig(seed=seed), root, None)
        for arm, scale in (("SFT", 1.0), ("rl", 2.0)):
            with exp.arm_logger(arm) as logger:
                for step in range(3):
                    logger.log(step, {"eval/success": scale * seed * step / 10})
        exp.run.finish()
        runs.append(exp.run.run_id)
    target = tmp_path / "arms.png"
    result = runner.invoke(
        app,
        [
            "runs",
            "compare",
            *runs,
            "--runs-root",
            str(root),
            "-m",
            "arms/rl/eval/success",
            "--plot",
            str(target),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "arms/rl/eval/success" in result.stdout
    assert target.read_bytes().startswith(b"\x89PNG")
    from transferlab.platform.run_compare import read_run_metrics

    frame = read_run_metrics(root / "tiny-exp" / runs[1])
    last = frame[frame["step"] == 2].set_index("key")["value"].to_dict()
    assert last == {"arms/sft/eval/success": 0.4, "arms/rl/eval/success": 0.8}  # 1.0*2*2/10, 2.0*2*2/10
