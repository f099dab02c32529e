"""What the adaptive policy learned about a pair, kept across generations and processes.

Costs (a target step, verify batches, draft steps) belong to the pair and the machine, and
acceptance mostly to the pair: a new generation, a new chat turn or a new request should
start from them rather than measure them again. :class:`Memory` keeps the latest
:meth:`AdaptivePolicy.learned` per drafter in the Engine, and on disk in ``learned.json``
next to `localspec tune`'s store, keyed like it by the two files and the backend.

Writes to disk are gathered and made by a timer thread at most every :data:`WRITE_DELAY`
seconds (and by :func:`flush`, which an Engine calls on close and the process at exit): a
write reads, locks and rewrites the whole file (~5 ms), which a server answering short
requests would otherwise pay on its engine thread for every request.
"""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path

from ..paths import StateLockTimeout, home, read_json, update_json
from .fingerprint import pair_key

FILE = "learned.json"
WRITE_DELAY = 2.0     # seconds a learned state may wait before it is written

_pending: dict[Path, dict[str, dict]] = {}    # file -> key -> entry, not yet written
_guard = threading.Lock()
_writing = threading.Lock()   # held while pending states are written: a reset never races a write
_timer: threading.Timer | None = None


def _defer(path: Path, key: str, entry: dict) -> None:
    global _timer
    with _guard:
        _pending.setdefault(path, {})[key] = entry
        if _timer is None:
            _timer = threading.Timer(WRITE_DELAY, flush)
            _timer.daemon = True
            _timer.start()


def flush() -> None:
    """Write every learned state still waiting (a file whose lock another process holds
    for too long keeps its states in this process only)."""
    global _timer
    with _writing:
        with _guard:
            pending = dict(_pending)
            _pending.clear()
            timer, _timer = _timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        for path, entries in pending.items():
            try:
                update_json(path, lambda data, entries=entries: data.update(entries))
            except (OSError, StateLockTimeout):
                pass   # a read-only home, or a process hanging on the file


atexit.register(flush)


def _waiting(key: str) -> dict | None:
    """The entry of ``key`` still waiting to be written to this home's file, if any."""
    try:
        path = home() / FILE
    except OSError:
        return None
    with _guard:
        return _pending.get(path, {}).get(key)


def _drop(prefix: str) -> None:
    """Forget the waiting writes of keys starting with ``prefix``."""
    with _guard:
        for entries in _pending.values():
            for k in [k for k in entries if k.startswith(prefix)]:
                del entries[k]


def load() -> dict:
    return read_json(FILE)


def reset() -> int:
    """Forget everything learned; the number of entries forgotten."""

    def clear(data: dict) -> int:
        n = len(data)
        data.clear()
        return n

    with _writing:
        _drop("")
        return update_json(FILE, clear)


class Memory:
    """The learned policy state of one loaded pair, per drafter kind (a string)."""

    def __init__(self, target: str, draft: str | None, backend: str, persist: bool = True):
        self.target, self.draft, self.backend = target, draft, backend
        self.persist = persist
        self._states: dict[str, dict] = {}
        self._absent: set[str] = set()      # drafters the file had no state for (not read again)
        self._key: str | None = None

    def key(self, drafter: str) -> str | None:
        if self._key is None:
            try:
                self._key = pair_key(self.target, self.draft, self.backend)
            except OSError:
                return None
        return f"{self._key}|{drafter}"

    def get(self, drafter: str) -> dict | None:
        """The last state learned with this drafter: this process's, else the stored one (the
        file is read once per drafter: a server asks for every request)."""
        if drafter not in self._states and drafter not in self._absent and self.persist:
            key = self.key(drafter)
            entry = _waiting(key) if key else None
            try:
                entry = entry or (load().get(key) if key else None)
            except StateLockTimeout:   # another process hangs on the file: start afresh
                entry = None
            if isinstance(entry, dict) and isinstance(entry.get("state"), dict):
                self._states[drafter] = entry["state"]
            else:
                self._absent.add(drafter)
        return self._states.get(drafter)

    def put(self, drafter: str, state: dict) -> None:
        """Keep ``state`` as this drafter's latest, here at once and on disk soon (:func:`flush`)."""
        self._states[drafter] = state
        if not self.persist:
            return
        key = self.key(drafter)
        if key is None:
            return
        entry = {"target": Path(self.target).name, "draft": Path(self.draft).name if self.draft else None,
                 "backend": self.backend, "drafter": drafter, "state": state,
                 "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        try:
            path = home() / FILE
        except OSError:
            return     # no home can be made: keep it for this process only
        _defer(path, key, entry)

    def snapshot(self) -> dict[str, dict]:
        """This process's states, to put back with :meth:`restore` (a benchmark's warm-up run
        must not teach the next one)."""
        return dict(self._states)

    def restore(self, snapshot: dict[str, dict]) -> None:
        self._states = dict(snapshot)

    def forget(self) -> None:
        """Forget this pair's states here and on disk."""
        self._states.clear()
        self._absent.clear()
        if self.persist and self._key is not None:
            prefix = self._key + "|"

            def drop(data: dict) -> None:
                for k in [k for k in data if k.startswith(prefix)]:
                    del data[k]

            with _writing:
                _drop(prefix)
                update_json(FILE, drop)
