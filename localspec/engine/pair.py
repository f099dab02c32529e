"""Two draft models of different sizes, one of them drafting each round.

A small draft is cheap and does well on easy stretches of an answer; a larger one costs
more a token and holds up where the small one fails. The policy
(:class:`~localspec.engine.policy.LayeredPair`) measures both and says each round which one
drafts and how far; the other's cache stays behind and catches up, in one batch, the next
time it drafts (its usual sync, see :class:`~localspec.engine.drafters.ModelDrafter`), or
earlier when the policy has it scored on the tokens it missed (:meth:`ModelDrafter.score`).
In a layered round the large draft drafts from the small one's blocks
(:meth:`ModelDrafter.draft_checked`).
"""

from __future__ import annotations

from typing import Protocol

from .drafters import Draft, Gate, ModelDrafter
from .policy import LARGE, LAYERED, SMALL  # the drafts' names, as Step.source carries them
from .sampling import SamplingConfig


class Route(Protocol):
    """This round's draft (SMALL, LARGE or LAYERED, with the small draft's ``block``), the
    draft to score on the tokens it missed (``score``, "" for none) and whether each draft
    drafts at all."""

    route: str
    score: str
    block: int

    def drafting_now(self, name: str) -> bool: ...


class PairDrafter:
    """Drafts with the small or the large draft model, as the policy routes each round.

    Args:
        small, large: the two model drafters (the smaller weights first).
    """

    name = "models"
    deterministic = False
    ready = True

    def __init__(self, small: ModelDrafter, large: ModelDrafter):
        self.drafts = {SMALL: small, LARGE: large}
        self.small, self.large = small, large
        self.ctx = large.ctx
        self.contexts = (small.ctx, large.ctx)
        self._route: Route | None = None
        self._answer = 0               # where the answer starts in the context (what a score predicts)

    def follow(self, route: Route | None) -> None:
        """Take each round's draft from ``route`` (None: the small one, as with a fixed K)."""
        self._route = route

    def _now(self, name: str) -> bool:
        route = self._route
        return name == SMALL if route is None else route.drafting_now(name)

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        """Only the draft the policy starts with reads the prompt now; the other catches up
        when it first drafts."""
        self._answer = len(tokens)
        for name, d in self.drafts.items():
            d.prefill(tokens, now=now and self._now(name))

    def read_alongside(self, tokens: list[int]) -> bool:
        return False

    def settle(self, wait: bool = True) -> None:
        for d in self.drafts.values():
            d.settle(wait)

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate: Gate | None = None,
              budget: float | None = None) -> Draft:
        route = self._route
        name, scored = (route.route, route.score) if route is not None else (SMALL, "")
        score = self.drafts[scored].score(context, self._answer) if scored else None
        if name == LAYERED and self.large.grammar is None:
            d = self.large.draft_checked(self.small, context, k, route.block)
        else:
            d = self.drafts[LARGE if name == LAYERED else name].draft(context, k, cfg, rng, gate)
        d.source = name if d.steps else ""
        if score is not None:
            d.scored, (d.scored_hits, d.score_seconds) = scored, score
        return d

    def close(self) -> None:
        pass   # both contexts belong to the engine
