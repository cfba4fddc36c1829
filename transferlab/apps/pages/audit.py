"""Audit log: every transition (who, when, before/after, why), and a spreadsheet-safe CSV export."""

import streamlit as st

from transferlab.apps.pages._common import signed_in
from transferlab.human_review import views
from transferlab.human_review.service import ReviewError

svc, user = signed_in()
st.title("Audit log")
only = st.number_input("Suggestion id (0: all)", min_value=0, step=1, key="audit_id")
try:
    entries = svc.audit(user, int(only) or None)
except ReviewError as e:
    st.error(str(e))
    st.stop()
st.dataframe(views.audit_rows(entries), hide_index=True, width="stretch")
st.download_button(
    "Download CSV", views.audit_csv(entries), file_name="audit.csv", mime="text/csv", key="audit_csv"
)
