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
st.caption("One panel per outcome, each on its own scale; on the dashed line the prediction was exact.")
layers = pd.concat([frame.assign(kind="result"), pd.DataFrame(views.exact_line(rows)).assign(kind="exact")])
base = alt.Chart()
points = (
    base.transform_filter(alt.datum.kind == "result")
    .mark_circle(size=80)
    .encode(
        x=alt.X("predicted:Q", title="predicted"),
        y=alt.Y("real:Q", title="real"),
        tooltip=["id", "metric", "predicted", "low", "high", "real"],
    )
)
results = base.transform_filter(alt.datum.kind == "result")
whiskers = results.mark_rule().encode(x="low:Q", x2="high:Q", y="real:Q")
exact = base.transform_filter(alt.datum.kind == "exact")
diagonal = exact.mark_line(strokeDash=[4, 4], color="gray").encode(x="exact:Q", y="exact:Q")
chart = (
    alt.layer(diagonal, whiskers, points, data=layers)
    .properties(width=220, height=200)
    .facet(facet=alt.Facet("metric:N", title=None), columns=3)
    .resolve_scale(x="independent", y="independent")
)
st.altair_chart(chart)
st.dataframe(views.results_summary(rows), hide_index=True, width="stretch")
st.dataframe(frame, hide_index=True, width="stretch")
