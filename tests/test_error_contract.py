"""The one error contract of `transferlab`: every anticipated failure is one `error:` line naming the
problem and the fix, exit code 2, no traceback (that only with --debug), and nothing is created
before the inputs pass their checks. Each case is one a user met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from transferlab.cli import main
from transferlab.platform.cli_kit import EXIT_BAD_INPUT
from transferlab.platform.config import BaseConfig
from transferlab.platform.runstore import RunStore


def _transferlab(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of `transferlab ARGV` run in this process through the real entry point."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0), capsys.readouterr().err


def _small_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Two weeks of a 100-customer shop's logs, made by `transferlab sim generate-logs`."""
    logs = tmp_path / "logs"
    argv = ["sim", "generate-logs", "--out", str(logs), "--customers", "100", "--days", "14"]
    assert _transferlab(argv, capsys)[0] == 0
    return logs


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_an_out_of_range_epsilon_is_refused_before_any_logs_are_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _transferlab(["sim", "generate-logs", "--epsilon", "2", "--out", str(tmp_path / "l")], capsys)
    assert code == EXIT_BAD_INPUT
    assert "--epsilon" in err and "Traceback" not in err
    assert not (tmp_path / "l").exists()


def test_fitting_logs_with_a_corrupt_parquet_names_the_file_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _small_logs(tmp_path, capsys)
    (logs / "campaigns.parquet").write_bytes(b"not parquet")
    code, err = _transferlab(["sim", "fit", str(logs), "--out", str(tmp_path / "sim")], capsys)
    line = _one_error_line(err)
    assert code == EXIT_BAD_INPUT
    assert "campaigns.parquet is not a readable Parquet table" in line and "sim generate-logs" in line
    assert not (tmp_path / "sim").exists()


@pytest.mark.parametrize(
    ("option", "content", "expected"),
    [
        ("--human-agreement", "{bad", "is not valid JSON"),
        ("--human-agreement", "[1, 2]", "not an object"),
        ("--human-agreement", '{"n": 3}', "lacks ['mean_abs_diff', 'spearman']"),
        ("--ops-result", '{"x": 1}', "is not a transfer summary"),
        ("--ops-learn-result", '{"x": 1}', "does not fit"),
    ],
)
def test_compare_refuses_a_malformed_input_file_before_measuring(
    option: str, content: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = tmp_path / "report"
    code, err = _transferlab(["compare", "--preset", "smoke", "--out", str(out), option, str(bad)], capsys)
    line = _one_error_line(err)
    assert code == EXIT_BAD_INPUT
    assert str(bad) in line and expected in line
    assert not out.exists()


def test_resume_of_a_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _transferlab(["coding", "experiment", "learn", "--resume", str(tmp_path)], capsys)
    assert code == EXIT_BAD_INPUT
    assert "is not a run directory (no meta.json)" in _one_error_line(err)


class _OtherConfig(BaseConfig):
    seed: int = Field(default=0, description="A seed.")


def test_resume_of_another_kind_of_run_names_both_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with RunStore(tmp_path).create_run("ops-train", _OtherConfig()) as run:
        other = run.dir
    meta_before = json.loads((other / "meta.json").read_text())
    code, err = _transferlab(["coding", "experiment", "dense-sparse", "--resume", str(other)], capsys)
    line = _one_error_line(err)
    assert code == EXIT_BAD_INPUT
    assert "is a run of 'ops-train', not of 'coding-dense-sparse'" in line
    assert json.loads((other / "meta.json").read_text()) == meta_before  # untouched


def test_a_bad_simulator_leaves_no_training_run_behind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = _small_logs(tmp_path, capsys)
    runs = tmp_path / "runs"
    code, err = _transferlab(
        [
            "sim",
            "train",
            "--simulator",
            str(tmp_path / "nope"),
            "--logs",
            str(logs),
            "--runs-root",
            str(runs),
        ],
        capsys,
    )
    assert code == EXIT_BAD_INPUT
    assert "is not a learned simulator" in _one_error_line(err)
    assert not runs.exists()


def test_a_mistyped_database_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "reveiw.db"
    code, err = _transferlab(["review", "list", "--db", str(typo)], capsys)
    assert code == EXIT_BAD_INPUT
    assert "there is no review database" in _one_error_line(err)
    assert not typo.exists()


def test_debug_shows_the_traceback_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{bad")
    code, err = _transferlab(
        ["compare", "--preset", "smoke", "--human-agreement", str(bad), "--debug"], capsys
    )
    assert code == EXIT_BAD_INPUT
    assert "Traceback" in err and "JSONDecodeError" in err
    assert err.splitlines()[-1].startswith("error:")
