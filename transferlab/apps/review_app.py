"""The human review app: sign in, then the pages your role may see.

Run it with ``streamlit run transferlab/apps/review_app.py``; it reads the database URL from
``$TRANSFERLAB_REVIEW_DB`` (default: a SQLite file in the user data dir). Pages are registered once per
run with ``st.navigation``; what a role may *do* is enforced by the service, the pages only hide it.
"""

from pathlib import Path

import streamlit as st

from transferlab.apps.pages._common import USER_KEY, service
from transferlab.human_review import views
from transferlab.human_review.service import AuthError

PAGES_DIR = Path(__file__).resolve().parent / "pages"
TITLES = {
    "queue": ("Queue", ":material/inbox:"),
    "suggestion": ("Suggestion", ":material/fact_check:"),
    "executed": ("Executed", ":material/rocket_launch:"),
    "audit": ("Audit log", ":material/history:"),
    "results": ("Results", ":material/insights:"),
    "reports": ("Rate reports", ":material/grading:"),
    "experiments": ("Experiments", ":material/science:"),
}
#: Pages every signed-in role sees, after the role's review pages.
ALL_ROLES_PAGES = ["experiments"]


def sign_in() -> None:
    """The sign-in form; on success only the user name goes into the session."""
    st.title("Review: sign in")
    with st.form("sign_in"):
        name = st.text_input("Name", key="sign_in_name")
        password = st.text_input("Password", type="password", key="sign_in_password")
        submitted = st.form_submit_button("Sign in")
    if submitted:
        try:
            user = service().authenticate(name, password)
        except AuthError as e:
            st.error(str(e))
        else:
            st.session_state[USER_KEY] = user.name
            st.rerun()


st.set_page_config(page_title="transferlab review", page_icon=":material/fact_check:", layout="wide")
user = views.current_user(service(), st.session_state.get(USER_KEY))
if user is None:
    pages = [st.Page(sign_in, title="Sign in", url_path="sign_in")]
else:
    st.sidebar.text(f"{user.name} ({user.role})")
    if st.sidebar.button("Sign out", key="sign_out"):
        st.session_state.pop(USER_KEY, None)
        st.rerun()
    pages = [
        st.Page(PAGES_DIR / f"{name}.py", title=TITLES[name][0], icon=TITLES[name][1], default=i == 0)
        for i, name in enumerate([*views.pages_for(user.role), *ALL_ROLES_PAGES])
    ]
st.navigation(pages).run()
