"""Crash-safe file writes: write a temp file next to the target, fsync it, then ``os.replace``.

A reader never sees a half-written file: it sees either the old content or the new one. The temp
file lives in the target's directory so that ``os.replace`` is a same-filesystem rename, and it is
removed if anything fails before the rename. Files and directories made here get the modes that
``open`` and ``mkdir`` would give them under the process umask (``tempfile`` alone would leave them
0600 / 0700, unreadable to an app running as another user).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "atomic_directory",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_parquet",
    "atomic_write_text",
    "honour_umask",
    "read_json_object",
    "temp_directory",
]


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def honour_umask(path: str | os.PathLike[str]) -> None:
    """Give ``path`` the mode a plain ``open``/``mkdir`` would: 0666 or 0777 less the umask."""
    target = Path(path)
    full = 0o777 if target.is_dir() else 0o666
    os.chmod(target, full & ~_umask())


def temp_directory(parent: str | os.PathLike[str], prefix: str) -> Path:
    """A new, uniquely named directory in ``parent`` (created) with the umask's usual mode."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    honour_umask(tmp)
    return tmp


def _fsync_dir(directory: Path) -> None:
    """Best-effort fsync of a directory so the rename itself is durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temp_path_for(path: Path) -> Path:
    """Create (and close) an empty temp file in ``path``'s directory and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    honour_umask(tmp)
    return Path(tmp)


def _commit(tmp: Path, path: Path) -> None:
    """fsync ``tmp``, rename it over ``path`` and fsync the directory."""
    with open(tmp, "rb+") as fh:
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


@contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Fill a new directory that appears at ``path`` all at once, or not at all.

    The block writes into a temporary sibling directory (yielded); when it ends without an error the
    sibling is renamed to ``path`` (which must not exist or be empty), otherwise it is removed::

        with atomic_directory("runs/sim") as tmp:
            (tmp / "params.npz").write_bytes(data)
    """
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} already exists and is not empty: choose a new directory or remove it")
    tmp = temp_directory(out.parent, f".{out.name}.")
    try:
        yield tmp
        if out.exists():
            out.rmdir()
        tmp.rename(out)
        _fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Atomically write ``data`` to ``path`` (parent directories are created). Returns the path."""
    target = Path(path)
    tmp = _temp_path_for(target)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> Path:
    """Atomically write ``text`` to ``path`` in ``encoding``. Returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomically write ``obj`` as JSON (indent 2, sorted keys, trailing newline). Returns the path.

    Serialisation happens before the file is touched, so an unserialisable object leaves any
    existing file unchanged.
    """
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return atomic_write_text(path, text)


def read_json_object(path: str | os.PathLike[str], fix: str) -> dict[str, Any]:
    """The JSON object in ``path``; a ``ValueError`` naming the file, the problem and ``fix`` (what to
    pass instead) when it cannot be read, is not JSON or is not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"cannot read {path} ({err.strerror or err}): {fix}") from err
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}): {fix}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not an object: {fix}")
    return data


def atomic_write_parquet(path: str | os.PathLike[str], df: pd.DataFrame) -> Path:
    """Atomically write ``df`` to ``path`` as Parquet (no index). Returns the path."""
    target = Path(path)
    tmp = _temp_path_for(target)
    try:
        df.to_parquet(tmp, index=False)
        _commit(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


class AtomicRewriter:
    """Keeps everything in memory and rewrites one file atomically with all of it.

    For writers that append (metrics rows, trajectories) but must never leave a partial file: a
    subclass appends under ``self._lock``, calls :meth:`_note_added` (which says whether
    ``flush_every`` additions are pending), and implements :meth:`_payload` (the whole file's bytes).
    """

    def _init_rewriter(self, path: str | os.PathLike[str], flush_every: int) -> None:
        if flush_every < 1:
            raise ValueError(f"flush_every must be >= 1, got {flush_every}")
        self.path = Path(path)
        self.flush_every = flush_every
        self._lock = threading.Lock()
        self._pending = 0
        self._dirty = False

    def _payload(self) -> bytes:
        raise NotImplementedError

    def _note_added(self, changed: bool) -> bool:
        """Record one addition (call under ``self._lock``); True when a flush is due."""
        self._dirty = self._dirty or changed
        self._pending += 1
        return self._pending >= self.flush_every

    def flush(self) -> None:
        """Atomically rewrite the file with everything so far (creates it, possibly empty, if missing)."""
        with self._lock:
            if self._dirty or not self.path.exists():
                atomic_write_bytes(self.path, self._payload())
                self._dirty = False
            self._pending = 0
