"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one test process per core: a numeric library's own thread pool in each would ask
    # for every core again and the processes would wait on each other (set before numpy or torch loads)
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

#: The real datasets for tests and benchmarks (see ../shared/data/README.md); never needed at run time.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _shared_file(relative: str) -> Path:
    """The path of ``relative`` under the shared data folder, or skip (fail under CI) when absent."""
    path = SHARED_DATA / relative
    if path.exists():
        return path
    reason = f"shared data {relative!r} not found under {SHARED_DATA}"
    if os.environ.get("TRANSFERLAB_REQUIRE_SHARED") == "1":
        pytest.fail(f"{reason}, and TRANSFERLAB_REQUIRE_SHARED=1 requires it", pytrace=False)
    pytest.skip(f"{reason} (set TRANSFERLAB_REQUIRE_SHARED=1 to fail instead)")


@pytest.fixture
def shared_data() -> Callable[[str], Path]:
    """``shared_data("cdnow/CDNOW_sample.txt")``: a file of ../shared/data, skipping when it is absent."""
    return _shared_file


def pytest_configure(config: pytest.Config) -> None:
    """Scenario worlds built by the tests go to a cache of this test session, not the user's
    (``TRANSFERLAB_SCENARIO_CACHE`` set by the caller wins)."""
    import tempfile

    from transferlab.simulator.ops.scenarios import CACHE_ENV

    if not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="transferlab-test-scenarios-")
