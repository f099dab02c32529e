"""Two draft models' policy: each its own adaptive policy, one of them drafting per round.

A small draft wins on easy stretches of an answer and loses where its acceptance falls; a
larger draft costs more a token and holds up there. Each has its own
:class:`AdaptivePolicy` (its K, its costs, its acceptance, its pauses), and the pair routes
every round to the draft whose expected tokens per second are higher.

The draft in use is measured every round; its last few rounds, read on their own, move its
expected rate at once when a stretch changes (its policy's memory lags by tens of rounds); the
small draft's first tokens failing in a row, unlikely at its acceptance, shorten its K. The
idle one, paused by its own policy or not, is *scored*: catching up on the tokens it missed (at
most 64) it predicts each, and a greedy draft's predictions on the text are exactly the rounds
it would have drafted there. A score compares the two on the same tokens and keeps the faster
in use. It comes when the idle draft's evidence says it may be faster, when the text changes (a
shift in the acceptance of the draft in use; its last rounds easier under the large draft or
harder under the small one; a paused idle one's probe all accepted, in a round the draft in use
does not draft), and otherwise within ``route_budget`` of the time, a share divided by
``score_backoff`` by each score that keeps the draft in use (not by a score of the small draft
while its last stays saved time: its easy text may come back). A draft whose costs are not
known yet drafts a round instead. Once the small draft's last stays (from a switch to it to the
switch away) lost time in all against the large draft's rate, the failures that end them and
the return included, it is no longer scored (no score could send the pair to it). The draft in
use when an answer ends starts the next.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from ..events import Step
from .acceptance import beta_bounds, beyond
from .adaptive import AdaptivePolicy
from .params import DEFAULT, Params
from .predict import best, greedy_rounds
from .rates import best_rate, rate_after_catchup

SMALL, LARGE = "small", "large"     # the drafts' names, as Step.source carries them
USE = "in_use"                       # learned: the draft in use when the answer ended
_CATCHUP_MAX = 64                    # tokens a draft re-reads at most on coming back (ModelDrafter's)
_LABEL = {SMALL: "small draft", LARGE: "large draft"}


class PairPolicy:
    """Routes each round to the small or the large draft.

    Args:
        small, large: the two drafts' policies; params: the tunables; use: the draft to start
            with (the one in use when the last answer ended), else the small one.
    """

    adaptive = True
    may_draft = True

    def __init__(self, small: AdaptivePolicy, large: AdaptivePolicy, params: Params = DEFAULT,
                 use: str | None = None):
        self.policies, self.p = {SMALL: small, LARGE: large}, params
        self.use = SMALL               # the draft routed to, round after round
        self.route = SMALL             # this round's draft
        self.score = ""                # the draft to score this round on the tokens it missed
        self.measuring = False         # this round drafts with the idle draft, to learn its costs
        self.probe, self.ks = False, {SMALL: 0, LARGE: 0}
        self.idle = 0                  # rounds since the idle draft last drafted
        self.idle_tokens = 0           # tokens since the idle draft last drafted or was scored
        self.switches = self.scores = self._shifts = 0
        self._asked, self._probe = {SMALL: True, LARGE: True}, {SMALL: False, LARGE: False}
        self._spent = 0.0              # seconds of rounds since the last score
        self._score_rate: dict[str, float] = {}   # seconds per token scored, as measured
        self._budget = params.route_budget
        # Each draft's last rounds (emitted, accepted, failed): as many as cover any score.
        self._tracks = {n: deque(maxlen=_CATCHUP_MAX) for n in self.policies}
        self._note: str | None = None
        self._due = False              # the text changed: a score of the idle draft is due
        self._kept = False             # a score kept the draft in use, and the text has not changed since
        self._changed = False          # the score under way was called for by a change of text
        # The draft in use's last rounds (``route_recent``), read on their own besides its
        # policy's ~50-round memory, once there are ``route_recent_min``: their bounds (``z``
        # errors) move its expected rate, and bounds beyond its long-run mean in the direction
        # that favours the idle draft (easier text under the large one, harder under the small
        # one) mean the text changed.
        self._recent: deque[tuple[int, int]] = deque(maxlen=params.route_recent)
        self._quiet = 0                # rounds before the text's change may be told again
        # The small draft's stay since the pair switched to it: [tokens, seconds, the large
        # draft's expected rate then], and the seconds each of the last ones saved (< 0: lost).
        self._stay: list | None = None
        self._stays: deque[float] = deque(maxlen=params.route_stays)
        self._unlikely = beyond(params.z), beyond(params.shift_z)   # the odds _after_misses reads
        if (use in self.policies and self.policies[use].drafting) or (not small.drafting and large.drafting):
            self.use = self.route = use if use in self.policies else LARGE

    @classmethod
    def build(cls, draft_min: int, draft_max: int, p_min: float | None, can_pause: bool,
              learned: dict | None = None, params: Params = DEFAULT, size_ratios: tuple | None = None,
              **kw) -> PairPolicy:
        """A pair seeded from ``learned`` (:meth:`learned`); ``size_ratios``: each draft's
        weights over the target's (see AdaptivePolicy)."""
        learned, ratios = learned or {}, size_ratios or (None, None)
        return cls(*(AdaptivePolicy(draft_min, draft_max, p_min, can_pause, learned=learned.get(name),
                                    params=params, size_ratio=ratio, **kw)
                     for name, ratio in zip((SMALL, LARGE), ratios)), params=params, use=learned.get(USE))

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
        self.probe, self.measuring, self.score = False, False, ""
        use, idle = self.use, self.idle_name
        mine, other = self.policies[use], self.policies[idle]
        if self._probe[idle] and mine.drafting and self.p.quiet_idle:
            other.skip_probe()        # its failed probe would cost a verify for a token where a
            self._probe[idle] = False  # round of the draft in use gives several: scores tell as much
        if self._probe[use] or self._probe[idle]:
            self.route = use if self._probe[use] else idle       # a paused draft's probe
            self.probe = True
        elif not mine.drafting:
            self.route = idle if other.drafting else use         # the draft in use is paused
        elif not self.ks[use] or not (other.drafting or other.costs.known):
            self.route = use                                     # (a plain step it asked for)
        else:
            self.route = self._choose(use, idle)
        k = self.ks[self.route]
        if self.route == use == SMALL and self.p.miss_k:
            k = self.ks[use] = self._after_misses(k)
        if self.route == idle and not self.probe:
            k = k or other.k_now     # the plain steps it would ask for are the ones the other measures
            self.ks[idle] = k
        return k

    def _choose(self, use: str, idle: str) -> str:
        """The draft in use; the idle one for a round when its costs are still unknown. The
        idle one is scored on the tokens it missed (at least ``score_min``) when its evidence
        says it is faster, when the text changed under the draft in use, or when the time
        spent since the last score pays for one within ``route_budget``."""
        p = self.p
        other = self.policies[idle]
        r_use = self._rate_in_use()
        if r_use is None:
            return use                            # still measuring the draft in use
        if not other.costs.known:
            if self.idle < p.route_rounds and not self._due:
                return use
            self._due = False
            self.measuring = True                 # one round of it, to learn its costs
            self.score = idle                     # (and scored on what it missed before)
            self.scores += 1
            other.acc.thin(p.route_prior)
            return idle
        if self.idle_tokens < (1 if self._due else p.score_min) or (idle == SMALL and sum(self._stays) < 0.0):
            return use     # too little missed to score it on, or its stays lost: no score can send the pair to it
        missed = min(self.idle_tokens, _CATCHUP_MAX)
        r_idle = None if self._kept else rate_after_catchup(other, missed, p.route_rounds)
        faster = r_idle is not None and r_idle > r_use * (1.0 + p.route_margin)
        per = self._score_rate.get(idle)
        price = per * missed if per is not None else other.costs.catchup_seconds(missed) or 0.0
        if faster or self._due or self._spent * self._budget >= price:
            self._changed, self._due = self._due, False
            self.scores += 1
            self.score = idle
        return use

    def _after_misses(self, k: int) -> int:
        """``k``, or the small draft's best K at the acceptance its last rounds allow when their
        first tokens all failed, unlikely (below 1 - Φ(z)) at its acceptance: the text turned hard
        for it, and a failed round costs K decodes. Beyond ``shift_z``, a score of the large one is due."""
        pol = self.small
        misses = next((i for i, (a, f) in enumerate(reversed(self._recent)) if a or not f), len(self._recent))
        odds = (1.0 - pol.acc.mean) ** misses if misses else 1.0
        unlikely, far = self._unlikely
        if odds < far:
            self._text_changed()
        return min(k, best(pol.curve(beta_bounds(1.0, misses + 1.0, self.p.z)[2]), k)[0]) if odds < unlikely else k

    def _recent_bounds(self) -> tuple[float, float, float] | None:
        """(mean, lower, upper) of the draft in use's acceptance over its last rounds (up to
        ``route_recent``); None until it drafted ``route_recent_min`` since it came into use."""
        if len(self._recent) < self.p.route_recent_min:
            return None
        succ, fail = sum(a for a, _ in self._recent), sum(f for _, f in self._recent)
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

    def _scored(self, name: str, hits) -> None:
        """Draft ``name``'s predictions on the tokens it missed, read as the rounds it would
        have drafted at its K (a greedy draft's rounds exactly), against the other draft's
        rounds on the same tokens: the faster on them is the one in use. A score the text's
        change called for compares them on the other's last ``route_recent`` rounds' tokens,
        however few; only a score of ``score_min`` tokens replaces the draft's evidence."""
        pol, other = self.policies[name], SMALL if name == LARGE else LARGE
        changed, self._changed = self._changed, False
        if len(hits) < (1 if changed else self.p.score_min):
            return                                 # too few to tell the two apart
        if len(hits) >= self.p.score_min:
            pol.acc.thin(self.p.route_prior)       # its stale evidence yields to the score
        k = max(pol.k_now or self.ks[name] or pol.k, 1)
        for a, _ in greedy_rounds(hits, k):
            pol.observe_unused(k, k, a)
        track = list(self._tracks[other])
        n = min(sum(e for e, _, _ in track[-self.p.route_recent:]), len(hits)) if changed else len(hits)
        seen = [0, 0, 0]
        for emitted, a, f in reversed(track):
            if seen[0] >= n:
                break
            seen = [seen[0] + emitted, seen[1] + a, seen[2] + f]
        succ = sum(hits[len(hits) - n:])          # (per token: a round's unfinished tail counts)
        r_other = best_rate(self.policies[other], (seen[1] + 1.0) / (seen[1] + seen[2] + 2.0))
        r_name = best_rate(pol, (succ + 1.0) / (n + 2.0))
        if r_other is None or r_name is None or not seen[1] + seen[2] or name == self.use:
            return
        saved = sum(self._stays) if name == SMALL else 0.0   # what the small draft's last stays saved
        if r_name > r_other * (1.0 + self.p.route_margin) and saved >= 0.0:
            pol.reconsider()
            self._switch(f"the {_LABEL[name]} does better on the same text ({r_name:.0f} vs {r_other:.0f} tok/s)")
        else:
            if saved <= 0.0:                       # (after stays that saved time: no backoff)
                self._budget /= self.p.score_backoff
            self._kept = True

    def _judge(self, idle: str) -> None:
        """After a round of the idle draft that measured its costs: switch to it if it is
        expected faster."""
        r_use, r_idle = self._rate_in_use(), best_rate(self.policies[idle])
        if r_idle is not None and (r_use is None or r_idle > r_use * (1.0 + self.p.route_margin)):
            self._switch(f"the {_LABEL[idle]}, measured, is expected faster ({r_idle:.0f} vs {r_use or 0:.0f} tok/s)")

    def _switch(self, why: str) -> None:
        if self._stay is not None and self._stay[2]:
            self._stays.append(self._stay[0] / self._stay[2] - self._stay[1])
        self._stay = [0, 0.0, best_rate(self.large) or 0.0] if self.idle_name == SMALL else None
        self._take(self.idle_name)
        self._kept = self._due = False   # (the switch answers the change: the draft left is not scored at once)
        self.switches += 1
        self._note = why

    def _take(self, name: str) -> None:
        """``name`` is the draft in use from now: its own last rounds and acceptance shifts are
        read afresh, the idle one's missed tokens counted from here, scores at the full budget."""
        self.use = name
        self._recent.clear()
        self._shifts = self.policies[name].acc.shifts
        self.idle = self.idle_tokens = 0
        self._budget = self.p.route_budget

    def _text_changed(self) -> None:
        """A score of the idle draft is due, at the full budget, whatever the last one said."""
        self._due, self._kept = True, False
        self._budget = self.p.route_budget

    def gate(self):
        return self.policies[self.route].gate()

    def plain_step_seconds(self) -> float | None:
        return self.policies[self.use].plain_step_seconds()

    def observe(self, step: Step) -> str | None:
        """The draft that drafted the round learns from all of it, the other only the
        target's cost; a score is judged, and a change of text seen in the draft in use makes
        a score of the idle one due."""
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
                    pol.costs.add_catchup(step.sync_tokens, step.sync_seconds - step.wait_seconds)
                note = pol.observe(own)
            if note:
                notes.append(f"{_LABEL[name]}: {note}")
        use, idle = self.use, self.idle_name
        self.idle_tokens += step.emitted
        self._spent += step.draft_seconds + step.verify_seconds
        if self._stay is not None:
            self._stay[0] += step.emitted
            self._stay[1] += step.draft_seconds + step.verify_seconds + step.score_seconds
        if step.source in self._tracks and not step.probe:
            self._tracks[step.source].append((step.emitted, step.accepted, int(step.accepted < step.drafted)))
        if step.source == idle:
            self.idle = self.idle_tokens = 0
            if step.probe and step.drafted and step.accepted == step.drafted:
                self._text_changed()               # its probe all accepted: the text may suit it now
            if self.measuring:
                if not (step.scored == idle and len(step.scored_hits) >= self.p.score_min):
                    self._judge(idle)              # (else its score judges it)
            elif step.k and not self.probe:
                self._switch(f"the {_LABEL[use]} paused")
        else:
            self.idle += 1
            if step.source == use and step.drafted and not step.probe:
                self._recent.append((step.accepted, int(step.accepted < step.drafted)))
                recent = self._recent_bounds()
                mean = self.policies[use].acc.mean
                # The text got easier under the large draft, or harder under the small one.
                self._quiet = max(self._quiet - 1, 0)
                if not self._quiet and recent is not None and (recent[1] > mean if use == LARGE else recent[2] < mean):
                    self._quiet = self.p.route_recent     # its next rounds may tell it again
                    self._text_changed()
        if step.scored == self.idle_name:
            self.idle_tokens = 0                   # its cache holds the text now
        if step.scored in self.policies and step.scored_hits:
            self._spent = 0.0
            # Its own price: a score reads every row, which a catch-up before drafting does not.
            self._score_rate[step.scored] = step.score_seconds / len(step.scored_hits)
            self._scored(step.scored, step.scored_hits)
        shifts = self.policies[self.use].acc.shifts
        if shifts != self._shifts:
            self._shifts = shifts
            self._text_changed()
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
        return out | {USE: self.use} if any(out.values()) else None

    def estimates(self) -> dict:
        small, large = self.small.estimates(), self.large.estimates()
        return {"adaptive": True, "pair": True, "k": self.k_now, "drafting": self.drafting, "reason": self.reason,
                "seeded": small["seeded"] or large["seeded"],
                "predicted_speedup": max(small["predicted_speedup"], large["predicted_speedup"]),
                "pauses": self.pauses, "probes": self.probes, "in_use": self.use, "switches": self.switches,
                "scores": self.scores, SMALL: small, LARGE: large}
