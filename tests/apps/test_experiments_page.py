"""AppTests of the Experiments page: real runs made with RunStore, shown side by side.

The page runs through the review app's entry script (signed in, ``st.navigation``), with
``$TRANSFERLAB_RUNS_ROOT`` on a temporary run store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field
from streamlit.testing.v1 import AppTest

from transferlab.apps import REVIEW_APP
from transferlab.human_review import auth
from transferlab.human_review.service import ReviewService
from transferlab.human_review.store import ReviewStore
from transferlab.platform.config import BaseConfig
from transferlab.platform.runstore import RunStore


class PageConfig(BaseConfig):
    seed: int = Field(default=0, description="Random seed.")
    lr: float = Field(default=1e-3, description="Learning rate.")
    steps: int = Field(default=30, description="Training steps.")


@pytest.fixture
def viewer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A review database with one viewer (the lowest role); returns the user's name."""
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 64)
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 1)
    url = f"sqlite:///{tmp_path / 'review.db'}"
    monkeypatch.setenv("TRANSFERLAB_REVIEW_DB", url)
    svc = ReviewService(ReviewStore(url))
    ada = svc.add_user(None, "ada", "pass-word-ada", "admin")
    svc.add_user(ada, "vic", "pass-word-vic", "viewer")
    return "vic"


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("TRANSFERLAB_RUNS_ROOT", str(root))
    return root


def make_runs(root: Path) -> None:
    """Two cql runs that differ in lr and seed, with a few metrics."""
    store = RunStore(root)
    with store.create_run("cql", PageConfig(seed=1, lr=1e-3), run_id="alpha") as run:
        for step, loss in [(0, 1.0), (10, 0.5), (20, 0.25)]:
            run.logger.log(step, {"train/loss": loss, "eval/return": 10.0 + step, "aux/steps": float(step)})
    with store.create_run("cql", PageConfig(seed=2, lr=3e-4), run_id="beta") as run:
        for step, loss in [(0, 2.0), (10, 0.75)]:
            run.logger.log(step, {"train/loss": loss})


def open_page(user: str) -> AppTest:
    at = AppTest.from_file(str(REVIEW_APP), default_timeout=30)
    at.session_state["user"] = user
    at.run()
    at.switch_page("pages/experiments.py")
    at.run()
    assert not at.exception, at.exception
    return at


def test_two_runs_side_by_side(viewer: str, runs_root: Path) -> None:
    make_runs(runs_root)
    at = open_page(viewer)
    assert [t.value for t in at.title] == ["Experiments"]
    assert at.selectbox(key="exp_experiment").value == "cql"
    assert at.multiselect(key="exp_runs_cql").value == ["beta", "alpha"]  # newest first, both picked
    config, metrics = (df.value for df in at.dataframe)
    assert list(config.index) == ["lr", "seed"]  # steps is equal in both: hidden
    assert config.loc["lr"].to_dict() == {"beta": "0.0003", "alpha": "0.001"}
    last = metrics[metrics["stat"] == "last"].set_index("metric")
    assert last.loc["train/loss", "alpha"] == 0.25
    assert last.loc["train/loss", "beta"] == 0.75
    assert last.loc["eval/return", "alpha"] == 30.0
    assert last["beta"].isna().loc["eval/return"]  # beta never logged it
    minimum = metrics[metrics["stat"] == "min"].set_index("metric")
    assert minimum.loc["train/loss", ["beta", "alpha"]].to_dict() == {"beta": 0.75, "alpha": 0.25}
    assert at.selectbox(key="exp_metric").options == ["aux/steps", "eval/return", "train/loss"]
    assert at.selectbox(key="exp_metric").value == "eval/return"  # opens on an evaluation, not A-Z
    [chart] = at.get("vega_lite_chart")
    assert "eval/return" in chart.proto.spec  # the chosen metric's curves

    at.selectbox(key="exp_metric").select("train/loss").run()
    assert not at.exception
    [chart] = at.get("vega_lite_chart")
    assert "train/loss" in chart.proto.spec

    at.multiselect(key="exp_runs_cql").unselect("beta").run()
    assert not at.exception
    assert len(at.dataframe) == 1  # one run: no config differs
    assert list(at.dataframe[0].value.columns) == ["metric", "stat", "alpha"]


def test_compare_run_shows_report_and_result(viewer: str, runs_root: Path) -> None:
    run_dir = runs_root / "compare" / "20250101-120000-abcdef"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"preset": "test", "seed": 0}))
    (run_dir / "result.json").write_text(json.dumps({"wall_s": 1.5, "table": {"gain": 0.2}}))
    (run_dir / "report.md").write_text("# Transfer report\n\nGain is **0.2**.\n")
    at = open_page(viewer)
    assert at.selectbox(key="exp_experiment").value == "compare"
    assert "20250101-120000-abcdef · finished · 2025-01-01 12:00:00 · seed 0" in (
        at.multiselect(key="exp_runs_compare").format_func("20250101-120000-abcdef")
    )
    assert any("Gain is **0.2**." in m.value for m in at.markdown)
    assert at.json[0].value == json.dumps({"wall_s": 1.5, "table": {"gain": 0.2}})


def test_empty_root_says_how_to_make_runs(viewer: str, runs_root: Path) -> None:
    at = open_page(viewer)
    [info] = [i.value for i in at.info]
    assert f"No runs under `{runs_root}`" in info
    assert "transferlab demo --runs-root" in info
    assert not at.dataframe
