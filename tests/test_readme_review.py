"""The README's human-review walkthrough runs as printed: each line of its bash block, in order, in a
fresh folder, as the people it names (each command's --user gets that user's password, as a terminal
prompt would; `users add NAME` gets NAME's new password). Only `review serve` is left out: it serves
until stopped, and tests/human_review/test_cli.py and the browser test run it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
HEADING = "### 1. The review app: the assistant suggests, a person decides"
PASSWORDS = {"ada": "pass-word-ada", "bob": "pass-word-bob"}

pytestmark = pytest.mark.slow


def review_block() -> list[str]:
    """The command lines of the bash block under the README's human-review heading."""
    text = README.read_text(encoding="utf-8")
    after = text[text.index(HEADING) :]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block is not None, "no bash block under the human-review heading"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _env_for(words: list[str], env: dict[str, str]) -> dict[str, str]:
    """The passwords a person would type for this command."""
    env = dict(env)
    if "--user" in words:
        env["TRANSFERLAB_PASSWORD"] = PASSWORDS[words[words.index("--user") + 1]]
    if words[1:4] == ["review", "users", "add"]:
        env["TRANSFERLAB_NEW_PASSWORD"] = PASSWORDS[words[4]]
    return env


def test_the_readme_review_block_runs_as_printed(tmp_path: Path) -> None:
    lines = review_block()
    assert lines[-1].split("#")[0].split() == ["transferlab", "review", "serve"]
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFERLAB_")}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    outputs: dict[str, str] = {}
    for line in lines[:-1]:
        words = shlex.split(line, comments=True)
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            env[name] = value
            continue
        assert words[0] == "transferlab", line
        done = subprocess.run(
            words, cwd=tmp_path, env=_env_for(words, env), capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        outputs[" ".join(words[1:3])] = done.stdout
    assert (tmp_path / "review.db").is_file()  # the export put the database here, not elsewhere
    assert outputs["review list"].count("pending") >= 3, outputs["review list"]
    shown = json.loads(outputs["review show"])
    assert shown["state"] == "feedback_received", shown["state"]  # executed once, its results matured
    assert shown["executions"] == 1 and shown["outcome"], shown
