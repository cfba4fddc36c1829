"""Run every experiment's smoke preset into a folder, or compare two such folders number for number.

A move or rename must not change what the experiments compute. Run the smoke presets on the commit
before and on the commit after, then compare:

    python scripts/smoke_runs.py run BEFORE_DIR      # on the old commit (about five minutes)
    python scripts/smoke_runs.py run AFTER_DIR       # on the new one
    python scripts/smoke_runs.py compare BEFORE_DIR AFTER_DIR

``compare`` matches every ``result.json`` and ``metrics.parquet`` by its path below the run folder and
reports each number that differs; wall times, paths, provenance and settings fields new in AFTER are
left out (they differ by design). Exit status 1 when any number differs.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

EXPERIMENTS: tuple[tuple[str, ...], ...] = (
    ("coding", "experiment", "learn", "--seeds", "0"),
    ("coding", "experiment", "agent-learn", "--seeds", "0"),
    ("coding", "experiment", "dense-sparse", "--seeds", "0"),
    ("coding", "experiment", "ablations", "--seeds", "0"),
    ("ops", "experiment", "learn", "--seeds", "0"),
    ("ops", "experiment", "transfer"),
)
TIMING = re.compile(r"(?:seconds|_s$|^time|wall|elapsed|duration|per_s|throughput|share|provenance|command)")
STAMP = re.compile(r"\d{8}-\d{6}")


def run(out: Path) -> None:
    """Every smoke preset into ``out/<experiment>``."""
    for args in EXPERIMENTS:
        name = "-".join(args[:3]).replace("-experiment", "")
        cmd = [
            sys.executable,
            "-m",
            "transferlab.cli",
            *args,
            "--preset",
            "smoke",
            "--runs-root",
            str(out / name),
        ]
        print("$", " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _key(path: Path, root: Path) -> str:
    parts = path.relative_to(root).parts[1:]  # below the runs root: experiment/stamp/...
    return "/".join(p for p in parts if not STAMP.match(p))


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str) and (Path(value).is_absolute() or bool(STAMP.search(value))):
        return "<path>"
    return value


def _diff(a: Any, b: Any, where: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: gone" for k in a if k not in b]
        return out + [line for k in a if k in b for line in _diff(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            line for i, (x, y) in enumerate(zip(a, b, strict=True)) for line in _diff(x, y, f"{where}[{i}]")
        ]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    return [] if same else [f"{where}: {a!r} -> {b!r}"]


def compare(before: Path, after: Path) -> int:
    """Print every number that differs; the count of files that differ."""
    bad = same = 0
    for pattern in ("**/result.json", "**/metrics.parquet"):
        theirs = {_key(p, after): p for p in after.glob(pattern)}
        for mine in sorted(before.glob(pattern)):
            key = _key(mine, before)
            if key not in theirs:
                print(f"{key}: missing in {after}")
                bad += 1
                continue
            if mine.suffix == ".json":
                lines = _diff(
                    _clean(json.loads(mine.read_text())), _clean(json.loads(theirs[key].read_text())), ""
                )
            else:
                a, b = (pd.read_parquet(p) for p in (mine, theirs[key]))
                a, b = (f[~f["key"].str.contains(TIMING)].reset_index(drop=True) for f in (a, b))
                rows = [(r.step, r.key, r.value) for r in a.itertuples()]
                other = [(r.step, r.key, r.value) for r in b.itertuples()]
                lines = _diff([list(r) for r in rows], [list(r) for r in other], "")
            if lines:
                bad += 1
                print(f"{key}: {len(lines)} differences", *lines[:10], sep="\n    ")
            else:
                same += 1
    print(f"{same} files identical, {bad} differ")
    return bad


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        run(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return 1 if compare(Path(argv[1]), Path(argv[2])) else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
