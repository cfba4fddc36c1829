"""Rewards of the ops analysis environment, as plain functions: the rubric, the dense table, humans.

Report rubric (0-10), :func:`rubric_score`. A report is graded against what its own episode retrieved
(:class:`Retrieved`: the numbers the tool calls returned), so evidence is credited only for work done:

=====================  ==================================================================================
component              points
=====================  ==================================================================================
causes_named           5 x share of the true causes the report *asserts* (a sentence with a causal cue,
                       "cause", "because", "due to", "导致" ...; synonyms EN/ZH)
evidence_cited         4 x share of the task's supporting numbers cited: within rounding of the true
                       value, returned by a tool call earlier in the episode, and in a sentence that
                       names the metric it measures (a cause's numbers count only when it is named)
no_false_blame         +1 when no absent cause is asserted
false_blame            -3 per absent cause asserted ("no stock-out", "campaigns: nothing unusual" rule
                       a cause out; a mention without a causal cue is neither)
unsupported_numbers    -1 per number in the report that no tool call returned (the precision term:
                       a spray of numbers loses)
=====================  ==================================================================================

The total is clipped to [0, 10]; a success is 8 or more. Keyword stuffing loses 3 points per absent
cause; the right cause without numbers scores 6; the expert's report sent without its queries scores
0 (its numbers were never retrieved). The probe suite (:mod:`transferlab.simulator.ops.probes`) keeps
these properties as measured rates on every split.

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
>>> rubric_score(task, "Causes: stock-out, competitor price cut, failed campaign, seasonality.").total
0.0
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
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
    r"\b(?:no|not|none|nothing|never|neither|nor|without|ruled out|rule out|normal|unchanged|stable|"
    r"steady|flat|fine)\b|n't\b"
    r"|排除|没有|无|正常|并非|不是"
)
"""A clause with one of these rules the causes it names out ("no stock-out", "campaigns: nothing
unusual", "competitor prices stayed stable")."""
ASSERTIONS = re.compile(
    r"\bcause[sd]?\b|\bbecause\b|\bdue to\b|\bdriven\b|\bdrivers?\b|\bexplains?\b|\bexplained\b"
    r"|\bblame|\bled to\b|\bresult(?:ed|s)? (?:of|from)\b|\breasons?\b|\bresponsible\b|\bbehind\b"
    r"|原因|导致|由于|因为|造成|归因"
)
"""A sentence with one of these asserts the causes its (not negated) clauses name."""
CLAUSE_SPLIT = re.compile(r"[;!?\n。；！？:：]|(?<!\d)[.,]|[.,](?!\d)|，|\bbut\b|\bwhile\b")
SENTENCE_SPLIT = re.compile(r"[;!?\n。；！？]|(?<!\d)\.|\.(?!\d)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
METRIC_WORDS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in {
        "orders_change_pct": r"order|sales|gmv|revenue|销量|订单|销售",
        "stock_out_days": r"stock|inventory|库存|缺货|断货",
        "late_deliveries": r"late|delay|迟|延",
        "delivery_complaints": r"complain|投诉",
        "competitor_index": r"index|competitor|rival|price|指数|竞",
        "competitor_change_pct": r"index|competitor|rival|price|指数|竞",
        "last_year_orders_change_pct": r"last year|year ago|a year|去年|同比",
        "last_year_orders": r"last year|year ago|a year|去年|同比",
        "campaign_discount_pct": r"discount|off\b|折",
        "campaign_margin": r"margin|loss|lost|profit|利润|亏",
    }.items()
}
"""The words that say which metric a cited number measures (an evidence counts only when one of its
metric's words stands in the same sentence as the number)."""


@dataclass(frozen=True)
class Retrieved:
    """The numbers an episode's tool calls returned (and the question's), which a report may cite."""

    numbers: tuple[float, ...]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> Retrieved:
        """From the observations of an episode: the task's introduction and every tool result; tool
        errors (which echo the caller's own arguments) and the report's receipt count for nothing."""
        found: list[float] = []
        for text in texts:
            if text.startswith(("tool error", "report received")):
                continue
            found += report_numbers(text)
        return cls(tuple(sorted(set(found))))

    def supports(self, cited: str) -> bool:
        """True when a retrieved number rounds to ``cited`` at the precision it is written with."""
        value = float(cited)
        decimals = len(cited.split(".")[1]) if "." in cited else 0
        half = 0.5 * 10.0**-decimals + 1e-9
        return any(abs(abs(value) - abs(r)) <= half for r in self.numbers)


NOTHING_RETRIEVED = Retrieved(())
"""What a report written without any tool call may cite."""


@dataclass(frozen=True)
class RubricScore:
    """The rubric's components and their clipped total (0-10)."""

    components: dict[str, float]
    named: tuple[str, ...]
    blamed_absent: tuple[str, ...]
    unsupported: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return float(min(10.0, max(0.0, round(sum(self.components.values()), 6))))


def sentences(text: str) -> list[str]:
    """The text's sentences, lower-cased (a decimal point does not end one)."""
    return [s.strip() for s in SENTENCE_SPLIT.split(text.lower()) if s.strip()]


def mentions(text: str) -> dict[str, str]:
    """Each cause the text mentions: ``"blamed"`` (a sentence with a causal cue names it in a clause
    that does not negate it), ``"ruled_out"`` (a negating clause names it, or a sentence without a
    causal cue holds a negation) or ``"mentioned"``; blamed anywhere wins."""
    out: dict[str, str] = {}
    rank = {"mentioned": 0, "ruled_out": 1, "blamed": 2}
    for sentence in sentences(text):
        asserted = ASSERTIONS.search(sentence) is not None
        # a sentence that asserts a cause negates clause by clause ("cause: X, not Y"); one that asserts
        # nothing is a check, ruled out by a negation anywhere in it ("looked at Y: nothing unusual")
        whole = not asserted and NEGATIONS.search(sentence) is not None
        for clause in CLAUSE_SPLIT.split(sentence):
            negated = whole or NEGATIONS.search(clause) is not None
            for cause, patterns in CAUSE_SYNONYMS.items():
                if any(re.search(p, clause) for p in patterns):
                    said = "ruled_out" if negated else "blamed" if asserted else "mentioned"
                    if cause not in out or rank[said] > rank[out[cause]]:
                        out[cause] = said
    return out


def report_numbers(text: str) -> list[float]:
    """Every number in the text (thousands separators removed)."""
    return [float(n) for n in _number_strings(text)]


def _number_strings(text: str) -> list[str]:
    return NUMBER.findall(re.sub(r"(?<=\d),(?=\d{3})", "", text))


def cited(task: OpsTask, report: str, retrieved: Retrieved, named: Sequence[str]) -> int:
    """How many of the task's evidence numbers the report cites (see the rubric's table)."""
    usable = [e for e in task.evidence if e.cause == "sales" or e.cause in named]
    said = [(s, [n for n in _number_strings(s) if retrieved.supports(n)]) for s in sentences(report)]
    return sum(
        any(METRIC_WORDS[e.name].search(s) and any(e.matches(float(n)) for n in ns) for s, ns in said)
        for e in usable
    )


def rubric_score(task: OpsTask, report: str, retrieved: Retrieved = NOTHING_RETRIEVED) -> RubricScore:
    """Score a report 0-10 against the task's true causes and supporting numbers (see the table).

    ``retrieved`` is what the report's episode retrieved (:meth:`Retrieved.from_texts` of its
    observations); a report graded without it cites nothing and every number it holds is unsupported.
    """
    said = mentions(report)
    named = tuple(c for c in task.causes if said.get(c) == "blamed")
    blamed_absent = tuple(c for c in task.absent if said.get(c) == "blamed")
    unsupported = tuple(n for n in _number_strings(report) if not retrieved.supports(n))
    components = {
        "causes_named": 5.0 * len(named) / max(len(task.causes), 1),
        "evidence_cited": 4.0 * cited(task, report, retrieved, named) / max(len(task.evidence), 1),
        "no_false_blame": 0.0 if blamed_absent else 1.0,
        "false_blame": -3.0 * len(blamed_absent),
        "unsupported_numbers": -1.0 * len(unsupported),
    }
    return RubricScore(components, named, blamed_absent, unsupported)


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
