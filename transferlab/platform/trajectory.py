"""The trajectory schema shared by the coding and the ecommerce sides: one record per environment step.

An episode is a prompt followed by alternating policy actions and environment observations::

    prompt_ids + action_ids[0] + observation_ids[0] + action_ids[1] + observation_ids[1] + ...

**Exact token ids, never re-tokenised.** ``action_ids`` are the ids the policy *sampled*, in order,
including the stop token it sampled (e.g. ``<|im_end|>``); ``observation_ids`` (and ``prompt_ids``) are
exactly the ids that were fed to the model after the action, including any chat-template tokens that
wrap the observation (e.g. ``\\n<|im_start|>user\\n ... <|im_end|>\\n<|im_start|>assistant\\n``). The
``*_text`` fields are for humans and debugging only: nothing here ever tokenises them, so a training
sequence is bit-for-bit the sequence the policy saw and produced. Mask and tokenisation drift at turn
boundaries (re-tokenising the conversation, a dropped separator) is the most reported bug in RL
trainers; this schema makes it impossible by construction.

**The prompt** (the initial observation, after ``reset``) is stored on the first step only, in
``prompt_text`` / ``prompt_ids``; these fields must be empty on every later step. ``observation_*`` of
step ``t`` is the observation that *followed* action ``t`` (it may be empty after the final action).

**Rewards.** ``reward`` is the step's total reward (what the trainer optimises); ``reward_components``
break it down (e.g. ``{"tests_passed": 1.0, "format": -0.1}``) and need not sum to it (weights may
apply). For training, each step's reward is placed on that step's *last action token*
(``token_rewards``), so dense per-turn rewards reach the trainer and returns / GAE can assign credit.

On disk: ``trajectories.parquet`` in the run directory (:data:`TRAJECTORIES_FILE`), one row per step,
list columns for ids and log-probs, dicts as JSON strings. Write with :class:`TrajectoryWriter`, read
with :func:`read_trajectories`, and turn into padded trainer tensors with :func:`to_tensors`::

    with TrajectoryWriter(run.dir / TRAJECTORIES_FILE) as writer:
        writer.add(Trajectory([StepRecord(episode_id="ep-0", step=0, ...), ...]))
    batch = to_tensors(read_trajectories(run.dir / TRAJECTORIES_FILE), pad_id=tok.pad_token_id)
    loss = -(batch["loss_mask"] * logp).sum() / batch["loss_mask"].sum()
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self, TypedDict, cast, get_args

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transferlab.platform.io import AtomicRewriter, atomic_write_bytes

if TYPE_CHECKING:
    import torch

__all__ = [
    "COLUMNS",
    "DOMAINS",
    "MAX_INFO_CHARS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TRAJECTORIES_FILE",
    "Domain",
    "StepRecord",
    "Trajectory",
    "TrajectoryBatch",
    "TrajectoryWriter",
    "read_trajectories",
    "to_tensors",
]

_log = logging.getLogger(__name__)

Domain = Literal["coding", "ecommerce"]
DOMAINS: tuple[str, ...] = get_args(Domain)
"""Allowed values of :attr:`StepRecord.domain`."""

TRAJECTORIES_FILE: Final = "trajectories.parquet"
"""File name of the trajectory table inside a run directory."""

SCHEMA_VERSION: Final = 1
"""Bumped on any incompatible change of :data:`SCHEMA`; stored in the Parquet file metadata."""

MAX_INFO_CHARS: Final = 16_384
"""Upper bound on the JSON size of a step's ``info`` (keep it small; put big things in artifacts)."""

_VERSION_KEY: Final = b"transferlab.trajectory.schema_version"
_MAX_ID: Final = 2**63 - 1  # ids are stored as int64

SCHEMA: Final = pa.schema(
    [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("prompt_text", pa.string(), nullable=False),
        pa.field("prompt_ids", pa.list_(pa.int64()), nullable=False),
        pa.field("action_text", pa.string(), nullable=False),
        pa.field("action_ids", pa.list_(pa.int64()), nullable=False),
        pa.field("action_logprobs", pa.list_(pa.float64()), nullable=True),  # null: none supplied
        pa.field("observation_text", pa.string(), nullable=False),
        pa.field("observation_ids", pa.list_(pa.int64()), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("reward_components", pa.string(), nullable=False),  # JSON object str -> float
        pa.field("terminated", pa.bool_(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
        pa.field("info", pa.string(), nullable=False),  # JSON object
        pa.field("timings", pa.string(), nullable=False),  # JSON object str -> float (seconds)
    ]
)
"""Arrow schema of the trajectory table: one row per step."""

COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)
"""Columns of the trajectory table, in order."""

_JSON_COLUMNS: Final = ("reward_components", "info", "timings")


# ---------------------------------------------------------------------------------------- validation


def _is_int(value: object) -> bool:
    """True for ints (numpy ints included) but not bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _is_real(value: object) -> bool:
    """True for real numbers (numpy scalars included) but not bools."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _check_ids(ids: object, where: str) -> None:
    """Raise ``ValueError`` unless ``ids`` is a list of non-negative ints."""
    if not isinstance(ids, list):
        raise ValueError(f"{where} must be a list of token ids, got {type(ids).__name__}")
    if not ids:
        return
    try:  # fast path: one numpy pass (episodes run to tens of thousands of tokens)
        arr = np.asarray(ids)
        if arr.ndim == 1 and arr.dtype.kind in "iu" and arr.min() >= 0:
            return
    except (TypeError, ValueError, OverflowError):
        pass
    for i, tok in enumerate(ids):
        if not _is_int(tok) or tok < 0 or tok > _MAX_ID:
            raise ValueError(f"{where}[{i}] must be a non-negative int token id, got {tok!r}")


def _check_float_map(value: object, where: str, non_negative: bool = False) -> None:
    """Raise ``ValueError`` unless ``value`` maps str keys to finite reals (``>= 0`` if asked)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a dict[str, float], got {type(value).__name__}")
    for key, number in value.items():
        if not isinstance(key, str):
            raise ValueError(f"{where} keys must be str, got {key!r}")
        if not _is_real(number) or not math.isfinite(number):
            raise ValueError(f"{where}[{key!r}] must be a finite number, got {number!r}")
        if non_negative and number < 0:
            raise ValueError(f"{where}[{key!r}] must be >= 0, got {number!r}")


def _info_json(info: object, where: str) -> str:
    """``info`` as compact, sorted JSON; ``ValueError`` if it is not a small JSON-able dict."""
    if not isinstance(info, Mapping):
        raise ValueError(f"{where} must be a JSON-able dict, got {type(info).__name__}")
    try:
        text = json.dumps(info, sort_keys=True, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where} is not JSON-serialisable: {exc}") from None
    if len(text) > MAX_INFO_CHARS:
        raise ValueError(
            f"{where} is {len(text)} characters of JSON, over MAX_INFO_CHARS={MAX_INFO_CHARS}; "
            "keep info small and write large payloads as run artifacts"
        )
    return text


def _float_map_json(value: Mapping[str, float]) -> str:
    """A validated ``dict[str, float]`` as sorted JSON (``repr`` floats round-trip exactly)."""
    return json.dumps({k: float(v) for k, v in value.items()}, sort_keys=True, allow_nan=False)


# ---------------------------------------------------------------------------------------- records


@dataclass(kw_only=True)
class StepRecord:
    """One environment step: the policy's action, the observation that followed, reward and timings.

    All fields are keyword-only. See the module docstring for what the id fields must contain.
    """

    episode_id: str
    """Unique id of the episode this step belongs to."""
    step: int
    """0-based step number within the episode; steps are consecutive."""
    task_id: str
    """Id of the task / scenario the episode ran."""
    domain: Domain
    """``"coding"`` or ``"ecommerce"``."""
    action_text: str
    """Decoded text of ``action_ids`` (for humans; never re-tokenised)."""
    action_ids: list[int]
    """The token ids the policy sampled, in order, including a sampled stop token. Not empty."""
    observation_text: str
    """Text of the observation that followed the action (for humans; never re-tokenised)."""
    observation_ids: list[int]
    """Token ids fed to the model after the action (template tokens included); may be empty."""
    reward: float
    """Total reward of this step."""
    action_logprobs: list[float] | None = None
    """Per-token log-probs under the sampling policy (same length as ``action_ids``), or None."""
    reward_components: dict[str, float] = field(default_factory=dict)
    """Named parts of the reward (need not sum to ``reward``)."""
    terminated: bool = False
    """The episode ended in a terminal state after this step (only allowed on the last step)."""
    truncated: bool = False
    """The episode was cut (step / time / context limit) after this step (only on the last step)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Small JSON-able extras (at most :data:`MAX_INFO_CHARS` of JSON)."""
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent, e.g. ``{"policy_s": 1.2, "env_s": 0.1, "sandbox_s": 0.8}``."""
    prompt_text: str = ""
    """Step 0 only: the initial observation's text (empty on later steps)."""
    prompt_ids: list[int] = field(default_factory=list)
    """Step 0 only: the initial prompt's token ids (empty on later steps)."""

    def validate(self) -> None:
        """Check this record on its own; raise ``ValueError`` naming the step and field at fault."""
        where = f"step {self.step!r} of episode {self.episode_id!r}"
        if not _is_int(self.step) or self.step < 0:
            raise ValueError(f"{where}: step must be a non-negative int, got {self.step!r}")
        for name in ("episode_id", "task_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{where}: {name} must be a non-empty str, got {value!r}")
        if self.domain not in DOMAINS:
            raise ValueError(f"{where}: domain must be one of {list(DOMAINS)}, got {self.domain!r}")
        for name in ("action_text", "observation_text", "prompt_text"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{where}: {name} must be a str, got {type(getattr(self, name)).__name__}")
        for name in ("action_ids", "observation_ids", "prompt_ids"):
            _check_ids(getattr(self, name), f"{where}: {name}")
        if not self.action_ids:
            raise ValueError(
                f"{where}: action_ids is empty; a step needs at least one sampled token "
                "(a sampled stop token counts)"
            )
        self._validate_logprobs(where)
        if self.step > 0 and (self.prompt_ids or self.prompt_text):
            raise ValueError(
                f"{where}: prompt_text/prompt_ids must be empty after step 0 (the prompt lives on step 0; "
                "later observations go in observation_text/observation_ids of the previous step)"
            )
        if not _is_real(self.reward) or not math.isfinite(self.reward):
            raise ValueError(f"{where}: reward must be a finite number, got {self.reward!r}")
        _check_float_map(self.reward_components, f"{where}: reward_components")
        _check_float_map(self.timings, f"{where}: timings", non_negative=True)
        for name in ("terminated", "truncated"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{where}: {name} must be a bool, got {getattr(self, name)!r}")
        if self.terminated and self.truncated:
            raise ValueError(
                f"{where}: terminated and truncated are both true; an episode either reached a terminal "
                "state (terminated) or was cut by a limit (truncated), not both"
            )
        _info_json(self.info, f"{where}: info")

    def _validate_logprobs(self, where: str) -> None:
        """Check ``action_logprobs``: None, or finite floats, one per action token."""
        if self.action_logprobs is None:
            return
        if not isinstance(self.action_logprobs, list):
            raise ValueError(
                f"{where}: action_logprobs must be a list of floats or None, "
                f"got {type(self.action_logprobs).__name__}"
            )
        if len(self.action_logprobs) != len(self.action_ids):
            raise ValueError(
                f"{where}: action_logprobs has {len(self.action_logprobs)} values but action_ids has "
                f"{len(self.action_ids)} tokens; they must be the same length"
            )
        try:  # fast path: one numpy pass
            if bool(np.isfinite(np.asarray(self.action_logprobs, dtype=np.float64)).all()):
                return
        except (TypeError, ValueError):
            pass
        for i, lp in enumerate(self.action_logprobs):
            if not _is_real(lp) or not math.isfinite(lp):
                raise ValueError(f"{where}: action_logprobs[{i}] must be a finite float, got {lp!r}")

    @property
    def done(self) -> bool:
        """``terminated or truncated``."""
        return bool(self.terminated or self.truncated)


@dataclass
class Trajectory:
    """One episode: its steps in order (the prompt lives on ``steps[0]``).

    The full token sequence is ``prompt_ids + (action_ids + observation_ids)`` over the steps; the loss
    mask is 1 exactly on action tokens.
    """

    steps: list[StepRecord]

    def __len__(self) -> int:
        return len(self.steps)

    def _first(self) -> StepRecord:
        if not self.steps:
            raise ValueError("trajectory has no steps")
        return self.steps[0]

    @property
    def episode_id(self) -> str:
        """The episode id (of the first step)."""
        return self._first().episode_id

    @property
    def task_id(self) -> str:
        """The task id (of the first step)."""
        return self._first().task_id

    @property
    def domain(self) -> Domain:
        """The domain (of the first step)."""
        return self._first().domain

    @property
    def prompt_text(self) -> str:
        """The initial observation's text (``steps[0].prompt_text``)."""
        return self._first().prompt_text

    @property
    def prompt_ids(self) -> list[int]:
        """The initial prompt's ids (``steps[0].prompt_ids``)."""
        return self._first().prompt_ids

    @property
    def total_reward(self) -> float:
        """Undiscounted sum of the step rewards."""
        return math.fsum(s.reward for s in self.steps)

    @property
    def terminated(self) -> bool:
        """The last step reached a terminal state."""
        return bool(self.steps and self.steps[-1].terminated)

    @property
    def truncated(self) -> bool:
        """The last step was cut by a limit."""
        return bool(self.steps and self.steps[-1].truncated)

    @property
    def num_tokens(self) -> int:
        """Length of :meth:`token_ids`."""
        return len(self.prompt_ids) + sum(len(s.action_ids) + len(s.observation_ids) for s in self.steps)

    def validate(self) -> Self:
        """Check every step and the episode as a whole; raise ``ValueError`` naming the step and field.

        Returns ``self`` so it can be chained.
        """
        if not self.steps:
            raise ValueError("trajectory has no steps; an episode needs at least one action")
        first = self.steps[0]
        for index, rec in enumerate(self.steps):
            if not isinstance(rec, StepRecord):
                raise ValueError(f"steps[{index}] must be a StepRecord, got {type(rec).__name__}")
            rec.validate()
            where = f"step {rec.step} of episode {first.episode_id!r}"
            if rec.step != index:
                raise ValueError(
                    f"{where}: step numbers must be consecutive from 0; expected step {index} at position "
                    f"{index}, got {rec.step}"
                )
            for name in ("episode_id", "task_id", "domain"):
                mine, theirs = getattr(rec, name), getattr(first, name)
                if mine != theirs:
                    raise ValueError(f"{where}: {name} {mine!r} differs from step 0's {theirs!r}")
            if rec.done and index != len(self.steps) - 1:
                flag = "terminated" if rec.terminated else "truncated"
                raise ValueError(
                    f"{where}: {flag} is true but {len(self.steps) - 1 - index} step(s) follow it; "
                    "only the last step may end the episode"
                )
        return self

    def action_spans(self) -> list[tuple[int, int]]:
        """``[start, end)`` positions of each step's action tokens in :meth:`token_ids`."""
        spans: list[tuple[int, int]] = []
        pos = len(self.prompt_ids)
        for rec in self.steps:
            spans.append((pos, pos + len(rec.action_ids)))
            pos += len(rec.action_ids) + len(rec.observation_ids)
        return spans

    def _lengths(self) -> np.ndarray:
        """Segment lengths ``[prompt, action_0, obs_0, action_1, obs_1, ...]``."""
        lens = [len(self.prompt_ids)]
        for rec in self.steps:
            lens += [len(rec.action_ids), len(rec.observation_ids)]
        return np.asarray(lens, dtype=np.int64)

    def ids_array(self) -> np.ndarray:
        """:meth:`token_ids` as an int64 array (no Python-level loop over tokens)."""
        pieces = [np.asarray(self.prompt_ids, dtype=np.int64)]
        for rec in self.steps:
            pieces += [
                np.asarray(rec.action_ids, dtype=np.int64),
                np.asarray(rec.observation_ids, dtype=np.int64),
            ]
        return np.concatenate(pieces)

    def mask_array(self) -> np.ndarray:
        """:meth:`loss_mask` as an int64 array."""
        pattern = np.zeros(1 + 2 * len(self.steps), dtype=np.int64)
        pattern[1::2] = 1  # the action segments
        return np.repeat(pattern, self._lengths())

    def logprobs_array(self) -> np.ndarray:
        """:meth:`logprobs` as a float64 array (NaN on non-policy tokens and where none was supplied)."""
        pieces = [np.full(len(self.prompt_ids), np.nan)]
        for rec in self.steps:
            lps = rec.action_logprobs
            pieces.append(
                np.full(len(rec.action_ids), np.nan) if lps is None else np.asarray(lps, dtype=np.float64)
            )
            pieces.append(np.full(len(rec.observation_ids), np.nan))
        return np.concatenate(pieces)

    def token_ids(self) -> list[int]:
        """The full sequence ``prompt + (action + observation)*`` of stored ids (never re-tokenised)."""
        return cast(list[int], self.ids_array().tolist())

    def loss_mask(self) -> list[int]:
        """1 on every action (policy) token, 0 on every prompt / observation token; aligned to ids."""
        return cast(list[int], self.mask_array().tolist())

    def logprobs(self) -> list[float]:
        """Sampling log-prob of each token; NaN on non-policy tokens and where none was supplied."""
        return cast(list[float], self.logprobs_array().tolist())

    def token_rewards(self) -> list[float]:
        """Each step's reward on that step's last action token, 0.0 elsewhere; aligned to ids."""
        out = [0.0] * self.num_tokens
        for rec, (_, end) in zip(self.steps, self.action_spans(), strict=True):
            out[end - 1] += float(rec.reward)
        return out

    def returns(self, gamma: float = 1.0) -> list[float]:
        """Discounted return-to-go per step: ``G_t = r_t + gamma * G_{t+1}`` (no bootstrap at the end).

        A truncated episode's last return is therefore a lower-information estimate; trainers that
        care should mask or bootstrap truncated episodes themselves.
        """
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        out = [0.0] * len(self.steps)
        running = 0.0
        for i in range(len(self.steps) - 1, -1, -1):
            running = float(self.steps[i].reward) + gamma * running
            out[i] = running
        return out


# ---------------------------------------------------------------------------------------- Parquet


def _table(trajectories: Sequence[Trajectory]) -> pa.Table:
    """Build the Arrow table (one row per step) for validated trajectories (Arrow converts the lists)."""
    cols: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for traj in trajectories:
        for rec in traj.steps:
            cols["episode_id"].append(rec.episode_id)
            cols["step"].append(int(rec.step))
            cols["task_id"].append(rec.task_id)
            cols["domain"].append(rec.domain)
            cols["prompt_text"].append(rec.prompt_text)
            cols["prompt_ids"].append(rec.prompt_ids)
            cols["action_text"].append(rec.action_text)
            cols["action_ids"].append(rec.action_ids)
            cols["action_logprobs"].append(rec.action_logprobs)
            cols["observation_text"].append(rec.observation_text)
            cols["observation_ids"].append(rec.observation_ids)
            cols["reward"].append(float(rec.reward))
            cols["reward_components"].append(_float_map_json(rec.reward_components))
            cols["terminated"].append(bool(rec.terminated))
            cols["truncated"].append(bool(rec.truncated))
            cols["info"].append(_info_json(rec.info, f"step {rec.step} of episode {rec.episode_id!r}: info"))
            cols["timings"].append(_float_map_json(rec.timings))
    schema = SCHEMA.with_metadata({_VERSION_KEY: str(SCHEMA_VERSION).encode()})
    return pa.Table.from_pydict(cols, schema=schema)


def _parquet_bytes(trajectories: Sequence[Trajectory]) -> bytes:
    """Serialise to Parquet in memory (so a serialisation failure never touches the target file)."""
    sink = pa.BufferOutputStream()
    pq.write_table(_table(trajectories), sink)
    return bytes(sink.getvalue().to_pybytes())


def write_trajectories(path: str | os.PathLike[str], trajectories: Sequence[Trajectory]) -> None:
    """Write ``trajectories`` (validated; unique episode ids) as one Parquet file, atomically."""
    ids = [t.validate().episode_id for t in trajectories]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: episode ids must be unique within a file")
    atomic_write_bytes(Path(path), _parquet_bytes(trajectories))


def _record(row: Mapping[str, Any]) -> StepRecord:
    """A :class:`StepRecord` from one table row (JSON columns decoded)."""
    comps = json.loads(row["reward_components"])
    timings = json.loads(row["timings"])
    return StepRecord(
        episode_id=row["episode_id"],
        step=row["step"],
        task_id=row["task_id"],
        domain=row["domain"],
        prompt_text=row["prompt_text"],
        prompt_ids=row["prompt_ids"],
        action_text=row["action_text"],
        action_ids=row["action_ids"],
        action_logprobs=row["action_logprobs"],
        observation_text=row["observation_text"],
        observation_ids=row["observation_ids"],
        reward=row["reward"],
        reward_components={k: float(v) for k, v in comps.items()},
        terminated=row["terminated"],
        truncated=row["truncated"],
        info=json.loads(row["info"]),
        timings={k: float(v) for k, v in timings.items()},
    )


def read_trajectories(path: str | os.PathLike[str], missing_ok: bool = False) -> list[Trajectory]:
    """Read a trajectory Parquet file: validated episodes in the order they were written.

    A missing file raises ``FileNotFoundError``, or gives ``[]`` when ``missing_ok``. A table that is
    not a trajectory table (missing columns, newer schema version) raises ``ValueError``.
    """
    p = Path(path)
    if not p.exists():
        if missing_ok:
            return []
        raise FileNotFoundError(f"trajectory file not found: {p}")
    table = pq.read_table(p)
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(
            f"{p} is not a trajectory table: missing columns {missing}; expected {list(COLUMNS)}"
        )
    version = int((table.schema.metadata or {}).get(_VERSION_KEY, b"1"))
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"{p} has trajectory schema version {version}, newer than this code's {SCHEMA_VERSION}; "
            "upgrade transferlab to read it"
        )
    episodes: dict[str, list[StepRecord]] = {}
    for row in table.select(list(COLUMNS)).to_pylist():
        rec = _record(row)
        episodes.setdefault(rec.episode_id, []).append(rec)
    out: list[Trajectory] = []
    for steps in episodes.values():
        steps.sort(key=lambda r: r.step)
        out.append(Trajectory(steps).validate())
    return out


class TrajectoryWriter(AtomicRewriter):
    """Collects episodes and (re)writes them to one Parquet file atomically.

    :meth:`add` validates an episode and buffers it; every ``flush_every`` episodes (and on
    :meth:`flush` / :meth:`close`) the whole file is rewritten through a temp file and ``os.replace``,
    so a reader (or a crash) never sees a partial file. If ``path`` already exists its episodes are
    loaded first and new ones are appended (resume). Episode ids must be unique within the file.
    Closing a writer that got no episodes still writes an empty table with the full schema.
    """

    def __init__(self, path: str | os.PathLike[str], flush_every: int = 50) -> None:
        self._init_rewriter(path, flush_every)
        self._episodes: list[Trajectory] = read_trajectories(self.path, missing_ok=True)
        self._ids: set[str] = {t.episode_id for t in self._episodes}
        self._closed = False

    @property
    def num_episodes(self) -> int:
        """Episodes held (loaded from disk + added), flushed or not."""
        return len(self._episodes)

    @property
    def num_steps(self) -> int:
        """Steps (rows) held, flushed or not."""
        return sum(len(t) for t in self._episodes)

    def add(self, trajectory: Trajectory) -> None:
        """Validate and buffer one episode; flush when ``flush_every`` episodes are pending."""
        self.extend([trajectory])

    def extend(self, trajectories: Iterable[Trajectory]) -> None:
        """Validate and buffer several episodes (all or none are added)."""
        if self._closed:
            raise RuntimeError("TrajectoryWriter is closed")
        batch = list(trajectories)
        seen: set[str] = set()
        for traj in batch:
            if not isinstance(traj, Trajectory):
                raise TypeError(f"expected a Trajectory, got {type(traj).__name__}")
            traj.validate()
            eid = traj.episode_id
            if eid in self._ids or eid in seen:
                raise ValueError(f"episode_id {eid!r} is already in {self.path}; episode ids must be unique")
            seen.add(eid)
        with self._lock:
            self._episodes.extend(batch)
            self._ids.update(seen)
            self._pending += len(batch) - 1  # _note_added counts the last one
            due = self._note_added(bool(batch))
        if due:
            self.flush()

    def _payload(self) -> bytes:
        """Every episode so far as a Parquet file (an empty table with the full schema if none)."""
        return _parquet_bytes(self._episodes)

    def close(self) -> None:
        """Flush and mark closed (idempotent)."""
        if self._closed:
            return
        self.flush()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ---------------------------------------------------------------------------------------- tensors


class TrajectoryBatch(TypedDict):
    """What :func:`to_tensors` returns: B×T tensors (left-aligned, right-padded) plus bookkeeping."""

    input_ids: torch.Tensor
    """long B×T: the stored token ids, ``pad_id`` after each sequence."""
    attention_mask: torch.Tensor
    """long B×T: 1 on real tokens, 0 on padding."""
    loss_mask: torch.Tensor
    """long B×T: 1 only on policy (action) tokens."""
    old_logprobs: torch.Tensor
    """float B×T: sampling log-probs on action tokens that have them, 0.0 elsewhere."""
    logprob_mask: torch.Tensor
    """long B×T: 1 where ``old_logprobs`` holds a supplied value."""
    token_rewards: torch.Tensor
    """float B×T: each step's reward on its last action token, 0.0 elsewhere."""
    seq_lens: torch.Tensor
    """long B: each episode's full length before truncation."""
    episode_ids: list[str]
    """Episode id of each row."""
    num_truncated: int
    """Episodes cut to ``max_len``."""
    num_truncated_tokens: int
    """Tokens dropped by truncation, over all episodes."""
    num_dropped_rewards: int
    """Step rewards lost because their last action token was cut off."""


def to_tensors(
    trajectories: Sequence[Trajectory],
    pad_id: int = 0,
    max_len: int | None = None,
    float_dtype: torch.dtype | None = None,
    validate: bool = True,
) -> TrajectoryBatch:
    """Pad episodes into trainer tensors (see :class:`TrajectoryBatch`).

    Sequences are left-aligned and right-padded with ``pad_id`` to the longest (kept) length.
    ``max_len`` truncates longer episodes keeping their *beginning*; how many episodes, tokens and step
    rewards were cut is returned and logged as a warning. ``float_dtype`` (default ``torch.float32``) is
    used for ``old_logprobs`` and ``token_rewards``. Each episode is validated first unless
    ``validate=False`` (e.g. fresh from :func:`read_trajectories`, which already did). Torch is imported
    here, not at module import.
    """
    import torch

    if not _is_int(pad_id) or pad_id < 0:
        raise ValueError(f"pad_id must be a non-negative int, got {pad_id!r}")
    if max_len is not None and (not _is_int(max_len) or max_len < 1):
        raise ValueError(f"max_len must be a positive int or None, got {max_len!r}")
    dtype = float_dtype if float_dtype is not None else torch.float32
    if validate:
        for traj in trajectories:
            traj.validate()
    full = [t.num_tokens for t in trajectories]
    kept = [n if max_len is None else min(n, max_len) for n in full]
    b, width = len(trajectories), max(kept, default=0)
    ids = np.full((b, width), pad_id, dtype=np.int64)
    attn = np.zeros((b, width), dtype=np.int64)
    mask = np.zeros((b, width), dtype=np.int64)
    lp = np.zeros((b, width), dtype=np.float64)
    lp_mask = np.zeros((b, width), dtype=np.int64)
    rewards = np.zeros((b, width), dtype=np.float64)
    dropped = 0
    for i, traj in enumerate(trajectories):
        n = kept[i]
        ids[i, :n] = traj.ids_array()[:n]
        attn[i, :n] = 1
        mask[i, :n] = traj.mask_array()[:n]
        row_lp = traj.logprobs_array()[:n]
        has = ~np.isnan(row_lp)
        lp[i, :n] = np.where(has, row_lp, 0.0)
        lp_mask[i, :n] = has
        for rec, (_, end) in zip(traj.steps, traj.action_spans(), strict=True):
            if end <= n:
                rewards[i, end - 1] += float(rec.reward)
            else:
                dropped += 1
    num_truncated = sum(1 for f, k in zip(full, kept, strict=True) if k < f)
    num_truncated_tokens = sum(full) - sum(kept)
    if num_truncated:
        _log.warning(
            "to_tensors: truncated %d of %d episode(s) to max_len=%s, dropping %d token(s) and %d step "
            "reward(s) whose last action token was cut",
            num_truncated,
            b,
            max_len,
            num_truncated_tokens,
            dropped,
        )
    return TrajectoryBatch(
        input_ids=torch.from_numpy(ids),
        attention_mask=torch.from_numpy(attn),
        loss_mask=torch.from_numpy(mask),
        old_logprobs=torch.from_numpy(lp).to(dtype),
        logprob_mask=torch.from_numpy(lp_mask),
        token_rewards=torch.from_numpy(rewards).to(dtype),
        seq_lens=torch.tensor(full, dtype=torch.long),
        episode_ids=[t.episode_id for t in trajectories],
        num_truncated=num_truncated,
        num_truncated_tokens=num_truncated_tokens,
        num_dropped_rewards=dropped,
    )
