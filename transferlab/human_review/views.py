"""What the review app's pages show, as plain data: rows, diffs, chart frames, a safe CSV export.

The Streamlit pages (``transferlab/apps/pages``) only lay these out; everything that can be tested
without a browser lives here, and this module never imports streamlit.

    >>> action_diff({"discount": 0.1, "budget": 30.0}, {"discount": 0.05, "budget": 30.0})
    [{'field': 'discount', 'before': 0.1, 'after': 0.05}]
    >>> safe_cell("=HYPERLINK(1)"), safe_cell("plain"), safe_cell(-3.5)
    ("'=HYPERLINK(1)", 'plain', -3.5)
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from transferlab.human_review.auth import Role, role_allows
from transferlab.human_review.service import (
    STATES,
    AuditRow,
    Rating,
    Report,
    ReviewService,
    SuggestionView,
    User,
    report_subject,
)
from transferlab.human_review.text import shown
from transferlab.simulator.vocabulary import PROMO_CATEGORIES, TARGETS

__all__ = [
    "ACTION_FIELDS",
    "ALL",
    "CATEGORY_CHOICES",
    "EXECUTED_STATES",
    "PAGES",
    "QUEUE_STATES",
    "RISK_FILTERS",
    "SEGMENT_CHOICES",
    "SORTS",
    "action_diff",
    "action_summary",
    "audit_csv",
    "audit_rows",
    "batch_candidates",
    "can_decide",
    "current_user",
    "evidence_rows",
    "executed_line",
    "executed_rows",
    "ope_summary",
    "own_rating_rows",
    "pages_for",
    "parse_id",
    "queue_filters",
    "queue_rows",
    "rating_confirmation",
    "report_card",
    "results_rows",
    "results_summary",
    "safe_cell",
    "state_counts",
]

#: The choice meaning "no filter" in the queue's select boxes.
ALL = "all"
QUEUE_STATES: tuple[str, ...] = ("pending", ALL, *(st for st in STATES if st != "pending"))
RISK_FILTERS: tuple[str, ...] = (ALL, "low", "medium", "high")
SORTS: tuple[str, ...] = ("risk", "expiry", "created")
#: States shown on the executed page (launched, or tried to be).
EXECUTED_STATES: tuple[str, ...] = ("executing", "executed", "failed", "feedback_received")
#: The campaign fields a reviewer may change with "modify", in display order.
ACTION_FIELDS: tuple[str, ...] = ("discount", "push_hour", "segment", "budget", "category", "products")
SEGMENT_CHOICES: tuple[str, ...] = TARGETS
CATEGORY_CHOICES: tuple[str, ...] = PROMO_CATEGORIES
#: Every page of the app and the least role that sees it (decisions are gated inside the pages; rating
#: reports is the reviewers' own work, so viewers do not get that page).
PAGES: dict[str, Role] = {
    "queue": "viewer",
    "suggestion": "viewer",
    "executed": "viewer",
    "audit": "viewer",
    "results": "viewer",
    "reports": "reviewer",
}
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


# ----------------------------------------------------------------------------------------------------
# users and roles
# ----------------------------------------------------------------------------------------------------


def current_user(service: ReviewService, name: str | None) -> User | None:
    """The signed-in user as stored now (its role re-read on every rerun), or None when unknown."""
    return service.user(name) if name else None


def can_decide(role: str) -> bool:
    """Whether ``role`` may approve, modify or reject at all (the service still checks each case)."""
    return role_allows(role, "reviewer")


def pages_for(role: str) -> list[str]:
    """The pages ``role`` sees, in navigation order."""
    return [page for page, needed in PAGES.items() if role_allows(role, needed)]


def parse_id(value: Any) -> int | None:
    """A suggestion id from a query parameter (``"7"``), or None when absent or malformed."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


# ----------------------------------------------------------------------------------------------------
# queue
# ----------------------------------------------------------------------------------------------------


def queue_filters(state: str, risk: str, sort: str) -> dict[str, Any]:
    """``ReviewService.list`` keyword arguments for the queue's select boxes (``"all"``: no filter)."""
    if state not in QUEUE_STATES:
        raise ValueError(f"unknown state filter {state!r}; use one of {', '.join(QUEUE_STATES)}")
    if risk not in RISK_FILTERS:
        raise ValueError(f"unknown risk filter {risk!r}; use one of {', '.join(RISK_FILTERS)}")
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; use one of {', '.join(SORTS)}")
    return {
        "state": None if state == ALL else state,
        "risk": None if risk == ALL else risk,
        "sort": sort,
    }


def action_summary(action: Mapping[str, Any]) -> str:
    """One line: ``10% off all, push 20h, segment loyal, budget 30``."""
    discount = float(action.get("discount", 0.0))
    category = action.get("category", "all")
    budget = float(action.get("budget", 0.0))
    text = (
        f"{discount:.0%} off {category}, push {action.get('push_hour', '?')}h, "
        f"segment {action.get('segment', '?')}, budget {budget:g}"
    )
    products = action.get("products") or []
    return f"{text}, products {', '.join(map(str, products))}" if products else text


def _hours_left(expires_at: datetime, now: datetime) -> float:
    return round((expires_at - now).total_seconds() / 3600.0, 1)


def queue_rows(views: Sequence[SuggestionView], now: datetime) -> list[dict[str, Any]]:
    """One flat row per suggestion for the queue table, in the order given (the service sorted)."""
    return [
        {
            "id": v.id,
            "state": v.state,
            "risk": v.risk,
            "claimed risk": v.claimed_risk,
            "confidence": round(v.confidence, 3),
            "action": action_summary(v.action),
            "submitted by": v.submitted_by,
            "expires at": v.expires_at.strftime("%Y-%m-%d %H:%M UTC"),
            "hours left": _hours_left(v.expires_at, now) if v.state == "pending" else None,
        }
        for v in views
    ]


def batch_candidates(views: Iterable[SuggestionView], user_name: str) -> list[int]:
    """Ids a batch approval may take: pending, low or medium risk, not submitted by ``user_name``.

    Only a convenience for the picker; the service refuses anything else on its own.
    """
    return [v.id for v in views if v.state == "pending" and v.risk != "high" and v.submitted_by != user_name]


def _key_figure(view: SuggestionView, baseline: str | None) -> str:
    """Predicted profit (``baseline`` None) or its uplift over a baseline, as text; "—" when unknown."""
    evidence = view.evidence
    iv = (
        (evidence.get("predicted") or {}).get("profit")
        if baseline is None
        else ((evidence.get("uplift") or {}).get(baseline) or {}).get("profit")
    )
    return interval_text(iv, signed=baseline is not None) if iv else "—"


def batch_label(view: SuggestionView) -> str:
    """A batch picker's option: id, risk and the action in words."""
    return f"#{view.id} ({view.risk} risk): {action_summary(view.action)}"


def batch_rows(views: Sequence[SuggestionView]) -> list[dict[str, Any]]:
    """What a batch approval is about to approve: each item's action and key evidence."""
    return [
        {
            "id": v.id,
            "risk": v.risk,
            "confidence": f"{v.confidence:.0%}",
            "action": action_summary(v.action),
            "predicted profit ($)": _key_figure(v, None),
            "profit vs what the shop does now ($)": _key_figure(v, "current"),
            "submitted by": v.submitted_by,
        }
        for v in views
    ]


# ----------------------------------------------------------------------------------------------------
# suggestion
# ----------------------------------------------------------------------------------------------------


def action_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The changed fields of an action, ``[{"field", "before", "after"}]``, in :data:`ACTION_FIELDS` order."""
    order = [f for f in ACTION_FIELDS if f in old or f in new]
    order += sorted((set(old) | set(new)) - set(order))
    return [
        {"field": f, "before": old.get(f), "after": new.get(f)} for f in order if old.get(f) != new.get(f)
    ]


def evidence_rows(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The simulator's predicted outcome intervals as chart rows: metric, estimate, low, high."""
    predicted = evidence.get("predicted") or {}
    return [
        {
            "metric": key,
            "estimate": float(iv["estimate"]),
            "low": float(iv["low"]),
            "high": float(iv["high"]),
        }
        for key, iv in predicted.items()
    ]


OUTCOME_UNITS: dict[str, str] = {
    "profit": "$",
    "gmv": "$",
    "orders": "orders",
    "discount_cost": "$",
    "push_cost": "$",
    "refunds": "$",
    "returns": "returns",
    "complaints": "complaints",
    "late_deliveries": "deliveries",
    "satisfaction": "0-1",
    "retention_30": "share",
}
"""Each outcome's unit, in the order the evidence table lists them (profit first: it decides most)."""

BASELINES: dict[str, str] = {"no_campaign": "vs doing nothing", "current": "vs what the shop does now"}
"""The uplift columns of the evidence table, by the evidence's baseline key."""


def _number(value: float, signed: bool = False) -> str:
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 1000 else 0
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def interval_text(iv: Mapping[str, Any], signed: bool = False) -> str:
    """``estimate [low, high]`` with digits that suit the size (``+`` signs for differences).

    >>> interval_text({"estimate": 99.1, "low": 65.8, "high": 142.2}), interval_text(
    ...     {"estimate": -0.5, "low": -1.25, "high": 0.5}, signed=True)
    ('99.1 [65.8, 142.2]', '-0.50 [-1.25, +0.50]')
    """
    est, low, high = (float(iv[k]) for k in ("estimate", "low", "high"))
    return f"{_number(est, signed)} [{_number(low, signed)}, {_number(high, signed)}]"


def evidence_table(evidence: Mapping[str, Any]) -> list[dict[str, str]]:
    """The suggestion's numbers, one row per outcome with its unit: the simulator's prediction for the
    campaign and its uplift over doing nothing and over what the shop does now, each with its
    10th-90th percentile interval ("—" where the evidence has no such figure)."""
    predicted = evidence.get("predicted") or {}
    uplift = evidence.get("uplift") or {}
    keys = [k for k in OUTCOME_UNITS if k in predicted or any(k in u for u in uplift.values())]
    keys += sorted(set(predicted) - set(keys))
    rows = []
    for key in keys:
        row = {
            "outcome": f"{key} ({OUTCOME_UNITS.get(key, '?')})",
            "predicted for this campaign": interval_text(predicted[key]) if key in predicted else "—",
        }
        for base, column in BASELINES.items():
            iv = (uplift.get(base) or {}).get(key)
            row[column] = interval_text(iv, signed=True) if iv else "—"
        rows.append(row)
    return rows


def ope_words(evidence: Mapping[str, Any]) -> str | None:
    """The off-policy estimate in words: its value and interval, the shop's own logged value next to
    it, and the coverage verdict with the effective sample size rounded (None without OPE)."""
    ope = ope_summary(evidence)
    if ope is None:
        return None
    text = (
        f"Off-policy estimate ({ope['estimator'].upper()}) of the policy's 30-day return: "
        f"{interval_text(ope)}"
    )
    if ope["behaviour"] is not None:
        text += f", against {_number(ope['behaviour'])} for what the shop does now (its logged value)"
    size = ""
    if ope["ess"] is not None:
        share = f", {ope['ess_share']:.0%} of the logged days" if ope["ess_share"] is not None else ""
        size = f" (effective sample size about {round(ope['ess']):,}{share})"
    if ope["covered"]:
        return text + f". Coverage: trusted{size}: the logs took this policy's actions often enough."
    return (
        text + f". Coverage: NOT trusted{size}: the logs rarely took this policy's actions, so the "
        "estimate may be far off; weigh the simulator's figures instead."
    )


def outcome_rows(view: SuggestionView) -> list[dict[str, Any]]:
    """After execution: each outcome that has come back next to its prediction (an empty list before)."""
    if not view.outcome:
        return []
    predicted = view.evidence.get("predicted") or {}
    listed = [k for k in OUTCOME_UNITS if k in view.outcome]
    rows = []
    for key in listed + sorted(set(view.outcome) - set(listed)):
        real = view.outcome[key]
        if not isinstance(real, int | float) or isinstance(real, bool) or not math.isfinite(real):
            continue
        iv = predicted.get(key)
        inside = None if iv is None else float(iv["low"]) <= float(real) <= float(iv["high"])
        rows.append(
            {
                "outcome": f"{key} ({OUTCOME_UNITS.get(key, '?')})",
                "actual": _number(float(real)),
                "predicted": interval_text(iv) if iv else "—",
                "inside the interval": "—" if inside is None else ("yes" if inside else "no"),
            }
        )
    return rows


def decision_block(view: SuggestionView, user_name: str, role: str) -> str | None:
    """Why this user sees no decision buttons on a pending suggestion (None when they may decide)."""
    if view.state != "pending":
        return None
    if not can_decide(role):
        return "Viewers cannot decide; a reviewer or approver will."
    if view.submitted_by == user_name:
        return "You proposed this suggestion, so someone else decides it (four eyes on every change)."
    return None


def ope_summary(evidence: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OPE estimate with its interval and coverage flag, or None when the evidence has none.

    ``covered`` says whether the estimator's diagnostics (``trusted``: enough effective sample size,
    support of the logged policy) let us believe the interval.
    """
    ope = evidence.get("ope")
    if not ope:
        return None
    ess = ope.get("ess")
    return {
        "estimator": str(ope.get("estimator", "?")),
        "estimate": float(ope.get("estimate", math.nan)),
        "low": float(ope.get("low", math.nan)),
        "high": float(ope.get("high", math.nan)),
        "covered": bool(ope.get("trusted", False)),
        "ess": float(ess) if ess is not None else None,
        "ess_share": float(ope["ess_share"]) if ope.get("ess_share") is not None else None,
        "behaviour": float(ope["behaviour"]) if ope.get("behaviour") is not None else None,
    }


# ----------------------------------------------------------------------------------------------------
# executed and results
# ----------------------------------------------------------------------------------------------------


def executed_rows(views: Sequence[SuggestionView]) -> list[dict[str, Any]]:
    """Executed (or executing / failed) suggestions with their market receipt and outcome so far."""
    rows = []
    for v in views:
        result = v.result or {}
        outcome = v.outcome or {}
        rows.append(
            {
                "id": v.id,
                "state": v.state,
                "action": action_summary(v.action),
                "decided by": v.decided_by,
                "executions": v.executions,
                "campaign": result.get("campaign_id"),
                "launched on day": result.get("day"),
                "key": result.get("key", v.idempotency_key),
                "outcome": ", ".join(f"{k}={float(x):.3g}" for k, x in outcome.items())
                or ("matures later" if v.state == "executed" else ""),
                "note": shown(v.reason) if v.state == "failed" else "",
            }
        )
    return rows


def executed_line(row: Mapping[str, Any]) -> str:
    """A readable line for an :func:`executed_rows` row: ``#3 executed: campaign 7 launched on day 2``."""
    launch = (
        f"campaign {row['campaign']} launched on day {row['launched on day']}"
        if row["campaign"] is not None
        else "not launched"
    )
    tail = row["outcome"] or row["note"]
    return f"#{row['id']} {row['state']}: {launch}" + (f"; {tail}" if tail else "")


def state_counts(views: Iterable[SuggestionView]) -> dict[str, int]:
    """How many suggestions are in each state (states with none left out), in :data:`STATES` order."""
    found: dict[str, int] = {}
    for v in views:
        found[v.state] = found.get(v.state, 0) + 1
    return {state: found[state] for state in STATES if state in found}


def results_rows(views: Iterable[SuggestionView]) -> list[dict[str, Any]]:
    """Predicted vs real: one row per (suggestion, metric) with both a prediction and a real outcome."""
    rows = []
    for v in views:
        if not v.outcome:
            continue
        for pred in evidence_rows(v.evidence):
            real = v.outcome.get(pred["metric"])
            if real is None:
                continue
            rows.append(
                {
                    "id": v.id,
                    "metric": pred["metric"],
                    "predicted": pred["estimate"],
                    "low": pred["low"],
                    "high": pred["high"],
                    "real": float(real),
                    "error": float(real) - pred["estimate"],
                    "inside interval": pred["low"] <= float(real) <= pred["high"],
                }
            )
    return rows


def exact_line(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per metric, the two ends of the line on which the prediction equals the real outcome, spanning
    every prediction, interval bound and real value of that metric (what the Results page draws dashed).

    >>> exact_line([{"metric": "gmv", "predicted": 5.0, "low": 3.0, "high": 8.0, "real": 9.0}])
    [{'metric': 'gmv', 'exact': 3.0}, {'metric': 'gmv', 'exact': 9.0}]
    """
    spans: dict[str, list[float]] = {}
    for row in rows:
        values = [float(row[k]) for k in ("predicted", "low", "high", "real")]
        spans.setdefault(str(row["metric"]), []).extend(values)
    return [{"metric": m, "exact": end} for m, v in spans.items() for end in (min(v), max(v))]


def results_summary(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per metric: how many, mean absolute error and the share of real outcomes inside the interval."""
    by_metric: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_metric.setdefault(str(row["metric"]), []).append(row)
    return [
        {
            "metric": metric,
            "n": len(group),
            "mean abs error": sum(abs(float(r["error"])) for r in group) / len(group),
            "coverage": sum(bool(r["inside interval"]) for r in group) / len(group),
        }
        for metric, group in sorted(by_metric.items())
    ]


# ----------------------------------------------------------------------------------------------------
# reports to rate
# ----------------------------------------------------------------------------------------------------


def report_card(report: Report) -> dict[str, str]:
    """What a reviewer sees of a report: heading, question and text; never the rubric score (no anchoring)."""
    return {
        "heading": f"Report #{report.id} ({report.task_id})",
        "question": report.question,
        "text": report.text,
    }


def own_rating_rows(ratings: Sequence[Rating], reports: Sequence[Report], rater: str) -> list[dict[str, Any]]:
    """``rater``'s ratings of reports, newest first: report id, task, score, comment, when."""
    by_subject = {report_subject(r.id): r for r in reports}
    rows = []
    for rating in reversed(ratings):
        report = by_subject.get(rating.subject)
        if rating.rater != rater or report is None:
            continue
        rows.append(
            {
                "report": report.id,
                "task": report.task_id,
                "score": rating.score,
                "comment": shown(rating.comment),
                "at": rating.at.strftime("%Y-%m-%d %H:%M UTC"),
            }
        )
    return rows


def rating_confirmation(report_id: int, score: float) -> str:
    """The line shown after a rating is stored.

    >>> rating_confirmation(3, 7)
    'Rated report #3: 7/10. Thank you.'
    """
    return f"Rated report #{report_id}: {score:g}/10. Thank you."


# ----------------------------------------------------------------------------------------------------
# audit
# ----------------------------------------------------------------------------------------------------


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True, default=str)


def audit_rows(rows: Sequence[AuditRow]) -> list[dict[str, Any]]:
    """The audit trail as flat rows (before/after as JSON text); actor and reason pass through
    :func:`~transferlab.human_review.text.shown`, so no control character reaches a screen or a CSV."""
    return [
        {
            "id": r.id,
            "suggestion": r.suggestion_id,
            "actor": shown(r.actor),
            "at": r.at.isoformat(),
            "from": r.from_state or "",
            "to": r.to_state,
            "reason": shown(r.reason),
            "before": _json(r.before),
            "after": _json(r.after),
        }
        for r in rows
    ]


def safe_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text starting with ``= + - @``, tab or CR gets a ``'``.

    Numbers pass as they are (their text is never a formula); so does other text.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def audit_csv(rows: Sequence[AuditRow]) -> bytes:
    """The audit trail as UTF-8 CSV, every text cell passed through :func:`safe_cell`."""
    flat = audit_rows(rows)
    columns = ["id", "suggestion", "actor", "at", "from", "to", "reason", "before", "after"]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    writer.writerow(columns)
    for row in flat:
        writer.writerow([safe_cell(row[c]) for c in columns])
    return out.getvalue().encode("utf-8")
