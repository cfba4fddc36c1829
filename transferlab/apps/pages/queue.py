"""Queue: filter and sort suggestions, see how many wait, open one, approve low/medium ones together."""

from datetime import UTC, datetime

import streamlit as st

from transferlab.apps.pages._common import SUGGESTION_PAGE, signed_in
from transferlab.human_review import views

svc, user = signed_in()
st.title("Review queue")
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
    picked = st.multiselect(
        "Low and medium risk suggestions submitted by others",
        candidates,
        format_func=lambda i: f"#{i}",
        key="batch_pick",
    )
    if st.button("Approve selected", key="batch_approve", disabled=not picked):
        for sid, outcome in svc.approve_batch(user, picked).items():
            if outcome == "approved":
                st.success(f"#{sid} approved")
            else:
                st.error(f"#{sid} {outcome}")
