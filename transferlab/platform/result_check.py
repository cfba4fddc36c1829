"""``transferlab results check``: every committed ``result.json`` in a schema, with its splits and origin.

Each file must parse and name its ``experiment``, the ``command`` that makes it, the split it scored
(``scored_split``) and the split it was tuned on (``tuned_on``). Then, by kind:

* a result with ``arms`` (the learning experiments, ``compare``): the shared :class:`Result` schema;
* ``simulator-fidelity``: ``tau_before``, ``tau_after`` and ``tau_ceiling`` are rank correlations;
* ``offline-rl``: its ``seeds`` and each of its ``comparisons`` in the shared schema;
* ``ops-probes``: each probe's success is a share, and ``held`` says whether every limit held.

A result without ``provenance`` (commit, dirty flag, command, packages, wall time) was made before
results recorded it: it is listed as *legacy*, an error only with ``strict`` (the rule once every
headline has been re-made; until then such a directory is current only if README says so, else it
belongs under ``docs/results/history/``).

>>> [f.level for f in check_payload("x/result.json", {"experiment": "x"})]
['error']
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from transferlab.platform.results import Comparison, Result

Level = Literal["error", "legacy"]
REQUIRED = ("experiment", "command", "scored_split", "tuned_on")
"""Keys every result.json names (non-empty strings)."""


@dataclass(frozen=True)
class Finding:
    """One problem with one file."""

    path: str
    level: Level
    message: str


def _errors_of(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return f"{where}: {first['msg']}"


def _with_arms(data: Mapping[str, Any]) -> list[str]:
    try:
        Result.model_validate(data)
    except ValidationError as exc:
        return [f"not in the shared result schema ({_errors_of(exc)})"]
    return []


def _fidelity(data: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("tau_before", "tau_after", "tau_ceiling"):
        value = data.get(key)
        if not isinstance(value, int | float) or not math.isfinite(value) or not -1.0 <= value <= 1.0:
            out.append(f"{key} must be a rank correlation in [-1, 1], got {value!r}")
    return out


def _offline(data: Mapping[str, Any]) -> list[str]:
    out = []
    if not isinstance(data.get("seeds"), list) or not data["seeds"]:
        out.append("seeds must be a non-empty list")
    for i, raw in enumerate(data.get("comparisons") or []):
        try:
            Comparison.model_validate(raw)
        except ValidationError as exc:
            out.append(f"comparisons[{i}] is not in the shared schema ({_errors_of(exc)})")
    if not data.get("comparisons"):
        out.append("comparisons must list the paired comparisons")
    return out


def _probes(data: Mapping[str, Any]) -> list[str]:
    rows = data.get("probes")
    if not isinstance(rows, list) or not rows:
        return ["probes must list the probe rows"]
    out = [
        f"probe {r.get('probe')!r}: success must be a share in [0, 1]"
        for r in rows
        if not isinstance(r, dict) or not 0.0 <= float(r.get("success", -1)) <= 1.0
    ]
    if not isinstance(data.get("held"), bool):
        out.append("held must say whether every limit held (true or false)")
    return out


KINDS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "simulator-fidelity": _fidelity,
    "offline-rl": _offline,
    "ops-probes": _probes,
}
"""Checks of the results that are not in the arms-and-comparisons schema, by experiment."""


def check_payload(path: str, data: Any) -> list[Finding]:
    """The findings of one parsed result.json."""
    if not isinstance(data, dict):
        return [Finding(path, "error", "is not a JSON object")]
    missing = [k for k in REQUIRED if not isinstance(data.get(k), str) or not data[k].strip()]
    if missing:
        return [Finding(path, "error", f"names no {', '.join(missing)} (each a non-empty string)")]
    check = _with_arms if "arms" in data else KINDS.get(str(data["experiment"]))
    if check is None:
        return [Finding(path, "error", f"unknown kind of result {data['experiment']!r} without arms")]
    out = [Finding(path, "error", m) for m in check(data)]
    prov = data.get("provenance")
    if prov is None:
        out.append(Finding(path, "legacy", "made before results recorded their provenance"))
    elif not isinstance(prov, dict) or "git_commit" not in prov or prov.get("command") != data["command"]:
        out.append(Finding(path, "error", "provenance must name the git commit and the result's command"))
    return out


def check_results(root: str | Path) -> list[Finding]:
    """Findings for every ``result.json`` under ``root`` (ValueError when there is none)."""
    paths = sorted(Path(root).rglob("result.json"))
    if not paths:
        raise ValueError(f"no result.json under {root}; pass the folder of committed results (docs/results)")
    out: list[Finding] = []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            out.append(Finding(str(path), "error", f"is not readable JSON ({exc})"))
            continue
        out += check_payload(str(path), data)
    return out


def failures(findings: list[Finding], strict: bool = False) -> list[Finding]:
    """The findings that fail the check: errors, and legacy results too when ``strict``."""
    return [f for f in findings if f.level == "error" or (strict and f.level == "legacy")]
