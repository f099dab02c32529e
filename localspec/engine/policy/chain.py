"""A draft chain's policy: prompt lookup and the draft model, each its own adaptive policy.

A lookup costs microseconds and finds a long match or nothing; a draft model costs a decode
a token and always proposes. Each has its own :class:`AdaptivePolicy`, learning from the
rounds its drafter drafted (every round's target cost is shared), choosing its own K and
pausing on its own. A model round also pays for catching up on the lookups' tokens: the
chain measures that and adds it to the model's round cost. Where the model's expected
tokens per second are clearly higher, it takes a round even when the lookup matched; the
unused match is judged against what the target emits, so the lookups can take rounds back.
"""

from __future__ import annotations

from dataclasses import replace

from ..events import Step
from .adaptive import AdaptivePolicy
from .params import DEFAULT, Params

LOOKUP, MODEL = "ngram", "model"     # the drafters' names, as Step.source carries them
CATCHUP = "model_catchup"            # learned: a model round's mean catch-up seconds
_LABEL = {LOOKUP: "prompt lookup", MODEL: "draft model"}


class ChainPolicy:
    """Routes each round to the policy of the drafter that drafted it.

    Args:
        lookup, model: the two drafters' policies.
    """

    adaptive = True
    may_draft = True

    def __init__(self, lookup: AdaptivePolicy, model: AdaptivePolicy):
        self.lookup, self.model = lookup, model
        self.p: Params = model.p
        self.k_lookup = self.k_model = 0     # this round's draft lengths, read by the ChainDrafter
        self.routed = 0                      # lookup matches the model drafted instead
        self.probe = False
        self._asked = {LOOKUP: True, MODEL: True}
        self._probe = {LOOKUP: False, MODEL: False}
        self._first: bool | None = True
        self._catchup: float | None = None

    @classmethod
    def build(cls, draft_min: int, draft_max: int, p_min: float | None, can_pause: bool,
              learned: dict | None = None, params: Params = DEFAULT, size_ratio: float | None = None,
              **kw) -> ChainPolicy:
        """A chain seeded from ``learned`` (:meth:`learned`, or the lone drafters' states
        under the same keys)."""
        learned = learned or {}
        chain = cls(AdaptivePolicy(draft_min, draft_max, None, can_pause, learned=learned.get(LOOKUP),
                                   params=params, **kw),
                    AdaptivePolicy(draft_min, draft_max, p_min, can_pause, learned=learned.get(MODEL),
                                   params=params, size_ratio=size_ratio, **kw))
        catchup = learned.get(CATCHUP)
        if isinstance(catchup, (int, float)) and catchup >= 0:
            chain._catchup = chain.model.round_extra = float(catchup)
        return chain

    def _policies(self):
        return ((LOOKUP, self.lookup), (MODEL, self.model))

    @property
    def drafting(self) -> bool:
        return self.lookup.drafting or self.model.drafting

    @property
    def model_drafting(self) -> bool:
        return self.model.drafting

    @property
    def lookup_drafting(self) -> bool:
        return self.lookup.drafting

    @property
    def pauses(self) -> int:
        return self.lookup.pauses + self.model.pauses

    @property
    def probes(self) -> int:
        return self.lookup.probes + self.model.probes

    @property
    def k_now(self) -> int:
        return max(self.lookup.k_now, self.model.k_now)

    def next_k(self) -> int:
        """Asks each drafter's policy, except one that is paused between probes."""
        ks = {}
        for name, pol in self._policies():
            self._asked[name] = not pol.quiet_rounds()
            ks[name] = pol.next_k() if self._asked[name] else 0
            self._probe[name] = self._asked[name] and pol.probe
        self.k_lookup, self.k_model = ks[LOOKUP], ks[MODEL]
        if not self.k_lookup and self.lookup.drafting and self.k_model:
            self.k_lookup = self.lookup.k_now   # its plain step would not be one: the model drafts
        self.probe = any(self._probe.values())
        self._first = None
        return max(self.k_lookup, self.k_model)

    @property
    def lookup_first(self) -> bool:
        """Whether a lookup's match drafts this round rather than the model: yes unless both
        draft (no probe) and the model's expected tokens per second, catch-up included, are
        clearly above the lookups'."""
        if self._first is None:
            self._first = True
            if self.k_lookup and self.k_model and not self.probe:
                lookup, model = self.lookup.rate(self.k_lookup, matched=True), self.model.rate(self.k_model)
                self._first = lookup is None or model is None or model <= lookup * (1.0 + self.p.route_margin)
        return self._first

    def lookup_unused(self, k: int, drafted: int, accepted: int) -> None:
        """A lookup's proposal the model drafted instead, judged afterwards."""
        self.routed += 1
        self.lookup.observe_unused(k, drafted, accepted)

    def gate(self):
        return self.model.gate()      # p_min is the draft model's stop rule

    def lookup_gate(self):
        return self.lookup.gate()     # which matches pay for their place in the batch

    def plain_step_seconds(self) -> float | None:
        return self.model.plain_step_seconds()

    def observe(self, step: Step) -> str | None:
        """The drafter that drafted the round learns from all of it, the other only the
        target's cost (and the tokens towards its next probe)."""
        if step.source == MODEL and step.draft_steps:
            self._learn_catchup(step)
        notes = []
        for name, pol in self._policies():
            if not self._asked[name]:
                pol.passed(1, step.emitted)
                continue
            if step.source != name:
                note = pol.observe_other(step)
            else:
                k = self.k_lookup if name == LOOKUP else self.k_model
                fit = step.k <= k and step.probe == self._probe[name]
                note = pol.observe(step if fit else replace(step, k=min(step.k, k), probe=self._probe[name]))
            if note:
                notes.append(f"{_LABEL[name]}: {note}")
        return "; ".join(notes) or None

    def _learn_catchup(self, step: Step) -> None:
        """A model round's first decode beyond one decode's cost (its catch-up on the lookups'
        tokens) and its wait for a catch-up alongside, averaged over recent model rounds."""
        one = self.model.costs.draft_first()   # the drafter's first decode, little to catch up
        if one is None:
            return
        decode = step.sync_seconds - step.wait_seconds
        extra = (max(decode - one, 0.0) if step.sync_tokens > self.p.short_sync else 0.0) + step.wait_seconds
        self._catchup = extra if self._catchup is None else self._catchup + 0.2 * (extra - self._catchup)
        self.model.round_extra = self._catchup

    def opening_note(self) -> str | None:
        notes = [f"{_LABEL[name]}: {note}" for name, pol in self._policies() if (note := pol.opening_note())]
        return "; ".join(notes) or None

    def quiet_rounds(self) -> int:
        return min(self.lookup.quiet_rounds(), self.model.quiet_rounds())

    def passed(self, rounds: int, tokens: int) -> None:
        self.lookup.passed(rounds, tokens)
        self.model.passed(rounds, tokens)

    @property
    def reason(self) -> str:
        return "; ".join(f"{_LABEL[name]}: {pol.reason}" for name, pol in self._policies())

    def describe(self) -> str:
        return f"{self.model.describe()}, prompt lookup and draft model each"

    def learned(self) -> dict | None:
        out = {name: pol.learned() for name, pol in self._policies()}
        if not any(out.values()):
            return None
        out[CATCHUP] = self._catchup
        return out

    def estimates(self) -> dict:
        lookup, model = self.lookup.estimates(), self.model.estimates()
        return {"adaptive": True, "chain": True, "k": self.k_now, "drafting": self.drafting, "reason": self.reason,
                "seeded": lookup["seeded"] or model["seeded"],
                "predicted_speedup": max(lookup["predicted_speedup"], model["predicted_speedup"]),
                "pauses": self.pauses, "probes": self.probes, "lookup_matches_given_to_the_model": self.routed,
                LOOKUP: lookup, MODEL: model}
