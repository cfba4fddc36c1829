"""The data platform an ops analyst queries: deterministic pandas queries over a scenario's logs.

Tools (the names the founding design note gives its ops assistant, plus ``campaign_analysis`` for
the campaign family), called as JSON objects in the coding environment's form,
``{"action": "<tool>", "<arg>": "<string>", ...}``:

=======================  ===================================  =========================================
tool                     arguments                            returns
=======================  ===================================  =========================================
query_sales_data         category; window or time, compare    orders, GMV, change vs the window before,
                         (all optional)                       weekly orders; ``compare: last_year``
                                                              adds the same windows a year earlier
analyze_user_feedback    filter, category (both optional)     complaints, returns, late deliveries,
                                                              delivery complaints (per category
                                                              when no category is given)
check_inventory          category                             stock cover now, stock-out days
competitor_analysis      category or platform                 competitor price index, change, cut days
campaign_analysis        category (optional)                  campaigns: discount, orders, margin
generate_report          text                                 ends the episode
=======================  ===================================  =========================================

Windows accept ``"last 30 days"``, ``"30d"``, ``"4 weeks"`` or ``"近30天"``; categories accept the
English names and ``女装``/``男装``/``鞋``/``配饰``; ``compare`` accepts ``"previous"`` (the default) and
``"last_year"`` (``"yoy"``, ``"去年"``, ``"同比"``). Bad arguments raise :class:`ToolError`, which the
environment turns into an error observation. Results are ``key: value`` lines (see :func:`parse_fields`).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from transferlab.platform.tools import ToolCall, ToolError, parse_tool_call
from transferlab.simulator.ops.scenarios import Scenario, campaign_summary, window_sales
from transferlab.simulator.vocabulary import CATEGORIES

TOOLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # name: (required, optional)
    "query_sales_data": (("category",), ("window", "time", "compare")),
    "analyze_user_feedback": ((), ("filter", "category", "window", "time")),
    "check_inventory": (("category",), ("window", "time")),
    "competitor_analysis": ((), ("category", "platform", "window", "time")),
    "campaign_analysis": ((), ("category", "window", "time")),
    "generate_report": (("text",), ()),
}
#: The evidence source each cause's claims rest on (the "check before reporting" component).
EVIDENCE_SOURCE: dict[str, str] = {
    "stock_out": "check_inventory",
    "shipping_delays": "analyze_user_feedback",
    "competitor_price_cut": "competitor_analysis",
    "failed_campaign": "campaign_analysis",
    "seasonality": "query_sales_data",
}
CATEGORY_ALIASES: dict[str, str] = {
    "women": "womenswear", "women's wear": "womenswear", "womens wear": "womenswear", "女装": "womenswear",
    "men": "menswear", "men's wear": "menswear", "mens wear": "menswear", "男装": "menswear",
    "shoe": "shoes", "鞋": "shoes", "鞋类": "shoes", "鞋子": "shoes",
    "accessory": "accessories", "配饰": "accessories",
}  # fmt: skip
COMPARE_LAST_YEAR = ("last_year", "last year", "yoy", "year over year", "去年", "同比", "去年同期")
COMPARE_PREVIOUS = ("previous", "prev", "window before", "环比", "上期")
YEAR = 365
NEGATIVE_FILTERS = ("negative", "complaint", "complaints", "bad", "差评", "投诉", "负面")


def parse_action(text: str) -> ToolCall:
    """Parse one JSON tool call; raise ToolError naming what is wrong."""
    return parse_tool_call(text, TOOLS, '{"action": "query_sales_data", "category": "shoes"}')


def parse_fields(text: str) -> dict[str, str]:
    """The ``key: value`` lines of a tool result."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_window(text: str | None, default: int = 30) -> int:
    """Days in ``"last 30 days"``, ``"30d"``, ``"4 weeks"``, ``"近30天"``, ``"1 month"``."""
    if text is None or not text.strip():
        return default
    m = re.search(r"(\d+)\s*(days?|d|天|日|weeks?|w|周|months?|个月|月)?", text.strip().lower())
    if not m:
        raise ToolError(f"cannot read the window {text!r}; use e.g. 'last 30 days' or '近30天'")
    n, unit = int(m.group(1)), m.group(2) or "d"
    days = n * (7 if unit[0] in "w周" else 30 if unit[0] in "m个月" else 1)
    if not 1 <= days <= 60:
        raise ToolError(f"window {text!r} is {days} days; the platform keeps 1 to 60 days")
    return days


def parse_compare(text: str | None) -> bool:
    """True for a last-year comparison (``"last_year"``, ``"yoy"``, ``"去年"``), False for the default."""
    name = (text or "previous").strip().lower().replace("-", "_")
    if name in COMPARE_LAST_YEAR or name.replace("_", " ") in COMPARE_LAST_YEAR:
        return True
    if name in COMPARE_PREVIOUS or not name:
        return False
    raise ToolError(f"unknown compare {text!r}; use 'previous' (the window before) or 'last_year'")


def parse_category(text: str | None) -> str:
    """A category name (English or Chinese alias); ToolError otherwise."""
    name = (text or "").strip().lower()
    name = CATEGORY_ALIASES.get(name, name)
    if name not in CATEGORIES:
        raise ToolError(f"unknown category {text!r}; categories: {', '.join(CATEGORIES)}")
    return name


class DataPlatform:
    """Deterministic queries over one scenario's logs; ``call`` runs a parsed tool call."""

    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.days = scenario.task.days

    def call(self, call: ToolCall) -> str:
        a = call.args
        window = parse_window(a.get("window", a.get("time")))
        if call.action == "query_sales_data":
            sales_cat = parse_category(a["category"])
            if parse_compare(a.get("compare")):
                return self.sales_vs_last_year(sales_cat, window)
            return self.query_sales_data(sales_cat, window)
        if call.action == "analyze_user_feedback":
            cat = parse_category(a["category"]) if "category" in a else None
            return self.analyze_user_feedback(a.get("filter", "all"), cat, window)
        if call.action == "check_inventory":
            return self.check_inventory(parse_category(a["category"]), window)
        if call.action == "competitor_analysis":
            if "category" not in a and "platform" not in a:
                raise ToolError("competitor_analysis needs 'category' or 'platform'")
            cat = parse_category(a["category"]) if "category" in a else None
            return self.competitor_analysis(cat, window)
        if call.action == "campaign_analysis":
            cat = parse_category(a["category"]) if "category" in a else None
            return self.campaign_analysis(cat, window)
        raise ToolError(f"{call.action} is not a query")

    # -- queries ------------------------------------------------------------------------------------

    def query_sales_data(self, category: str, window: int) -> str:
        s = window_sales(self.s.events, category, self.days, window)
        p = self.s.events
        p = p[(p["event"] == "purchase") & (p["category"] == CATEGORIES.index(category))]
        p = p[p["day"] >= self.days - 2 * window]
        weeks = ((p["day"] - (self.days - 2 * window)) // 7).value_counts().sort_index()
        return _lines(
            f"sales of {category}, last {window} days vs the {window} days before",
            orders=int(s["orders"]),
            orders_prev=int(s["orders_prev"]),
            orders_change_pct=s["orders_change_pct"],
            gmv=round(s["gmv"], 2),
            gmv_prev=round(s["gmv_prev"], 2),
            gmv_change_pct=s["gmv_change_pct"],
            weekly_orders=" ".join(str(int(v)) for v in weeks.to_numpy()),
        )

    def sales_vs_last_year(self, category: str, window: int) -> str:
        """This window and the one before, and the same two windows a year earlier."""
        if self.days < YEAR + 2 * window:
            raise ToolError(
                f"the platform holds {self.days} days of sales; comparing {window} days with last year "
                f"needs {YEAR + 2 * window}"
            )
        now = window_sales(self.s.events, category, self.days, window)
        last = window_sales(self.s.events, category, self.days - YEAR, window)
        return _lines(
            f"sales of {category}, last {window} days and the same {window} days last year "
            f"(each vs the {window} days before it)",
            orders=int(now["orders"]),
            orders_prev=int(now["orders_prev"]),
            orders_change_pct=now["orders_change_pct"],
            gmv_change_pct=now["gmv_change_pct"],
            last_year_orders=int(last["orders"]),
            last_year_orders_prev=int(last["orders_prev"]),
            last_year_orders_change_pct=last["orders_change_pct"],
            last_year_gmv_change_pct=last["gmv_change_pct"],
            orders_vs_last_year_pct=round(100.0 * (now["orders"] / last["orders"] - 1.0), 1)
            if last["orders"] > 0
            else 0.0,
        )

    def analyze_user_feedback(self, filter: str, category: str | None, window: int) -> str:
        f = filter.strip().lower()
        if f not in (*NEGATIVE_FILTERS, "all", "returns", "退货", "late", "物流"):
            raise ToolError(f"unknown filter {filter!r}; use 'negative' (差评), 'returns' or 'all'")
        ev = self._recent(category, window)
        prev = self._recent(category, window, before=True)

        def count(frame: pd.DataFrame, kind: str) -> int:
            return int((frame["event"] == kind).sum())

        fields: dict[str, Any] = {}
        for kind, key in (
            ("complaint", "complaints"),
            ("late_delivery", "late_deliveries"),
            ("return", "returns"),
        ):
            fields[key], fields[f"{key}_prev"] = count(ev, kind), count(prev, kind)
        # every complaint in the shop's logs is about an order that arrived late
        fields["delivery_complaints"], fields["delivery_complaints_prev"] = (
            fields["complaints"],
            fields["complaints_prev"],
        )
        fields["late_delivery_rate_pct"] = _rate(fields["late_deliveries"], count(ev, "delivery"))
        fields["late_delivery_rate_pct_prev"] = _rate(fields["late_deliveries_prev"], count(prev, "delivery"))
        if category is None:
            for k, name in enumerate(CATEGORIES):
                mine = ev[ev["category"] == k]
                fields[f"{name}_late_deliveries"] = count(mine, "late_delivery")
                fields[f"{name}_delivery_complaints"] = count(mine, "complaint")
        return _lines(
            f"customer feedback ({f}) for {category or 'all categories'}, last {window} days", **fields
        )

    def check_inventory(self, category: str, window: int) -> str:
        m = self.s.market
        col = m[f"stock_days_{category}"]
        recent = col[m["day"] >= self.days - window]
        prev = col[(m["day"] >= self.days - 2 * window) & (m["day"] < self.days - window)]
        return _lines(
            f"inventory of {category}, last {window} days",
            stock_cover_days_now=round(float(col.iloc[-1]), 1),
            stock_out_days=int((recent <= 0).sum()),
            stock_out_days_prev=int((prev <= 0).sum()),
            min_stock_cover_days=round(float(recent.min()), 1),
        )

    def competitor_analysis(self, category: str | None, window: int) -> str:
        m = self.s.market
        cats = [category] if category else list(CATEGORIES)
        fields: dict[str, Any] = {}
        for c in cats:
            col = m[f"competitor_{c}"]
            now = float(col[m["day"] >= self.days - window].mean())
            before = float(col[(m["day"] >= self.days - 2 * window) & (m["day"] < self.days - window)].mean())
            prefix = "" if category else f"{c}_"
            fields[f"{prefix}competitor_index"] = round(now, 2)
            fields[f"{prefix}competitor_index_prev"] = round(before, 2)
            fields[f"{prefix}competitor_change_pct"] = round(100 * (now / before - 1), 1)
            fields[f"{prefix}price_cut_days"] = int((col[m["day"] >= self.days - window] < 0.9).sum())
        head = "competitor price index (1 = our price level; lower = rival cheaper)"
        return _lines(f"{head}, last {window} days vs the {window} before", **fields)

    def campaign_analysis(self, category: str | None, window: int) -> str:
        cats = [category] if category else list(CATEGORIES)
        lines = [f"campaigns in the last {2 * window} days (margin = paid - cost of goods - push cost)"]
        n = 0
        for c in cats:
            for camp in campaign_summary(self.s.events, self.s.campaigns, c):
                if camp["day"] < self.days - 2 * window:
                    continue
                n += 1
                ago = int(self.days - camp["day"])
                lines += [
                    f"campaign {int(camp['campaign'])} on {c}, launched {ago} days ago:",
                    f"campaign_discount_pct: {camp['discount_pct']}",
                    f"campaign_orders: {int(camp['orders'])}",
                    f"campaign_gmv: {camp['gmv']}",
                    f"campaign_margin: {camp['margin']}",
                ]
        if n == 0:
            lines.append("campaigns: 0")
        return "\n".join(lines)

    def _recent(self, category: str | None, window: int, before: bool = False) -> pd.DataFrame:
        ev = self.s.events
        lo = self.days - (2 if before else 1) * window
        ev = ev[(ev["day"] >= lo) & (ev["day"] < lo + window)]
        return ev if category is None else ev[ev["category"] == CATEGORIES.index(category)]


def _rate(part: int, whole: int) -> float:
    return round(100 * part / max(whole, 1), 1)


def _lines(title: str, **fields: Any) -> str:
    return "\n".join([title, *(f"{k}: {v}" for k, v in fields.items())])
