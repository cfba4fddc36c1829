"""The "real market" that approved suggestions are launched into: the ground-truth world, journaled.

:class:`MarketGateway` keeps a journal ``market.json`` in its directory: the world config, the
logged history that precedes the present (``history_days`` of the marketer with ``epsilon``, as
:func:`~transferlab.simulator.logs.drive_with_marketer` runs it), every launch (its key, day,
action and campaign id) and the current day. The world itself is never stored: :meth:`world`
replays the journal, which is deterministic because the world is seeded::

    MarketWorld(config) -> drive_with_marketer(history_days, epsilon)
    -> for each day since: launch that day's recorded actions (in journal order), advance one day
    -> launch today's recorded actions

Every change is made under a :class:`filelock.FileLock` (``market.lock``) and written atomically,
so several worker processes can share one directory. :meth:`launch` is idempotent by key: a key
already in the journal gets the same receipt back and nothing new reaches the market, and a known
key with a different action is refused (:class:`KeyConflict`): a key reused by another review store
or a rebuilt one never gets an old campaign's receipt. A journal that cannot be read as one raises
:class:`MarketError` (one line naming the file and the fix) and is never rewritten.

Several campaigns may be launched on one day: the world schedules each push at its hour, and a
customer targeted by two of them keeps the offer of the later push (by hour, then by launch order).

Replay costs O(days): 0.5-1.5 s for a 365-day history of 2,000 customers (idle vs. a busy 2-core
machine; 0.02 s for 30 days of 200), against 0.2 ms for a cached :meth:`world` and a few ms for a
launch or a one-day advance on the cached world. A gateway caches its replayed world keyed by the
journal's content hash, and moves the cached world along with its own launches and advances, so
repeated calls in one process are cheap; a change made by another process is picked up by a fresh
replay.

>>> import tempfile
>>> gw = MarketGateway.create(Path(tempfile.mkdtemp()), WorldConfig(n_customers=100, seed=1))
>>> action = CampaignAction(discount=0.1, push_hour=20, segment="loyal", budget=5.0)
>>> gw.launch(action, "suggestion-1") == gw.launch(action, "suggestion-1")
True
>>> try:
...     gw.launch(CampaignAction(budget=0.0), "suggestion-1")
... except KeyConflict as e:
...     print(str(e)[:51])
key 'suggestion-1' was launched with another action
>>> len(gw.launches()), len(gw.world().campaigns)
(1, 1)
>>> [r.key for r in gw.advance(31)]
['suggestion-1']
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from transferlab.platform.io import atomic_write_json
from transferlab.simulator.logs import drive_with_marketer, read_logs
from transferlab.simulator.vocabulary import OUTCOME_KEYS, CampaignAction
from transferlab.simulator.world import MarketWorld
from transferlab.simulator.world_config import WorldConfig

JOURNAL = "market.json"
LOCK = "market.lock"
JOURNAL_VERSION = 1
LOCK_TIMEOUT_S = 120.0

__all__ = ["KeyConflict", "LaunchReceipt", "MarketError", "MarketGateway", "MaturedResult"]


class MarketError(ValueError):
    """The market's journal cannot be used (corrupted, or of another version); one line with the fix."""


class KeyConflict(MarketError):
    """A launch under a key the journal holds for a different action."""


@dataclass(frozen=True)
class LaunchReceipt:
    """What the market answered to a launch; the same receipt again for a repeated key.

    Attributes:
        key: the idempotency key (``suggestion-<id>`` for the review workflow).
        campaign_id: the world's campaign id, or None for a no-op action (budget 0: nothing sent).
        day: the market day the campaign was launched on (its pushes go out that day).
        action: the campaign as launched (``CampaignAction.to_dict()``).
    """

    key: str
    campaign_id: int | None
    day: int
    action: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what the worker stores as the execution's result)."""
        return asdict(self)


@dataclass(frozen=True)
class MaturedResult:
    """A launched campaign's outcome once it matured (``WorldConfig.maturity_days`` after launch).

    ``outcome`` holds the :data:`~transferlab.simulator.vocabulary.OUTCOME_KEYS` known at the time:
    ``retention_60``/``retention_90`` only once those horizons have passed.
    """

    key: str
    campaign_id: int
    day_launched: int
    day_matured: int
    outcome: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


class MarketGateway:
    """The ground-truth world as a shared, replayable market. See the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL
        if not self.path.exists():
            raise FileNotFoundError(
                f"{self.path} does not exist: make a market with MarketGateway.create(directory, world) "
                "or MarketGateway.from_logs(directory, logs_dir)"
            )
        self._lock = FileLock(str(self.directory / LOCK), timeout=LOCK_TIMEOUT_S)
        self._cache: tuple[str, MarketWorld] | None = None

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls, directory: Path, world: WorldConfig, history_days: int = 0, epsilon: float = 0.1
    ) -> MarketGateway:
        """A market whose present follows ``history_days`` of the marketer in ``world``.

        Opening an existing journal with the same world and history is allowed (several workers may
        call this); a different one is an error.
        """
        if history_days < 0:
            raise ValueError(f"history_days={history_days} must be >= 0")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon={epsilon} must be in [0, 1]")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        config = world.model_dump(mode="json")
        with FileLock(str(directory / LOCK), timeout=LOCK_TIMEOUT_S):
            path = directory / JOURNAL
            if path.exists():
                old = _load_journal(path)
                same = (old["world"], old["history_days"], old["epsilon"]) == (config, history_days, epsilon)
                if not same:
                    raise ValueError(
                        f"{path} already holds a different market (world/history): "
                        "use a new directory or open it with MarketGateway(directory)"
                    )
                return cls(directory)
            present = _replay_history(world, history_days, epsilon)
            journal = {
                "version": JOURNAL_VERSION,
                "world": config,
                "history_days": history_days,
                "epsilon": epsilon,
                "history_campaigns": len(present.campaigns),
                "day": present.day,
                "launches": [],
            }
            atomic_write_json(path, journal)
        gateway = cls(directory)
        gateway._cache = (_digest(path.read_bytes()), present)
        return gateway

    @classmethod
    def from_logs(cls, directory: Path, logs_dir: Path) -> MarketGateway:
        """The world of a log directory, continuing after its logged history (day = the logs' days).

        The replayed history is checked against the logs' daily GMV, so logs made by a different
        simulator version are refused instead of silently continuing another world.
        """
        logs = read_logs(logs_dir)
        manifest = logs.manifest
        try:
            config = WorldConfig.build(**manifest["world"])
            days, epsilon = int(manifest["days"]), float(manifest["epsilon"])
        except KeyError as exc:
            raise ValueError(
                f"log manifest in {logs_dir} is missing {exc.args[0]!r}: regenerate the logs"
            ) from exc
        gateway = cls.create(directory, config, history_days=days, epsilon=epsilon)
        replayed = gateway.world().daily_frame()["gmv"].to_numpy()[:days]
        logged = logs.daily["gmv"].to_numpy()[:days]
        if len(replayed) != len(logged) or not (abs(replayed - logged) <= 1e-6 * (1 + abs(logged))).all():
            raise ValueError(
                f"replaying the world of {logs_dir} does not reproduce its logged daily GMV: the logs were "
                "made by another simulator version; regenerate them with `transferlab sim generate-logs`"
            )
        return gateway

    # ------------------------------------------------------------------ market operations

    def launch(self, action: CampaignAction, key: str) -> LaunchReceipt:
        """Launch ``action`` today, once per ``key``: a repeated key returns the first receipt.

        :class:`KeyConflict` when ``key`` was launched with a different action (nothing changes).
        """
        if not key:
            raise ValueError("launch needs a non-empty idempotency key, e.g. '<store id>:suggestion-<id>'")
        with self._locked():
            text, journal = self._read()
            for entry in journal["launches"]:
                if entry["key"] == key:
                    _check_same_action(entry, action)
                    return _receipt(entry)
            cid: int | None = None
            if not action.is_noop:
                earlier = sum(1 for e in journal["launches"] if e["campaign_id"] is not None)
                cid = journal["history_campaigns"] + earlier
            entry = {"key": key, "day": journal["day"], "action": action.to_dict(), "campaign_id": cid}
            journal["launches"].append(entry)
            world = self._cached(_digest(text))
            self._cache = None
            atomic_write_json(self.path, journal)
            if world is not None:  # move the cached present along instead of replaying it later
                got = world.launch(action)
                self._cache = (_digest(self.path.read_bytes()), world) if got == cid else None
        return _receipt(entry)

    def launches(self, key: str | None = None) -> list[LaunchReceipt]:
        """Every launch in the journal (or those of ``key``: 0 or 1), in launch order."""
        journal = self._read()[1]
        return [_receipt(e) for e in journal["launches"] if key is None or e["key"] == key]

    def advance(self, days: int = 1) -> list[MaturedResult]:
        """Move the market's clock ``days`` days on; the results of campaigns that matured meanwhile."""
        if days < 1:
            raise ValueError(f"days={days} must be >= 1")
        with self._locked():
            text, journal = self._read()
            world = self._replayed(text, journal)
            self._cache = None  # the world changes in place: cache it again only once it is consistent
            start = world.day
            world.advance(days)
            journal["day"] = world.day
            atomic_write_json(self.path, journal)
            self._cache = (_digest(self.path.read_bytes()), world)
            return [r for r in _matured(world, journal) if start <= r.day_matured < world.day]

    def results(self) -> list[MaturedResult]:
        """Every launched campaign's result that has matured so far, in launch order."""
        text, journal = self._read()
        return _matured(self._replayed(text, journal), journal)

    def day(self) -> int:
        """The market's current day (the next one :meth:`advance` simulates)."""
        return int(self._read()[1]["day"])

    def world(self) -> MarketWorld:
        """The present world, replayed from the journal. Read it, never change it: it is cached."""
        text, journal = self._read()
        return self._replayed(text, journal)

    # ------------------------------------------------------------------ internals

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            with self._lock:
                yield
        except Timeout as exc:
            raise TimeoutError(
                f"{self._lock.lock_file} stayed locked for {LOCK_TIMEOUT_S:.0f} s: another process is stuck "
                "holding the market; stop it (or remove the lock file if none runs)"
            ) from exc

    def _read(self) -> tuple[bytes, dict[str, Any]]:
        text = self.path.read_bytes()
        return text, _parse_journal(self.path, text)

    def _cached(self, digest: str) -> MarketWorld | None:
        if self._cache is not None and self._cache[0] == digest:
            return self._cache[1]
        return None

    def _replayed(self, text: bytes, journal: dict[str, Any]) -> MarketWorld:
        digest = _digest(text)
        world = self._cached(digest)
        if world is None:
            world = replay(journal)
            self._cache = (digest, world)
        return world


_JOURNAL_FIELDS: dict[str, type | tuple[type, ...]] = {
    "version": int,
    "world": dict,
    "history_days": int,
    "epsilon": (int, float),
    "history_campaigns": int,
    "day": int,
    "launches": list,
}
_LAUNCH_FIELDS: dict[str, type | tuple[type, ...]] = {
    "key": str,
    "day": int,
    "action": dict,
    "campaign_id": (int, type(None)),
}


def _corrupted(path: Path, problem: str) -> MarketError:
    return MarketError(
        f"the market journal {path} is corrupted ({problem}): restore it from a backup; it was left as it is"
    )


def _parse_journal(path: Path, text: bytes) -> dict[str, Any]:
    """The journal in ``text``, checked field by field; :class:`MarketError` naming the damage."""
    try:
        journal = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise _corrupted(path, f"not valid JSON{where}") from None
    if not isinstance(journal, dict):
        raise _corrupted(path, f"a JSON {type(journal).__name__}, not an object")
    if journal.get("version") != JOURNAL_VERSION:
        version = journal.get("version")
        raise MarketError(f"{path} has journal version {version!r:.40}; expected {JOURNAL_VERSION}")
    _check_fields(path, journal, _JOURNAL_FIELDS, "")
    for i, entry in enumerate(journal["launches"]):
        if not isinstance(entry, dict):
            raise _corrupted(path, f"launches[{i}] is not an object")
        _check_fields(path, entry, _LAUNCH_FIELDS, f"launches[{i}].")
    return journal


def _check_fields(
    path: Path, data: dict[str, Any], fields: dict[str, type | tuple[type, ...]], prefix: str
) -> None:
    for name, kind in fields.items():
        if name not in data:
            raise _corrupted(path, f"{prefix}{name} is missing")
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise _corrupted(path, f"{prefix}{name} has the wrong type")


def _load_journal(path: Path) -> dict[str, Any]:
    return _parse_journal(path, path.read_bytes())


def _check_same_action(entry: dict[str, Any], action: CampaignAction) -> None:
    """:class:`KeyConflict` unless the journal's launch under this key was ``action``."""
    if entry["action"] != action.to_dict():
        raise KeyConflict(
            f"key {entry['key']!r} was launched with another action on day {entry['day']} "
            f"(campaign {entry['campaign_id']}); nothing launched and no receipt handed out: the review "
            "database was probably restored from an older backup and reused a suggestion id"
        )


def replay(journal: dict[str, Any]) -> MarketWorld:
    """Rebuild the present world of a journal (a pure function of its content)."""
    config = WorldConfig.build(**journal["world"])
    world = _replay_history(config, journal["history_days"], journal["epsilon"])
    by_day: dict[int, list[dict[str, Any]]] = {}
    for entry in journal["launches"]:
        by_day.setdefault(int(entry["day"]), []).append(entry)
    for day in range(world.day, int(journal["day"]) + 1):
        for entry in by_day.get(day, []):
            cid = world.launch(CampaignAction.from_dict(entry["action"]))
            if cid != entry["campaign_id"]:
                raise MarketError(
                    f"journal launch {entry['key']!r} replays as campaign {cid}, recorded as "
                    f"{entry['campaign_id']}: the journal was edited or the simulator changed"
                )
        if day < journal["day"]:
            world.advance()
    return world


def _replay_history(config: WorldConfig, history_days: int, epsilon: float) -> MarketWorld:
    world = MarketWorld(config)
    if history_days:
        drive_with_marketer(world, history_days, epsilon)
    return world


def _matured(world: MarketWorld, journal: dict[str, Any]) -> list[MaturedResult]:
    out = []
    for entry in journal["launches"]:
        cid = entry["campaign_id"]
        if cid is None or not world.campaigns[cid].matured:
            continue
        record = world.campaigns[cid]
        outcome = {
            k: float(record.outcome[k])
            for k in OUTCOME_KEYS
            if not k.startswith("retention_") or record.retention_known[int(k.split("_")[1])]
        }
        matured_day = record.matured_day if record.matured_day is not None else world.day
        out.append(MaturedResult(entry["key"], cid, int(entry["day"]), int(matured_day), outcome))
    return out


def _receipt(entry: dict[str, Any]) -> LaunchReceipt:
    return LaunchReceipt(entry["key"], entry["campaign_id"], int(entry["day"]), dict(entry["action"]))


def _digest(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()
