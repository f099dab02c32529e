"""Draft chains: prompt lookup first, the draft model when the lookup finds nothing.

Prompt lookup costs next to nothing and, where the answer repeats its context (code,
summaries, edits), proposes long runs that are accepted; elsewhere it finds nothing and the
draft model takes over. llama.cpp combines an n-gram drafter with a draft model the same way.

With an adaptive policy (:class:`~localspec.engine.policy.ChainPolicy`, which the
chain follows) each drafter has its own draft length and may be paused on its own: a paused
draft model leaves a lookup miss to a plain target step, and does not read the prompt.

The model drafter keeps its own cache exact: rounds drafted by the lookup leave it behind by
the tokens they accepted, and it decodes those in one catch-up batch the next time it drafts
(its usual sync, see :class:`~localspec.engine.drafters.ModelDrafter`). Where it may work
beside the target (a ``budget`` is given), it catches up alongside instead, while the target
verifies each lookup's draft, so a lookup miss finds it at most one round behind.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from .drafters import Draft, Gate, ModelDrafter, NgramDrafter, judged_prefix
from .sampling import SamplingConfig

_UNUSED_HELD = 8   # lookup proposals waiting to be judged against what the target emits


class Plan(Protocol):
    """This round's draft length per drafter (a ChainPolicy), whether the model drafts, and
    whether a lookup's match drafts before it (else the model takes the round)."""

    k_lookup: int
    k_model: int
    lookup_first: bool

    @property
    def model_drafting(self) -> bool: ...

    @property
    def lookup_drafting(self) -> bool: ...

    def lookup_unused(self, k: int, drafted: int, accepted: int) -> None: ...

    def lookup_gate(self) -> Gate | None: ...


class ChainDrafter:
    """Prompt lookup, then the draft model when the lookup proposes nothing."""

    name = "ngram+model"
    deterministic = False      # the model's drafts carry distributions
    ready = True               # lookups draft while the model reads alongside

    def __init__(self, lookup: NgramDrafter, model: ModelDrafter):
        self.lookup = lookup
        self.model = model
        self.ctx = model.ctx
        self.lookups = 0       # rounds the lookup drafted (the rest fell to the model)
        self._plan: Plan | None = None
        # Lookup proposals the model drafted instead: (where they start in the context,
        # their tokens, the K they were drafted under), until the target's tokens judge them.
        self._unused: deque[tuple[int, list[int], int]] = deque(maxlen=_UNUSED_HELD)

    def follow(self, plan: Plan | None) -> None:
        """Take each round's draft lengths from ``plan`` (None: both drafters get the K the
        generator asks for, as with a fixed draft length)."""
        self._plan = plan

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        self._unused.clear()
        plan = self._plan
        self.lookup.prefill(tokens, now=now if plan is None else plan.lookup_drafting)
        self.model.prefill(tokens, now=now if plan is None else plan.model_drafting)

    def read_alongside(self, tokens: list[int]) -> bool:
        plan = self._plan
        if plan is not None and not plan.model_drafting:
            return False            # a paused model reads nothing: prefill does the lookup's index
        self._unused.clear()
        self.lookup.prefill(tokens, now=plan is None or plan.lookup_drafting)
        return self.model.read_alongside(tokens)

    def settle(self, wait: bool = True) -> None:
        self.model.settle(wait)

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate: Gate | None = None,
              budget: float | None = None) -> Draft:
        plan = self._plan
        k_lookup, k_model = (k, k) if plan is None else (min(k, plan.k_lookup), min(k, plan.k_model))
        if k_model > 0 and not self.model.ready and (budget is None or self.model.busy_beyond(budget)):
            # Reading alongside for longer than a plain step, or for how long nobody knows (a
            # prompt's read; no plain step measured yet): a lookup miss is a plain step.
            k_model = 0
        if self._unused and plan is not None:
            self._judge_unused(context, plan)
        if k_lookup <= 0:
            # Paused lookups cost nothing: the index takes in what went by at the next lookup.
            d = Draft([], None, 0.0, 0)
        else:
            d = self.lookup.draft(context, k_lookup, cfg, rng, gate if plan is None else plan.lookup_gate())
        if d.tokens and k_model > 0 and plan is not None and not plan.lookup_first:
            # The model's rounds pay more here: it drafts, and the lookup's proposal waits to
            # be judged by what the target emits. A model that only starts catching up
            # (proposes nothing) leaves the round to the lookup after all.
            m = self.model.draft(context, k_model, cfg, rng, gate, budget)
            if m.steps:
                self._unused.append((len(context), d.tokens, k_lookup))
                return self._model_round(m, d.seconds)
            d.seconds += m.seconds           # its deferral (a wait up to a plain step) is this round's
            d.sync_seconds += m.seconds
        if d.tokens:
            self.lookups += 1
            if budget is not None and k_model > 0:   # beside the target: keep the model close behind
                self.model.catch_up_alongside(context)
            d.source = self.lookup.name
            return d
        if k_model <= 0:
            # The model is paused: a plain target step after the lookup's miss, which is the
            # lookup's round (as alone, its policy learns what a miss costs, and may pause it).
            d.source = self.lookup.name if d.steps else ""
            return d
        return self._model_round(self.model.draft(context, k_model, cfg, rng, gate, budget), d.seconds)

    def _model_round(self, m: Draft, lookup_seconds: float) -> Draft:
        """The model's draft as this round's: the lookup's time is part of its first (sync)
        step. A model that only started catching up (no decode: steps 0) leaves a plain
        step, which no drafter drafted."""
        return Draft(m.tokens, m.dists, m.seconds + lookup_seconds, m.steps, m.sync_tokens,
                     m.sync_seconds + lookup_seconds, m.confidence, source=self.model.name if m.steps else "",
                     waited=m.waited)

    def _judge_unused(self, context: list[int], plan: Plan) -> None:
        """Judge each held proposal whose fate the context now decides: its leading tokens
        that match what the target emitted there, up to the first that does not (or all)."""
        n = len(context)
        for item in list(self._unused):
            start, tokens, k = item
            if start > n:            # a context that is no extension of the last: drop them
                self._unused.clear()
                return
            matched = judged_prefix(tokens, context, start)
            if matched is not None:
                self._unused.remove(item)
                plan.lookup_unused(k, len(tokens), matched)

    def close(self) -> None:
        self.lookup.close()   # the model drafter's context belongs to the engine's model drafter
