"""Optional parts of the install: a feature whose extra is missing says which extra to install."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transferlab.platform.extras import EXTRAS, MissingExtra, require_extra


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` look uninstalled to :func:`importlib.util.find_spec`."""
    real: Callable[..., Any] = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name in modules else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_a_present_module_passes_and_a_missing_one_names_its_extra() -> None:
    require_extra("json", "app", "the review app")
    with pytest.raises(
        MissingExtra, match=r"the app needs the 'app' extra .*: pip install 'transferlab\[app\]'"
    ):
        require_extra("no_such_module_anywhere", "app", "the app")


def test_every_extra_is_declared_in_pyproject() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    declared = pyproject["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    assert declared["all"] == [f"transferlab[{','.join(sorted(EXTRAS, key=list(EXTRAS).index))}]"]


def test_the_ray_backend_without_ray_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from transferlab.agent_rl.workers import make_pool

    _without(monkeypatch, "ray")
    with pytest.raises(MissingExtra, match=r"the ray rollout backend needs the 'ray' extra"):
        make_pool("ray", dict, size=1)


def test_a_postgresql_store_without_psycopg_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from transferlab.human_review.store import ReviewStore

    _without(monkeypatch, "psycopg")
    with pytest.raises(MissingExtra, match=r"a PostgreSQL review store needs the 'pg' extra"):
        ReviewStore("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_review_serve_without_streamlit_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from transferlab.cli import app
    from transferlab.platform.cli_kit import describe_error

    _without(monkeypatch, "streamlit")
    res = CliRunner().invoke(app, ["review", "serve", "--db", f"sqlite:///{tmp_path / 'r.db'}"])
    assert isinstance(res.exception, MissingExtra)
    line, code = describe_error(res.exception)
    assert code == 2 and line.startswith("the review app needs the 'app' extra")
    assert not (tmp_path / "r.db").exists()  # nothing was created
