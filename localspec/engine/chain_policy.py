"""The drafting policy of a draft chain: one adaptive policy per drafter of the chain.

Prompt lookup and the draft model differ in everything the policy measures: a lookup costs
microseconds and either finds a run the answer copies (long, mostly accepted) or nothing; a
draft model costs a real decode per token and always proposes. One policy over both would
average them into a drafter that exists nowhere, and pause or keep both together. So each
has its own :class:`~localspec.engine.policy.AdaptivePolicy`: it learns from the rounds its
drafter drafted (every round's target costs are shared), picks its own K and pauses on its
own. Where the draft model loses and lookups pay, the chain keeps the lookups and leaves the
model paused (and its prompt unread); where lookups find nothing, the model drafts as alone.

A model round in a chain also costs what a lone draft model never pays: decoding the tokens
the lookups' rounds emitted since its last round, before it can draft. The chain measures
that per model round and adds it to the model policy's round cost.

A lookup that finds a match is not always the better round: where the answer only half
repeats its context (code that renames, a chat that quotes), its drafts are accepted less
than the draft model's, and a lookup round that barely beats a plain step takes the place of
a model round that pays more. So each round the chain compares the two policies' expected
tokens per second and, where the model's is clearly higher, gives it the round even when the
lookup found something (:attr:`ChainPolicy.lookup_first`). The lookup's unused proposal is
judged against what the target then emits (:meth:`ChainPolicy.lookup_unused`), so its
acceptance stays current and the lookups take their rounds back when they pay more again.
"""

from __future__ import annotations

from dataclasses import replace

from .events import Step
from .policy import SHORT_SYNC, AdaptivePolicy

LOOKUP, MODEL = "ngram", "model"     # the drafters' names, as Step.source carries them
_CATCHUP = "model_catchup"           # learned: a model round's mean catch-up seconds
_ROUTE_MARGIN = 0.02                 # the model takes a round a lookup found a draft for only this much faster


class ChainPolicy:
    """Routes each round to the policy of the drafter that drafted it."""

    adaptive = True
    may_draft = True

    def __init__(self, lookup: AdaptivePolicy, model: AdaptivePolicy):
        self.lookup = lookup
        self.model = model
        self.k_lookup = 0          # this round's draft lengths, read by the ChainDrafter
        self.k_model = 0
        self._first: bool | None = True   # this round's lookup_first, worked out when asked
        self.routed = 0            # lookup matches the model drafted instead (counted as judged)
        self._probe_lookup = self._probe_model = False   # this round's probe, per drafter
        self._model_asked = True   # this round's next_k asked the draft model (see next_k)
        self._lookup_asked = True  # ... and the lookups
        # A first round asks both: a seeded pause nobody took as the opening note is said
        # at once (the generator takes it before the answer; a caller driving the chain may not).
        self._started = False
        self.probe = False
        self._catchup: float | None = None   # recent mean catch-up seconds of a model round

    @classmethod
    def build(cls, draft_min: int, draft_max: int, p_min: float | None, can_pause: bool,
              learned: dict | None = None, size_ratio: float | None = None) -> ChainPolicy:
        """``learned``: what an earlier chain learned (:meth:`learned`), or the single
        drafters' states under the same keys; ``size_ratio``: the draft model's weights over
        the target's (see :class:`AdaptivePolicy`)."""
        learned = learned or {}
        chain = cls(AdaptivePolicy(draft_min, draft_max, None, can_pause, learned=learned.get(LOOKUP), lookup=True),
                    AdaptivePolicy(draft_min, draft_max, p_min, can_pause, learned=learned.get(MODEL),
                                   size_ratio=size_ratio))
        catchup = learned.get(_CATCHUP)
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
        # A paused drafter between its measured rounds and its probes has nothing to decide:
        # as the generator does for a whole policy (quiet_rounds), the chain asks it nothing
        # in such a round and only counts the round towards its next probe.
        started = self._started
        self._started = True
        self._lookup_asked, self.k_lookup, probe_lookup = self._ask(self.lookup, started)
        self._model_asked, self.k_model, probe_model = self._ask(self.model, started)
        if not self.k_lookup and self.lookup.drafting and self.k_model:
            # The lookups ask for a plain step (to measure the target's), but the model drafts
            # this round: it would not be one. They draft as usual; the target's plain step
            # reaches them whenever a round is one (every round's target cost is shared).
            self.k_lookup = self.lookup.k_now
        self._probe_lookup, self._probe_model = probe_lookup, probe_model
        self.probe = self._probe_lookup or self._probe_model
        self._first = None
        return max(self.k_lookup, self.k_model)

    @staticmethod
    def _ask(pol: AdaptivePolicy, started: bool) -> tuple[bool, int, bool]:
        """One policy's part of :meth:`next_k`: whether it is asked this round, its K and
        whether that is a probe (0, no probe: a quiet round, after the first)."""
        if started and pol.quiet_rounds():
            return False, 0, False
        return True, pol.next_k(), pol.probe

    @property
    def lookup_first(self) -> bool:
        """Whether a lookup's match drafts this round rather than the draft model (asked only
        when the lookup found one and the model may draft): yes unless both draft (no probe
        of either) and the model's expected tokens per second, its catch-up included, are
        clearly above the lookups' (as each one's policy predicts them from its own rounds
        and, for the lookups, the proposals judged afterwards)."""
        if self._first is None:
            self._first = self._lookups_pay_more()
        return self._first

    def _lookups_pay_more(self) -> bool:
        if not (self.k_lookup and self.k_model) or self._probe_lookup or self._probe_model:
            return True
        lookup, model = self.lookup.rate(self.k_lookup), self.model.rate(self.k_model)
        return lookup is None or model is None or model <= lookup * (1.0 + _ROUTE_MARGIN)

    def lookup_unused(self, k: int, drafted: int, accepted: int) -> None:
        """A lookup's proposal the model drafted instead, judged afterwards (see the module)."""
        self.routed += 1
        self.lookup.observe_unused(k, drafted, accepted)

    def gate(self):
        return self.model.gate()      # p_min is the draft model's stop rule

    def lookup_gate(self):
        return self.lookup.gate()     # which matches pay for their place in the batch

    def plain_step_seconds(self) -> float | None:
        return self.model.plain_step_seconds()   # every round's target cost reaches both policies

    def observe(self, step: Step) -> str | None:
        """The drafter that drafted this round learns from all of it; the other one only
        the target's costs (and, paused, the tokens that went by towards its next probe)."""
        if step.source == MODEL and step.draft_steps:
            self._learn_catchup(step)
        lookup = self._tell(LOOKUP, self.lookup, step, self._lookup_asked, self.k_lookup, self._probe_lookup)
        model = self._tell(MODEL, self.model, step, self._model_asked, self.k_model, self._probe_model)
        return f"{lookup}; {model}" if lookup and model else lookup or model

    @staticmethod
    def _tell(name: str, pol: AdaptivePolicy, step: Step, asked: bool, k: int, probe: bool) -> str | None:
        """One policy's part of :meth:`observe`: its own round or another's, its note
        labelled; a quiet round (it was not asked) only counts towards its next probe."""
        if not asked:
            pol.passed(1, step.emitted)   # what observe_other does with such a round
            return None
        if step.source != name:
            note = pol.observe_other(step)
        else:
            note = pol.observe(step if step.k <= k and step.probe == probe
                               else replace(step, k=min(step.k, k), probe=probe))
        return f"{_LABEL[name]}: {note}" if note else None

    def opening_note(self) -> str | None:
        notes = [f"{_LABEL[name]}: {note}" for name, pol in self._policies() if (note := pol.opening_note())]
        return "; ".join(notes) or None

    def quiet_rounds(self) -> int:
        return min(self.lookup.quiet_rounds(), self.model.quiet_rounds())

    def passed(self, rounds: int, tokens: int) -> None:
        self.lookup.passed(rounds, tokens)
        self.model.passed(rounds, tokens)

    def _learn_catchup(self, step: Step) -> None:
        """The model round's first decode beyond what one decode costs (its catch-up on the
        lookups' tokens), and its wait for the catch-up running alongside, averaged over
        recent model rounds."""
        one = self.model.one_decode_seconds()
        if one is None:
            return
        # Short syncs are part of the policy's own first-decode cost; longer ones are not.
        decode = step.sync_seconds - step.wait_seconds
        extra = max(decode - one, 0.0) if step.sync_tokens > SHORT_SYNC else 0.0
        extra += step.wait_seconds
        self._catchup = extra if self._catchup is None else self._catchup + 0.2 * (extra - self._catchup)
        self.model.round_extra = self._catchup

    @property
    def reason(self) -> str:
        return "; ".join(f"{_LABEL[name]}: {pol.reason}" for name, pol in self._policies())

    def describe(self) -> str:
        return f"{self.model.describe()}, prompt lookup and draft model each"

    def learned(self) -> dict | None:
        out = {name: pol.learned() for name, pol in self._policies()}
        if not any(out.values()):
            return None
        out[_CATCHUP] = self._catchup
        return out

    def estimates(self) -> dict:
        lookup, model = self.lookup.estimates(), self.model.estimates()
        return {
            "adaptive": True,
            "chain": True,
            "k": self.k_now,
            "drafting": self.drafting,
            "reason": self.reason,
            "seeded": lookup["seeded"] or model["seeded"],
            "predicted_speedup": max(lookup["predicted_speedup"], model["predicted_speedup"]),
            "pauses": self.pauses,
            "probes": self.probes,
            "lookup_matches_given_to_the_model": self.routed,
            LOOKUP: lookup,
            MODEL: model,
        }


_LABEL = {LOOKUP: "prompt lookup", MODEL: "draft model"}
