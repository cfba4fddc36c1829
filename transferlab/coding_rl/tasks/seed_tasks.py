"""The seed tasks with buggy and fixed solutions.

The quick sort is the founding design note's code RL example (it drops the elements equal to the
pivot); the binary search is the readiness checklist's running example (both boundaries written
``low = mid`` and ``high = mid``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transferlab.coding_rl.tasks.code_task import CodeTask, load_task

SEED_DIR = Path(__file__).resolve().parent / "seed"


@dataclass(frozen=True)
class SeedSolution:
    """A solution file for a seed task, with what it is meant to show."""

    task_file: Path
    solution_file: Path
    label: str

    @property
    def task(self) -> CodeTask:
        return load_task(self.task_file)

    @property
    def source(self) -> str:
        return self.solution_file.read_text(encoding="utf-8")


SEED_SOLUTIONS: tuple[tuple[str, str, str], ...] = (
    (
        "quick_sort.json",
        "quick_sort_buggy.py",
        "quick sort, drops elements equal to the pivot (note 000)",
    ),
    ("quick_sort.json", "quick_sort_fixed.py", "quick sort, fixed"),
    (
        "binary_search.json",
        "binary_search_buggy.py",
        "binary search, low = mid and high = mid (note 004)",
    ),
    ("binary_search.json", "binary_search_low_bug.py", "binary search, only low = mid left"),
    ("binary_search.json", "binary_search_high_bug.py", "binary search, only high = mid left"),
    ("binary_search.json", "binary_search_fixed.py", "binary search, fixed"),
)


def seed_solutions() -> list[SeedSolution]:
    """Every seed (task, solution) pair, buggy ones first within each task."""
    return [SeedSolution(SEED_DIR / t, SEED_DIR / s, label) for t, s, label in SEED_SOLUTIONS]
