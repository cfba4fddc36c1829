"""``transferlab compare``: the coding-vs-ecommerce domain table measured, plus the readiness checks.

The domain table is the comparison of environment properties from the project's founding design
note: determinism, reward delay, parallel exploration, cost per trial, reward objectivity and whether
tool use is trainable. The readiness checks come from the project's readiness checklist: four
questions to answer before RL (is the reward trustworthy, can the policy explore different outcomes,
can the environment be repeated, is the gain worth the cost) and a three-layer diagnosis of where an
agent fails (information and interface, basic behaviour, sequential decisions).

Task families: ``coding`` (CodeRepair-v0 and the sandbox verifier), ``ops_analysis`` (OpsAnalysis-v0
and its rubric), ``campaign_sim`` (campaign decisions in a learned simulator), ``campaign_offline``
(offline RL on logged campaigns, from the committed ``docs/results/offline_rl/result.json``), and the
``market`` column: the ground-truth world standing in for a real shop.

>>> cfg = PRESETS["quick"]
>>> result = run_compare(cfg, Path("runs/compare/x"))  # doctest: +SKIP
>>> print(table_text(result))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from transferlab.coding_rl.compare_column import measure_coding
from transferlab.comparison.offline_column import measure_offline
from transferlab.comparison.settings import SOURCES as SETTINGS_SOURCES
from transferlab.comparison.settings import settings_table
from transferlab.platform.config import BaseConfig
from transferlab.platform.io import atomic_write_json, read_json_object
from transferlab.platform.measures import (
    LAYERS,
    PROPERTIES,
    QUESTIONS,
    Measure,
    Measured,
    Progress,
    Section,
    not_measured,
    per_cost,
)
from transferlab.platform.provenance import provenance
from transferlab.simulator.compare_columns import SECONDS_PER_DAY, measure_campaign
from transferlab.simulator.ops.compare_column import measure_ops

if TYPE_CHECKING:
    from transferlab.platform.results import Result

FAMILIES = ("coding", "ops_analysis", "campaign_sim", "campaign_offline", "market")
QUESTION_FAMILIES = FAMILIES[:4]


class CompareConfig(BaseConfig):
    """How much to measure; every count is per measurement, and the run takes a few of each."""

    replays: int = Field(default=5, ge=2, le=1000, description="Replays of the same action for determinism.")
    coding_episodes: int = Field(default=16, ge=2, description="CodeRepair-v0 episodes per worker setting.")
    agreement_pairs: int = Field(default=12, ge=2, description="Solutions graded by two sandboxes.")
    ops_tasks: int = Field(default=6, ge=2, description="OpsAnalysis-v0 training tasks used.")
    ops_episodes: int = Field(default=12, ge=2, description="Ops expert episodes per worker setting.")
    random_reports: int = Field(
        default=2, ge=0, description="Random-agent reports per task for grader agreement."
    )
    group_size: int = Field(
        default=4, ge=2, description="Episodes per group (GRPO's G) for the explore question."
    )
    world_customers: int = Field(
        default=300, ge=50, description="Customers in each world / simulated market."
    )
    world_seeds: int = Field(default=5, ge=2, description="Market seeds for the campaign replay spread.")
    campaign_jobs: int = Field(default=4, ge=2, description="Jobs per worker setting in campaign throughput.")
    campaign_batch: int = Field(default=2, ge=1, description="30-day episodes per campaign throughput job.")
    sim_log_days: int = Field(
        default=120, ge=60, description="Days of logs the learned simulator is fitted on."
    )
    backend: Literal["forkserver", "subprocess"] = Field(
        default="forkserver", description="Sandbox backend (forkserver falls back to subprocess)."
    )
    results_dir: str = Field(
        default="docs/results",
        description="Where the committed results are read from; the default, when it is not a folder "
        "here, is the repository's docs/results beside the package.",
    )
    human_agreement: str | None = Field(
        default=None,
        description="JSON from `transferlab review reports agreement --out FILE`: the rubric vs "
        "reviewers' 0-10 ratings of ops reports.",
    )
    ops_result: str | None = Field(
        default=None,
        description="The transfer experiment's summary.json (ops SFT + GRPO); default: "
        "<results_dir>/transfer/summary.json.",
    )
    ops_learn_result: str | None = Field(
        default=None,
        description="The ops-learn experiment's result.json (multi-turn SFT vs SFT + GRPO on ops; it "
        "supplies the ops RL gain, its cost and SFT success when present); default: "
        "<results_dir>/ops_learn/seven_seeds/result.json (the preset's seven seeds pooled).",
    )


PRESETS: dict[str, CompareConfig] = {
    "smoke": CompareConfig(
        replays=3,
        coding_episodes=4,
        agreement_pairs=4,
        ops_tasks=3,
        ops_episodes=4,
        random_reports=1,
        group_size=2,
        world_customers=100,
        world_seeds=3,
        campaign_jobs=2,
        campaign_batch=1,
        sim_log_days=60,
    ),
    "quick": CompareConfig(),
    "cpu": CompareConfig(
        replays=20,
        coding_episodes=64,
        agreement_pairs=60,
        ops_tasks=20,
        ops_episodes=40,
        random_reports=4,
        group_size=4,
        world_customers=1000,
        world_seeds=20,
        campaign_jobs=8,
        campaign_batch=4,
        sim_log_days=240,
    ),
}
PRESET_ALIASES = {"test": "smoke", "full": "cpu"}
"""The presets' earlier names (still accepted: committed results name them in their commands)."""


@dataclass
class CompareResult:
    """The measured table, the four questions and the three layers, per family."""

    config: CompareConfig
    table: dict[str, dict[str, Measure]] = field(default_factory=dict)  # property -> family -> Measure
    questions: dict[str, dict[str, Measure]] = field(default_factory=dict)  # family -> question -> Measure
    diagnosis: dict[str, dict[str, Measure]] = field(default_factory=dict)  # family -> layer -> Measure
    panel: dict[str, dict[str, float]] = field(default_factory=dict)
    throughput: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    transfer: list[dict[str, str]] = field(default_factory=list)  # one row per arm, from the summary
    transfer_source: str = ""
    matched: dict[str, Any] = field(default_factory=dict)  # arms, comparisons, seeds, sources
    domain_settings: list[dict[str, str]] = field(default_factory=list)  # comparison.settings rows
    command: str = "transferlab compare"
    wall_s: float = 0.0
    run_dir: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        def conv(d: Mapping[str, Mapping[str, Measure]]) -> dict[str, Any]:
            return {k: {kk: vv.to_dict() for kk, vv in v.items()} for k, v in d.items()}

        return {
            "experiment": "compare",
            "command": self.command,
            "seeds": self.matched.get("seeds") or [0],
            "settings": self.config.to_dict(),
            "arms": self.matched.get("arms", {}),
            "comparisons": self.matched.get("comparisons", []),
            "sources": self.matched.get("sources", {}),
            "config": self.config.to_dict(),
            "table": conv(self.table),
            "questions": conv(self.questions),
            "diagnosis": conv(self.diagnosis),
            "panel": self.panel,
            "throughput": {k: {str(w): r for w, r in v.items()} for k, v in self.throughput.items()},
            "transfer": self.transfer,
            "transfer_source": self.transfer_source,
            "domain_settings": self.domain_settings,
            "wall_s": self.wall_s,
            "provenance": provenance(self.command, self.wall_s),
        }


# ------------------------------------------------------------------------------------------ coding


# --------------------------------------------------------------------------------------------- ops


def _ops_summary(config: CompareConfig) -> tuple[dict[str, Any], str]:
    """The transfer experiment's committed summary (its scratch arm is plain ops SFT + GRPO), or {}."""
    path = Path(config.ops_result or Path(config.results_dir, "transfer", "summary.json"))
    if not path.is_file():
        return {}, str(path)
    data = read_json_object(
        path, "pass the summary.json that `transferlab ops experiment transfer --report-dir DIR` writes"
    )
    if not isinstance(data.get("arms"), dict) or "scratch" not in data["arms"]:
        raise ValueError(
            f"{path} is not a transfer summary (no arms.scratch): pass the summary.json that "
            "`transferlab ops experiment transfer --report-dir DIR` writes"
        )
    return data, str(path)


def _ops_learned(config: CompareConfig) -> dict[str, Measure]:
    """RL gain, its cost, SFT success and GRPO's non-flat groups on ops: from the ops-learn result when
    there is one (the multi-turn recipe, like coding's agent-learn), else from the transfer experiment's
    summary (its scratch arm); the non-flat groups always from the transfer summary."""
    learned = _from_transfer(config)
    learned.update(_from_ops_learn(config))
    return learned


def _from_ops_learn(config: CompareConfig) -> dict[str, Measure]:
    """Gain, worth and SFT success from the ops-learn result.json, or {} when there is none."""
    from transferlab.platform.results import read_result

    path = Path(config.ops_learn_result or Path(config.results_dir, OPS_LEARN))
    if not path.is_file():
        return {}
    result = read_result(path)
    c = next(c for c in result.comparisons if c.name == "rl - sft" and c.cluster == "seed")
    gain = Measure(
        100 * c.estimate,
        "pts",
        f"multi-turn agent RL on OpsAnalysis-v0: SFT + GRPO - SFT held-out success, {c.n_clusters} seeds "
        f"(95% CI [{100 * c.ci[0]:+.1f}, {100 * c.ci[1]:+.1f}] pts, MDE {100 * c.mde:.1f} pts; {path})",
        {"low": 100 * c.ci[0], "high": 100 * c.ci[1]},
    )
    timed = _rl_seconds_source(result, path, config)
    seconds = (read_result(timed).arms["rl"].model_extra or {}).get("seconds_per_seed", []) if timed else []
    cpu_h = sum(seconds) / len(seconds) / 3600 if seconds else float("nan")
    worth = Measure(
        per_cost(100 * c.estimate, cpu_h),
        "pts/CPU-h",
        f"GRPO gain {100 * c.estimate:+.1f} pts over {cpu_h:.2f} CPU-hours of RL per seed (one core; "
        f"gain from {path}, time from {timed})",
    )
    h = result.arms["sft"].held_out_success
    sft = Measure(
        h.estimate,
        "success",
        f"ops SFT held-out success (rubric >= 8), 95% CI [{h.ci[0]:.2f}, {h.ci[1]:.2f}] clustered by seed "
        f"({path})",
        {"low": h.ci[0], "high": h.ci[1]},
    )
    return {"gain": gain, "worth": worth, "sft": sft}


def _rl_seconds_source(result: Any, path: Path, config: CompareConfig) -> Path | None:
    """The result whose RL arm timed its seeds: ``path`` itself, or for a pooled result (which keeps
    no timings) the first pooled run of the same preset, ``<results_dir>/ops_learn/result.json``."""
    if "seconds_per_seed" in (result.arms["rl"].model_extra or {}):
        return path
    first = Path(config.results_dir, "ops_learn", "result.json")
    return first if first.is_file() and first != path else None


def _from_transfer(config: CompareConfig) -> dict[str, Measure]:
    """RL gain, its cost, SFT success and GRPO's non-flat groups, from the transfer experiment's summary."""
    data, src = _ops_summary(config)
    row = data.get("arms", {}).get("scratch", {})
    if "rl_gain" not in row:
        gone = not_measured(
            f"no RL run on OpsAnalysis-v0 in {src}: run "
            "`transferlab ops experiment transfer --report-dir docs/results/transfer`"
        )
        return {"gain": gone, "worth": gone, "sft": gone, "explore": gone}
    g = row["rl_gain"]
    seeds = len(row.get("episodes_to_threshold", []))
    gain = Measure(
        100 * g["estimate"],
        "pts",
        f"GRPO - SFT held-out success of the from-scratch ops policy, {seeds} seeds (95% CI "
        f"[{100 * g['low']:+.1f}, {100 * g['high']:+.1f}] pts; mean rubric change per seed "
        + ", ".join(f"{r:+.2f}" for r in row.get("rubric_gain_per_seed", []))
        + f"; {src})",
        {"low": 100 * g["low"], "high": 100 * g["high"]},
    )
    cpu_h = float(row.get("ops_cpu_hours", float("nan")))
    worth = Measure(
        per_cost(100 * g["estimate"], cpu_h),
        "pts/CPU-h",
        f"GRPO gain {100 * g['estimate']:+.1f} pts over {cpu_h:.2f} CPU-hours of ops SFT + GRPO ({src})",
    )
    sft = row["stages"]["sft"]["success"]
    basic = Measure(
        sft["estimate"],
        "success",
        f"ops SFT held-out success (rubric >= 8), 95% CI [{sft['low']:.2f}, {sft['high']:.2f}] ({src})",
        {"low": sft["low"], "high": sft["high"]},
    )
    explore = (
        Measure(
            row["nonflat_group_share"],
            "non-flat",
            f"share of the ops GRPO run's groups with non-zero reward variance (dense rewards; {src})",
        )
        if "nonflat_group_share" in row
        else not_measured(f"no GRPO group statistics in {src}")
    )
    return {"gain": gain, "worth": worth, "sft": basic, "explore": explore}


def _ci(d: Mapping[str, Any], fmt: str = ".2f") -> str:
    return f"{format(d['estimate'], fmt)} [{format(d['low'], fmt)}, {format(d['high'], fmt)}]"


def transfer_rows(summary: Mapping[str, Any]) -> list[dict[str, str]]:
    """The transfer experiment per arm: success after SFT and at the end, GRPO's gain, episodes to the
    threshold per seed, and the two ops habits after SFT and at the end (95% intervals)."""
    rows = []
    for arm, row in summary.get("arms", {}).items():
        st = row["stages"]
        eps = ", ".join("never" if e is None else f"{e:.0f}" for e in row["episodes_to_threshold"])
        out = {
            "arm": arm,
            "SFT success": _ci(st["sft"]["success"]) if "sft" in st else "—",
            "end success": _ci(st["end"]["success"]) if "end" in st else "—",
            "GRPO gain": _ci(row["rl_gain"], "+.2f") if "rl_gain" in row else "—",
            f"episodes to {summary.get('threshold', 0):.0%}": eps,
        }
        for habit in ("query_before_concluding", "check_before_reporting"):
            if "sft" in st and "end" in st:
                before, after = st["sft"]["habits"][habit], st["end"]["habits"][habit]
                out[f"{habit} (SFT -> end)"] = f"{before['estimate']:.2f} -> {after['estimate']:.2f}"
            else:
                out[f"{habit} (SFT -> end)"] = "—"
        rows.append(out)
    return rows


def _clustered_success(rows: list[dict[str, str]], transfer: Result) -> None:
    """Replace the rows' pooled success intervals with the result's seed-clustered ones."""
    for row in rows:
        for column, name in (("SFT success", f"{row['arm']}_sft"), ("end success", row["arm"])):
            if name in transfer.arms:
                h = transfer.arms[name].held_out_success
                row[column] = f"{h.estimate:.2f} [{h.ci[0]:.2f}, {h.ci[1]:.2f}]"


def measure_transfer(config: CompareConfig, result: CompareResult, say: Progress) -> None:
    """Read the transfer experiment's committed summary into ``result.transfer``; where its
    ``result.json`` lies next to it, the success cells and transfer - scratch are the seed-clustered
    figures from there (with the MDE), else the summary's episode-pooled ones, labelled as such."""
    from transferlab.platform.results import read_result

    say("transfer: committed summary")
    data, src = _ops_summary(config)
    result.transfer, result.transfer_source = transfer_rows(data), src
    clustered = Path(src).with_name("result.json")
    if data and clustered.is_file():
        transfer = read_result(clustered)
        _clustered_success(result.transfer, transfer)
        lines = [c.sentence() for c in transfer.comparisons if c.cluster == "seed"]
        result.transfer_source = (
            f"{src} and {clustered} (success: 95% intervals clustered by seed; GRPO gain: paired over "
            f"episodes); {'; '.join(lines)}"
        )
    elif data and "transfer_minus_scratch" in data:
        diff = _ci(data["transfer_minus_scratch"], "+.2f")
        result.transfer_source = (
            f"{src} (95% bootstrap intervals over episodes, not clustered by seed); transfer - scratch "
            f"at the end: {diff}"
        )


def _human_agreement(path: str) -> dict[str, Any]:
    """The reviewers-vs-rubric agreement file; ``ValueError`` naming the fix when it is not one."""
    fix = "pass the file that `transferlab review reports agreement --out` writes"
    data = read_json_object(path, fix)
    missing = {"spearman", "mean_abs_diff", "n"} - set(data)
    if missing:
        raise ValueError(f"{path} lacks {sorted(missing)}: {fix}")
    return data


def check_inputs(config: CompareConfig) -> None:
    """Read every result file the config names before anything is measured, so a bad one fails in a
    second, not after the measuring; ``ValueError`` naming the file and the fix."""
    from transferlab.platform.results import read_result

    _ops_summary(config)
    if config.human_agreement is not None:
        _human_agreement(config.human_agreement)
    if config.ops_learn_result is not None:
        read_result(config.ops_learn_result)


def with_humans(agree: Measure, path: str | None) -> Measure:
    """The rubric-vs-second-grader measure, with the rubric-vs-humans agreement added when rated."""
    how = "review app: "
    if path is None or not Path(path).is_file():
        how += (
            "no human ratings given (rate reports on the app's 'Rate reports' page, then "
            "`transferlab review reports agreement --out FILE` and `--human-agreement FILE`)"
        )
        return Measure(agree.value, agree.unit, f"{agree.how}; {how}", agree.extra)
    data = _human_agreement(path)
    how += (
        f"rubric vs reviewers on {data['n']} rated reports: Spearman {data['spearman']:.2f}, "
        f"mean |diff| {data['mean_abs_diff']:.2f} points"
    )
    extra = agree.extra | {"human": data}
    return Measure(agree.value, agree.unit, f"{agree.how}; {how}", extra)


def ops_with_trained_runs(config: CompareConfig, say: Progress) -> Measured:
    """The ops column: OpsAnalysis-v0 measured, with the trained policy's figures from the transfer
    experiment's summary (RL gain and its worth, SFT success, GRPO's groups) and the reviewers'
    agreement with the rubric when rated."""
    measured = measure_ops(
        config.replays, config.ops_tasks, config.ops_episodes, config.random_reports, config.group_size, say
    )
    table, questions, diagnosis = (
        measured.sections["ops_analysis"][k] for k in ("table", "questions", "diagnosis")
    )
    table["objectivity"] = with_humans(table["objectivity"], config.human_agreement)
    learned = _ops_learned(config)
    if learned["explore"].measured:
        questions["explore"] = learned["explore"]
    if learned["sft"].measured:
        diagnosis["basic"] = learned["sft"]
    table["tool_use"] = diagnosis["sequential"] = learned["gain"]
    questions["worth_cost"] = learned["worth"]
    return measured


# ------------------------------------------------------------------------------ committed results

OPS_LEARN = "ops_learn/seven_seeds/result.json"
"""The ops GRPO result compare reads by default: the preset's seven seeds pooled."""

COMMITTED: tuple[str, ...] = (
    "coding_learn/result.json",
    "coding_agent_learn/result.json",
    "coding_dense_sparse/result.json",
    "ops_learn/result.json",
    OPS_LEARN,
    "ops_learn_rft/result.json",
    "transfer/summary.json",
    "offline_rl/result.json",
)
"""The committed results compare reads cells from (relative to ``results_dir``)."""


def results_root(configured: str | Path) -> Path:
    """The folder of committed results: ``configured`` when it is a folder (or absolute); else, for a
    relative path, the same path in the repository beside the package, if there is one there. So
    ``transferlab compare`` run outside the repository root still finds ``docs/results``."""
    path = Path(configured)
    if path.is_dir() or path.is_absolute():
        return path
    beside = Path(__file__).resolve().parents[2] / path
    return beside if beside.is_dir() else path


def missing_results(root: str | Path) -> list[str]:
    """The committed result files compare would read that are not under ``root``."""
    return [str(Path(root, name)) for name in COMMITTED if not Path(root, name).is_file()]


# -------------------------------------------------------------------------------- matched results

MATCHED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("coding multi-turn", "coding_agent_learn", ("rl - sft", "rl - rft", "rft - sft")),
    ("ops multi-turn", "ops_learn/seven_seeds", ("rl - sft",)),
    ("ops multi-turn, RFT first", "ops_learn_rft", ("rft - sft", "rft_rl - sft", "rft_rl - rft")),
    ("coding single-step", "coding_learn", ("grpo - sft",)),
)
"""(label, committed result directory, comparisons copied): the RL-vs-baseline results set side by
side, multi-turn agent RL in both domains first and the single-step toy result on its own."""


def matched_results(
    results_dir: str | Path, overrides: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """The committed experiments' arms and comparisons, renamed ``"<label>: <name>"``, in the shared
    result schema; ``overrides`` maps a result directory's name to another result.json. A missing
    result.json is listed under ``missing`` instead of silently skipped."""
    from transferlab.platform.results import read_result

    arms: dict[str, Any] = {}
    comparisons: list[dict[str, Any]] = []
    seeds: set[int] = set()
    sources: dict[str, str] = {}
    missing: list[str] = []
    for label, directory, names in MATCHED:
        path = Path((overrides or {}).get(directory) or Path(results_dir, directory, "result.json"))
        if not path.is_file():
            missing.append(str(path))
            continue
        result = read_result(path)
        sources[label] = str(path)
        seeds.update(result.seeds)
        for name, arm in result.arms.items():
            arms[f"{label}: {name}"] = {
                "held_out_success": arm.held_out_success.model_dump(),
                "n_episodes": arm.n_episodes,
            }
        for c in result.comparisons:
            if c.name in names:
                comparisons.append({**c.model_dump(), "name": f"{label}: {c.name}"})
    return {
        "arms": arms,
        "comparisons": comparisons,
        "seeds": sorted(seeds),
        "sources": {**sources, **({"missing": missing} if missing else {})},
    }


def matched_rows(matched: Mapping[str, Any]) -> list[dict[str, str]]:
    """One report row per matched comparison: clusters, difference and MDE in points, verdict."""
    from transferlab.platform.results import Comparison

    rows = []
    for raw in matched.get("comparisons", []):
        c = Comparison.model_validate(raw)
        lo, hi = (100 * x for x in c.ci)
        rows.append(
            {
                "comparison": c.name,
                "clusters": f"{c.n_clusters} x {c.cluster}",
                "difference (points)": f"{100 * c.estimate:+.1f} [{lo:+.1f}, {hi:+.1f}]",
                "MDE (points)": f"{100 * c.mde:.1f}",
                "verdict": c.verdict,
            }
        )
    return rows


# ---------------------------------------------------------------------------------------- the run


def run_compare(
    config: CompareConfig,
    out_dir: Path,
    progress: Progress | None = None,
    command: str = "transferlab compare",
) -> CompareResult:
    """Measure every family, then write ``config.json``, ``result.json`` and the report into ``out_dir``;
    ``command`` is the command line recorded in result.json and the report."""
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    config = config.model_copy(update={"results_dir": str(results_root(config.results_dir))})
    for path in missing_results(config.results_dir):
        say(f"not found: {path}; the cells read from it show 'not measured' (pass --results-dir DIR)")
    result = CompareResult(config, command=command)
    sections: dict[str, Section] = {}
    for measured in (
        measure_coding(
            config.replays,
            config.agreement_pairs,
            config.coding_episodes,
            config.backend,
            config.results_dir,
            say,
        ),
        ops_with_trained_runs(config, say),
        measure_campaign(
            config.world_customers,
            config.sim_log_days,
            config.world_seeds,
            config.campaign_jobs,
            config.campaign_batch,
            config.group_size,
            say,
        ),
    ):
        sections.update(measured.sections)
        result.throughput.update(measured.throughput)
        result.panel.update(measured.panel)
    sections["campaign_offline"] = measure_offline(config.results_dir, sections["market"]["table"], say)
    measure_transfer(config, result, say)
    result.matched = matched_results(config.results_dir, {"ops_learn/seven_seeds": config.ops_learn_result})
    result.domain_settings = settings_table(config.results_dir)
    result.table = {
        p: {f: sections[f]["table"].get(p) or not_measured(f"{f} has no such task") for f in FAMILIES}
        for p in PROPERTIES
    }
    result.questions = {f: sections[f]["questions"] for f in QUESTION_FAMILIES}
    result.diagnosis = {f: sections[f]["diagnosis"] for f in QUESTION_FAMILIES}
    result.wall_s = time.perf_counter() - t0
    result.run_dir = Path(out_dir)
    say("writing the report")
    out = Path(out_dir)
    config.save(out / "config.json")
    atomic_write_json(out / "result.json", result.to_dict())
    write_report(result, out)
    return result


def table_rows(result: CompareResult) -> list[dict[str, str]]:
    return [
        {"property": PROPERTIES[p], **{f: result.table[p][f].cell() for f in FAMILIES}} for p in PROPERTIES
    ]


def _width(text: str) -> int:
    """Terminal columns of ``text`` (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _text_table(rows: list[dict[str, str]]) -> str:
    cols = list(rows[0])
    width = {c: max(_width(c), *(_width(r[c]) for r in rows)) for c in cols}

    def pad(text: str, c: str) -> str:
        return text + " " * (width[c] - _width(text))

    line = " | ".join(pad(c, c) for c in cols)
    sep = "-+-".join("-" * width[c] for c in cols)
    return "\n".join([line, sep, *(" | ".join(pad(r[c], c) for c in cols) for r in rows)])


def table_text(result: CompareResult) -> str:
    """The domain table with measured numbers, then the four readiness questions and three layers."""
    questions = [
        {"question": QUESTIONS[q], **{f: result.questions[f][q].cell() for f in QUESTION_FAMILIES}}
        for q in QUESTIONS
    ]
    layers = [
        {"layer": LAYERS[k], **{f: result.diagnosis[f][k].cell() for f in QUESTION_FAMILIES}} for k in LAYERS
    ]
    parts = [_text_table(table_rows(result)), _text_table(questions), _text_table(layers)]
    if result.transfer:
        parts.append(f"transfer coding -> ops ({result.transfer_source})\n" + _text_table(result.transfer))
    return "\n\n".join(parts)


def _how(rows: Mapping[str, Mapping[str, Measure]], names: Mapping[str, str]) -> list[str]:
    return [
        f"{names[k]} / {f}: {meas.cell()} — {meas.how}" for k, row in rows.items() for f, meas in row.items()
    ]


def _throughput_figure(result: CompareResult) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    names = list(result.throughput)
    x = np.arange(len(names))
    for j, w in enumerate((1, 2)):
        rates = [result.throughput[k][w]["eps_per_s"] for k in names]
        bars = ax.bar(x + (j - 0.5) * 0.38, rates, 0.38, label=f"{w} worker{'s' if w > 1 else ''}")
        ax.bar_label(bars, labels=[f"{r:.0f}" for r in rates], fontsize=7, padding=2)
    shop = 1 / (30 * SECONDS_PER_DAY)
    ax.axhline(shop, color="C3", linestyle="--", label="a real shop: one 30-day episode")
    ax.set_yscale("log")
    ax.set_xticks(x, names)
    ax.set_ylabel("episodes per second (log scale)")
    fig.legend(loc="outside lower center", ncols=3, frameon=False, fontsize="small")  # never over a bar
    return fig


def _panel_figure(panel: Mapping[str, Mapping[str, float]]) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 4.2), layout="constrained")
    ax, key = fig.subplots(1, 2, width_ratios=(3, 1.4))
    ordered = sorted(panel.items(), key=lambda item: -item[1]["profit"])  # 1 = the most profitable
    for i, (_, v) in enumerate(ordered, start=1):  # a number at each point, the names in a key beside:
        ax.scatter(v["gmv"], v["profit"], color="C0")  # names at the points overlap when policies tie
        ax.annotate(str(i), (v["gmv"], v["profit"]), xytext=(4, 3), textcoords="offset points", fontsize=8)
    ax.set_xlabel("GMV per 30-day episode ($)")
    ax.set_ylabel("profit per 30-day episode ($)")
    ax.grid(True, alpha=0.3)
    key.axis("off")
    lines = [f"{i:>2}  {name}" for i, (name, _) in enumerate(ordered, start=1)]
    key.text(0.0, 1.0, "\n".join(lines), va="top", ha="left", family="monospace", fontsize=7.5)
    return fig


def write_report(result: CompareResult, out: Path) -> Any:
    from transferlab.platform.reports import Report

    report = Report("Coding vs ecommerce: design note 000's domain table, measured")
    report.paragraph(
        "Each cell is a number measured in this run (or read from a committed result, which it says); the "
        f"run took {result.wall_s:.0f} s. How each was measured is listed under the tables."
    )
    report.heading("The domain table (design note 000)")
    report.table(table_rows(result))
    report.heading("RL against its baselines, side by side")
    if result.matched.get("comparisons"):
        report.table(matched_rows(result.matched))
        report.paragraph(
            "Held-out success, from the committed experiments ("
            + ", ".join(f"{k}: {v}" for k, v in result.matched["sources"].items() if k != "missing")
            + "); 95% two-stage bootstrap intervals clustered by seed or by (seed, task); MDE = the "
            "smallest true difference the interval's width would detect with 80% power."
        )
    missing = result.matched.get("sources", {}).get("missing", [])
    if missing:
        report.paragraph("Not found, so not in this table: " + ", ".join(missing) + ".")
    if result.domain_settings:
        report.heading("The settings of the two domains' multi-turn experiments")
        report.table(result.domain_settings)
        report.paragraph(
            "Read from each result's settings ("
            + ", ".join(f"{d}: {f}/result.json" for d, f in SETTINGS_SOURCES.items())
            + "); where the domains differ, the last column says why."
        )
    report.heading("Four questions before RL (design note 004)")
    report.table(
        [
            {"question": QUESTIONS[q], **{f: result.questions[f][q].cell() for f in QUESTION_FAMILIES}}
            for q in QUESTIONS
        ]
    )
    report.heading("Three-layer diagnosis (design note 004)")
    report.table(
        [
            {"layer": LAYERS[k], **{f: result.diagnosis[f][k].cell() for f in QUESTION_FAMILIES}}
            for k in LAYERS
        ]
    )
    report.heading("The transfer experiment: coding-pretrained vs from scratch on ops")
    if result.transfer:
        report.table(result.transfer)
        report.paragraph(
            f"From {result.transfer_source} (held-out success = rubric >= 8; the full report with "
            "curves is docs/results/transfer/report.md)."
        )
    else:
        report.paragraph(f"Not run: no transfer summary at {result.transfer_source}.")
    report.figure(
        _throughput_figure(result), "throughput", "Episodes per second on 1 and 2 workers (log scale)."
    )
    if result.panel:
        report.figure(
            _panel_figure(result.panel), "gmv_profit", "GMV vs profit of the policy panel in the world."
        )
    report.heading("How each number was measured")
    report.bullets(_how(result.table, PROPERTIES))
    report.bullets(
        _how({q: {f: result.questions[f][q] for f in QUESTION_FAMILIES} for q in QUESTIONS}, QUESTIONS)
    )
    report.bullets(_how({k: {f: result.diagnosis[f][k] for f in QUESTION_FAMILIES} for k in LAYERS}, LAYERS))
    report.code(json.dumps(result.config.to_dict(), indent=1), "json")
    report.code(result.command)
    return report.write(out)
