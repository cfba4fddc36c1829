"""Atomic writes: content lands whole, parents are created, temp files never linger."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from transferlab.platform import io as tio
from transferlab.platform.io import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_parquet,
    atomic_write_text,
)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_bytes_creates_parents_and_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "blob.bin"
    assert atomic_write_bytes(target, b"\x00first") == target
    assert target.read_bytes() == b"\x00first"
    atomic_write_bytes(target, b"second")
    assert target.read_bytes() == b"second"
    assert _leftovers(target.parent) == []


def test_text_roundtrip_unicode(tmp_path: Path) -> None:
    target = tmp_path / "note.txt"
    atomic_write_text(target, "héllo — ✓\n")
    assert target.read_text(encoding="utf-8") == "héllo — ✓\n"


def test_json_is_sorted_indented_with_trailing_newline(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    atomic_write_json(target, {"b": 1, "a": [1, 2]})
    text = target.read_text()
    assert text == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    assert json.loads(text) == {"a": [1, 2], "b": 1}


def test_unserialisable_json_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    atomic_write_json(target, {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"ok": True}
    assert _leftovers(tmp_path) == []


def test_failed_replace_removes_temp_and_keeps_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "x.txt"
    atomic_write_text(target, "old")

    def boom(src: object, dst: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(tio.os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_parquet_roundtrip_and_failure_cleanup(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "t.parquet"
    df = pd.DataFrame({"step": [1, 2], "value": [0.5, 1.5]})
    atomic_write_parquet(target, df)
    pd.testing.assert_frame_equal(pd.read_parquet(target), df)

    bad = pd.DataFrame({"x": [object()]})  # pyarrow cannot serialise a bare object
    with pytest.raises(Exception):  # noqa: B017 - exact pyarrow error type is not our contract
        atomic_write_parquet(target, bad)
    pd.testing.assert_frame_equal(pd.read_parquet(target), df)
    assert _leftovers(target.parent) == []


def test_atomic_directory_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    from transferlab.platform.io import atomic_directory

    with atomic_directory(tmp_path / "out") as tmp:
        (tmp / "a.txt").write_text("a")
        assert not (tmp_path / "out").exists()  # nothing at the target while the block runs
    assert (tmp_path / "out" / "a.txt").read_text() == "a"
    with pytest.raises(RuntimeError, match="boom"), atomic_directory(tmp_path / "broken") as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no target, no temporary left
    with pytest.raises(FileExistsError, match="not empty"), atomic_directory(tmp_path / "out"):
        pass


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_written_files_and_directories_honour_the_umask(
    tmp_path: Path, mask: int, file_mode: int, dir_mode: int
) -> None:
    """What ``open``/``mkdir`` would give under the umask, not tempfile's private 0600/0700."""
    old = os.umask(mask)
    try:
        text = atomic_write_text(tmp_path / "t.txt", "x")
        js = atomic_write_json(tmp_path / "j.json", {"a": 1})
        with tio.atomic_directory(tmp_path / "d") as staging:
            (staging / "f").write_text("y")
        made = tio.temp_directory(tmp_path / "p", ".x-")
    finally:
        os.umask(old)
    assert stat.S_IMODE(text.stat().st_mode) == file_mode
    assert stat.S_IMODE(js.stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == dir_mode
    assert stat.S_IMODE(made.stat().st_mode) == dir_mode
