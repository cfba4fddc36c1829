"""Fixtures shared by the coding_rl test packages (policies, trainers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from transferlab.coding_rl.policies.tokenizer import train_tokenizer
from transferlab.coding_rl.tasks.toy import OPERATIONS, toy_solution, toy_tasks


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One intra-op torch thread for the module, then the previous setting back.

    The models in these tests are tiny: one thread is fastest, and far faster on a busy machine. Opt in
    per module with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
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
    train, held = toy_tasks(operations=tuple(OPERATIONS))
    texts = [f"{t.task_description}\n{t.function_signature}\n{toy_solution(t)}" for t in train + held]
    return train_tokenizer(texts * 3, vocab_size=300)
