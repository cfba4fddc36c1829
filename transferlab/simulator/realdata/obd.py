"""Open Bandit Dataset (OBD) logs: load, validate, and hand out as logged bandit feedback.

The Open Bandit Dataset (Saito, Aihara, Matsutani and Narita, NeurIPS 2021 Datasets and Benchmarks,
arXiv 2008.07146; CC BY 4.0) records a 7-day A/B test of two recommendation policies on the ZOZOTOWN
fashion site. Each row of a ``{campaign}.csv`` is one impression: an item shown at a position, whether
it was clicked, and the logging policy's probability of that choice. :func:`load_obd` reads one such
file (and optionally the campaign's ``item_context.csv``) into an :class:`ObdLog`;
:meth:`ObdLog.to_bandit_feedback` turns it into the arrays an off-policy learner or estimator expects::

    log = load_obd("obd/random/men/men.csv", item_context="obd/random/men/item_context.csv")
    log.n_items, log.n_positions, log.policy  # (34, 3, 'random')
    feedback = log.to_bandit_feedback()         # context, action, position, reward, pscore, n_actions

Every problem with a file is an :class:`ObdFormatError` (a ``ValueError``) that names the problem and
the fix. Only the standard library, numpy and pandas are needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = [
    "AFFINITY_PREFIX",
    "BanditFeedback",
    "ObdFormatError",
    "ObdLog",
    "load_item_context",
    "load_obd",
]

#: Columns every log must have (``propensity_score`` may also be spelled ``action_prob``).
REQUIRED_COLUMNS = ("timestamp", "item_id", "position", "click", "propensity_score")
#: The upstream README's name for ``propensity_score``.
PROPENSITY_ALIAS = "action_prob"
#: Prefix of the hashed categorical user features: ``user_feature_0``, ``user_feature_1``, ...
USER_FEATURE_PREFIX = "user_feature_"
#: Prefix of the user-item affinity columns, one per item: ``user-item_affinity_0`` ... ``_{n_items-1}``.
AFFINITY_PREFIX = "user-item_affinity_"
#: Prefix of the item context features: ``item_feature_0`` (float), ``item_feature_1..`` (hashed).
ITEM_FEATURE_PREFIX = "item_feature_"
#: Directory names of the two logging policies in the OBD layout ``{policy}/{campaign}/{campaign}.csv``.
KNOWN_POLICIES = ("random", "bts")

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class ObdFormatError(ValueError):
    """An Open Bandit Dataset file that cannot be used; the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class BanditFeedback:
    """Logged bandit feedback: one row per impression, in log order.

    Attributes:
        context: ``(n, d)`` float matrix: the one-hot user features followed by the ``n_actions``
            user-item affinities (the same layout as OBP's ``OpenBanditDataset.context``).
        context_columns: the ``d`` column names of ``context`` (``user_feature_0=<hash>``, ...,
            ``user-item_affinity_0``, ...).
        action: ``(n,)`` the item shown, in ``0..n_actions-1``.
        position: ``(n,)`` the slot it was shown in, **0-based** (the file's 1, 2, 3 become 0, 1, 2).
        reward: ``(n,)`` the click, 0 or 1.
        pscore: ``(n,)`` the logging policy's propensity of that item at that position, in ``(0, 1]``.
        n_actions: the number of items.
        n_positions: the number of slots.
        action_context: ``(n_actions, k)`` item features (``item_feature_0`` then one-hot hashed
            features), or ``None`` when the log was loaded without an item context.
    """

    context: FloatArray
    context_columns: tuple[str, ...]
    action: IntArray
    position: IntArray
    reward: IntArray
    pscore: FloatArray
    n_actions: int
    n_positions: int
    action_context: FloatArray | None = None

    @property
    def n_rounds(self) -> int:
        """The number of impressions."""
        return int(self.action.shape[0])


@dataclass(frozen=True)
class ObdLog:
    """One validated OBD log (one policy, one campaign).

    Attributes:
        frame: one row per impression with ``timestamp`` (UTC datetime), ``item_id`` (0-based),
            ``position`` (as in the file: 1-based), ``click`` (0/1), ``propensity`` (float), the
            ``user_feature_*`` columns (strings) and the ``user-item_affinity_*`` columns (floats).
        n_items: the number of items, read from the number of affinity columns.
        n_positions: the number of slots, the largest position in the file.
        policy: ``"random"`` or ``"bts"`` when the path follows the OBD layout, else ``None``.
        item_context: one row per item (sorted by ``item_id``) with the ``item_feature_*`` columns,
            or ``None``.
        source: the file the log was read from.
    """

    frame: pd.DataFrame
    n_items: int
    n_positions: int
    policy: str | None = None
    item_context: pd.DataFrame | None = None
    source: Path | None = None

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def user_feature_columns(self) -> list[str]:
        """``user_feature_0``, ``user_feature_1``, ... in numeric order."""
        return _numbered_columns(self.frame.columns, USER_FEATURE_PREFIX)

    @property
    def affinity_columns(self) -> list[str]:
        """``user-item_affinity_0`` ... ``user-item_affinity_{n_items-1}``."""
        return [f"{AFFINITY_PREFIX}{i}" for i in range(self.n_items)]

    @property
    def item_id(self) -> IntArray:
        """The item shown in each impression."""
        return self.frame["item_id"].to_numpy(dtype=np.int64)

    @property
    def click(self) -> IntArray:
        """The click (0/1) of each impression."""
        return self.frame["click"].to_numpy(dtype=np.int64)

    @property
    def propensity(self) -> FloatArray:
        """The logging policy's propensity of each impression."""
        return self.frame["propensity"].to_numpy(dtype=np.float64)

    @property
    def affinity(self) -> FloatArray:
        """``(n, n_items)`` user-item affinities."""
        return self.frame[self.affinity_columns].to_numpy(dtype=np.float64)

    @property
    def shown_affinity(self) -> FloatArray:
        """The affinity of each impression's user for the item that was shown."""
        return self.affinity[np.arange(len(self)), self.item_id]

    @property
    def ctr(self) -> float:
        """The observed click rate."""
        return float(self.frame["click"].mean())

    @property
    def uniform_propensity(self) -> bool:
        """Whether every impression had the same propensity (a uniform random logging policy)."""
        p = self.propensity
        return bool(np.allclose(p, p[0], rtol=1e-9, atol=0.0))

    def user_feature_categories(self) -> dict[str, list[str]]:
        """The sorted distinct values of each user feature: pass them (merged) to encode two logs alike."""
        return {c: sorted(self.frame[c].unique().tolist()) for c in self.user_feature_columns}

    def to_bandit_feedback(self, categories: Mapping[str, Sequence[str]] | None = None) -> BanditFeedback:
        """The log as :class:`BanditFeedback` arrays (context, action, position, reward, pscore, ...).

        Args:
            categories: the values to one-hot encode per user feature; by default this log's own
                (:meth:`user_feature_categories`). Pass the union of two logs' categories to give them
                the same context columns; a value outside ``categories`` encodes as all zeros.
        """
        cats = dict(categories) if categories is not None else self.user_feature_categories()
        onehot, names = _one_hot(self.frame, self.user_feature_columns, cats)
        context = np.hstack([onehot, self.affinity])
        return BanditFeedback(
            context=context,
            context_columns=(*names, *self.affinity_columns),
            action=self.item_id,
            position=self.frame["position"].to_numpy(dtype=np.int64) - 1,
            reward=self.click,
            pscore=self.propensity,
            n_actions=self.n_items,
            n_positions=self.n_positions,
            action_context=None if self.item_context is None else _action_context(self.item_context),
        )


# --------------------------------------------------------------------------------------- loading


def load_obd(path: str | Path, item_context: str | Path | None = None) -> ObdLog:
    """Read and validate one OBD log ``{campaign}.csv``, optionally with its ``item_context.csv``.

    Raises:
        ObdFormatError: the file is missing or empty, a column is missing, or a value is out of range
            (propensities outside (0, 1], clicks not 0/1, item ids outside ``0..n_items-1``, positions
            below 1), or the item context does not list exactly the items ``0..n_items-1``.
    """
    path = Path(path)
    raw = _read_csv(path, "log")
    raw = raw.rename(columns={PROPENSITY_ALIAS: "propensity_score"})
    _require_columns(raw, path)
    n_items = _count_items(raw, path)
    frame = _clean_frame(raw, n_items, path)
    context = None if item_context is None else load_item_context(item_context, n_items)
    return ObdLog(
        frame=frame,
        n_items=n_items,
        n_positions=int(frame["position"].max()),
        policy=infer_policy(path),
        item_context=context,
        source=path,
    )


def load_item_context(path: str | Path, n_items: int | None = None) -> pd.DataFrame:
    """Read an ``item_context.csv``: one row per item, sorted by ``item_id``, with ``item_feature_*``.

    When ``n_items`` is given the file must list exactly the items ``0..n_items-1``.
    """
    path = Path(path)
    raw = _read_csv(path, "item context")
    features = _numbered_columns(raw.columns, ITEM_FEATURE_PREFIX)
    missing = [c for c in ("item_id",) if c not in raw.columns] + ([] if features else ["item_feature_0"])
    if missing:
        raise ObdFormatError(
            f"{path}: item context is missing column(s) {', '.join(missing)}; an OBD item_context.csv "
            "has item_id and item_feature_0, item_feature_1, ... (is this the right file?)"
        )
    ids = _integer_column(raw, "item_id", path)
    if ids.duplicated().any():
        dup = sorted(set(ids[ids.duplicated()].tolist()))[:5]
        raise ObdFormatError(f"{path}: item_id {dup} listed more than once; keep one row per item")
    if n_items is not None and sorted(ids.tolist()) != list(range(n_items)):
        extra = sorted(set(ids.tolist()) - set(range(n_items)))[:5]
        absent = sorted(set(range(n_items)) - set(ids.tolist()))[:5]
        raise ObdFormatError(
            f"{path}: item context item ids do not match the log's {n_items} items (0..{n_items - 1}): "
            f"extra {extra}, missing {absent}; pass the item_context.csv of the same campaign"
        )
    out = raw[features].copy()
    out[features[0]] = _float_column(raw, features[0], path)
    out.insert(0, "item_id", ids)
    out = out.sort_values("item_id").reset_index(drop=True)
    for col in features[1:]:
        out[col] = out[col].astype(str)
    return out


def infer_policy(path: Path) -> str | None:
    """``"random"`` / ``"bts"`` from the OBD layout ``.../{policy}/{campaign}/{campaign}.csv``, else None."""
    parts = path.parts
    name = parts[-3] if len(parts) >= 3 else ""
    return name if name in KNOWN_POLICIES else None


# ------------------------------------------------------------------------------------ validation


def _read_csv(path: Path, what: str) -> pd.DataFrame:
    """The CSV at ``path`` (first column as the index when it is unnamed), or an ObdFormatError."""
    if not path.is_file():
        raise ObdFormatError(f"{what} file {path} not found; check the path (e.g. obd/random/men/men.csv)")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise ObdFormatError(f"{path} is empty; pass an OBD {what} CSV with a header and rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ObdFormatError(f"{path} is not a readable CSV ({exc}); pass an OBD {what} CSV") from None
    if frame.empty:
        raise ObdFormatError(f"{path} has a header but no rows; pass a {what} file with impressions")
    unnamed = [c for c in frame.columns if str(c).startswith("Unnamed:")]
    return frame.drop(columns=unnamed)


def _require_columns(raw: pd.DataFrame, path: Path) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in raw.columns]
    if not _numbered_columns(raw.columns, USER_FEATURE_PREFIX):
        missing.append(f"{USER_FEATURE_PREFIX}0")
    if not _numbered_columns(raw.columns, AFFINITY_PREFIX):
        missing.append(f"{AFFINITY_PREFIX}0..{AFFINITY_PREFIX}<n_items-1>")
    if missing:
        raise ObdFormatError(
            f"{path}: missing column(s) {', '.join(missing)}; an OBD log has timestamp, item_id, "
            "position, click, propensity_score, user_feature_* and user-item_affinity_* columns"
        )


def _count_items(raw: pd.DataFrame, path: Path) -> int:
    """The number of items: the affinity columns must be numbered 0..n_items-1 without gaps."""
    numbers = sorted(int(c[len(AFFINITY_PREFIX) :]) for c in _numbered_columns(raw.columns, AFFINITY_PREFIX))
    if numbers != list(range(len(numbers))):
        absent = sorted(set(range(max(numbers) + 1)) - set(numbers))[:5]
        raise ObdFormatError(
            f"{path}: affinity columns are not numbered 0..{max(numbers)} (missing {absent}); "
            f"add the missing {AFFINITY_PREFIX}* columns"
        )
    return len(numbers)


def _clean_frame(raw: pd.DataFrame, n_items: int, path: Path) -> pd.DataFrame:
    """Typed, validated columns in a fixed order."""
    user_cols = _numbered_columns(raw.columns, USER_FEATURE_PREFIX)
    aff_cols = [f"{AFFINITY_PREFIX}{i}" for i in range(n_items)]
    out = pd.DataFrame(
        {
            "timestamp": _timestamps(raw, path),
            "item_id": _integer_column(raw, "item_id", path),
            "position": _integer_column(raw, "position", path),
            "click": _integer_column(raw, "click", path),
            "propensity": _float_column(raw, "propensity_score", path),
        }
    )
    _check_ranges(out, n_items, path)
    for col in user_cols:
        out[col] = raw[col].astype(str)
    affinity = pd.DataFrame({c: _float_column(raw, c, path) for c in aff_cols})
    return pd.concat([out, affinity], axis=1)


def _check_ranges(frame: pd.DataFrame, n_items: int, path: Path) -> None:
    p = frame["propensity"]
    if not ((p > 0.0) & (p <= 1.0)).all():
        raise ObdFormatError(
            f"{path}: {_bad_rows(~((p > 0.0) & (p <= 1.0)))} propensity_score outside (0, 1]; "
            "propensities are the logging policy's probabilities: fix or drop those rows"
        )
    if not frame["click"].isin([0, 1]).all():
        raise ObdFormatError(f"{path}: {_bad_rows(~frame['click'].isin([0, 1]))} click not 0 or 1")
    items = frame["item_id"]
    if not items.between(0, n_items - 1).all():
        raise ObdFormatError(
            f"{path}: {_bad_rows(~items.between(0, n_items - 1))} item_id outside 0..{n_items - 1} "
            f"(the file has {n_items} {AFFINITY_PREFIX}* columns); item ids must be 0-based and "
            "each item needs an affinity column"
        )
    if not (frame["position"] >= 1).all():
        raise ObdFormatError(
            f"{path}: {_bad_rows(frame['position'] < 1)} position below 1; positions are 1-based slots"
        )


def _bad_rows(mask: pd.Series) -> str:
    """E.g. ``"3 row(s) (first at data row 7) have"``."""
    rows = np.flatnonzero(mask.to_numpy())
    return f"{rows.size} row(s) (first at data row {int(rows[0]) + 1}) have"


def _timestamps(raw: pd.DataFrame, path: Path) -> pd.Series:
    try:
        return pd.to_datetime(raw["timestamp"], utc=True, format="ISO8601")
    except (ValueError, TypeError) as exc:
        raise ObdFormatError(f"{path}: timestamp is not a date-time ({exc}); use ISO 8601 UTC") from None


def _integer_column(raw: pd.DataFrame, col: str, path: Path) -> pd.Series:
    values = pd.to_numeric(raw[col], errors="coerce")
    bad = values.isna() | (values != values.round())
    if bad.any():
        raise ObdFormatError(f"{path}: {_bad_rows(bad)} a {col} value that is not an integer; fix those rows")
    return values.astype(np.int64)


def _float_column(raw: pd.DataFrame, col: str, path: Path) -> pd.Series:
    values = pd.to_numeric(raw[col], errors="coerce")
    bad = values.isna() | ~np.isfinite(values.to_numpy(dtype=np.float64, na_value=np.nan))
    if bad.any():
        raise ObdFormatError(
            f"{path}: {_bad_rows(bad)} a {col} value that is not a finite number; fix those rows"
        )
    return values.astype(np.float64)


def _numbered_columns(columns: Sequence[object] | pd.Index, prefix: str) -> list[str]:
    """The columns named ``{prefix}{integer}``, in numeric order."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    found = [(int(m.group(1)), str(c)) for c in columns if (m := pattern.match(str(c)))]
    return [name for _, name in sorted(found)]


# ------------------------------------------------------------------------------------- encoding


def _one_hot(
    frame: pd.DataFrame, columns: Sequence[str], categories: Mapping[str, Sequence[str]]
) -> tuple[FloatArray, list[str]]:
    """One-hot blocks for ``columns`` over the given categories (unknown values: all zeros)."""
    blocks: list[FloatArray] = []
    names: list[str] = []
    for col in columns:
        cats = list(categories.get(col, []))
        values = frame[col].to_numpy()
        blocks.append((values[:, None] == np.asarray(cats, dtype=object)[None, :]).astype(np.float64))
        names.extend(f"{col}={c}" for c in cats)
    width = sum(b.shape[1] for b in blocks)
    return (np.hstack(blocks) if blocks else np.zeros((len(frame), width))), names


def _action_context(item_context: pd.DataFrame) -> FloatArray:
    """``item_feature_0`` (float) followed by the one-hot hashed item features, one row per item."""
    features = _numbered_columns(item_context.columns, ITEM_FEATURE_PREFIX)
    numeric = item_context[features[:1]].to_numpy(dtype=np.float64)
    cats = {c: sorted(item_context[c].unique().tolist()) for c in features[1:]}
    onehot, _ = _one_hot(item_context, features[1:], cats)
    return np.hstack([numeric, onehot])
