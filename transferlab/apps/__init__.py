"""Streamlit apps; thin, the logic lives in the packages.

``review_app.py`` is the human review app: ``streamlit run transferlab/apps/review_app.py``.
"""

from pathlib import Path

#: The review app's entry script (what ``streamlit run`` is given).
REVIEW_APP = Path(__file__).resolve().parent / "review_app.py"
