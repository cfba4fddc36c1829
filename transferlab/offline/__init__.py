"""Offline RL on logs, off-policy evaluation and coverage diagnostics.

d3rlpy imports the legacy ``gym`` package, which prints "Gym has been unmaintained since 2022 ..." on
stderr when imported (a print, not a warning: no filter or environment variable turns it off). Every
d3rlpy import of ours is in this package, so importing it mutes that one import, whoever does it
first; nothing is imported now, so the CLI stays light.
"""

import contextlib
import io
from collections.abc import Callable

from transferlab.platform.import_hooks import around_first_import


def _without_gym_notice(execute: Callable[[], None]) -> None:
    with contextlib.redirect_stderr(io.StringIO()):
        execute()


around_first_import("gym", _without_gym_notice)
