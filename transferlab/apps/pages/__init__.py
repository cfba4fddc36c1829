"""The review app's pages, one short script each (registered by ``review_app.py`` with st.navigation)."""
