"""Prometheus metrics of one server, in its own registry (several servers can share a process).

The scheduler's worker feeds it the engine's own records (:class:`Step`, :class:`Done`), so
the figures are those ``localspec run`` prints. Labelled children are looked up once: the
per-round cost is a few counter increments.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from ..engine import Step

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
TOKEN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)

OUTCOMES = ("stop", "length", "cancelled", "shutdown", "error", "bad_request", "unauthorized", "queue_full")
ENDPOINTS = ("chat", "completions", "completion")   # /completion: llama-server's native one


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, queue_capacity: int, slots: int = 1):
        disable_created_metrics()   # no *_created series: they double the page and nobody graphs them
        r = self.registry = CollectorRegistry()
        self.requests = Counter("localspec_requests", "Requests by endpoint and outcome "
                                "(stop, length, cancelled by the client, shutdown, error, bad_request, "
                                "unauthorized, queue_full).", ["endpoint", "outcome"], registry=r)
        for e in ENDPOINTS:   # present from the start, so rates work before the first failure
            for o in OUTCOMES:
                self.requests.labels(e, o)
        self.generated = Counter("localspec_tokens_generated", "Tokens generated (all requests).", registry=r)
        self.prompt = Counter("localspec_prompt_tokens", "Prompt tokens decoded (not reused from the cache).",
                              registry=r)
        self.cached = Counter("localspec_prompt_tokens_cached", "Prompt tokens reused from the previous "
                              "request's cache.", registry=r)
        self.drafted = Counter("localspec_draft_tokens", "Tokens proposed by the drafter.", registry=r)
        self.accepted = Counter("localspec_draft_tokens_accepted", "Drafted tokens the target accepted.",
                                registry=r)
        pos = ["position"]
        self.pos_drafted = Counter("localspec_draft_position_tokens", "Tokens drafted at each draft position "
                                   "(1 = first drafted token of a round).", pos, registry=r)
        self.pos_accepted = Counter("localspec_draft_position_accepted", "Tokens accepted at each draft "
                                    "position.", pos, registry=r)
        self.pos_rate = Gauge("localspec_draft_acceptance", "Acceptance rate at each draft position since "
                              "the server started.", pos, registry=r)
        drafting = Counter("localspec_tokens_drafting", "Tokens generated while drafting was on or paused "
                           "by the adaptive policy.", ["drafting"], registry=r)
        self._on, self._off = drafting.labels("on"), drafting.labels("off")
        self.queue_depth = Gauge("localspec_queue_depth", "Requests waiting for the engine.", registry=r)
        Gauge("localspec_queue_capacity", "Most requests that may wait (--queue).", registry=r).set(queue_capacity)
        self.busy = Gauge("localspec_generating", "1 while a request is being generated.", registry=r)
        self.ttft = Histogram("localspec_time_to_first_token_seconds", "From a request's arrival (queue wait "
                              "included) to its first generated token.", buckets=TTFT_BUCKETS, registry=r)
        self.queue_wait = Histogram("localspec_queue_wait_seconds", "Time requests waited for the engine.",
                                    buckets=TTFT_BUCKETS, registry=r)
        self.per_token = Histogram("localspec_time_per_output_token_seconds", "Generation time per token: "
                                   "each round's time divided over the tokens it emitted, every token counted.",
                                   buckets=TOKEN_BUCKETS, registry=r)
        self.cascade = Counter("localspec_cascade_answers", "Cascaded requests by who answered: 'draft' (the "
                               "draft model's answer, not the target's) or 'target'.", ["answered_by"], registry=r)
        self._pos: list[tuple] = []    # (drafted child, accepted child, rate child, drafted n, accepted n)
        Gauge("localspec_slots", "Slots: requests generated together (--parallel).", registry=r).set(slots)
        self.slots_busy = Gauge("localspec_slots_busy", "Slots generating now (the rest are idle).", registry=r)
        self.decode_batch = Histogram("localspec_decode_batch_tokens", "Tokens in each round's target decode "
                                      "(every busy slot's plain step or verify batch together).",
                                      buckets=BATCH_BUCKETS, registry=r)
        self.slot_tps = Gauge("localspec_slot_tokens_per_second", "Each slot's last request's tokens per "
                              "second.", ["slot"], registry=r)
        self.slot_acceptance = Gauge("localspec_slot_draft_acceptance", "Each slot's last request's share "
                                     "of drafted tokens accepted.", ["slot"], registry=r)
        self._slot_children = [(self.slot_tps.labels(str(i)), self.slot_acceptance.labels(str(i)))
                               for i in range(slots)]

    # -- fed by the scheduler's worker ------------------------------------------------
    def step(self, s: Step) -> None:
        if s.emitted:
            (self._on if s.drafting else self._off).inc(s.emitted)
            self.generated.inc(s.emitted)
            per = (s.draft_seconds + s.verify_seconds) / s.emitted
            for _ in range(s.emitted):
                self.per_token.observe(per)
        if s.drafted:
            self.drafted.inc(s.drafted)
            self.accepted.inc(s.accepted)
            while len(self._pos) < s.drafted:
                p = str(len(self._pos) + 1)
                self._pos.append([self.pos_drafted.labels(p), self.pos_accepted.labels(p), self.pos_rate.labels(p),
                                  0, 0])
            for i in range(s.drafted):
                row = self._pos[i]
                row[0].inc()
                row[3] += 1
                if i < s.accepted:
                    row[1].inc()
                    row[4] += 1
                row[2].set(row[4] / row[3])

    def answered(self, s) -> None:
        """A finished request's Summary: who answered, with a cascade."""
        if s.answered_by:
            self.cascade.labels(s.answered_by).inc()

    def round(self, batch_tokens: int, busy: int) -> None:
        """A round of the slots: its decode's tokens, and the slots still busy after it."""
        self.decode_batch.observe(batch_tokens)
        self.slots_busy.set(busy)

    def slot_done(self, slot: int, tokens_per_second: float, acceptance: float | None) -> None:
        tps, acc = self._slot_children[slot]
        tps.set(tokens_per_second)
        if acceptance is not None:
            acc.set(acceptance)

    def prompt_done(self, n_prompt: int, n_cached: int) -> None:
        self.prompt.inc(n_prompt - n_cached)
        self.cached.inc(n_cached)

    def request(self, endpoint: str, outcome: str) -> None:
        self.requests.labels(endpoint, outcome).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
