"""around_first_import: code around a module's first import, the module not imported before."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from transferlab.platform.import_hooks import around_first_import


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("tl_hook_probe")]:
        del sys.modules[name]


def test_wraps_the_first_import_once_and_then_leaves(module_dir: Path) -> None:
    (module_dir / "tl_hook_probe_a.py").write_text("import sys\nsys.stdout.write('executed\\n')\nVALUE = 1\n")
    seen: list[str] = []

    def wrap(execute: Callable[[], None]) -> None:
        seen.append("before")
        execute()
        seen.append("after")

    assert around_first_import("tl_hook_probe_a", wrap) is True
    assert "tl_hook_probe_a" not in sys.modules  # nothing imported yet
    import tl_hook_probe_a  # type: ignore[import-not-found]

    assert tl_hook_probe_a.VALUE == 1
    assert seen == ["before", "after"]
    assert not any(getattr(f, "name", None) == "tl_hook_probe_a" for f in sys.meta_path)


def test_an_imported_module_is_left_alone(module_dir: Path) -> None:
    (module_dir / "tl_hook_probe_b.py").write_text("VALUE = 2\n")
    import tl_hook_probe_b  # type: ignore[import-not-found]  # noqa: F401

    assert around_first_import("tl_hook_probe_b", lambda execute: execute()) is False


def test_a_missing_module_still_fails_as_missing() -> None:
    assert around_first_import("tl_hook_probe_missing", lambda execute: execute()) is True
    with pytest.raises(ModuleNotFoundError):
        import tl_hook_probe_missing  # type: ignore[import-not-found]  # noqa: F401


def test_only_top_level_names() -> None:
    with pytest.raises(ValueError, match="top-level module name"):
        around_first_import("gymnasium.envs", lambda execute: execute())
