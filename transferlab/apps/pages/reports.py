"""Rate reports: ops analysis reports this reviewer has not rated yet, each rated 0-10 with a comment."""

import streamlit as st

from transferlab.apps.pages._common import signed_in
from transferlab.human_review import views
from transferlab.human_review.service import ReviewError, ReviewService, User, report_subject

SHOWN = 10  # reports on the page at once
svc, user = signed_in()
st.title("Rate reports")
if not views.can_decide(user.role):
    st.warning("Rating reports needs the reviewer role (ask an admin).")
    st.stop()


def rate(service: ReviewService, rater: User, report_id: int) -> None:
    """The submit button's callback: runs before the rerun, so the list below no longer has the report."""
    score = st.session_state[f"score_{report_id}"]
    comment = st.session_state[f"comment_{report_id}"]
    try:
        service.rate(rater, report_subject(report_id), score, comment)
    except ReviewError as e:
        st.error(str(e))
    else:
        st.success(views.rating_confirmation(report_id, score))


st.caption("Judge each report as an expert would: is the cause right, and does it show the numbers? 0-10.")
todo = svc.reports(user, unrated_by=user)
if not todo:
    st.info("Nothing left to rate. New reports come from `transferlab review reports queue`.")
for report in todo[:SHOWN]:
    card = views.report_card(report)
    with st.container(border=True):
        st.subheader(card["heading"])
        st.text(card["question"])
        st.text(card["text"])
        st.slider("Score", 0, 10, 5, key=f"score_{report.id}")
        st.text_area("Comment", key=f"comment_{report.id}")
        st.button("Submit rating", key=f"rate_{report.id}", on_click=rate, args=(svc, user, report.id))
if len(todo) > SHOWN:
    st.caption(f"{len(todo) - SHOWN} more after these.")
st.subheader("Your ratings")
mine = views.own_rating_rows(svc.ratings(user), svc.reports(user), user.name)
if mine:
    st.dataframe(mine, hide_index=True, width="stretch")
else:
    st.caption("None yet.")
