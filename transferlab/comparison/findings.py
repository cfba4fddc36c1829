"""README's findings table, generated from the committed results under the project's inference rule.

Each row is one claim: a difference between two arms of a committed ``result.json``, restated from
the arms' per-seed values (``per_seed``: each seed's mean over the same evaluation tasks and
episodes, so a seed's paired difference is the difference of its two values) as a t-interval over
the seeds with a t-quantile MDE (:func:`transferlab.platform.results.comparison`'s rule; see
``docs/guide/methods.md``). The interval the result was committed with sits beside it, so a reader
sees what the rule changed. ``transferlab results findings --write README.md`` puts the table
between the README's markers; a test fails when they disagree.

>>> row = finding_row(Claim("b vs a", "x", "a", "b"), {"seeds": [0, 1, 2], "arms": {
...     "a": {"per_seed": [0.1, 0.2, 0.3]}, "b": {"per_seed": [0.2, 0.4, 0.3]}},
...     "comparisons": [], "scored_split": "test"})
>>> row["difference, points [95% CI]"], row["seeds"], row["verdict"]
('+10.0 [-14.8, +34.8]', '3', 'no detectable change')
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferlab.platform.stats import t_interval, t_mde, verdict

START, END = "<!-- findings:start -->", "<!-- findings:end -->"
"""The markers around the generated table in README.md."""


@dataclass(frozen=True)
class Claim:
    """``b - a`` of the result in ``folder`` (relative to the results directory)."""

    claim: str
    folder: str
    a: str
    b: str
    committed: str = ""  # the name of the comparison the result holds (default ``"b - a"``)


CLAIMS: tuple[Claim, ...] = (
    Claim("Coding, multi-turn: SFT + GRPO vs SFT", "coding_agent_learn", "sft", "rl"),
    Claim("Coding, multi-turn: SFT + GRPO vs SFT + RFT", "coding_agent_learn", "rft", "rl"),
    Claim("Coding, multi-turn: SFT + RFT vs SFT", "coding_agent_learn", "sft", "rft"),
    Claim("Coding, single-step toy functions: SFT + GRPO vs SFT", "coding_learn", "sft", "grpo"),
    Claim("Ops: SFT + GRPO vs SFT (seven seeds pooled)", "ops_learn/seven_seeds", "sft", "rl"),
    Claim("Ops: SFT + RFT vs SFT", "ops_learn_rft", "sft", "rft"),
    Claim("Ops: SFT + RFT + GRPO vs SFT", "ops_learn_rft", "sft", "rft_rl"),
    Claim("Ops: SFT + RFT + GRPO vs SFT + RFT", "ops_learn_rft", "rft", "rft_rl"),
    Claim("Ops, 120 demonstrations: SFT + GRPO vs SFT", "ops_learn_demos120", "sft", "rl"),
    Claim(
        "Transfer: coding-pretrained vs scratch, after ops SFT",
        "transfer",
        "scratch_sft",
        "transfer_sft",
        committed="transfer - scratch after sft",
    ),
    Claim("Transfer: coding-pretrained vs scratch, after ops GRPO", "transfer", "scratch", "transfer"),
)
"""The learning claims README states, in its order."""


def _points(value: float, plus: bool = True) -> str:
    return f"{100 * value:+.1f}" if plus else f"{100 * value:.1f}"


def _stored(result: Mapping[str, Any], claim: Claim) -> str:
    """The seed-clustered interval the result was committed with (``-`` when it has none)."""
    name = claim.committed or f"{claim.b} - {claim.a}"
    for c in result.get("comparisons", []):
        if c.get("cluster") == "seed" and c.get("name") == name:
            return f"{_points(c['estimate'])} [{_points(c['ci'][0])}, {_points(c['ci'][1])}]"
    return "-"


def finding_row(claim: Claim, result: Mapping[str, Any]) -> dict[str, str]:
    """One table row: the t-interval over the seeds of ``b - a`` from the arms' per-seed values."""
    arms = result["arms"]
    a, b = arms[claim.a]["per_seed"], arms[claim.b]["per_seed"]
    if len(a) != len(b) or len(a) != len(result["seeds"]):
        raise ValueError(
            f"{claim.folder}: arms {claim.a} and {claim.b} must hold one per-seed value per seed "
            f"({len(result['seeds'])}), got {len(a)} and {len(b)}"
        )
    diffs = [float(y) - float(x) for x, y in zip(a, b, strict=True)]
    ci = t_interval(diffs)
    width = ci.high > ci.low
    mde = t_mde(ci.low, ci.high, len(diffs)) if width else 0.0
    return {
        "claim": claim.claim,
        "difference, points [95% CI]": f"{_points(ci.estimate)} [{_points(ci.low)}, {_points(ci.high)}]",
        "seeds": str(len(diffs)),
        "MDE, points": _points(mde, plus=False) if width else "unknown",
        "verdict": verdict(ci.estimate, (ci.low, ci.high), mde),
        "as committed": _stored(result, claim),
        "scored on": str(result.get("scored_split", "-")).split(":")[0],
        "source": f"docs/results/{claim.folder}",
    }


def findings_rows(results_dir: str | Path, claims: Sequence[Claim] = CLAIMS) -> list[dict[str, str]]:
    """Every claim's row, from ``results_dir`` (a ValueError naming a missing result)."""
    rows = []
    for claim in claims:
        path = Path(results_dir, claim.folder, "result.json")
        if not path.is_file():
            raise ValueError(f"no {path}: the findings table reads every claim's committed result")
        rows.append(finding_row(claim, json.loads(path.read_text(encoding="utf-8"))))
    return rows


def markdown_table(rows: Sequence[Mapping[str, str]]) -> str:
    """A Markdown table of ``rows`` (their keys as the header)."""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r[k] for k in head) + " |" for r in rows]
    return "\n".join(lines)


def findings_block(results_dir: str | Path) -> str:
    """What stands between the README's markers: the table and the line that says how it was made."""
    return "\n".join(
        [
            START,
            markdown_table(findings_rows(results_dir)),
            "",
            "Generated by `transferlab results findings --write README.md` from each source's result.json: "
            "a t-interval over the training seeds of the per-seed paired differences, with the minimum "
            "detectable effect at 80% power (docs/guide/methods.md); *as committed* is the interval the "
            "result was written with (a bootstrap over seed clusters, too narrow at 3 seeds).",
            END,
        ]
    )


def replace_block(text: str, block: str) -> str:
    """``text`` with the part between the markers (inclusive) replaced by ``block``."""
    if START not in text or END not in text or text.index(START) > text.index(END):
        raise ValueError(f"the README has no {START} ... {END} block to fill; add the two markers first")
    return text[: text.index(START)] + block + text[text.index(END) + len(END) :]
