"""What the server is doing right now, as plain data for a front end (the app's server screen).

:class:`LiveState` is written by the scheduler's worker and read by anyone through
:meth:`LiveState.snapshot`, which returns frozen copies; nothing here knows of terminals.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..engine import Step


@dataclass(frozen=True)
class CurrentRequest:
    """A request being generated (in ``slot``)."""

    id: str
    endpoint: str
    drafter: str
    prompt_tokens: int
    cached_tokens: int
    tokens: int
    seconds: float             # since its first token
    tokens_per_second: float
    drafted: int
    accepted: int
    drafting: bool             # False while the adaptive policy has drafting paused
    slot: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(frozen=True)
class FinishedRequest:
    id: str
    endpoint: str
    outcome: str
    tokens: int
    tokens_per_second: float
    acceptance: float
    ttft: float                # seconds from arrival to the first token


@dataclass(frozen=True)
class ServerSnapshot:
    model: str
    drafter: str
    address: str
    uptime: float
    queue_depth: int
    queue_capacity: int
    current: CurrentRequest | None
    requests: dict[str, int]   # outcome -> count
    tokens: int
    drafted: int
    accepted: int
    recent: tuple[FinishedRequest, ...] = field(default_factory=tuple)
    slots: tuple[CurrentRequest | None, ...] = ()    # each slot's request (None: idle)

    @property
    def slots_busy(self) -> int:
        return sum(s is not None for s in self.slots)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def served(self) -> int:
        return sum(self.requests.values())


class LiveState:
    """The server's running figures, updated per round by the worker (cheap: a few additions)."""

    RECENT = 8

    def __init__(self, model: str, drafter: str, queue_capacity: int, slots: int = 1):
        self.model, self.drafter, self.queue_capacity = model, drafter, queue_capacity
        self.address = ""
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._queue = 0
        self._cur: list[dict | None] = [None] * slots   # per slot
        self._requests: dict[str, int] = {}
        self._tokens = self._drafted = self._accepted = 0
        self._recent: list[FinishedRequest] = []

    def queue(self, depth: int) -> None:
        self._queue = depth

    def start(self, job_id: str, endpoint: str, drafter: str, slot: int = 0) -> None:
        with self._lock:
            self._cur[slot] = dict(id=job_id, endpoint=endpoint, drafter=drafter, prompt_tokens=0, cached_tokens=0,
                                   tokens=0, first=None, drafted=0, accepted=0, drafting=drafter != "none")

    def prompt(self, n_tokens: int, n_cached: int, slot: int = 0) -> None:
        cur = self._cur[slot]
        if cur is not None:
            cur["prompt_tokens"], cur["cached_tokens"] = n_tokens, n_cached

    def step(self, s: Step, slot: int = 0) -> None:
        cur = self._cur[slot]
        if cur is None:
            return
        if cur["first"] is None and s.emitted:
            cur["first"] = time.perf_counter() - (s.draft_seconds + s.verify_seconds)
        cur["tokens"] += s.emitted
        cur["drafted"] += s.drafted
        cur["accepted"] += s.accepted
        cur["drafting"] = s.drafting

    def finish(self, outcome: str, tokens: int, tokens_per_second: float, drafted: int, accepted: int,
               ttft: float, slot: int = 0) -> None:
        with self._lock:
            cur, self._cur[slot] = self._cur[slot], None
            self._requests[outcome] = self._requests.get(outcome, 0) + 1
            self._tokens += tokens
            self._drafted += drafted
            self._accepted += accepted
            if cur is not None:
                self._recent.append(FinishedRequest(cur["id"], cur["endpoint"], outcome, tokens, tokens_per_second,
                                                    accepted / drafted if drafted else 0.0, ttft))
                del self._recent[:-self.RECENT]

    def refused(self, outcome: str) -> None:
        """A request answered without generating (bad input, queue full, shutdown)."""
        with self._lock:
            self._requests[outcome] = self._requests.get(outcome, 0) + 1

    def snapshot(self) -> ServerSnapshot:
        with self._lock:
            now = time.perf_counter()
            slots = tuple(_current(cur, i, now) for i, cur in enumerate(self._cur))
            current = next((c for c in slots if c is not None), None)
            return ServerSnapshot(self.model, self.drafter, self.address, time.monotonic() - self._started,
                                  self._queue, self.queue_capacity, current, dict(self._requests),
                                  self._tokens, self._drafted, self._accepted, tuple(self._recent), slots)


def _current(cur: dict | None, slot: int, now: float) -> CurrentRequest | None:
    if cur is None:
        return None
    secs = now - cur["first"] if cur["first"] is not None else 0.0
    return CurrentRequest(cur["id"], cur["endpoint"], cur["drafter"], cur["prompt_tokens"], cur["cached_tokens"],
                          cur["tokens"], secs, cur["tokens"] / secs if secs > 0 else 0.0, cur["drafted"],
                          cur["accepted"], cur["drafting"], slot)
