"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op torch thread for the module, then the previous setting back.

    The models in these tests are tiny: one thread is fastest, and far faster on a busy machine. Opt in
    per module with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tok() -> Any:
    """A 300-token BPE trained on every toy task (all operations, train and held-out) and its solution.

    Session-scoped: BPE training is deterministic and nothing mutates the tokenizer. Modules that need
    another tokenizer (trained on the seed repos, say) define their own ``tok``, which overrides this.
    """
    from transferlab.agent_rl.policies.tokenizer import train_tokenizer
    from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_solution, toy_tasks

    train, held = toy_tasks(operations=tuple(OPERATIONS))
    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in train + held]
    return train_tokenizer(texts * 3, vocab_size=300)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Any]:
    """The default sandbox backend with one worker, opened for the module and closed after it.

    Module-scoped, not session-scoped, so no sandbox process outlives the module that used it.
    """
    from transferlab.coding_rl.sandbox.backends import open_backend
    from transferlab.coding_rl.sandbox.config import SandboxConfig

    backend, _, _ = open_backend(SandboxConfig(workers=1))
    yield backend
    backend.close()


def pytest_configure(config: pytest.Config) -> None:
    """Scenario worlds built by the tests go to a cache of this test session, not the user's
    (``TRANSFERLAB_SCENARIO_CACHE`` set by the caller wins)."""
    import tempfile

    from transferlab.simulator.ops.scenarios import CACHE_ENV

    if not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="transferlab-test-scenarios-")
