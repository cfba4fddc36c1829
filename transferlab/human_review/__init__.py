"""The human review workflow: suggestions, approval, exactly-once execution and delayed feedback.

The logic lives here and never imports streamlit; ``transferlab.apps`` holds the pages. See
``docs/design/human_review_contract.md``.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Lazy re-exports: importing a submodule (e.g. the light CLI) must not load SQLAlchemy and pydantic.
_EXPORTS: dict[str, str] = {
    "ActionSpec": "schema",
    "AuditRow": "service",
    "AuthError": "service",
    "Claim": "service",
    "Evidence": "schema",
    "Interval": "schema",
    "InvalidTransition": "service",
    "NotFound": "service",
    "PermissionDenied": "service",
    "ROLES": "auth",
    "Rating": "service",
    "ReviewError": "service",
    "ReviewService": "service",
    "ReviewStore": "store",
    "Risk": "schema",
    "Role": "auth",
    "STATES": "service",
    "SuggestionError": "service",
    "SuggestionIn": "schema",
    "SuggestionView": "service",
    "TRANSITIONS": "service",
    "User": "service",
    "classify_risk": "schema",
    "default_url": "store",
    "effective_risk": "schema",
    "hash_password": "auth",
    "parse_suggestion": "schema",
    "verify_password": "auth",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"transferlab.human_review.{module}"), name)


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
