"""Suggestions, approval, exactly-once execution and delayed feedback (issue 7).

The logic lives here and never imports streamlit; ``transferlab.apps`` holds the pages. See
``docs/design/human_review_contract.md``.
"""

from transferlab.human_review.auth import ROLES, Role, hash_password, verify_password
from transferlab.human_review.schema import (
    ActionSpec,
    Evidence,
    Interval,
    Risk,
    SuggestionIn,
    classify_risk,
    effective_risk,
    parse_suggestion,
)
from transferlab.human_review.service import (
    STATES,
    TRANSITIONS,
    AuditRow,
    AuthError,
    Claim,
    InvalidTransition,
    NotFound,
    PermissionDenied,
    Rating,
    ReviewError,
    ReviewService,
    SuggestionError,
    SuggestionView,
    User,
)
from transferlab.human_review.store import ReviewStore, default_url

__all__ = [
    "ROLES",
    "STATES",
    "TRANSITIONS",
    "ActionSpec",
    "AuditRow",
    "AuthError",
    "Claim",
    "Evidence",
    "Interval",
    "InvalidTransition",
    "NotFound",
    "PermissionDenied",
    "Rating",
    "ReviewError",
    "ReviewService",
    "ReviewStore",
    "Risk",
    "Role",
    "SuggestionError",
    "SuggestionIn",
    "SuggestionView",
    "User",
    "classify_risk",
    "default_url",
    "effective_risk",
    "hash_password",
    "parse_suggestion",
    "verify_password",
]
