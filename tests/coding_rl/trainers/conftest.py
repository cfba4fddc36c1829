"""Fixtures shared by the trainer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from transferlab.coding_rl.sandbox.backends import SandboxBackend, open_backend
from transferlab.coding_rl.sandbox.config import SandboxConfig


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxBackend]:
    """The default sandbox backend with one worker, opened for the module and closed after it.

    Module-scoped, not session-scoped, so no sandbox process outlives the module that used it.
    """
    backend, _, _ = open_backend(SandboxConfig(workers=1))
    yield backend
    backend.close()
