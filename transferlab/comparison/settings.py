"""The settings both domains' multi-turn experiments use, side by side, read from their results.

A comparison of "does agent RL carry over" is only as fair as its arms are matched. This table reads
each committed result's ``settings`` (never a hand-typed copy) and puts the numbers a reader checks
first next to each other; where the domains differ, :data:`WHY` says why (a reason measured in a pilot
on the validation split, or that the difference is unmatched history the re-run removes).

>>> row = settings_row({"policy": {"n_layer": 2, "d_model": 128}, "sft": {"steps": 400},
...     "sft_tasks": 40, "rl": {"steps": 32, "tasks_per_step": 8, "group_size": 4, "temperature": 0.7,
...     "kl_coef": 0.1, "advantage": "gigpo"}, "rft": {"demo_anchor": 0}})
>>> row["policy"], row["RL episodes"], row["RFT data"]
('2 layers x 128', '1024', 'own successes only')
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

SETTINGS: tuple[str, ...] = (
    "policy",
    "SFT steps",
    "demonstrations",
    "RL episodes",
    "group size",
    "temperature",
    "KL",
    "advantage",
    "RFT data",
)
"""The rows of the table, in order."""
SOURCES: dict[str, str] = {"coding": "coding_agent_learn", "ops": "ops_learn_rft"}
"""Each domain's multi-turn result (a folder under the results directory holding ``result.json``)."""
WHY: dict[str, str] = {
    "policy": "unmatched: each domain's preset was sized in its own pilots; one size for both is the "
    "re-run's to set",
    "SFT steps": "unmatched: set in each domain's own pilots",
    "demonstrations": "each domain's own preset (ops: 120 demonstrations instead of 40 gave no RL gain, "
    "docs/results/ops_learn_demos120)",
    "group size": "the same 32 episodes per step: coding 4 tasks x 8, ops 8 scenarios x 4",
    "temperature": "ops samples at 0.7 since its first preset; coding at 1.0 (each domain's pilots)",
    "KL": "ops: 0.1 with GiGPO, from the ops pilots (docs/pilots/ops_learn.md, scored on what is now the "
    "validation split); coding: 0.05, its preset's",
    "advantage": "ops: per-turn credit (GiGPO) from the ops pilots; coding keeps the episode advantage",
    "RFT data": "results made before RFT trained on its own successes only kept every demonstration "
    "(then RFT was mostly more SFT)",
}
"""Why a row differs between the domains (shown only where the values differ)."""


def _get(settings: Mapping[str, Any], *path: str) -> Any:
    node: Any = settings
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _policy(settings: Mapping[str, Any]) -> str:
    if settings.get("model_path"):
        return str(settings["model_path"])
    return f"{_get(settings, 'policy', 'n_layer')} layers x {_get(settings, 'policy', 'd_model')}"


def _demonstrations(settings: Mapping[str, Any]) -> str:
    if settings.get("sft_tasks") is not None:
        return f"{settings['sft_tasks']} scenarios"
    variants = settings.get("demo_variants") or 0
    train = _get(settings, "tasks", "train")
    return f"{train} training tasks, + {variants} renamed copies each" if train else "-"


def _rft_data(settings: Mapping[str, Any]) -> str:
    rft = settings.get("rft") or {}
    if "demo_anchor" in rft:
        n = int(rft["demo_anchor"])
        return "own successes only" if n == 0 else f"own successes + {n} demonstrations"
    return "every demonstration + own successes" if rft.get("keep_demos", True) else "own successes only"


def settings_row(settings: Mapping[str, Any]) -> dict[str, str]:
    """One domain's column: each of :data:`SETTINGS` from a result's ``settings``."""
    rl = settings.get("rl") or {}
    episodes = (rl.get("steps") or 0) * (rl.get("tasks_per_step") or 0) * (rl.get("group_size") or 0)
    return {
        "policy": _policy(settings),
        "SFT steps": str(_get(settings, "sft", "steps")),
        "demonstrations": _demonstrations(settings),
        "RL episodes": str(episodes),
        "group size": str(rl.get("group_size")),
        "temperature": str(rl.get("temperature")),
        "KL": str(rl.get("kl_coef")),
        "advantage": str(rl.get("advantage", "episode")),
        "RFT data": _rft_data(settings),
    }


def settings_table(results_dir: str | Path) -> list[dict[str, str]]:
    """The table's rows (setting, one column per domain, and why they differ), from the results under
    ``results_dir``; a domain whose result is missing shows ``not found``."""
    from transferlab.platform.results import read_result

    columns: dict[str, dict[str, str]] = {}
    for domain, folder in SOURCES.items():
        path = Path(results_dir, folder, "result.json")
        columns[domain] = settings_row(read_result(path).settings) if path.is_file() else {}
    rows = []
    for name in SETTINGS:
        values = {domain: col.get(name, "not found") for domain, col in columns.items()}
        differ = len(set(values.values())) > 1
        rows.append({"setting": name, **values, "why they differ": WHY.get(name, "") if differ else "same"})
    return rows
