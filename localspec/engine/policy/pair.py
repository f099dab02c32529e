"""Two draft models' policy: each its own adaptive policy, one of them drafting per round.

A small draft wins on easy stretches of an answer and loses where its acceptance falls; a
larger draft costs more a token and holds up there. Each has its own
:class:`AdaptivePolicy` (its K, its costs, its acceptance, its pauses), and the pair routes
every round to the draft whose expected tokens per second are higher. The draft in use is
measured every round, and its last few rounds, read on their own, move its expected rate
at once when a stretch changes (its policy's memory lags by tens of rounds). The idle one's
acceptance is only what it was when it last drafted, so the pair tries it again, for
``route_try`` rounds, when its evidence, thinned by the rounds since (``route_rounds`` a
half-life) and read optimistically, could make it the faster one, its catch-up on the
tokens it missed priced in. A try that fails doubles the gap to the next (up to
``route_max`` rounds, carried into the next answer): where one draft is clearly better, the
other is rarely tried. A change in the text seen in the draft in use (a shift in its
acceptance, or its last rounds easier under the large draft or harder under the small one)
makes the idle one due for a try at once; the small draft in use, doing at least as well as
the large one's evidence, is not left for blind tries (its own rounds show when its text
turns hard). The draft in use when an answer ends starts the next.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from ..events import Step
from .acceptance import beta_bounds
from .adaptive import AdaptivePolicy
from .params import DEFAULT, Params

SMALL, LARGE = "small", "large"     # the drafts' names, as Step.source carries them
USE = "in_use"                       # learned: the draft in use when the answer ended
GAP = "try_gap"                      # learned: rounds between tries of the idle draft when it ended
_CATCHUP_MAX = 64                    # tokens a draft re-reads at most on coming back (ModelDrafter's)
_LABEL = {SMALL: "small draft", LARGE: "large draft"}


def best_rate(pol: AdaptivePolicy, alpha: float | None = None) -> float | None:
    """The highest expected tokens per second over K of ``pol`` (acceptance ``alpha`` if
    given); None until its costs are known."""
    if not pol.costs.known:
        return None
    rates = [t / s for k, (t, s) in pol.curve(alpha).items() if k > 0 and s > 0]
    return max(rates) if rates else None


class PairPolicy:
    """Routes each round to the small or the large draft.

    Args:
        small, large: the two drafts' policies; params: the tunables; use: the draft to start
            with (the one in use when the last answer ended), else the small one.
    """

    adaptive = True
    may_draft = True
    #: The draft in use's last rounds (``route_recent``), read on their own besides its
    #: policy's ~50-round memory (which lags a stretch change), once there are
    #: ``route_recent_min``, bound its acceptance (``z`` errors), and its expected rate is moved
    #: into those bounds; bounds beyond its long-run mean in the direction that favours the
    #: idle draft (easier text under the large one, harder under the small one) make a try due.

    def __init__(self, small: AdaptivePolicy, large: AdaptivePolicy, params: Params = DEFAULT,
                 use: str | None = None, gap: int | None = None):
        self.policies = {SMALL: small, LARGE: large}
        self.p = params
        self.use = SMALL               # the draft routed to, round after round
        self.route = SMALL             # this round's draft (a try routes to the other)
        self.trying = False
        self.try_left = 0              # rounds of the try under way still to go
        self.probe = False
        self.ks = {SMALL: 0, LARGE: 0}
        self.idle = 0                  # rounds since the idle draft last drafted
        self.gap = params.route_rounds
        if isinstance(gap, int) and params.route_rounds <= gap <= params.route_max:
            self.gap = gap             # failed tries of the last answer still count
        self.switches = self.tries = 0
        self._asked = {SMALL: True, LARGE: True}
        self._probe = {SMALL: False, LARGE: False}
        self._shifts = 0
        self.idle_tokens = 0             # tokens since the idle draft last drafted
        self._catchup: dict[str, float] = {}   # seconds per token a draft's catch-up costs
        self._note: str | None = None
        self._due = False                # the text changed: a try of the idle draft is due
        self._try_rounds: list[tuple[int, int]] = []   # the try under way's (accepted, failed) rounds
        self._recent: deque[tuple[int, int]] = deque(maxlen=params.route_recent)   # the draft in use's
        if (use in self.policies and self.policies[use].drafting) or (not small.drafting and large.drafting):
            self.use = self.route = use if use in self.policies else LARGE

    @classmethod
    def build(cls, draft_min: int, draft_max: int, p_min: float | None, can_pause: bool,
              learned: dict | None = None, params: Params = DEFAULT, size_ratios: tuple | None = None,
              **kw) -> PairPolicy:
        """A pair seeded from ``learned`` (:meth:`learned`); ``size_ratios``: each draft's
        weights over the target's (see AdaptivePolicy)."""
        learned = learned or {}
        ratios = size_ratios or (None, None)
        return cls(*(AdaptivePolicy(draft_min, draft_max, p_min, can_pause, learned=learned.get(name),
                                    params=params, size_ratio=ratio, **kw)
                     for name, ratio in zip((SMALL, LARGE), ratios)), params=params, use=learned.get(USE),
                   gap=learned.get(GAP))

    @property
    def small(self) -> AdaptivePolicy:
        return self.policies[SMALL]

    @property
    def large(self) -> AdaptivePolicy:
        return self.policies[LARGE]

    @property
    def idle_name(self) -> str:
        return LARGE if self.use == SMALL else SMALL

    def drafting_now(self, name: str) -> bool:
        """Whether ``name`` drafts this round (read by the PairDrafter)."""
        return self.route == name and self.policies[name].drafting

    @property
    def drafting(self) -> bool:
        return self.small.drafting or self.large.drafting

    @property
    def pauses(self) -> int:
        return self.small.pauses + self.large.pauses

    @property
    def probes(self) -> int:
        return self.small.probes + self.large.probes

    @property
    def k_now(self) -> int:
        return self.policies[self.use].k_now or self.policies[self.idle_name].k_now

    def next_k(self) -> int:
        """Asks each draft's policy (except one paused between probes), then routes."""
        for name, pol in self.policies.items():
            self._asked[name] = not pol.quiet_rounds()
            self.ks[name] = pol.next_k() if self._asked[name] else 0
            self._probe[name] = self._asked[name] and pol.probe
        self.trying = self.probe = False
        use, idle = self.use, self.idle_name
        mine, other = self.policies[use], self.policies[idle]
        if self._probe[use] or self._probe[idle]:
            self.route = use if self._probe[use] else idle       # a paused draft's probe
            self.probe = True
        elif not mine.drafting:
            self.route = idle if other.drafting else use         # the draft in use is paused
        elif not self.ks[use] or not other.drafting:
            self.route = use                                     # (a plain step it asked for)
            self.try_left = 0
        elif self.try_left:
            self.route, self.trying = idle, True                 # a try goes on
        else:
            self.route = self._choose(use, idle)
        k = self.ks[self.route]
        if self.route == idle and not self.probe:
            k = k or other.k_now     # the plain steps it would ask for are the ones the other measures
            if self.trying:
                k = max(k, min(self.p.probe_k, other.draft_max))
            self.ks[idle] = k
        return k

    def _choose(self, use: str, idle: str) -> str:
        """The draft in use, unless the idle one is expected clearly faster (switch), or a
        try is due (``gap`` rounds since it drafted, and for the large draft idle, a change of
        text seen or its evidence saying it is faster) and its thinned evidence, read
        optimistically, could make it so (or it was never measured): then ``route_try``
        rounds of it, judged after the last."""
        p = self.p
        other = self.policies[idle]
        r_use = self._rate_in_use()
        if r_use is None:
            return use                            # still measuring the draft in use
        r_idle = self._rate_after_catchup(idle)
        if r_idle is not None and r_idle > r_use * (1.0 + p.route_margin):
            self._switch(f"the {_LABEL[idle]} is expected faster ({r_idle:.0f} vs {r_use:.0f} tok/s)")
            return idle
        if self.idle < self.gap:
            return use
        if use == SMALL and not self._due and r_idle is not None and r_idle <= r_use:
            return use      # no blind tries: the small draft's own rounds show when its text turns hard
        if other.costs.known:
            optimistic = self._rate_after_catchup(idle, self._idle_upper(other))
            if optimistic is None or optimistic <= r_use * (1.0 + p.route_margin):
                return use
        self.trying = True
        self._due = False
        self.try_left = p.route_try
        self._try_rounds = []
        self.tries += 1
        other.acc.thin(p.route_prior)              # its stale evidence yields to the try
        return idle

    def _recent_bounds(self) -> tuple[float, float, float] | None:
        """(mean, lower, upper) of the draft in use's acceptance over its last rounds (up to
        ``route_recent``); None until it drafted ``route_recent_min`` since it came into use."""
        if len(self._recent) < self.p.route_recent_min:
            return None
        succ = sum(a for a, _ in self._recent)
        fail = sum(f for _, f in self._recent)
        return beta_bounds(succ + 1.0, fail + 1.0, self.p.z)

    def _rate_in_use(self) -> float | None:
        """The draft in use's expected tokens per second: its policy's, moved into the bounds
        its last rounds set (its policy's memory lags a stretch change)."""
        pol = self.policies[self.use]
        rate = best_rate(pol)
        recent = self._recent_bounds()
        if rate is None or recent is None:
            return rate
        if recent[2] < pol.acc.mean:
            return min(rate, best_rate(pol, recent[2]) or rate)
        if recent[1] > pol.acc.mean:
            return max(rate, best_rate(pol, recent[1]) or rate)
        return rate

    def _idle_upper(self, pol: AdaptivePolicy) -> float:
        """The idle draft's acceptance at its upper bound, its evidence halved every
        ``route_rounds`` rounds it did not draft (down to ``route_prior`` tokens)."""
        p, a = self.p, pol.acc
        w = max((a.succ + a.fail) * 0.5 ** (self.idle / p.route_rounds), p.route_prior)
        return beta_bounds(a.mean * w + 1.0, (1.0 - a.mean) * w + 1.0, p.z)[2]

    def _rate_after_catchup(self, name: str, alpha: float | None = None) -> float | None:
        """The idle draft's expected tokens per second over ``route_rounds`` rounds, its
        catch-up on the tokens it missed (as measured on its last switch) included."""
        pol = self.policies[name]
        if not pol.costs.known:
            return None
        curve = [v for k, v in pol.curve(alpha).items() if k > 0 and v[1] > 0]
        if not curve:
            return None
        tokens, seconds = max(curve, key=lambda v: v[0] / v[1])
        n = self.p.route_rounds
        catchup = self._catchup.get(name, 0.0) * min(self.idle_tokens, _CATCHUP_MAX)
        return n * tokens / (n * seconds + catchup)

    def _switch(self, why: str) -> None:
        self.use = self.idle_name
        self._recent.clear()
        self.idle = self.idle_tokens = 0
        self.gap = self.p.route_rounds
        self.switches += 1
        self._note = why

    def gate(self):
        return self.policies[self.route].gate()

    def plain_step_seconds(self) -> float | None:
        return self.policies[self.use].plain_step_seconds()

    def observe(self, step: Step) -> str | None:
        """The draft that drafted the round learns from all of it, the other only the
        target's cost; then a try is judged, and a shift in the draft in use makes the idle
        one due for a try."""
        notes = []
        for name, pol in self.policies.items():
            if not self._asked[name]:
                pol.passed(1, step.emitted)
                continue
            if step.source != name:
                note = pol.observe_other(step)
            else:
                k = self.ks[name]
                own = step
                if not (step.k <= k and step.probe == self._probe[name]):
                    own = replace(own, k=min(step.k, k), probe=self._probe[name])
                if step.sync_tokens > self.p.short_sync and step.draft_steps > 1:
                    # A catch-up on the rounds the other drafted is the switch's cost, not a
                    # round's: the first decode is priced as the others were.
                    per = (step.draft_seconds - step.sync_seconds) / (step.draft_steps - 1)
                    extra = max(step.sync_seconds - step.wait_seconds - per, 0.0)
                    own = replace(own, sync_tokens=1, wait_seconds=step.wait_seconds + extra)
                    self._catchup[name] = extra / (step.sync_tokens - 1)
                note = pol.observe(own)
            if note:
                notes.append(f"{_LABEL[name]}: {note}")
        use, idle = self.use, self.idle_name
        self.idle_tokens += step.emitted
        if step.source == idle:
            self.idle = self.idle_tokens = 0
            self.try_left = max(self.try_left - 1, 0)
            if self.trying and step.drafted:
                self._try_rounds.append((step.accepted, int(step.accepted < step.drafted)))
            if self.trying and not self.try_left:
                r_use, r_idle = self._rate_in_use(), best_rate(self.policies[idle])
                if r_idle is not None and (r_use is None or r_idle > r_use * (1.0 + self.p.route_margin)):
                    self._switch(f"a try of the {_LABEL[idle]} says it is faster")
                    self._recent.extend(self._try_rounds)    # the try's rounds are its first in use
                else:
                    self.gap = min(self.gap * 2, self.p.route_max)
            elif step.k and not self.probe and not self.trying:
                self._switch(f"the {_LABEL[use]} paused")
        else:
            self.idle += 1
            if step.source == use and step.drafted and not step.probe:
                self._recent.append((step.accepted, int(step.accepted < step.drafted)))
                recent = self._recent_bounds()
                mean = self.policies[use].acc.mean
                # The text got easier under the large draft, or harder under the small one.
                if recent is not None and (recent[1] > mean if use == LARGE else recent[2] < mean):
                    self._recent.clear()
                    self._due = True
                    self.gap = self.p.route_rounds
                    self.idle = max(self.idle, self.gap)
        shifts = self.policies[self.use].acc.shifts
        if shifts != self._shifts:
            self._shifts = shifts
            self._due = True
            self.gap = self.p.route_rounds
            self.idle = max(self.idle, self.gap)
        note, self._note = self._note, None
        if note:
            notes.append(note)
        return "; ".join(notes) or None

    def opening_note(self) -> str | None:
        notes = [f"{_LABEL[n]}: {note}" for n, pol in self.policies.items() if (note := pol.opening_note())]
        return "; ".join(notes) or None

    def quiet_rounds(self) -> int:
        return min(self.small.quiet_rounds(), self.large.quiet_rounds())

    def passed(self, rounds: int, tokens: int) -> None:
        for pol in self.policies.values():
            pol.passed(rounds, tokens)

    @property
    def reason(self) -> str:
        return "; ".join(f"{_LABEL[n]}: {pol.reason}" for n, pol in self.policies.items())

    def describe(self) -> str:
        return f"{self.small.describe()}, small and large draft each, switched per stretch"

    def learned(self) -> dict | None:
        out = {name: pol.learned() for name, pol in self.policies.items()}
        return out | {USE: self.use, GAP: self.gap} if any(out.values()) else None

    def estimates(self) -> dict:
        small, large = self.small.estimates(), self.large.estimates()
        return {"adaptive": True, "pair": True, "k": self.k_now, "drafting": self.drafting, "reason": self.reason,
                "seeded": small["seeded"] or large["seeded"],
                "predicted_speedup": max(small["predicted_speedup"], large["predicted_speedup"]),
                "pauses": self.pauses, "probes": self.probes, "in_use": self.use, "switches": self.switches,
                "tries": self.tries, SMALL: small, LARGE: large}
