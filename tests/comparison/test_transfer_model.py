"""The transfer experiment started from a local Hugging Face model (``--model PATH``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transferlab.comparison import transfer as tr


@pytest.mark.slow
def test_transfer_test_preset_from_a_random_qwen2_checkpoint(tmp_path: Path) -> None:
    from transferlab.agent_rl.policies.families import init_checkpoint
    from transferlab.coding_rl.tokenizer_corpus import default_texts

    model = init_checkpoint("qwen2", tmp_path / "qwen2", size="tiny", texts=default_texts())
    runs, report = tmp_path / "runs", tmp_path / "report"
    args = ["--preset", "smoke", "--model", str(model)]
    tr.main([*args, "--runs-root", str(runs), "--report-dir", str(report)])
    [run] = (runs / "transfer").iterdir()
    summary = json.loads((run / "artifacts" / "summary.json").read_text())
    assert summary["model"]["path"] == str(model) and summary["model"]["parameters"] > 0
    # both arms start from the model and its own tokenizer: none trained here, no fresh tiny init
    assert not (run / "tokenizer").exists() and not (run / "arms" / "scratch-seed0" / "init").exists()
    for arm in tr.ARMS:
        for stage, row in summary["arms"][arm]["stages"].items():
            assert 0.0 <= row["success"]["estimate"] <= 1.0, (arm, stage)
    assert 0.0 <= summary["coding"]["held_out"]["estimate"] <= 1.0
    md = (report / "report.md").read_text()
    assert f"policy: `{model}` (" in md and f"--model {model}" in md
