"""Threads that do the slow work (load, generate, pull) and post coalesced messages.

The engine thread only folds events into an :class:`~.live.Accumulator` under a lock (a few
microseconds per event). A separate ticker wakes every ``interval`` seconds and posts what
accumulated since its last tick as one message: 0.1 s (ten a second, whatever the token
rate), or 0.25 s when llama.cpp has every core (see ``LocalspecApp.stream_interval``). The
UI therefore never sees more than ``1 / interval`` progress messages per second, and the
engine never waits for the UI. Text is at most ``interval`` late on screen.

``interval=None`` posts at every engine step instead, from the engine thread: deterministic,
for tests and screenshots only.

Stopping sets the ``cancel`` event the engine checks before every round, so a stop takes
effect within one step; :meth:`Job.join` then waits for the thread to end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from ..chat.live import Accumulator
from ..errors import IncompatiblePair, LocalspecError
from .messages import (
    EngineFailed,
    EngineLoading,
    EngineReady,
    GenerationFailed,
    GenerationFinished,
    GenerationProgress,
    PullFailed,
    PullFinished,
    PullProgress,
    PullStatus,
)

DEFAULT_INTERVAL = 0.1


def error_text(exc: BaseException) -> tuple[str, str]:
    """(one line, details) for an exception: never a traceback."""
    if isinstance(exc, IncompatiblePair):
        report = getattr(exc, "report", None)
        return str(exc), report.render() if report is not None else ""
    if isinstance(exc, LocalspecError):
        return str(exc), ""
    if isinstance(exc, MemoryError):
        return "out of memory (try a smaller context or fewer GPU layers)", ""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"unexpected error: {type(exc).__name__}: {text}", ""


class Job:
    """A daemon thread with a cancel event and an optional ticker."""

    def __init__(self, target, name: str, interval: float | None = DEFAULT_INTERVAL):
        self.target = target          # a Textual message pump (app or screen)
        self.name = name
        self.interval = interval
        self.cancel = threading.Event()
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"localspec-{name}", daemon=True)
        self._ticker: threading.Thread | None = None
        self.posted = 0               # messages posted, and when (tests check the rate)
        self.post_times: list[float] = []

    def start(self) -> Job:
        # The ticker first: a job that ends at once joins it, which needs it started.
        if self.interval is not None:
            self._ticker = threading.Thread(target=self._tick, name=f"localspec-{self.name}-ticker",
                                            daemon=True)
            self._ticker.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self.cancel.set()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        if self._ticker is not None:
            self._ticker.join(timeout)
        return not self.alive

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() or (self._ticker is not None and self._ticker.is_alive())

    def post(self, message) -> None:
        self.posted += 1
        self.post_times.append(time.monotonic())
        self.target.post_message(message)

    def _tick(self) -> None:
        while not self._finished.wait(self.interval):
            self.flush()

    def _main(self) -> None:
        try:
            self.run()
        finally:
            self._finished.set()

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def flush(self) -> None:
        """Post what accumulated since the last flush (ticker thread)."""


class GenerationJob(Job):
    """One generation: engine events in, coalesced progress messages out."""

    def __init__(self, target, name: str, events: Callable[[threading.Event], Iterator], *,
                 drafter: str = "", interval: float | None = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.perf_counter):
        super().__init__(target, name, interval)
        self._events = events
        self._lock = threading.Lock()
        self.acc = Accumulator(drafter=drafter, clock=clock)
        self.steps_after_stop = 0     # steps the engine finished after stop was asked
        self.done = None
        self.error: str | None = None

    def run(self) -> None:
        from ..engine.events import Done, Step

        acc, lock, sync = self.acc, self._lock, self.interval is None
        try:
            events = self._events(self.cancel)
            try:
                for ev in events:
                    if self.cancel.is_set() and isinstance(ev, Step):
                        self.steps_after_stop += 1
                    with lock:
                        acc.feed(ev)
                    if isinstance(ev, Done):
                        self.done = ev
                    elif sync and isinstance(ev, Step):
                        self.flush()
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
        except BaseException as exc:
            self.error = error_text(exc)[0]
        self._finished.set()
        if self._ticker is not None:
            self._ticker.join()
        with lock:
            if self.done is None:
                acc.fail()
            segments, stats = acc.take_segments(), acc.snapshot()
        if self.done is not None and self.error is None:
            self.post(GenerationFinished(self.name, segments, stats, self.done, self.steps_after_stop))
        else:
            self.post(GenerationFailed(self.name, segments, stats, self.error or "the generation ended early"))

    def flush(self) -> None:
        """Post what accumulated since the last tick. With nothing new (a slow step) it posts
        all the same: the figures move on (the live rate falls), so the gauges keep their pace
        and the UI needs no timer of its own while a generation runs."""
        with self._lock:
            if self.acc.done is not None:
                return
            segments, stats = self.acc.take_segments(), self.acc.snapshot()
        self.post(GenerationProgress(self.name, segments, stats))


class LoadJob(Job):
    """Load the session's models (the demo pair is prepared here the first time)."""

    def __init__(self, target, session):
        super().__init__(target, "load", interval=None)
        self.session = session

    def run(self) -> None:
        try:
            summary = self.session.load(progress=lambda text: self.post(EngineLoading(text)))
        except BaseException as exc:
            self.post(EngineFailed(*error_text(exc)))
            return
        self.post(EngineReady(summary))


class PullJob(Job):
    """Pull a catalog pair through the puller: plan, header check, space check, download."""

    def __init__(self, target, alias: str, draft: str | None = None, *,
                 interval: float | None = DEFAULT_INTERVAL, force: bool = False):
        super().__init__(target, "pull", interval)
        self.alias = alias
        self.draft = draft or None
        self.force = force
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, int]] = {}

    def progress(self, label: str, done: int, total: int) -> None:
        """The puller's progress callback (download thread): keep only the latest figures."""
        with self._lock:
            self._pending[label] = (done, total)
        if self.interval is None:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if not self._pending:
                return
            pending, self._pending = self._pending, {}
        self.post(PullProgress(pending))

    def run(self) -> None:
        from ..models import hub, puller

        try:
            plan = puller.plan_pull(self.alias, self.draft)
            files = [(f"{f.repo}/{f.path}", f.size) for item in plan.items for f in item.files]
            names = " + ".join(i.name for i in plan.items)
            self.post(PullStatus(f"{names}: reading the GGUF headers...", files))
            report = puller.check_headers(plan)
            puller.refuse_if_incompatible(plan, self.force)
            puller.check_space(plan)
            verdict = f"tokenizers {report.summary()}; " if report is not None else ""
            self.post(PullStatus(f"{names}: {verdict}{puller.human(plan.missing_bytes)} to download"))
            entries = puller.execute(plan, progress=self.progress, cancel=self.cancel)
        except hub.Cancelled as exc:
            self._finish_progress()
            self.post(PullFailed(str(exc), cancelled=True))
            return
        except BaseException as exc:
            self._finish_progress()
            self.post(PullFailed(*error_text(exc)))
            return
        self._finish_progress()
        t, d = entries[0], entries[1] if len(entries) > 1 else None
        self.post(PullFinished(t.name, d.name if d else None, t.path, d.path if d else None))

    def _finish_progress(self) -> None:
        self._finished.set()
        if self._ticker is not None:
            self._ticker.join()
        self.flush()
