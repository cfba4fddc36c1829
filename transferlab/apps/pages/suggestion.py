"""Suggestion: the action, reasoning (as plain text), risk, the evidence table and charts, the decision,
and once executed the actual outcome next to the prediction."""

import json

import altair as alt
import pandas as pd
import streamlit as st

from transferlab.apps.pages._common import signed_in
from transferlab.human_review import views
from transferlab.human_review.service import ReviewError
from transferlab.human_review.text import shown

svc, user = signed_in()
st.title("Suggestion")
ids = [v.id for v in svc.list(user, sort="created")]
if not ids:
    st.info("No suggestions yet.")
    st.stop()
wanted = views.parse_id(st.query_params.get("id"))
sid = st.selectbox(
    "Suggestion",
    ids,
    index=ids.index(wanted) if wanted in ids else len(ids) - 1,
    format_func=lambda i: f"#{i}",
)
st.query_params["id"] = str(sid)  # a refresh reopens the same suggestion
before = svc.get(user, sid)
details = st.container()

# A click from a page rendered while pending (a double click, a second tab) still reaches the service,
# which refuses a second decision: the panel stays for that rerun so its message is shown.
clicked = any(st.session_state.get(f"{k}_{sid}") for k in ("approve", "reject", "modify"))
blocked = views.decision_block(before, user.name, user.role)
if (before.state == "pending" or clicked) and blocked is None and views.can_decide(user.role):
    st.subheader("Decision")
    reason = st.text_input("Reason (required to reject)", key=f"reason_{sid}")
    with st.expander("Modify the action", expanded=False):
        act = before.action
        new = dict(act)
        new["discount"] = st.number_input(
            "discount", 0.0, 0.5, float(act["discount"]), 0.01, key=f"m_discount_{sid}"
        )
        new["push_hour"] = int(
            st.number_input("push hour", 0, 23, int(act["push_hour"]), key=f"m_hour_{sid}")
        )
        new["segment"] = st.selectbox(
            "segment", views.SEGMENT_CHOICES, views.SEGMENT_CHOICES.index(act["segment"]), key=f"m_seg_{sid}"
        )
        new["budget"] = st.number_input(
            "budget", 0.0, 10000.0, float(act["budget"]), 10.0, key=f"m_budget_{sid}"
        )
        new["category"] = st.selectbox(
            "category",
            views.CATEGORY_CHOICES,
            views.CATEGORY_CHOICES.index(act.get("category", "all")),
            key=f"m_cat_{sid}",
        )
        diff = views.action_diff(act, new)
        if diff:
            st.caption("Changes (before → after)")
            st.table(pd.DataFrame(diff).astype(str))
        else:
            st.caption("Change a field to see the diff.")
        modify = st.button("Approve with these changes", key=f"modify_{sid}", disabled=not diff)
    approve_col, reject_col = st.columns(2)
    approve = approve_col.button("Approve", key=f"approve_{sid}", type="primary")
    reject = reject_col.button("Reject", key=f"reject_{sid}")
    try:
        if approve:
            done = svc.decide(user, sid, "approve", reason=reason or None)
            st.success(f"#{sid} is now {done.state}")
        elif reject:
            done = svc.decide(user, sid, "reject", reason=reason)
            st.success(f"#{sid} is now {done.state}")
        elif modify:
            done = svc.decide(user, sid, "modify", reason=reason or None, action=new)
            st.success(f"#{sid} is now {done.state} (risk {done.risk})")
    except ReviewError as e:
        st.error(str(e))
elif blocked is not None:
    st.info(blocked)

v = svc.get(user, sid)  # after any decision: what the store says now
with details:
    st.subheader(f"#{v.id}: {v.state}")
    risk_col, claim_col, conf_col = st.columns(3)
    risk_col.metric("Risk (ours)", v.risk)
    claim_col.metric("Risk (proposer's claim)", v.claimed_risk)
    conf_col.metric("Confidence", f"{v.confidence:.0%}")
    when = f"; expires {v.expires_at:%Y-%m-%d %H:%M} UTC" if v.state == "pending" else ""
    st.text(f"submitted by {v.submitted_by}{when}")
    if v.decided_by:
        st.text(f"decided by {shown(v.decided_by)}" + (f": {shown(v.reason)}" if v.reason else ""))
    outcome = views.outcome_rows(v)
    if outcome:
        st.subheader("Outcome: actual next to the prediction")
        st.dataframe(outcome, hide_index=True, width="stretch")
    elif v.state in ("executing", "executed"):
        st.caption("Executed; the results come back as the campaign matures (30 days).")
    st.subheader("Evidence")
    table = views.evidence_table(v.evidence)
    if table:
        st.caption(
            "The learned simulator's figures over the campaign's window: mean and 10th-90th percentile "
            "over simulated markets; uplifts are paired on the same markets."
        )
        st.dataframe(table, hide_index=True, width="stretch")
    else:
        st.caption("No predicted outcomes.")
    ope = views.ope_summary(v.evidence)
    if ope is not None:
        show = st.success if ope["covered"] else st.warning
        show(views.ope_words(v.evidence))
    source = [f"{k} {v.evidence[k]}" for k in ("policy", "run_dir") if v.evidence.get(k)]
    if source:
        st.caption("from " + ", ".join(source).replace("run_dir", "run"))
    left, right = st.columns(2)
    left.subheader("Action")
    left.code(json.dumps(v.action, indent=2), language="json")
    if v.original_action is not None:
        left.caption("Modified: the proposer's action → the one to execute")
        left.table(pd.DataFrame(views.action_diff(v.original_action, v.action)).astype(str))
    right.subheader("Reasoning")
    right.text(v.reasoning)
    rows = views.evidence_rows(v.evidence)
    if rows:
        st.subheader("Predicted outcomes, one scale each")
        frame = pd.DataFrame(rows)
        base = alt.Chart()
        bars = base.mark_bar().encode(x=alt.X("estimate:Q", title=None))
        whiskers = base.mark_errorbar(ticks=True).encode(x=alt.X("low:Q", title=None), x2="high:Q")
        chart = (
            alt.layer(bars, whiskers, data=frame)
            .properties(width=180, height=40)
            .facet(facet=alt.Facet("metric:N", title=None), columns=4)
            .resolve_scale(x="independent", y="independent")
        )
        st.altair_chart(chart)
