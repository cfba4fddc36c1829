"""Where a result came from: the commit (and whether the tree was dirty), the command, the machine,
package versions and wall time, as one dict a ``result.json`` keeps under ``provenance``.

>>> p = provenance("transferlab ops probes --split test", wall_s=1.5)
>>> print(" ".join(sorted(p)))
command cpu_count git_commit git_dirty machine packages python torch_threads wall_s
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("transferlab", "numpy", "pandas", "scipy", "torch", "transformers", "gymnasium")
"""Packages whose versions a result records (those installed)."""


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


@functools.cache
def git_state() -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the source tree; ``(None, None)`` outside a git checkout. Dirty means a
    tracked file under ``transferlab/`` differs from the commit."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return commit, bool(status)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names`` (the missing ones left out)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def provenance(command: str, wall_s: float) -> dict[str, Any]:
    """The provenance block of a result made by ``command`` in ``wall_s`` seconds."""
    commit, dirty = git_state()
    return {
        "command": command,
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "cpu_count": os.cpu_count(),
        "packages": package_versions(),
        "torch_threads": _torch_threads(),
        "wall_s": round(wall_s, 1),
    }


def _torch_threads() -> int | None:
    """torch's intra-op threads when torch is loaded (a result's numbers can depend on them)."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None
