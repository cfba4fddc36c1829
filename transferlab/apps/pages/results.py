"""Results: predicted vs real outcomes of executed suggestions whose results came back."""

import altair as alt
import pandas as pd
import streamlit as st

from transferlab.apps.pages._common import signed_in
from transferlab.human_review import views

svc, user = signed_in()
st.title("Predicted vs real")
rows = views.results_rows(svc.list(user, state="feedback_received", sort="created"))
if not rows:
    st.info("No results yet: they arrive when executed campaigns mature.")
    st.stop()
frame = pd.DataFrame(rows)
points = (
    alt.Chart(frame)
    .mark_circle(size=80)
    .encode(x="predicted:Q", y="real:Q", color="metric:N", tooltip=["id", "metric", "predicted", "real"])
)
whiskers = alt.Chart(frame).mark_rule().encode(x="low:Q", x2="high:Q", y="real:Q", color="metric:N")
lo, hi = float(frame[["low", "real"]].min().min()), float(frame[["high", "real"]].max().max())
diagonal = alt.Chart(pd.DataFrame({"predicted": [lo, hi], "real": [lo, hi]})).mark_line(
    strokeDash=[4, 4], color="gray"
)
st.altair_chart(diagonal.encode(x="predicted:Q", y="real:Q") + whiskers + points, width="stretch")
st.dataframe(views.results_summary(rows), hide_index=True, width="stretch")
st.dataframe(frame, hide_index=True, width="stretch")
