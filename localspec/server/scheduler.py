"""One engine, its slots, and a bounded queue of requests in arrival order.

A worker thread owns the engine. With one slot it answers one request at a time through
:meth:`Engine.run`; with ``engine.parallel`` > 1 it steps the engine's
:class:`~localspec.engine.batch.BatchRunner`: every busy slot advances in each round's one
decode, and a slot that frees takes the next queued request at once (continuous batching).
A request no slot can run (a grammar, a draft chain, an MTP head) waits until the slots are
free and runs alone. Each request is a :class:`Job` whose text, final :class:`Done` (or
error) come back to the HTTP side through a :class:`Channel`. Cancelling a job sets its
``threading.Event``, which the engine checks every round, so a client that goes away stops
its generation within one round and the other slots go on; a job still waiting just leaves
the queue.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass, field

from ..engine import Done, Engine, PromptProcessed, RunSpec, Step, StopReason, TextChunk, Token
from ..engine.rpc import WorkerLost
from ..errors import LocalspecError
from .errors import ApiError
from .live import LiveState
from .metrics import Metrics

log = logging.getLogger("localspec.server")

_ids = itertools.count(1)


class Channel:
    """Worker thread -> event loop: items are appended under a lock and the loop is woken only
    when its reader is waiting (one wake-up per batch, not per token)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._items: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._ready = asyncio.Event()
        self._waiting = False

    def put(self, item) -> None:
        with self._lock:
            self._items.append(item)
            wake, self._waiting = self._waiting, False
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._ready.set)
            except RuntimeError:   # the loop is gone: nobody is listening any more
                pass

    async def get(self) -> list:
        """Everything put since the last call (waits for at least one item)."""
        while True:
            with self._lock:
                if self._items:
                    out = list(self._items)
                    self._items.clear()
                    return out
                self._waiting = True
                self._ready.clear()
            await self._ready.wait()


@dataclass
class Job:
    endpoint: str                   # "chat" or "completions" (the metrics' label)
    prompt: list[int]
    spec: RunSpec
    channel: Channel
    stream: bool = True             # False: only the final Done is sent back
    cache_prompt: bool = True       # False: the cached prefix is dropped first (llama-server's field)
    slot: int = -1                  # the slot asked for (llama-server's id_slot; -1: any)
    tokens: bool = False            # the Token events go to the channel (their ids, log-probabilities)
    slot_used: int = 0              # the slot that generates it (set when it starts)
    id: str = field(default_factory=lambda: f"{next(_ids):06d}")
    arrived: float = field(default_factory=time.perf_counter)
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = ""         # "cancelled" (the client left) or "shutdown"


def _shutdown() -> ApiError:
    return ApiError(503, "the server is shutting down", code="shutting_down")


_OUTCOME = {StopReason.EOG: "stop", StopReason.STOP_STRING: "stop", StopReason.INDENT: "length",
            StopReason.TIME_LIMIT: "length", StopReason.MAX_TOKENS: "length", StopReason.CONTEXT_FULL: "length"}


class Scheduler:
    def __init__(self, engine: Engine, metrics: Metrics, live: LiveState, capacity: int):
        self.engine, self.metrics, self.live, self.capacity = engine, metrics, live, capacity
        self._queue: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self._stopped = False
        self._current: Job | None = None      # a job running alone (Engine.run)
        self.runner = engine.runner() if engine.parallel > 1 else None
        self._slots: list[tuple[Job, object] | None] = [None] * engine.parallel   # (job, Generation)
        self.submitted = 0           # jobs accepted into the queue so far
        self._mean_seconds = 5.0     # a running mean of request durations, for Retry-After
        self._thread = threading.Thread(target=self._loop, name="localspec-engine", daemon=True)
        self._thread.start()

    # -- the HTTP side ----------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue a job, or refuse it: 429 with Retry-After when full, 503 when shutting down."""
        with self._cv:
            if self._closing:
                raise _shutdown()
            if len(self._queue) >= self.capacity:
                wait = max(1, min(60, math.ceil(self._mean_seconds * (len(self._queue) + 1))))
                raise ApiError(429, f"the queue is full ({len(self._queue)} requests waiting); retry in "
                                    f"about {wait} s", code="queue_full", headers={"Retry-After": str(wait)})
            self._queue.append(job)
            self.submitted += 1
            self._depth()
            self._cv.notify()

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        """Stop a job: taken out of the queue, or its generation stopped at the next round."""
        with self._cv:
            if not job.cancel_reason:
                job.cancel_reason = reason
            job.cancel.set()
            if job in self._queue:
                self._queue.remove(job)
                self._depth()
                self._refused(job, _shutdown() if reason == "shutdown" else None, reason)

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def current(self) -> Job | None:
        """The job being generated (with several slots: the one in the lowest busy slot)."""
        if self._current is not None:
            return self._current
        return next((s[0] for s in self._slots if s is not None), None)

    @property
    def busy(self) -> bool:
        return self.current is not None

    def slot_jobs(self) -> list[Job | None]:
        """The job in each slot (None: free); one slot: the job running alone, if any."""
        if self.runner is None or self._current is not None:
            return [self._current] + [None] * (len(self._slots) - 1)
        return [s[0] if s is not None else None for s in self._slots]

    # -- shutdown -----------------------------------------------------------------------
    def close(self) -> None:
        """Refuse new jobs, answer the waiting ones with 503 and cancel the one generating."""
        with self._cv:
            self._closing = True
            waiting = list(self._queue)
            running = [self._current] + self.slot_jobs()
        for job in waiting:
            self.cancel(job, "shutdown")
        for job in running:
            if job is not None:
                self.cancel(job, "shutdown")

    def stop(self, timeout: float = 30.0) -> None:
        self.close()
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout)

    # -- the worker ---------------------------------------------------------------------
    def _depth(self) -> None:
        self.metrics.queue_depth.set(len(self._queue))
        self.live.queue(len(self._queue))

    def _refused(self, job: Job, error: ApiError | None, outcome: str) -> None:
        if error is not None:
            job.channel.put(error)
        self.metrics.request(job.endpoint, outcome)
        self.live.refused(outcome)

    def _loop(self) -> None:
        if self.runner is not None:
            self._loop_slots()
            return
        while True:
            with self._cv:
                while not self._queue and not self._stopped:
                    self._cv.wait()
                if not self._queue:
                    return
                job = self._current = self._queue.popleft()
                self._depth()
            try:
                self._run(job)
            finally:
                with self._cv:
                    self._current = None

    def _run(self, job: Job) -> None:
        m, live, put = self.metrics, self.live, job.channel.put
        if job.cancel.is_set():     # cancelled between leaving the queue and starting
            self._refused(job, _shutdown(), job.cancel_reason or "cancelled")
            return
        m.queue_wait.observe(time.perf_counter() - job.arrived)
        live.start(job.id, job.endpoint, job.spec.drafter.value)
        m.busy.set(1)
        done, ttft, stream, tokens = None, 0.0, job.stream, job.tokens
        try:
            if not job.cache_prompt:
                self.engine.reset()
            first = True
            for ev in self.engine.run(job.prompt, job.spec, job.cancel):
                kind = type(ev)
                if kind is Token:
                    if first:
                        first = False
                        ttft = time.perf_counter() - job.arrived
                        m.ttft.observe(ttft)
                    if tokens:
                        put(ev)
                    elif stream and ev.text:
                        put(ev.text)
                elif kind is Step:
                    m.step(ev)
                    live.step(ev)
                elif kind is TextChunk and stream:
                    put(ev.text)
                elif kind is PromptProcessed:
                    m.prompt_done(ev.n_tokens, ev.n_cached)
                    live.prompt(ev.n_tokens, ev.n_cached)
                elif kind is Done:
                    done = ev
                    m.answered(ev.summary)
            outcome, last = _OUTCOME.get(done.stop_reason) or job.cancel_reason or "cancelled", done
        except WorkerLost as exc:        # an RPC worker died mid-answer: a bad gateway, this request only
            log.error("request %s failed: %s", job.id, exc)
            outcome, last = "error", ApiError(502, str(exc), code="worker_lost")
        except LocalspecError as exc:    # e.g. a prompt the engine cannot take
            outcome, last = "bad_request", ApiError(400, str(exc))
        except Exception as exc:         # never a traceback: one line in the log, a 500 to the client
            log.error("request %s failed: %s: %s", job.id, type(exc).__name__, exc)
            outcome, last = "error", ApiError(500, f"generation failed: {type(exc).__name__}: {exc}")
        # Counted before the client hears back, so what it reads next (/metrics) includes it.
        m.busy.set(0)
        m.request(job.endpoint, outcome)
        s = done.summary if done is not None else None
        live.finish(outcome, s.n_generated if s else 0, s.tokens_per_second if s else 0.0,
                    s.drafted if s else 0, s.accepted if s else 0, ttft)
        self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.perf_counter() - job.arrived)
        put(last)
        if s is not None:
            log.info("request %s %s: %s, %d tokens at %.1f tok/s, %d/%d drafts accepted, %d prompt "
                     "tokens (%d cached)", job.id, job.endpoint, outcome, s.n_generated, s.tokens_per_second,
                     s.accepted, s.drafted, s.n_prompt, s.n_cached)

    # -- several slots ------------------------------------------------------------------
    def _loop_slots(self) -> None:
        runner, m = self.runner, self.metrics
        ended = runner.ended
        while True:
            admit: list[Job] = []
            alone: Job | None = None
            # Between requests a round takes no lock: with nothing queued and a slot busy, the
            # block below would neither wait nor admit (a deque's length reads safely unlocked).
            if self._queue or not runner.busy:
                stop, alone = self._admit(admit)
                if stop:
                    return
            if alone is not None:
                try:
                    self._run(alone)
                finally:
                    with self._cv:
                        self._current = None
                continue
            for job in admit:
                self._start(job)
            if runner.busy:
                runner.step()
                m.round(runner.last_batch, runner.busy)
            if runner.ended != ended:     # a slot freed: answer its job
                ended = runner.ended
                self._reap()

    def _admit(self, admit: list[Job]) -> tuple[bool, Job | None]:
        """Under the lock: wait for work, then move the jobs the free slots take into
        ``admit``. Returns (stopped with nothing queued or running, a job that must run alone
        or None)."""
        runner = self.runner
        alone: Job | None = None
        with self._cv:
            while not self._queue and not runner.busy and not self._stopped:
                self._cv.wait()
            if not self._queue and not runner.busy:
                return True, None
            free, taken, waiting = runner.free, set(), collections.deque()
            while self._queue and len(admit) < free:
                job = self._queue[0]
                if not runner.supports(job.spec):
                    if not runner.busy and not admit:   # its turn: it runs alone
                        alone = self._current = self._queue.popleft()
                    break
                self._queue.popleft()
                if job.slot < 0:
                    admit.append(job)
                elif runner.slots[job.slot] is None and job.slot not in taken:
                    taken.add(job.slot)
                    admit.insert(0, job)        # (started first: the others pick among the rest)
                else:
                    waiting.append(job)         # its slot is busy: it waits, the others go on
            self._queue.extendleft(reversed(waiting))
            if admit or alone:
                self._depth()
        return False, alone

    def _start(self, job: Job) -> None:
        """Put a job into a free slot (its prompt is read and its first token emitted by the next
        round; one that ends there is answered by :meth:`_reap`)."""
        if job.cancel.is_set():
            self._refused(job, _shutdown(), job.cancel_reason or "cancelled")
            return
        m, live, put, stream = self.metrics, self.live, job.channel.put, job.stream
        tokens = job.tokens
        m.queue_wait.observe(time.perf_counter() - job.arrived)
        state = {"first": True, "ttft": 0.0, "slot": 0}

        def on_event(ev) -> None:
            kind = type(ev)
            if kind is Token:
                if state["first"]:
                    state["first"] = False
                    state["ttft"] = time.perf_counter() - job.arrived
                    m.ttft.observe(state["ttft"])
                if tokens:
                    put(ev)
                elif stream and ev.text:
                    put(ev.text)
            elif kind is Step:
                m.step(ev)
                live.step(ev, state["slot"])
            elif kind is TextChunk and stream:
                put(ev.text)
            elif kind is PromptProcessed:
                m.prompt_done(ev.n_tokens, ev.n_cached)
                live.prompt(ev.n_tokens, ev.n_cached, state["slot"])

        slot = job.slot if job.slot >= 0 else self.runner.pick_slot(job.prompt)
        state["slot"] = job.slot_used = slot
        live.start(job.id, job.endpoint, job.spec.drafter.value, slot)
        self._slots[slot] = (job, state)
        try:   # read at the next round, with the prompts of the others admitted now
            gen = self.runner.admit(job.prompt, job.spec, job.cancel, on_event, cache_prompt=job.cache_prompt,
                                    slot=slot)
        except Exception as exc:    # noqa: BLE001 - answered as the single path answers it
            self._slots[slot] = None
            self._end(job, None, exc, 0.0, slot)
            return
        m.busy.set(1)     # only a job that holds a slot: one refused here leaves nothing to reset
        self._slots[slot] = (job, gen, state)

    def _reap(self) -> None:
        """Answer the jobs whose generations ended this round; their slots are free again."""
        for slot, entry in enumerate(self._slots):
            if entry is None or len(entry) < 3 or not entry[1].finished:
                continue
            job, gen, state = entry
            self._slots[slot] = None
            self._end(job, gen.done, gen.error, state["ttft"], slot)
        if self.runner.busy == 0:
            self.metrics.busy.set(0)

    def _end(self, job: Job, done: Done | None, error: BaseException | None, ttft: float, slot: int) -> None:
        m = self.metrics
        if error is None:
            outcome, last = _OUTCOME.get(done.stop_reason) or job.cancel_reason or "cancelled", done
        elif isinstance(error, WorkerLost):   # an RPC worker died mid-answer: a bad gateway
            log.error("request %s failed: %s", job.id, error)
            outcome, last = "error", ApiError(502, str(error), code="worker_lost")
        elif isinstance(error, LocalspecError):
            outcome, last = "bad_request", ApiError(400, str(error))
        else:
            log.error("request %s failed: %s: %s", job.id, type(error).__name__, error)
            outcome, last = "error", ApiError(500, f"generation failed: {type(error).__name__}: {error}")
        m.request(job.endpoint, outcome)
        s = done.summary if done is not None else None
        if s is not None:
            m.slot_done(slot, s.tokens_per_second, s.acceptance_rate if s.drafted else None)
        self.live.finish(outcome, s.n_generated if s else 0, s.tokens_per_second if s else 0.0,
                         s.drafted if s else 0, s.accepted if s else 0, ttft, slot)
        self._mean_seconds = 0.8 * self._mean_seconds + 0.2 * (time.perf_counter() - job.arrived)
        job.channel.put(last)
        if s is not None:
            log.info("request %s %s (slot %d): %s, %d tokens at %.1f tok/s, %d/%d drafts accepted, %d prompt "
                     "tokens (%d cached)", job.id, job.endpoint, slot, outcome, s.n_generated, s.tokens_per_second,
                     s.accepted, s.drafted, s.n_prompt, s.n_cached)
