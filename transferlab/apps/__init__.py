"""Streamlit pages; thin, the logic lives in the packages (issue 7)."""
