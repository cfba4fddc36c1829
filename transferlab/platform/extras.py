"""Optional parts of the install: the heavy libraries one command each needs, and the error naming them.

``pip install transferlab`` is the core (train, simulate, compare, review from the command line); the
extras add what one feature needs: ``ray`` (``--rollout-backend ray``), ``app`` (the review app),
``pg`` (a PostgreSQL review store), ``docker`` (the docker sandbox backend), ``metrics`` (TensorBoard
and MLflow sinks); ``all`` is every one of them, and ``make install`` installs ``all``.

>>> require_extra("json", "app", "the review app")  # present: nothing happens
>>> try:
...     require_extra("no_such_module", "app", "the app")
... except MissingExtra as err:
...     print(err)
the app needs the 'app' extra (no_such_module is not installed): pip install 'transferlab[app]'
"""

from __future__ import annotations

import importlib.util

EXTRAS: dict[str, tuple[str, ...]] = {
    "ray": ("ray",),
    "app": ("streamlit", "altair"),
    "pg": ("psycopg",),
    "docker": ("docker",),
    "metrics": ("tensorboard", "mlflow"),
}
"""Extra -> the modules it installs (pyproject.toml's optional dependencies)."""


class MissingExtra(ValueError):
    """A feature's optional dependency is not installed; the message names the extra to install."""


def require_extra(module: str, extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` unless ``module`` can be imported (``what`` names the feature)."""
    if importlib.util.find_spec(module) is None:
        install = f"pip install 'transferlab[{extra}]'"
        raise MissingExtra(f"{what} needs the {extra!r} extra ({module} is not installed): {install}")
