"""What every page of the review app needs: the service (one per database URL) and the signed-in user.

The session keeps only the user's name (:data:`USER_KEY`); the user, its role and every suggestion are
read from the store on each rerun, so a refresh or a second tab never sees stale state.
"""

from __future__ import annotations

import streamlit as st

from transferlab.human_review import views
from transferlab.human_review.service import ReviewService, User
from transferlab.human_review.store import ReviewStore, default_url

#: The only thing the app keeps in ``st.session_state``: the signed-in user's name.
USER_KEY = "user"
#: The suggestion page, as ``st.switch_page`` and ``st.page_link`` name it (relative to the entry).
SUGGESTION_PAGE = "pages/suggestion.py"


@st.cache_resource(show_spinner=False)
def service_for(url: str) -> ReviewService:
    """One :class:`ReviewService` per database URL, shared by the reruns and sessions of this server."""
    return ReviewService(ReviewStore(url))


def service() -> ReviewService:
    """The service on ``$TRANSFERLAB_REVIEW_DB`` (default: the SQLite file in the user data dir)."""
    return service_for(default_url())


def signed_in() -> tuple[ReviewService, User]:
    """The service and the signed-in user (re-read from the store); stops the page when nobody is."""
    svc = service()
    user = views.current_user(svc, st.session_state.get(USER_KEY))
    if user is None:
        st.session_state.pop(USER_KEY, None)
        st.warning("Sign in first.")
        st.stop()
    return svc, user
