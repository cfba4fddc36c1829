"""Experiments: runs of one experiment side by side, from ``$TRANSFERLAB_RUNS_ROOT``."""

import os
from pathlib import Path

import streamlit as st

from transferlab.apps.pages._common import signed_in
from transferlab.platform import run_compare as rc

signed_in()
st.title("Experiments")
root = Path(os.environ.get("TRANSFERLAB_RUNS_ROOT", "runs"))
names = rc.experiments(root)
if not names:
    st.info(
        f"No runs under `{root}` (set `TRANSFERLAB_RUNS_ROOT` to look elsewhere). Make some with "
        f"`transferlab demo --runs-root {root}` or `transferlab compare --preset quick --runs-root {root}`."
    )
    st.stop()

experiment = st.selectbox("Experiment", names, key="exp_experiment")
runs = {info.run_id: info for info in rc.list_runs(root, experiment)}
chosen = st.multiselect(
    "Runs (status, created UTC, seed)",
    list(runs),
    default=list(runs)[:4],
    format_func=lambda run_id: rc.run_label(runs[run_id]),
    key=f"exp_runs_{experiment}",
)
if not chosen:
    st.info("Pick one or more runs to see them side by side.")
    st.stop()
try:
    comparison = rc.compare([runs[r] for r in chosen])
except (OSError, ValueError) as err:
    st.error(str(err))
    st.stop()

st.subheader("Config keys that differ")
if comparison.differ:
    st.dataframe(rc.config_frame(comparison))
st.caption(f"{len(comparison.differ)} differ; {comparison.n_equal} equal in every selected run (hidden).")

st.subheader("Metrics: last value, its step, min and max")
keys = comparison.metric_keys
if keys:
    st.dataframe(rc.metrics_frame(comparison), hide_index=True)
    first = rc.default_metric(keys)
    metric = st.selectbox(
        "Metric over steps", keys, index=keys.index(first) if first else 0, key="exp_metric"
    )
    st.line_chart(rc.curves(comparison, metric), x_label="step", y_label=metric)
else:
    st.caption("The selected runs logged no metrics.")

for info, label in zip(comparison.infos, comparison.labels, strict=True):
    try:
        report, result = rc.read_report(info.dir), rc.read_result(info.dir)
    except (OSError, ValueError) as err:
        st.warning(str(err))
        continue
    if report is None and result is None:
        continue
    st.subheader(f"{label}: report")
    if report is not None:
        with st.container(border=True):
            st.markdown(report)  # our own generated Markdown (transferlab compare)
    if result is not None:
        with st.expander("result.json"):
            st.json(result, expanded=False)
