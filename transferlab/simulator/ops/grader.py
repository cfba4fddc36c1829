"""Rewards of the ops analysis environment, as plain functions: the rubric, the dense table, humans.

Report rubric (0-10), :func:`rubric_score`:

=================  ======================================================================
component          points
=================  ======================================================================
causes_named       5 x share of the true causes the report names (synonyms, EN/ZH)
evidence_cited     4 x share of the task's supporting numbers cited within tolerance
                   (a cause's numbers count only when that cause is named)
no_false_blame     +1 when no absent cause is blamed
false_blame        -3 per absent cause blamed (a clause that names a cause and negates it,
                   "no stock-out", rules it out instead of blaming it)
=================  ======================================================================

The total is clipped to [0, 10]. Keyword stuffing (every cause listed) loses 3 points per absent
cause; the right cause without numbers scores 6, with them 10.

Dense step table (:data:`DENSE_OPS_REWARDS`, a :class:`~transferlab.platform.agent_env.RewardTable`),
the analogue of the coding agent's dense reward table (:data:`transferlab.coding_rl.rewards.DENSE_REWARDS`):

=========================  ======  =====================================================
component                  weight  coding analogue
=========================  ======  =====================================================
query_success              +0.5    read_file_success (a new, successful query)
check_before_report        +1.0    test_after_modify (every cause the report names was
                                   checked in its evidence source first)
redundant_query            -0.5    redundant_action (the same call twice)
tool_error                 -1.0    tool_error (malformed call, bad argument)
report_without_query       -2.0    write_without_read (generate_report before any query)
report_score               x2.0    task_complete (+20 for a 10/10 report)
task_failed                -4.0    no report: the step limit, the context limit or the
                                   timeout (-5 in the sparse table)
=========================  ======  =====================================================

The sparse table pays only ``report_score`` and ``task_failed`` at the end. How each way an episode can
end pays (the terminal component; dense also pays the last step's other components):

===================================  ===================  ===================
ending                               dense                sparse
===================================  ===================  ===================
report scoring >= 8 (success)        2 x score (16..20)   2 x score (16..20)
report scoring < 8 (failure)         2 x score (0..<16)   2 x score (0..<16)
step limit (env, ``truncated``)      task_failed -4       task_failed -5
context limit (rollout cut)          task_failed -4       task_failed -5
timeout (rollout cut)                task_failed -4       task_failed -5
===================================  ===================  ===================

The rollout pays the context and timeout cuts with
:func:`~transferlab.platform.agent_env.cut_penalty`, the step limit's ``task_failed``: in the sparse
table an episode without a report returns -5, below any report (a 0/10 report returns 0). Human expert ratings
(0-10, ``ReviewService.rate(subject=report_subject(...))``) replace the rubric as the final reward
through :func:`human_report_reward`; :func:`rubric_human_agreement` says how far the two agree.

>>> from transferlab.simulator.ops.scenarios import scenario
>>> task = scenario(1).task
>>> rubric_score(task, "Every cause: stock-out, competitor price cut, failed campaign, seasonality.").total
0.0
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from transferlab.platform.agent_env import RewardTable
from transferlab.simulator.ops.scenarios import ALL_CAUSES, OpsTask

CAUSE_SYNONYMS: dict[str, tuple[str, ...]] = {
    "stock_out": (
        r"stock[- ]?outs?", r"out of stock", r"sold out", r"inventory (?:shortage|ran out|empty)",
        r"no stock", r"backorder", r"缺货", r"断货", r"库存不足",
    ),
    "competitor_price_cut": (
        r"competitors?'?s? (?:\w+ )?(?:price )?cut",
        r"competitors?'?s? (?:\w+ )?(?:lowered|cut|dropped) (?:their )?price",
        r"price war", r"rivals? (?:\w+ )?(?:cheaper|undercut)", r"competitor price index (?:fell|dropped)",
        r"undercut", r"竞品降价", r"竞争对手降价", r"对手降价",
    ),
    "failed_campaign": (
        r"campaign", r"promotion", r"pull(?:ed|ing)?[- ]forward", r"deep discount", r"促销", r"活动", r"大促",
    ),
    "shipping_delays": (
        r"shipping delays?", r"late deliver(?:y|ies)", r"delivery delays?", r"delayed deliver",
        r"物流", r"发货延迟",
    ),
    "seasonality": (r"seasonal", r"seasonality", r"季节"),
}  # fmt: skip
NEGATIONS = re.compile(
    r"\b(?:no|not|none|never|without|ruled out|rule out|normal|unchanged|stable|fine)\b"
    r"|排除|没有|无|正常|并非|不是"
)
CLAUSE_SPLIT = re.compile(r"[.;!?\n。；！？]|(?<!\d),|,(?!\d)|，|\bbut\b|\bwhile\b")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class RubricScore:
    """The rubric's components and their clipped total (0-10)."""

    components: dict[str, float]
    named: tuple[str, ...]
    blamed_absent: tuple[str, ...]

    @property
    def total(self) -> float:
        return float(min(10.0, max(0.0, round(sum(self.components.values()), 6))))


def mentions(text: str) -> dict[str, str]:
    """Each cause the text mentions: ``"blamed"`` (some clause asserts it) or ``"ruled_out"``."""
    out: dict[str, str] = {}
    for clause in CLAUSE_SPLIT.split(text.lower()):
        negated = NEGATIONS.search(clause) is not None
        for cause, patterns in CAUSE_SYNONYMS.items():
            if any(re.search(p, clause) for p in patterns):
                if not negated:
                    out[cause] = "blamed"
                else:
                    out.setdefault(cause, "ruled_out")
    return out


def report_numbers(text: str) -> list[float]:
    """Every number in the text (thousands separators removed)."""
    return [float(n) for n in NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text))]


def rubric_score(task: OpsTask, report: str) -> RubricScore:
    """Score a report 0-10 against the task's true causes and supporting numbers (see the table)."""
    said = mentions(report)
    named = tuple(c for c in task.causes if said.get(c) == "blamed")
    blamed_absent = tuple(c for c in task.absent if said.get(c) == "blamed")
    numbers = report_numbers(report)
    usable = [e for e in task.evidence if e.cause == "sales" or e.cause in named]
    cited = sum(any(e.matches(n) for n in numbers) for e in usable)
    components = {
        "causes_named": 5.0 * len(named) / max(len(task.causes), 1),
        "evidence_cited": 4.0 * cited / max(len(task.evidence), 1),
        "no_false_blame": 0.0 if blamed_absent else 1.0,
        "false_blame": -3.0 * len(blamed_absent),
    }
    return RubricScore(components, named, blamed_absent)


OPS_EVENTS: dict[str, str] = {
    "query_success": "A new query returned data.",
    "check_before_report": "Every cause the report names was checked in its evidence source first.",
    "redundant_query": "The same call as an earlier one.",
    "tool_error": "Malformed, unknown or failed tool call.",
    "report_without_query": "generate_report before any query.",
    "report_score": "Multiplies the report's 0-10 score (rubric or human).",
    "task_failed": "No report: the step limit (the env), the context limit or the timeout (the "
    "rollout's cut, cut_penalty); -4 dense, -5 sparse. Below the most the queries can pay (7 x 0.5), so "
    "that querying without ever reporting never beats reporting: at 0, GRPO on a weak policy learned "
    "to query until the step limit.",
}
"""Every event OpsAnalysis-v0 records, and when."""

DENSE_OPS_REWARDS = RewardTable(
    weights={
        "query_success": 0.5,
        "check_before_report": 1.0,
        "redundant_query": -0.5,
        "tool_error": -1.0,
        "report_without_query": -2.0,
        "report_score": 2.0,
        "task_failed": -4.0,
    },
    descriptions=OPS_EVENTS,
    final=("report_score", "task_failed"),
)
"""The ops environment's dense table (see the module's table)."""
SPARSE_OPS_REWARDS = DENSE_OPS_REWARDS.model_copy(
    update={"weights": {**DENSE_OPS_REWARDS.weights, "task_failed": -5.0}, "end_only": True}
)
"""2 x report score at the end, -5 without a report (the step limit, the context limit or the timeout;
``task_failed``, a final component)."""


def ops_reward_table(name: str) -> RewardTable:
    """``dense`` or ``sparse`` (2 x report score at the end, -5 without a report: step, context or time
    limit)."""
    tables = {"dense": DENSE_OPS_REWARDS, "sparse": SPARSE_OPS_REWARDS}
    if name not in tables:
        raise ValueError(f"unknown reward table {name!r}; choose one of {sorted(tables)}")
    return tables[name].model_copy(deep=True)


def checked_before_report(named: Sequence[str], queried: set[str], sources: dict[str, str]) -> bool:
    """True when the report names at least one cause and each named cause's source was queried."""
    return bool(named) and all(sources[c] in queried for c in named)


def named_causes(report: str) -> tuple[str, ...]:
    """Causes the report blames (any of :data:`ALL_CAUSES`)."""
    said = mentions(report)
    return tuple(c for c in ALL_CAUSES if said.get(c) == "blamed")


# -- human expert ratings -----------------------------------------------------------------------------


def report_subject(task_id: str, report: str) -> str:
    """The review service subject of a report: ``ops:<task id>:<first 12 hex of sha256(report)>``."""
    return f"ops:{task_id}:{hashlib.sha256(report.encode()).hexdigest()[:12]}"


def human_report_reward(
    ratings: Sequence[tuple[str, float]], subject: str, table: RewardTable = DENSE_OPS_REWARDS
) -> float | None:
    """Final reward from experts' ratings, as ``ratings_as_rewards`` returns them ((subject, 0-1)).

    The mean rating of ``subject`` back on the 0-10 scale times ``table["report_score"]`` (the weight the
    rubric score gets), or None when nobody rated it.
    """
    mine = [r for s, r in ratings if s == subject]
    if not mine:
        return None
    return float(table["report_score"] * 10.0 * np.mean(mine))


@dataclass(frozen=True)
class Agreement:
    """Rubric vs human ratings of the same reports."""

    spearman: float
    mean_abs_diff: float
    n: int


def rubric_human_agreement(rubric_scores: Sequence[float], human_scores: Sequence[float]) -> Agreement:
    """Spearman rank correlation and mean absolute difference (both on 0-10) of paired scores."""
    if len(rubric_scores) != len(human_scores):
        raise ValueError(f"{len(rubric_scores)} rubric scores but {len(human_scores)} human scores")
    if len(rubric_scores) < 2:
        raise ValueError("agreement needs at least 2 rated reports")
    r, h = np.asarray(rubric_scores, float), np.asarray(human_scores, float)
    rho = float(spearmanr(r, h).statistic) if r.std() > 0 and h.std() > 0 else float("nan")
    return Agreement(spearman=rho, mean_abs_diff=float(np.mean(np.abs(r - h))), n=len(r))
