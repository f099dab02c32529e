"""Prometheus metrics of one server, in its own registry (several servers can share a process).

The scheduler's worker feeds it the engine's own records (:class:`Step`, :class:`Done`), so
the figures are those ``localspec run`` prints. What changes every round (tokens, drafts,
time per token, decode batches) is kept as plain numbers by :class:`RoundFigures` and read
out when /metrics is asked for: a round costs a few additions, not a locked update per figure.
"""

from __future__ import annotations

import bisect

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ..engine import Step

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
TOKEN_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)

OUTCOMES = ("stop", "length", "cancelled", "shutdown", "error", "bad_request", "unauthorized", "queue_full")
# /completion, /infill: llama-server's own; responses: OpenAI's /v1/responses; messages: Anthropic's
# /v1/messages; ollama: Ollama's /api/chat and /api/generate
ENDPOINTS = ("chat", "completions", "completion", "infill", "responses", "messages", "ollama")


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
        self.figures = RoundFigures()
        r.register(self.figures)
        self.prompt = Counter("localspec_prompt_tokens", "Prompt tokens decoded (not reused from the cache).",
                              registry=r)
        self.cached = Counter("localspec_prompt_tokens_cached", "Prompt tokens reused from the previous "
                              "request's cache.", registry=r)
        self.queue_depth = Gauge("localspec_queue_depth", "Requests waiting for the engine.", registry=r)
        Gauge("localspec_queue_capacity", "Most requests that may wait (--queue).", registry=r).set(queue_capacity)
        self.busy = Gauge("localspec_generating", "1 while a request is being generated.", registry=r)
        self.ttft = Histogram("localspec_time_to_first_token_seconds", "From a request's arrival (queue wait "
                              "included) to its first generated token.", buckets=TTFT_BUCKETS, registry=r)
        self.queue_wait = Histogram("localspec_queue_wait_seconds", "Time requests waited for the engine.",
                                    buckets=TTFT_BUCKETS, registry=r)
        self.cascade = Counter("localspec_cascade_answers", "Cascaded requests by who answered: 'draft' (the "
                               "draft model's answer, not the target's) or 'target'.", ["answered_by"], registry=r)
        Gauge("localspec_slots", "Slots: requests generated together (--parallel).", registry=r).set(slots)
        self.slots_busy = Gauge("localspec_slots_busy", "Slots generating now (the rest are idle).", registry=r)
        self._slots_busy = 0
        self.slot_tps = Gauge("localspec_slot_tokens_per_second", "Each slot's last request's tokens per "
                              "second.", ["slot"], registry=r)
        self.slot_acceptance = Gauge("localspec_slot_draft_acceptance", "Each slot's last request's share "
                                     "of drafted tokens accepted.", ["slot"], registry=r)
        self._slot_children = [(self.slot_tps.labels(str(i)), self.slot_acceptance.labels(str(i)))
                               for i in range(slots)]

    # -- fed by the scheduler's worker ------------------------------------------------
    def step(self, s: Step) -> None:
        self.figures.step(s)

    def answered(self, s) -> None:
        """A finished request's Summary: who answered, with a cascade."""
        if s.answered_by:
            self.cascade.labels(s.answered_by).inc()

    def round(self, batch_tokens: int, busy: int) -> None:
        """A round of the slots: its decode's tokens, and the slots still busy after it."""
        self.figures.batch.observe(batch_tokens)
        if busy != self._slots_busy:     # a gauge's set takes a lock: only on a change
            self._slots_busy = busy
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


class _Histogram:
    """A histogram as plain numbers (one thread adds, any reads)."""

    def __init__(self, name: str, doc: str, buckets: tuple[float, ...]):
        self.name, self.doc, self.bounds = name, doc, buckets
        self.counts = [0] * (len(buckets) + 1)    # the last: above every bound
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def family(self) -> HistogramMetricFamily:
        counts, total, buckets = list(self.counts), self.sum, []
        running = 0
        for bound, c in zip((*self.bounds, float("inf")), counts):
            running += c
            buckets.append((floatToGoString(bound), running))
        return HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=total)


class RoundFigures:
    """The figures every round changes, as plain numbers, and a collector that exposes them
    (the scheduler's worker adds; /metrics reads)."""

    def __init__(self):
        self.generated = 0
        self.on = self.off = 0
        self.drafted = self.accepted = 0
        self.pos_drafted: list[int] = []       # at each draft position (1 = a round's first drafted token)
        self.pos_accepted: list[int] = []
        self.per_token = _Histogram("localspec_time_per_output_token_seconds", "Generation time per token: "
                                    "each round's time divided over the tokens it emitted, every token counted.",
                                    TOKEN_BUCKETS)
        self.batch = _Histogram("localspec_decode_batch_tokens", "Tokens in each round's target decode (every "
                                "busy slot's plain step or verify batch together).", BATCH_BUCKETS)

    def step(self, s: Step) -> None:
        n = s.emitted
        if n:
            if s.drafting:
                self.on += n
            else:
                self.off += n
            self.generated += n
            self.per_token.observe((s.draft_seconds + s.verify_seconds) / n, n)
        if s.drafted:
            self.drafted += s.drafted
            self.accepted += s.accepted
            while len(self.pos_drafted) < s.drafted:
                self.pos_drafted.append(0)
                self.pos_accepted.append(0)
            for i in range(s.drafted):
                self.pos_drafted[i] += 1
            for i in range(s.accepted):
                self.pos_accepted[i] += 1

    def collect(self):
        yield CounterMetricFamily("localspec_tokens_generated", "Tokens generated (all requests).",
                                  value=self.generated)
        yield CounterMetricFamily("localspec_draft_tokens", "Tokens proposed by the drafter.", value=self.drafted)
        yield CounterMetricFamily("localspec_draft_tokens_accepted", "Drafted tokens the target accepted.",
                                  value=self.accepted)
        drafted, accepted = list(self.pos_drafted), list(self.pos_accepted)[:len(self.pos_drafted)]
        pos_d = CounterMetricFamily("localspec_draft_position_tokens", "Tokens drafted at each draft position "
                                    "(1 = first drafted token of a round).", labels=["position"])
        pos_a = CounterMetricFamily("localspec_draft_position_accepted", "Tokens accepted at each draft position.",
                                    labels=["position"])
        rate = GaugeMetricFamily("localspec_draft_acceptance", "Acceptance rate at each draft position since "
                                 "the server started.", labels=["position"])
        for i, (d, a) in enumerate(zip(drafted, accepted)):
            pos_d.add_metric([str(i + 1)], d)
            pos_a.add_metric([str(i + 1)], a)
            rate.add_metric([str(i + 1)], a / d if d else 0.0)
        yield pos_d
        yield pos_a
        yield rate
        drafting = CounterMetricFamily("localspec_tokens_drafting", "Tokens generated while drafting was on or "
                                       "paused by the adaptive policy.", labels=["drafting"])
        drafting.add_metric(["on"], self.on)
        drafting.add_metric(["off"], self.off)
        yield drafting
        yield self.per_token.family()
        yield self.batch.family()
