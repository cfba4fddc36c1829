"""Provenance: the commit and whether the tree was dirty, the command, the machine, package versions."""

from __future__ import annotations

import doctest
import re
import subprocess
from pathlib import Path

from transferlab.platform import provenance as prov


def test_provenance_names_the_checkout_it_runs_from() -> None:
    got = prov.provenance("transferlab ops probes", wall_s=2.345)
    root = Path(prov.__file__).resolve().parents[2]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode == 0:  # a git checkout (CI clones one): the commit is HEAD's
        assert got["git_commit"] == head.stdout.strip() and isinstance(got["git_dirty"], bool)
    assert got["command"] == "transferlab ops probes" and got["wall_s"] == 2.3
    assert re.fullmatch(r"\d+\.\d+\.\d+", got["python"]) and got["cpu_count"] >= 1
    assert {"transferlab", "numpy"} <= set(got["packages"])
    assert prov.package_versions(("no-such-package-here",)) == {}


def test_module_doctests_hold() -> None:
    result = doctest.testmod(prov)
    assert result.attempted > 0 and result.failed == 0
