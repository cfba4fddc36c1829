"""Queue: filter and sort suggestions, see how many wait, open one, approve low/medium ones together."""

from datetime import UTC, datetime

import streamlit as st

from transferlab.apps.pages._common import SUGGESTION_PAGE, signed_in
from transferlab.human_review import views

svc, user = signed_in()
st.title("Review queue")
for kind, message in st.session_state.pop("queue_flash", []):  # what the last batch decision did
    (st.success if kind == "success" else st.error)(message)
st.metric("Pending", svc.pending_count(user))

left, middle, right = st.columns(3)
state = left.selectbox("State", views.QUEUE_STATES, key="queue_state")
risk = middle.selectbox("Risk", views.RISK_FILTERS, key="queue_risk")
sort = right.selectbox("Sort by", views.SORTS, key="queue_sort", help="risk: high first, then soonest expiry")
items = svc.list(user, **views.queue_filters(state, risk, sort))
if not items:
    st.info("No suggestions match these filters.")
    st.stop()

st.dataframe(views.queue_rows(items, datetime.now(UTC)), hide_index=True, width="stretch")
chosen = st.selectbox("Suggestion", [v.id for v in items], format_func=lambda i: f"#{i}", key="queue_pick")
if st.button("Open suggestion", key="queue_open"):
    st.switch_page(SUGGESTION_PAGE, query_params={"id": str(chosen)})

if views.can_decide(user.role):
    st.subheader("Batch approval")
    candidates = views.batch_candidates(items, user.name)
    by_id = {v.id: v for v in items}
    picked = st.multiselect(
        "Low and medium risk suggestions submitted by others",
        candidates,
        format_func=lambda i: views.batch_label(by_id[i]),
        key="batch_pick",
    )
    if picked:
        st.dataframe(views.batch_rows([by_id[i] for i in picked]), hide_index=True, width="stretch")
    if st.button("Approve selected", key="batch_approve", disabled=not picked):
        outcomes = svc.approve_batch(user, picked)
        st.session_state["queue_flash"] = [
            ("success", f"#{sid} approved") if outcome == "approved" else ("error", f"#{sid} {outcome}")
            for sid, outcome in outcomes.items()
        ]
        st.rerun()  # the count, the table and the picker as the store has them now
