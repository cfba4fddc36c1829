"""A click model fitted on one Open Bandit Dataset log and checked on another policy's log.

The model is a logistic regression (scikit-learn) on one impression's features: the position
(one-hot), the shown item (its context features when an ``item_context.csv`` is given, else its id
one-hot), the user's affinity for the shown item (standardised) and, optionally, the hashed user
features (one-hot). The inverse regularisation strength ``C`` is chosen by stratified k-fold
cross-validated log loss on the training log, so nothing about the evaluation log leaks into the fit
(the encoder, which uses no labels, is fitted once on the whole training log).

Why this model: on the random log of the men campaign (10,000 impressions, 46 clicks) it gave the
lowest cross-validated log loss of the candidates tried (logistic regressions with the feature sets
above and several ``C``, histogram gradient boosting); user features did not help and are off by
default. With so few clicks every candidate is within noise of a constant rate; see
``docs/results/obd_ctr.md``.

Training on a log whose propensities are not uniform (e.g. the Bernoulli-TS log) over-represents the
items that policy liked; ``ipw=True`` weights each impression by ``1 / propensity`` (normalised to
mean 1) so the fit targets the uniform mix of items. On the uniform random log it changes nothing.

    >>> from transferlab.simulator.realdata.obd import load_obd
    >>> train, test = load_obd("random/men/men.csv"), load_obd("bts/men/men.csv")  # doctest: +SKIP
    >>> model = ClickModelConfig(seed=0).create().fit(train)                        # doctest: +SKIP
    >>> report = evaluate_ctr(model, train, test, seed=0)                           # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from threadpoolctl import threadpool_limits

from transferlab.platform.stats import Interval, bootstrap_ci, bootstrap_diff_ci
from transferlab.simulator.realdata.obd import ITEM_FEATURE_PREFIX, ObdLog, load_obd

__all__ = [
    "ClickModel",
    "ClickModelConfig",
    "CtrReport",
    "calibration_bins",
    "evaluate_ctr",
    "obd_ctr",
    "refit_bootstrap_ctr",
    "save_calibration_plot",
]

ItemEncoding = Literal["auto", "id", "context", "both"]
FloatArray = npt.NDArray[np.float64]

#: ``C`` values tried by cross-validation when :attr:`ClickModelConfig.c` is None.
DEFAULT_C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


@dataclass(frozen=True)
class ClickModelConfig:
    """Settings of :class:`ClickModel`.

    Attributes:
        c: inverse L2 regularisation strength of the logistic regression; None chooses it from
            ``c_grid`` by cross-validated log loss on the training log.
        c_grid: the candidates for ``c`` (positive).
        cv_folds: folds of the stratified cross-validation that chooses ``c`` (at least 2, and at
            most the number of clicks in the training log).
        user_features: one-hot encode the hashed ``user_feature_*`` columns.
        item_encoding: how the shown item enters: ``"id"`` (one-hot item id), ``"context"`` (its
            ``item_context.csv`` features; needs the logs loaded with an item context), ``"both"``, or
            ``"auto"`` (context when the training log has one, else id).
        affinity: use the user's affinity for the shown item.
        ipw: weight impressions by ``1 / propensity`` (normalised to mean 1) when fitting.
        seed: seeds the cross-validation split.
    """

    c: float | None = None
    c_grid: tuple[float, ...] = DEFAULT_C_GRID
    cv_folds: int = 5
    user_features: bool = False
    item_encoding: ItemEncoding = "auto"
    affinity: bool = True
    ipw: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.c is not None and not self.c > 0:
            raise ValueError(f"c must be positive (e.g. 0.03) or None to choose it by CV, got {self.c!r}")
        if not self.c_grid or any(not c > 0 for c in self.c_grid):
            raise ValueError(f"c_grid must be non-empty and positive, e.g. {DEFAULT_C_GRID}: {self.c_grid}")
        if self.cv_folds < 2:
            raise ValueError(f"cv_folds must be at least 2 (e.g. 5), got {self.cv_folds}")
        if self.item_encoding not in ("auto", "id", "context", "both"):
            raise ValueError(
                f"item_encoding must be 'auto', 'id', 'context' or 'both', got {self.item_encoding!r}"
            )

    def create(self) -> ClickModel:
        """An unfitted :class:`ClickModel` with these settings."""
        return ClickModel(self)


# -------------------------------------------------------------------------------------- features


@dataclass(frozen=True)
class FeatureSpec:
    """Which columns of :func:`click_features` are one-hot encoded and which are standardised."""

    categorical: tuple[str, ...]
    numeric: tuple[str, ...]


def feature_spec(config: ClickModelConfig, log: ObdLog) -> FeatureSpec:
    """The feature columns ``config`` asks for, given the training ``log``."""
    encoding = config.item_encoding
    if encoding == "auto":
        encoding = "id" if log.item_context is None else "context"
    if encoding in ("context", "both") and log.item_context is None:
        raise ValueError(
            f"item_encoding={encoding!r} needs the item context: load the log with "
            "load_obd(path, item_context=...) (CLI: --item-context), or use item_encoding='id'"
        )
    categorical: list[str] = ["position"]
    numeric: list[str] = []
    if config.user_features:
        categorical += log.user_feature_columns
    if encoding in ("id", "both"):
        categorical.append("item_id")
    if encoding in ("context", "both"):
        assert log.item_context is not None
        item_cols = [c for c in log.item_context.columns if c.startswith(ITEM_FEATURE_PREFIX)]
        numeric.append(item_cols[0])
        categorical += item_cols[1:]
    if config.affinity:
        numeric.append("affinity")
    return FeatureSpec(tuple(categorical), tuple(numeric))


def click_features(log: ObdLog, spec: FeatureSpec) -> pd.DataFrame:
    """One row per impression with the columns of ``spec`` (categoricals as strings)."""
    frame = log.frame
    out = pd.DataFrame(index=frame.index)
    needs_context = [c for c in (*spec.categorical, *spec.numeric) if c.startswith(ITEM_FEATURE_PREFIX)]
    if needs_context and log.item_context is None:
        raise ValueError("this click model uses item context features: load the log with its item_context")
    context = None if log.item_context is None else log.item_context.set_index("item_id")
    for col in spec.categorical:
        if col.startswith(ITEM_FEATURE_PREFIX):
            assert context is not None
            out[col] = context[col].to_numpy()[frame["item_id"].to_numpy()].astype(str)
        else:
            out[col] = frame[col].astype(str)
    for col in spec.numeric:
        if col == "affinity":
            out[col] = log.shown_affinity
        else:
            assert context is not None
            out[col] = context[col].to_numpy(dtype=np.float64)[frame["item_id"].to_numpy()]
    return out


def ipw_weights(propensity: FloatArray) -> FloatArray:
    """``1 / propensity`` normalised to mean 1 (all ones for a uniform logging policy)."""
    w = 1.0 / np.asarray(propensity, dtype=np.float64)
    return w / w.mean()


# ----------------------------------------------------------------------------------------- model


def _encoder(spec: FeatureSpec) -> ColumnTransformer:
    """One-hot for the categoricals (unseen values: all zeros), standardisation for the numerics."""
    encoders: list[tuple[str, object, list[str]]] = [
        ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=False), list(spec.categorical))
    ]
    if spec.numeric:
        encoders.append(("scale", StandardScaler(), list(spec.numeric)))
    return ColumnTransformer(encoders, sparse_threshold=0.0)


def _logit(c: float, z: FloatArray, y: npt.NDArray[np.int64], weight: FloatArray) -> LogisticRegression:
    return LogisticRegression(C=c, max_iter=1000).fit(z, y, sample_weight=weight)


def cross_validated_log_loss(
    z: FloatArray,
    y: npt.NDArray[np.int64],
    weight: FloatArray,
    c_grid: tuple[float, ...],
    folds: int,
    seed: int,
) -> dict[float | str, float]:
    """Mean held-out (weighted) log loss per ``C`` over the same stratified folds of the design ``z``.

    The key ``"constant"`` holds the same for a constant rate (the training folds' click rate).
    """
    n_clicks = int(y.sum())
    if n_clicks < folds or len(y) - n_clicks < folds:
        raise ValueError(
            f"the training log has {n_clicks} click(s) in {len(y)} impressions: too few for {folds}-fold "
            "cross-validation; use a longer log, fewer folds, or a fixed C"
        )
    splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(z, y))
    scores: dict[float | str, float] = {}
    constant = []
    for train, test in splits:
        rate = np.full(len(test), np.average(y[train], weights=weight[train]))
        constant.append(float(np.average(binary_log_losses(y[test], rate), weights=weight[test])))
    scores["constant"] = float(np.mean(constant))
    for c in c_grid:
        losses = []
        for train, test in splits:
            p = _logit(c, z[train], y[train], weight[train]).predict_proba(z[test])[:, 1]
            losses.append(float(np.average(binary_log_losses(y[test], p), weights=weight[test])))
        scores[c] = float(np.mean(losses))
    return scores


class ClickModel:
    """Logistic click model; :meth:`fit` on one :class:`ObdLog`, :meth:`predict_proba` on any other.

    After fitting: ``c_`` (the ``C`` used), ``cv_log_loss_`` (``{C: held-out log loss}`` and
    ``"constant"``: a constant rate's; empty when ``config.c`` fixes ``C``) and ``spec_`` (the features).
    """

    def __init__(self, config: ClickModelConfig | None = None) -> None:
        self.config = config if config is not None else ClickModelConfig()
        self.c_: float | None = None
        self.cv_log_loss_: dict[float | str, float] = {}
        self.spec_: FeatureSpec | None = None
        self._encoder: ColumnTransformer | None = None
        self._logit: LogisticRegression | None = None

    def fit(self, log: ObdLog) -> ClickModel:
        """Fit on ``log`` (choosing ``C`` by cross-validation unless the config fixes it)."""
        cfg = self.config
        y = log.click
        if y.min() == y.max():
            raise ValueError(
                f"the training log has {'no' if y[0] == 0 else 'only'} clicks; a click model needs both"
            )
        spec = feature_spec(cfg, log)
        encoder = _encoder(spec)
        z = np.asarray(encoder.fit_transform(click_features(log, spec)), dtype=np.float64)
        weight = ipw_weights(log.propensity) if cfg.ipw else np.ones(len(y))
        # the design is small (about 10^4 x 10^1): threaded BLAS only adds overhead (10x on a busy machine)
        with threadpool_limits(limits=1):
            if cfg.c is None:
                self.cv_log_loss_ = cross_validated_log_loss(z, y, weight, cfg.c_grid, cfg.cv_folds, cfg.seed)
                self.c_ = min(cfg.c_grid, key=lambda c: self.cv_log_loss_[c])
            else:
                self.c_ = cfg.c
            self._logit = _logit(self.c_, z, y, weight)
        self._encoder, self.spec_ = encoder, spec
        return self

    def predict_proba(self, log: ObdLog) -> FloatArray:
        """The click probability of each impression of ``log``."""
        if self._encoder is None or self._logit is None or self.spec_ is None:
            raise RuntimeError("ClickModel.predict_proba called before fit; call fit(train_log) first")
        z = self._encoder.transform(click_features(log, self.spec_))
        return np.asarray(self._logit.predict_proba(z)[:, 1], dtype=np.float64)

    def describe(self) -> dict[str, object]:
        """The settings and fitted choices, JSON-ready."""
        spec = self.spec_
        return {
            "kind": "logistic regression (L2)",
            "C": self.c_,
            "cv_log_loss": {str(c): v for c, v in self.cv_log_loss_.items()},
            "categorical": list(spec.categorical) if spec else [],
            "numeric": list(spec.numeric) if spec else [],
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.config).items()},
        }


# ------------------------------------------------------------------------------------ evaluation


@dataclass(frozen=True)
class CtrReport:
    """How well a click model fitted on one log predicts another log's clicks."""

    predicted_ctr: float
    actual_ctr: float
    relative_error: float
    auc: float | None
    log_loss: float
    baseline_log_loss: float
    log_loss_diff: float
    predicted_ctr_ci: Interval
    actual_ctr_ci: Interval
    log_loss_diff_ci: Interval
    train_ctr: float
    n_train: int
    n_eval: int
    train_clicks: int
    eval_clicks: int

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the intervals as ``[low, high]``."""
        out: dict[str, object] = {}
        for key, value in asdict(self).items():
            out[key] = [value["low"], value["high"]] if isinstance(value, dict) else value
        return out


def binary_log_losses(click: npt.NDArray[np.int64], p: FloatArray) -> FloatArray:
    """Per-impression log loss (probabilities clipped to ``[1e-15, 1 - 1e-15]``)."""
    p = np.clip(p, 1e-15, 1.0 - 1e-15)
    return np.where(click == 1, -np.log(p), -np.log1p(-p))


def evaluate_ctr(
    model: ClickModel, train: ObdLog, test: ObdLog, *, seed: int = 0, n_boot: int = 2000
) -> CtrReport:
    """Predict every impression of ``test`` and compare with its clicks.

    ``relative_error = |predicted - actual| / actual``; the baseline predicts ``train``'s click rate
    for every impression; ``log_loss_diff`` is our log loss minus the baseline's (below 0: we are
    better). The intervals are 95% percentile bootstraps over ``test``'s impressions (paired for
    ``log_loss_diff_ci``).
    They leave out the uncertainty of the fit itself: see :func:`refit_bootstrap_ctr`.
    """
    pred = model.predict_proba(test)
    click = test.click
    actual = float(click.mean())
    predicted = float(pred.mean())
    ours = binary_log_losses(click, pred)
    baseline = binary_log_losses(click, np.full(len(click), train.ctr))
    auc = float(roc_auc_score(click, pred)) if 0 < click.sum() < len(click) else None
    return CtrReport(
        predicted_ctr=predicted,
        actual_ctr=actual,
        relative_error=abs(predicted - actual) / actual if actual > 0 else float("inf"),
        auc=auc,
        log_loss=float(ours.mean()),
        baseline_log_loss=float(baseline.mean()),
        log_loss_diff=float(ours.mean() - baseline.mean()),
        predicted_ctr_ci=bootstrap_ci(pred, n_boot=n_boot, seed=seed),
        actual_ctr_ci=bootstrap_ci(click.astype(np.float64), n_boot=n_boot, seed=seed),
        log_loss_diff_ci=bootstrap_diff_ci(baseline, ours, paired=True, n_boot=n_boot, seed=seed),
        train_ctr=train.ctr,
        n_train=len(train),
        n_eval=len(test),
        train_clicks=int(train.click.sum()),
        eval_clicks=int(click.sum()),
    )


def refit_bootstrap_ctr(
    config: ClickModelConfig, train: ObdLog, test: ObdLog, *, n_boot: int = 200, seed: int = 0
) -> Interval:
    """95% interval of the predicted CTR over refits on bootstrap resamples of ``train``.

    ``C`` is fixed to the one the full fit chose (choosing it again per resample would cost
    ``len(c_grid) * cv_folds`` fits each). Resamples without a click are redrawn.
    """
    full = config.create().fit(train)
    fixed = ClickModelConfig(**{**asdict(config), "c": full.c_})
    estimate = float(full.predict_proba(test).mean())
    rng = np.random.default_rng(seed)
    values: list[float] = []
    while len(values) < n_boot:
        rows = rng.integers(0, len(train), size=len(train))
        resample = _subset(train, rows)
        if resample.click.min() == resample.click.max():
            continue
        values.append(float(fixed.create().fit(resample).predict_proba(test).mean()))
    low, high = np.quantile(values, [0.025, 0.975])
    return Interval(estimate, float(low), float(high), 0.95, len(train))


def _subset(log: ObdLog, rows: npt.NDArray[np.int64]) -> ObdLog:
    frame = log.frame.iloc[rows].reset_index(drop=True)
    return ObdLog(frame, log.n_items, log.n_positions, log.policy, log.item_context, log.source)


# ----------------------------------------------------------------------------------- calibration


def calibration_bins(pred: FloatArray, click: npt.NDArray[np.int64], n_bins: int = 10) -> pd.DataFrame:
    """Impressions in ``n_bins`` equal-count bins of predicted CTR: mean predicted vs observed rate.

    Columns: ``n``, ``clicks``, ``predicted`` (mean), ``observed`` (click rate) and ``stderr`` (the
    binomial standard error of ``observed``).
    """
    order = np.argsort(pred, kind="stable")
    rows = []
    for idx in np.array_split(order, min(n_bins, len(order))):
        observed = float(click[idx].mean())
        rows.append(
            {
                "n": int(idx.size),
                "clicks": int(click[idx].sum()),
                "predicted": float(pred[idx].mean()),
                "observed": observed,
                "stderr": float(np.sqrt(max(observed * (1 - observed), 1e-12) / idx.size)),
            }
        )
    return pd.DataFrame(rows)


def save_calibration_plot(path: Path, bins: pd.DataFrame, title: str = "") -> None:
    """Predicted vs observed CTR per bin (with ±2 standard errors) and the diagonal, as an image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    fig, ax = plt.subplots(figsize=(5, 4.5))
    top = 1.1 * float(max(bins["predicted"].max(), (bins["observed"] + 2 * bins["stderr"]).max()))
    ax.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    yerr = 2 * bins["stderr"]
    ax.errorbar(bins["predicted"], bins["observed"], yerr=yerr, fmt="o", capsize=3, label="observed ± 2 s.e.")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    for axis in (ax.xaxis, ax.yaxis):  # CTRs are small fractions: a few ticks, as percentages
        axis.set_major_locator(MaxNLocator(5))
        axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=1))
    ax.set_xlabel("mean predicted CTR in bin")
    ax.set_ylabel("observed CTR in bin")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- run


def obd_ctr(
    train_path: Path,
    eval_path: Path,
    item_context: Path | None = None,
    config: ClickModelConfig | None = None,
    *,
    refit_boot: int = 0,
    n_bins: int = 10,
    plot: Path | None = None,
) -> dict[str, object]:
    """``transferlab sim obd-ctr``: load both logs, fit on ``train_path``, report on ``eval_path``.

    Returns the JSON-ready summary (:class:`CtrReport`'s fields, the logs, the model, the calibration
    bins, and ``predicted_ctr_refit_ci`` when ``refit_boot > 0``); writes the calibration plot to
    ``plot`` when given. Bad files or settings raise ``ValueError`` (``ObdFormatError`` for files).
    """
    config = config if config is not None else ClickModelConfig()
    train = load_obd(train_path, item_context)
    test = load_obd(eval_path, item_context)
    if train.n_items != test.n_items:
        raise ValueError(
            f"--train has {train.n_items} items but --eval has {test.n_items}: "
            "pass two logs of the same campaign"
        )
    model = config.create().fit(train)
    report = evaluate_ctr(model, train, test, seed=config.seed)
    bins = calibration_bins(model.predict_proba(test), test.click, n_bins)
    summary: dict[str, object] = {
        **report.to_dict(),
        "train": _log_summary(train),
        "eval": _log_summary(test),
        "item_context": None if item_context is None else str(item_context),
        "n_items": train.n_items,
        "n_positions": max(train.n_positions, test.n_positions),
        "model": model.describe(),
        "seed": config.seed,
        "calibration": bins.to_dict(orient="records"),
    }
    if refit_boot > 0:
        refit = refit_bootstrap_ctr(config, train, test, n_boot=refit_boot, seed=config.seed)
        summary["predicted_ctr_refit_ci"] = [refit.low, refit.high]
        summary["refit_boot"] = refit_boot
    if plot is not None:
        title = f"click model fitted on {train.policy or 'train'}, evaluated on {test.policy or 'eval'}"
        save_calibration_plot(plot, bins, title)
    return summary


def _log_summary(log: ObdLog) -> dict[str, object]:
    return {
        "path": str(log.source),
        "policy": log.policy,
        "impressions": len(log),
        "clicks": int(log.click.sum()),
        "ctr": log.ctr,
        "uniform_propensity": log.uniform_propensity,
    }
