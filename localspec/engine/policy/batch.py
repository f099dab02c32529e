"""The batch-level guard of a runner stepping several generations together.

Each slot's own policy decides its drafting from its round's costs, but in a shared batch one
slot's draft makes every other slot's round dearer (the verify decode carries all of them).
The guard compares the whole batch's tokens per second in rounds where slots drafted with
rounds where none did, and stops every slot's drafting while drafting loses for the batch;
it tries drafting again after a gap that doubles while it keeps losing. It acts only while
at least two slots are busy: a lone generation is its own policy's, as in a single run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .params import DEFAULT, Params


class _Rate:
    """Decayed tokens over decayed seconds, and how many samples went in."""

    __slots__ = ("tokens", "seconds", "n")

    def __init__(self):
        self.tokens = self.seconds = 0.0
        self.n = 0

    def add(self, tokens: int, seconds: float, decay: float) -> None:
        self.tokens = self.tokens * decay + tokens
        self.seconds = self.seconds * decay + seconds
        self.n += 1

    @property
    def value(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class BatchGuard:
    """Whether the slots may draft this round, from the batch's measured throughput.

    Usage per round: ``allow(n_busy)`` before it (False: every slot steps plain), then
    ``observe(n_busy, drafted, tokens)`` after it, with whether any slot drafted and the
    tokens all slots emitted; the round's time is the clock's between the two calls.
    Rates are kept per number of busy slots (a batch of 4 costs more than one of 2).

    Args:
        params: the tunables; clock: seconds (tests inject their own).
    """

    def __init__(self, params: Params = DEFAULT, clock: Callable[[], float] = time.perf_counter):
        self.p = params
        self.clock = clock
        self._draft: dict[int, _Rate] = {}
        self._plain: dict[int, _Rate] = {}
        self._off_until = 0          # rounds: drafting stopped until this round
        self._gap = params.guard_off_rounds
        self._since_plain = 0        # drafting rounds since the last plain one
        self._t0: float | None = None
        self.round = 0
        self.stops = 0               # times drafting was stopped for the batch
        self.reason = ""

    @property
    def stopped(self) -> bool:
        return self.round < self._off_until

    def allow(self, n_busy: int) -> bool:
        """Whether slots may draft this round (asked before it)."""
        if n_busy < 2:     # a lone slot's round is not timed: it is its own policy's
            self._t0 = None
            return True
        self._t0 = self.clock()
        if self.stopped:
            return False
        plain = self._plain.get(n_busy)
        if (plain is None or plain.n < self.p.guard_min_plain) and self._since_plain >= 1 or \
                self._since_plain >= self.p.guard_measure_every:
            return False     # a plain round, to measure
        return True

    def observe(self, n_busy: int, drafted: bool, tokens: int) -> str | None:
        """A round ended; a sentence when the guard stops or frees drafting."""
        seconds = self.clock() - self._t0 if self._t0 is not None else 0.0
        self._t0 = None
        self.round += 1
        if n_busy < 2 or seconds <= 0:
            return None
        d = self.p.guard_decay
        if drafted:
            self._since_plain += 1
            self._draft.setdefault(n_busy, _Rate()).add(tokens, seconds, d)
        else:
            self._since_plain = 0
            self._plain.setdefault(n_busy, _Rate()).add(tokens, seconds, d)
        if self.round == self._off_until:
            self._draft.pop(n_busy, None)     # measured afresh: the text may have changed
            self.reason = "drafting resumed for the batch"
            return self.reason
        if self.stopped:
            return None
        return self._judge(n_busy)

    def _judge(self, n_busy: int) -> str | None:
        draft, plain = self._draft.get(n_busy), self._plain.get(n_busy)
        if draft is None or plain is None or draft.n < self.p.guard_min_draft or plain.n < self.p.guard_min_plain:
            return None
        if draft.value >= plain.value * (1 - self.p.guard_margin):
            self._gap = self.p.guard_off_rounds
            return None
        self._off_until = self.round + self._gap
        self.stops += 1
        self.reason = (f"drafting stopped for the batch of {n_busy}: {draft.value:.1f} tok/s drafting vs "
                       f"{plain.value:.1f} plain (next try in {self._gap} rounds)")
        self._gap = min(self._gap * 2, self.p.guard_off_max)
        return self.reason

    def rates(self) -> dict:
        """Tokens per second measured per busy-slot count, drafting and plain."""
        keys = sorted(set(self._draft) | set(self._plain))
        return {str(n): {"drafting": self._draft[n].value if n in self._draft else None,
                         "plain": self._plain[n].value if n in self._plain else None} for n in keys}
