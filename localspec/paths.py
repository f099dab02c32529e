"""Where localspec keeps its files (the platform's user dirs, or LOCALSPEC_HOME for tests),
and its small JSON state files, which several processes may read and change at once.

Every read and every read-modify-write of a state file holds that file's lock
(``NAME.lock`` beside it, :mod:`filelock`: ``flock`` on POSIX, ``msvcrt`` on Windows), and a
write replaces the file atomically (a temporary file in the same folder, then
:func:`os.replace`), so no update is lost and no reader sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import filelock
import platformdirs

from .errors import LocalspecError

T = TypeVar("T")

LOCK_TIMEOUT = 60.0   # seconds to wait for another process's update before giving up


def home() -> Path:
    """Root of localspec's data (models it made, settings); LOCALSPEC_HOME overrides it."""
    env = os.environ.get("LOCALSPEC_HOME")
    p = Path(env).expanduser() if env else Path(platformdirs.user_data_dir("localspec", appauthor=False))
    p.mkdir(parents=True, exist_ok=True)
    return p


def models_dir() -> Path:
    p = home() / "models"
    p.mkdir(parents=True, exist_ok=True)
    return p


class StateLockTimeout(LocalspecError):
    """Another process held a state file's lock for longer than :data:`LOCK_TIMEOUT`."""


_locks: dict[str, filelock.FileLock] = {}
_locks_guard = threading.Lock()


def file_lock(path: Path) -> filelock.FileLock:
    """The lock of ``path`` (``path.lock`` beside it), one object per file in a process.

    The object is reentrant: a thread holding it may take it again (a read inside an
    update). Other threads and other processes wait for it: take it with :func:`locked`,
    which waits at most :data:`LOCK_TIMEOUT` seconds.
    """
    key = os.path.abspath(path)
    with _locks_guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = filelock.FileLock(key + ".lock")
        return lock


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """``with locked(path):`` holds ``path``'s :func:`file_lock`.

    Raises:
        StateLockTimeout: another process held it for :data:`LOCK_TIMEOUT` seconds.
        OSError: the lock file cannot be created (a read-only folder).
    """
    lock = file_lock(Path(path))
    try:
        lock.acquire(timeout=LOCK_TIMEOUT)
    except filelock.Timeout:
        raise StateLockTimeout(f"{path}: another localspec process has held its lock for {LOCK_TIMEOUT:g} s "
                               f"(remove {Path(path).name}.lock if none runs)") from None
    try:
        yield
    finally:
        lock.release()


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once: readers see the old file or the new one.

    Raises:
        OSError: the folder is not writable.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _load(p: Path) -> dict:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def read_json(name: str) -> dict:
    """A small JSON store in localspec's home, read under its lock.

    Args:
        name: the file's name in :func:`home`.

    Returns:
        Its object; empty when the file is missing, unreadable or not a JSON object. In a
        read-only home (no lock file can be made) the file is read without the lock.
    """
    p = home() / name
    try:
        with locked(p):
            return _load(p)
    except OSError:
        return _load(p)


def update_json(name: str | Path, change: Callable[[dict], T]) -> T:
    """Read, change and write back a small JSON store, all under its lock.

    Args:
        name: the file's name in :func:`home` (or its full path).
        change: called with the stored object (empty when missing or unreadable); it
            changes the object in place, and what it returns is returned.

    Returns:
        What ``change`` returned.

    Raises:
        StateLockTimeout: another process held the lock for :data:`LOCK_TIMEOUT` seconds.
        OSError: the home is not writable.
    """
    p = home() / name if isinstance(name, str) else name
    with locked(p):
        data = _load(p)
        result = change(data)
        write_text_atomic(p, json.dumps(data, indent=1, sort_keys=True))
    return result
