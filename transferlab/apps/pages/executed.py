"""Executed: launched suggestions, their market receipts, and their outcomes as they mature."""

import streamlit as st

from transferlab.apps.pages._common import signed_in
from transferlab.human_review import views

svc, user = signed_in()
st.title("Executed")
items = sorted(
    (v for state in views.EXECUTED_STATES for v in svc.list(user, state=state)), key=lambda v: v.id
)
if not items:
    st.info("Nothing executed yet: approved suggestions run when the worker picks them up.")
    st.stop()
for column, (state, count) in zip(st.columns(4), views.state_counts(items).items(), strict=False):
    column.metric(state, count)
rows = views.executed_rows(items)
st.dataframe(rows, hide_index=True, width="stretch")
st.subheader("Latest")
for row in rows[::-1][:10]:
    st.text(views.executed_line(row))
st.caption("Outcomes come back 7-30 market days after launch, recorded by the worker as feedback.")
