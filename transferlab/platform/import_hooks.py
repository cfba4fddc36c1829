"""Run code around the first import of a third-party module, without importing it now.

``import transferlab`` must stay light (no gymnasium, numpy or torch: ``transferlab --help`` imports
it), yet register its Gymnasium ids so ``gym.make("transferlab/...")`` works as Gymnasium users
expect; and d3rlpy's legacy ``gym`` import must not print its notice to our users. Both are
:func:`around_first_import`: a finder on ``sys.meta_path`` that wraps the module's execution the
first time it is imported, then removes itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Wrap = Callable[[Callable[[], None]], None]
"""``wrap(execute)``: must call ``execute()`` once (the module's own code), may do more around it."""


class _FirstImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, wrap: Wrap) -> None:
        self.name = name
        self.wrap = wrap

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and so that find_spec below asks the real finders
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute_module = spec.loader.exec_module
        wrap = self.wrap

        def exec_module(module: ModuleType) -> None:
            wrap(lambda: execute_module(module))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def around_first_import(name: str, wrap: Wrap) -> bool:
    """Run ``wrap(execute)`` in place of the first import's ``execute()`` of top-level module ``name``.

    Returns False (and does nothing) when ``name`` is already imported: the caller decides what to do
    then (e.g. register now).
    """
    if "." in name:
        raise ValueError(f"around_first_import takes a top-level module name, got {name!r}")
    if name in sys.modules:
        return False
    if not any(isinstance(f, _FirstImport) and f.name == name and f.wrap == wrap for f in sys.meta_path):
        sys.meta_path.insert(0, _FirstImport(name, wrap))
    return True
