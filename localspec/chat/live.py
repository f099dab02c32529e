"""Engine events folded into what the gauges show. No textual here.

:class:`Accumulator` is fed every event of one generation (in the engine's thread) and hands
out, on demand, the text that arrived since the last call and an immutable
:class:`LiveStats` snapshot. The worker calls it at a bounded rate; nothing here knows about
threads or screens.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.events import (
    Done,
    Origin,
    PolicyNote,
    PromptProcessed,
    Step,
    StopReason,
    TextChunk,
    Token,
)
from ..engine.stats import StatsRecorder

Segment = tuple[str, str]   # (text, origin: "draft" | "target" | "bonus" | "text")

HISTORY = 60                # sparkline samples kept
HISTORY_EVERY = 0.5         # seconds between sparkline samples (the sparkline moves twice a second,
                            # not on every frame: fewer lines to redraw)
WINDOW = 1.0                # seconds of recent tokens behind the live tok/s


@dataclass(frozen=True)
class LiveStats:
    """One snapshot of a generation, as the gauges show it."""

    phase: str = "idle"           # idle | prompt | generating | finished | stopped | failed
    drafter: str = ""
    tokens: int = 0
    elapsed: float = 0.0          # seconds since the first generated position
    rate: float = 0.0             # tok/s over the last WINDOW seconds (the final figure when done)
    history: tuple[float, ...] = ()
    steps: int = 0
    drafting_steps: int = 0       # steps that drafted at least one token
    drafted: int = 0
    accepted: int = 0
    k: int = 0                    # the draft length in force
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    drafting: bool = True         # False while the adaptive policy has drafting paused
    policy_reason: str = ""       # why, in the policy's words
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_seconds: float = 0.0
    ttft: float | None = None     # seconds from the start to the first token
    by_drafter: tuple[tuple[str, int, int], ...] = ()   # (drafter, drafted, accepted), two drafts' apart

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def accepted_per_step(self) -> float | None:
        return self.accepted / self.drafting_steps if self.drafting_steps else None

    @property
    def tokens_per_step(self) -> float | None:
        return self.tokens / self.steps if self.steps else None

    @property
    def draft_share(self) -> float | None:
        total = self.draft_seconds + self.verify_seconds
        return self.draft_seconds / total if total > 0 else None

    @property
    def active(self) -> bool:
        return self.phase in ("prompt", "generating")


class Accumulator:
    """Folds engine events into text segments and live statistics."""

    def __init__(self, drafter: str = "", clock: Callable[[], float] = time.perf_counter,
                 window: float = WINDOW, history: int = HISTORY):
        self.clock = clock
        self.window = window
        self._segments: list[Segment] = []
        self._samples: deque[tuple[float, int]] = deque()
        self._history: deque[float] = deque(maxlen=history)
        self._history_at: float | None = None
        self._t0 = clock()
        self._t_gen: float | None = None
        self.done: Done | None = None
        self.rounds = StatsRecorder(drafter, "", None)   # the engine's own per-round totals
        self.s = dict(phase="prompt", drafter=drafter, tokens=0, k=0, drafting=drafter != "none",
                      policy_reason="", prompt_tokens=0, cached_tokens=0, prompt_seconds=0.0, ttft=None)

    # -- feeding (engine thread) ------------------------------------------------------
    def feed(self, ev) -> None:
        s = self.s
        if isinstance(ev, Token):
            s["tokens"] += 1
            if s["ttft"] is None:
                s["ttft"] = self.clock() - self._t0
            if ev.text:
                self._add(ev.text, ev.origin.value if isinstance(ev.origin, Origin) else str(ev.origin))
        elif isinstance(ev, Step):
            self.rounds.step(ev)
            s["k"] = ev.k
            s["drafting"] = ev.drafting
        elif isinstance(ev, TextChunk):
            if ev.text:
                self._add(ev.text, "text")
        elif isinstance(ev, PolicyNote):
            s["drafting"] = ev.drafting
            s["k"] = ev.k
            s["policy_reason"] = ev.reason
        elif isinstance(ev, PromptProcessed):
            s["prompt_tokens"] = ev.n_tokens
            s["cached_tokens"] = ev.n_cached
            s["prompt_seconds"] = ev.seconds
            s["phase"] = "generating"
            self._t_gen = self.clock()
            self._samples.append((self._t_gen, 0))
        elif isinstance(ev, Done):
            self.done = ev
            s["phase"] = "stopped" if ev.stop_reason == StopReason.CANCELLED else "finished"
            summary = ev.summary
            if summary.policy and not s["policy_reason"] and not s["drafting"]:
                s["policy_reason"] = summary.policy

    def fail(self) -> None:
        self.s["phase"] = "failed"

    def _add(self, text: str, origin: str) -> None:
        if self._segments and self._segments[-1][1] == origin:
            self._segments[-1] = (self._segments[-1][0] + text, origin)
        else:
            self._segments.append((text, origin))

    # -- reading (flush) --------------------------------------------------------------
    def take_segments(self) -> list[Segment]:
        out, self._segments = self._segments, []
        return out

    def snapshot(self) -> LiveStats:
        """The statistics now; records one tok/s sample for the sparkline while generating."""
        s = self.s
        now = self.clock()
        elapsed = now - self._t_gen if self._t_gen is not None else 0.0
        rate = 0.0
        if self.done is not None:
            rate = self.done.summary.tokens_per_second
            elapsed = self.done.summary.generation_seconds
        elif self._t_gen is not None:
            self._samples.append((now, s["tokens"]))
            while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
                self._samples.popleft()
            t_old, n_old = self._samples[0]
            if now > t_old:
                rate = (s["tokens"] - n_old) / (now - t_old)
            if self._history_at is None or now - self._history_at >= HISTORY_EVERY * 0.9:
                self._history.append(rate)
                self._history_at = now
        r = self.rounds.s
        return LiveStats(elapsed=elapsed, rate=rate, history=tuple(self._history), steps=r.steps,
                         drafting_steps=self.rounds.rounds_drafting, drafted=r.drafted, accepted=r.accepted,
                         draft_seconds=r.draft_seconds, verify_seconds=r.verify_seconds,
                         by_drafter=tuple((n, d["drafted"], d["accepted"]) for n, d in r.by_drafter.items()), **s)
