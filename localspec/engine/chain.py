"""Draft chains: prompt lookup first, the draft model when the lookup finds nothing.

Prompt lookup costs next to nothing and, where the answer repeats its context (code,
summaries, edits), proposes long runs that are accepted; elsewhere it finds nothing and the
draft model takes over. llama.cpp combines an n-gram drafter with a draft model the same way.

The model drafter keeps its own cache exact: rounds drafted by the lookup leave it behind by
the tokens they accepted, and it decodes those in one catch-up batch the next time it drafts
(its usual sync, see :class:`~localspec.engine.drafters.ModelDrafter`).
"""

from __future__ import annotations

from .drafters import Draft, Gate, ModelDrafter, NgramDrafter
from .sampling import SamplingConfig


class ChainDrafter:
    """Prompt lookup, then the draft model when the lookup proposes nothing."""

    name = "ngram+model"
    deterministic = False      # the model's drafts carry distributions

    def __init__(self, lookup: NgramDrafter, model: ModelDrafter):
        self.lookup = lookup
        self.model = model
        self.ctx = model.ctx
        self.lookups = 0       # rounds the lookup drafted (the rest fell to the model)

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        self.lookup.prefill(tokens)
        self.model.prefill(tokens, now=now)

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate: Gate | None = None) -> Draft:
        d = self.lookup.draft(context, k, cfg, rng, gate)
        if d.tokens:
            self.lookups += 1
            return d
        m = self.model.draft(context, k, cfg, rng, gate)
        # The lookup's time is part of this round's first (sync) step.
        return Draft(m.tokens, m.dists, m.seconds + d.seconds, m.steps, m.sync_tokens,
                     m.sync_seconds + d.seconds, m.confidence)

    def close(self) -> None:
        self.lookup.close()   # the model drafter's context belongs to the engine's model drafter
