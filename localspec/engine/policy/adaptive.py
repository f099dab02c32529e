"""The adaptive controller: which K to draft next, and whether to draft at all.

Each round it predicts every draft length's tokens per second from the measured costs and
acceptance, drafts the best, and pauses only when even an optimistic reading of the evidence
(acceptance at its upper credible bound, costs at their favourable ends) says drafting
loses. Paused, it probes at gaps that keep probes under ``probe_budget`` of the time (at
once while earlier ones saved what the next may cost); one predicting a gain resumes drafting.
"""

import math
import time
from collections.abc import Callable
from enum import Enum

from ...errors import BadInput
from ..events import Step
from . import predict, report
from .acceptance import AcceptanceModel
from .costs import CostModel
from .params import DEFAULT, Params

SCHEMA = 2   # the version of learned()'s dict; any other is ignored


class State(str, Enum):
    """Where the controller stands."""

    MEASURING = "measuring"   # drafting at the first K until a plain step and a draft are measured
    DRAFTING = "drafting"
    PAUSED = "paused"
    PROBING = "probing"       # a paused drafter's trial round


class AdaptivePolicy:
    """Choose K each round for the most tokens per second, pausing when drafting loses.

    Args:
        draft_min, draft_max: the range of K; p_min: a draft token's least top probability.
        can_pause: whether drafting may pause; probe_budget: the share of time probes may cost.
        learned: what an earlier generation learned (:meth:`learned`); anything else is ignored.
        params: the tunables; clock: seconds (a simulator injects its own).
        size_ratio: the draft's weights over the target's on one device: >= 1 with the draft's
            cost unknown starts paused (it cannot decode faster; its prompt is then not read).
    Raises:
        BadInput: draft lengths out of range.
    """

    adaptive = True
    may_draft = True

    def __init__(self, draft_min: int = 1, draft_max: int = 8, p_min: float | None = None,
                 can_pause: bool = True, probe_budget: float | None = None, learned: dict | None = None,
                 params: Params = DEFAULT, clock: Callable[[], float] = time.perf_counter,
                 size_ratio: float | None = None):
        if draft_min < 1 or draft_max < 1:
            raise BadInput("draft lengths must be >= 1")
        if draft_min > draft_max:
            raise BadInput(f"draft-min ({draft_min}) is larger than draft-max ({draft_max})")
        self.p = params
        self.draft_min, self.draft_max, self.p_min = draft_min, draft_max, p_min or 0.0
        self.can_pause = can_pause
        self.budget = params.probe_budget if probe_budget is None else probe_budget
        self.ladder = sorted({k for k in params.ladder if draft_min <= k <= draft_max} | {draft_min, draft_max})
        self.costs = CostModel(params, self.ladder[-1])
        self.acc = AcceptanceModel(params, self.ladder[-1])
        self.clock = clock
        self.state = State.MEASURING
        self.k = self._on_ladder(params.first_k)
        self.round = self.tokens = self.draft_rounds = 0
        self.since_plain = 0          # drafting rounds since the last plain step
        self.since_resume = 0         # drafting rounds since drafting (re)started
        self.since_probe = 0          # tokens since the last probe (while paused)
        self.probe_every = params.probe_min
        self.refresh_every = params.refresh_min
        self.backoff, self.failed = 1, 0   # failed probes in a row widen the gap by this
        self.t_last: float | None = None
        self.pauses, self.probes, self.credit = 0, 0, 0.0   # (credit: seconds this pause's probes saved, net)
        self.predicted_speedup, self.seeded = 1.0, False
        self._reason: str | None = "starting: measuring draft and target costs"
        self._note, self._cache = None, {}   # (a sentence to tell; curves by their arguments)
        if isinstance(learned, dict) and learned.get("version") == SCHEMA:
            try:
                self.costs.seed(learned["costs"])
                self.acc.seed(learned["acceptance"])
                self.k = self._on_ladder(int(learned.get("k", self.k)))
                self.seeded = True
            except (KeyError, TypeError, ValueError, AttributeError):
                self.__init__(draft_min, draft_max, p_min, can_pause, probe_budget, None, params, clock, size_ratio)
                return
            self._start_seeded(learned.get("drafting") is False, learned.get("tokens"))
        if self.drafting and can_pause and self.costs.first.value is None and (size_ratio or 0.0) >= 1.0:
            self._pause(f"the draft's weights are {size_ratio:.1f}x the target's: drafting cannot pay",
                        every=int(min(params.probe_min * size_ratio, params.probe_max)))

    def _on_ladder(self, k: int) -> int:
        return min(self.ladder, key=lambda x: (abs(x - k), x))

    drafting = property(lambda self: self.state in (State.MEASURING, State.DRAFTING))
    probe = property(lambda self: self.state is State.PROBING)
    k_now = property(lambda self: self.k if self.drafting else 0)   # the draft length in force (0 while paused)
    probe_len = property(lambda self: max(self.k, min(self.p.probe_k, self.draft_max)))   # a probe's draft length

    def next_k(self) -> int:
        if self.t_last is None:
            self.t_last = self.clock()
        if self.state is State.PROBING or (self.state is State.PAUSED and self.since_probe >= self.probe_every):
            self.state = State.PROBING
            return self.probe_len
        return 0 if self.state is State.PAUSED or (self.round and not self._plain_fresh()) else self.k

    def _plain_fresh(self) -> bool:
        """Whether the plain step was measured recently enough (see :meth:`_schedule_refresh`)."""
        s = self.costs.verify.get(1)
        if s is None or s.value is None or (self.costs.overhead[False].value is None
                                            and self.costs.overhead[True].value is not None):
            return False     # (the latter: one plain round tells what drafting adds to the loop's own time)
        return self.since_plain < self.refresh_every

    def gate(self):   # the per-token stop rule of a draft: p_min, else None
        return (lambda i, top, p_min=self.p_min: top >= p_min) if self.p_min > 0 else None

    def plain_step_seconds(self) -> float | None:   # (None: unknown)
        return self.costs.plain()

    # Seconds every drafting round costs beyond its decodes (a chain's catch-up), set by the chain.
    round_extra = property(lambda self: self.costs.round_extra,
                           lambda self, s: (setattr(self.costs, "round_extra", s), self._cache.clear()))

    def opening_note(self) -> str | None:
        note, self._note = self._note, None
        return note

    def quiet_rounds(self) -> int:
        """While paused: the plain rounds before the one ahead of the next probe (which is
        observed, measuring a plain step and starting the probe's clock)."""
        return max(self.probe_every - self.since_probe - 1, 0) if self.state is State.PAUSED else 0

    def passed(self, rounds: int, tokens: int) -> None:
        self.round, self.tokens, self.since_probe = self.round + rounds, self.tokens + tokens, self.since_probe + tokens
        self.t_last = None

    def _count(self, r: Step, own: bool, now: float) -> None:
        """Every round: its tokens, its target decode and its time beyond the decodes (the
        policy's own time left out: it is measured apart, see :meth:`_own`)."""
        if not self.drafting and not (own and r.probe and self.state is State.PROBING):
            self.since_probe += r.emitted
        if self.t_last is not None and self.p.measure_loop:
            rest = max(now - self.t_last - r.draft_seconds - r.verify_seconds - r.score_seconds, 0.0)
            if r.k == 0:
                self.costs.add_overhead(False, rest)
            elif own and r.draft_steps > 0:
                self.costs.add_overhead(True, rest)
        self.round, self.tokens = self.round + 1, self.tokens + r.emitted
        self.costs.add_verify(r.verify_batch, r.verify_seconds)
        if r.verify_batch == 1:
            self.since_plain = 0
        elif self.drafting:
            self.since_plain += 1
        self._cache = {}

    def _own(self, start: float, note: str | None) -> str | None:
        """The policy's own time since ``start`` (its observation of a round): paid by every
        observed round, so by drafting, and not by the quiet rounds of a pause."""
        self.t_last = self.clock() if self.p.own_apart else start   # (ablation: in the next round's time)
        if self.p.own_apart and self.p.measure_loop:
            self.costs.add_own(self.t_last - start)
        return note

    def observe_other(self, r: Step) -> str | None:
        """A round another drafter of a chain drafted: only the target's cost and the tokens."""
        start = self.clock()
        self._count(r, False, start)
        return self._own(start, self.opening_note())

    def observe_unused(self, k: int, drafted: int, accepted: int) -> None:
        """A one-hot draft a chain did not verify, judged against what the target emitted (in
        distribution what verifying it would have accepted)."""
        if k > 0 and drafted > 0:
            self.acc.judge(k, drafted, accepted)
            self._cache = {}
            if self.state is State.DRAFTING and self.costs.known:   # fresh evidence: decide on it
                self.since_resume += 1
                self._note = self._decide() or self._note

    def skip_probe(self) -> None:   # the probe due is left out (a pair's scores tell as much): paused again
        self.state, self.since_probe = State.PAUSED, 0

    def reconsider(self) -> None:   # decide on evidence gathered outside its rounds (a pair's score)
        if self.costs.known and self.state is State.PAUSED:
            self._note = self._decide() or self._note

    def observe(self, r: Step) -> str | None:
        """Learn from a finished round; a sentence when drafting turns on or off."""
        start = self.clock()
        return self._own(start, self._learn(r, start))

    def _learn(self, r: Step, now: float) -> str | None:
        paused = not self.drafting and not (r.probe and self.state is State.PROBING)
        self._count(r, True, now)
        if paused:
            return self.opening_note()
        if r.k > 0 and r.draft_steps > 0:
            self.draft_rounds += 1
            self.costs.add_draft(r.draft_steps, r.draft_seconds - r.wait_seconds,
                                 r.sync_seconds - r.wait_seconds, r.sync_tokens)
            shifted = self.state is State.DRAFTING and r.drafted and self.acc.shifted(r.drafted, r.accepted)
            self.acc.judge(r.k, r.drafted, r.accepted, probe=r.probe)
            self.since_resume = (0 if shifted else self.since_resume) + self.drafting
            if r.probe:   # (one that drafted nothing told nothing: the credit goes)
                self.probes, c1 = self.probes + 1, (self.costs.plain() if r.drafted else 0.0)
                self.credit = self.credit + r.emitted * c1 - r.draft_seconds - r.verify_seconds if c1 else 0.0
        note = self.opening_note()
        if not self.costs.known:   # a probe's verdict waits for a plain step (another of two drafts drafts)
            return (r.probe and self.state is State.PROBING
                    and self._pause(None, self.probe_every * self.p.probe_backoff, quiet=True)) or note
        if self.state is State.MEASURING:
            self.state = State.DRAFTING
        return self._decide() or note

    def curve(self, alpha: float | None = None, z: float = 0.0) -> dict[int, tuple[float, float]]:
        """(expected tokens, expected seconds) of a round for every K on the ladder and 0;
        ``alpha`` replaces the acceptance, ``z`` reads the costs that many errors in drafting's favour."""
        key = (alpha, z)
        out = self._cache.get(key)
        if out is None:
            c = self.costs
            first, step = c.draft_seconds(z)
            cont, acc = self.acc.rates(alpha)
            out = self._cache[key] = predict.curve(c.table(z), self.ladder, cont, acc,
                                                   first + c.loop(True), step, c.loop(False))
        return out

    def speedup(self, k: int, alpha: float | None = None, z: float = 0.0) -> float | None:   # over a plain step
        return predict.speedup(self.curve(alpha, z), k)

    def rate(self, k: int, matched: bool = False) -> float | None:
        """Expected tokens per second of a round allowing k drafts; ``matched``: given that the
        drafter proposes a first token (a lookup that found a match). None until costs are known."""
        if not self.costs.known:
            return None
        if matched:
            c = self.costs
            cont, acc = self.acc.rates()
            first, step = c.draft_seconds()
            pr = predict.curve(c.table(), self.ladder, [1.0, 1.0] + cont[2:], acc, first + c.loop(True), step,
                               c.loop(False)).get(k)
        else:
            pr = self.curve().get(k)
        return pr[0] / pr[1] if pr and pr[1] > 0 else None

    def bounds(self) -> tuple[float, float, float]:
        """(expected, optimistic, cost-only) best speed-up over K: optimistic with acceptance at
        its upper bound and costs at their favourable ends, combined as independent errors;
        cost-only with every draft accepted (nothing can beat it)."""
        mean, _, hi = self.acc.bounds()
        z = self.p.z
        curves = [predict.speedups(c) for c in (self.curve(), self.curve(max(hi, mean)),
                                                self.curve(z=z), self.curve(1.0, z=z))]
        if not curves[0]:
            return 0.0, 0.0, 0.0
        exp = max(curves[0].values())
        up = max(s + math.hypot(max(a - s, 0.0), max(c - s, 0.0))
                 for s, a, c in zip(curves[0].values(), curves[1].values(), curves[2].values()))
        return exp, up, max(curves[3].values())

    def _decide(self) -> str | None:
        """K, and whether to pause or resume; a sentence when drafting turns on or off."""
        p = self.p
        k_best, s_best = predict.best(self.curve(), self.k)
        if self.drafting:
            # K moves where costs read in its favour by their errors would be clearly faster:
            # a batch size measured little (maybe in a spike) gets tried again.
            k_try, s_try = predict.best(self.curve(z=p.explore_z), self.k)
            # ... and, to a size not decoded yet, where that first decode is repaid (see predict.repays)
            extra = 0.0 if self.costs.decoded(k_try + 1) else self.costs.first_extra()
            if (k_try != self.k and s_try > (self.speedup(self.k, z=p.explore_z) or 0.0) * (1 + p.move_margin)
                    and predict.repays(self.curve(z=p.explore_z), self.k, k_try, self.tokens, extra, p.build_horizon)):
                self.k = k_try
            self.predicted_speedup = self.speedup(self.k) or 0.0
            self._schedule_refresh(s_best)
            n = self.since_resume
            # A clear expected loss over enough fresh rounds (a lookup that finds nothing can
            # never be proven to lose: its next match might be all accepted) ...
            pause = False
            if s_best < 1.0:     # (the optimistic reading is never below the expected one)
                _, hi, cost_only = self.bounds()
                # ... (unless a noisy spell could explain it) or even the optimistic reading loses
                pause = ((n >= p.expected_rounds and s_best < 1.0 - p.expected_loss and hi < 1.0 + p.expected_loss)
                         or hi < 1.0 and (n >= p.min_rounds or (cost_only < 1.0 and self.costs.first.n_kept >= 2)))
            if pause and self.can_pause:
                self.k = k_best
                return self._pause(None)
            self._reason = None
            return None
        self.predicted_speedup = s_best
        if s_best > 1.0 or not self.can_pause:
            self.acc.thin(resumed=self.p.carried_trial)
            self._cache = {}
            self.k, self.predicted_speedup = predict.best(self.curve(), k_best)
            self.state, self.since_resume, self.backoff, self.failed, self._reason = State.DRAFTING, 0, 1, 0, None
            return self.reason
        if self.p.probe_credit and self.credit > max(self._probe_seconds(self.probe_len)[0], 0.0):
            self.failed, self.backoff = 0, 1     # the probes so far paid for the next: it comes at once
            return self._pause(None, 1, quiet=True, early=self.p.probe_min)
        self.failed, self.credit = self.failed + 1, 0.0    # the second failed probe in a row on widens the gap
        self.backoff = min(2 ** (self.failed - 1), self.p.probe_backoff, max(self.tokens // self.p.probe_min, 1))
        return self._pause(None, quiet=True)

    def _schedule_refresh(self, s_best: float) -> None:
        """Drafting rounds between plain steps: a plain round instead of a drafted token
        loses the difference of their times per token, kept under ``refresh_share``; at once
        while the plain step's own error could turn the decision (every speed-up is read
        against it), until it has a window of samples."""
        plain = self.costs.verify.get(1)
        first = 0.0 if self.costs.decoded(1) else self.costs.first_extra()
        if (plain is not None and plain.n < self.p.window and not first
                and self.p.refresh_z * self.costs.error(plain) > abs(s_best - 1.0)):
            self.refresh_every = 1     # a plain step before the next drafting round
            return
        c = self.curve()
        tokens, seconds = c[self.k]
        lost = max(c[0][1] - seconds / tokens, 0.0) + first
        every = lost / (self.p.refresh_share * seconds) if seconds > 0 else self.p.refresh_min
        self.refresh_every = int(min(max(every, self.p.refresh_min), self.p.refresh_max))

    def _pause(self, why: str | None, every: int | None = None, quiet: bool = False, early: int = 0) -> str | None:
        """Pause drafting until the next probe, ``every`` tokens away (else budgeted); at
        the next round instead where that gap is at most ``early`` tokens."""
        was, self.state, self.since_probe = self.state, State.PAUSED, 0
        if every is None:
            extra, c1 = self._probe_seconds(self.probe_len)   # probes within the budget
            every = (extra / (self.budget * c1) if extra > 0 and c1 > 0 else self.p.probe_min) * self.backoff
        gap = int(min(max(every, self.p.probe_min), self.p.probe_max))
        self.probe_every = 1 if gap <= early else gap
        self.pauses += was is not State.PROBING
        self.credit *= was is State.PROBING   # (a pause from drafting starts with none)
        self._reason = report.explain(self, why, True)
        if why is not None:      # a pause from the start: said before the answer
            self._note = self._reason
        return None if quiet or why is not None else self._reason

    def _probe_seconds(self, k: int) -> tuple[float, float]:
        """(seconds a probe of ``k`` and its catch-up take beyond the plain steps they
        replace, a plain step's); zeros before they are known."""
        c = self.curve()
        if 0 not in c or k not in c:
            return 0.0, 0.0
        c1 = c[0][1]
        catch = self.costs.catchup * self.p.catchup_window if self.costs.catchup is not None else c[k][1] - c[0][1]
        return catch + c[k][1] - c[k][0] * c1, c1

    def _start_seeded(self, ended_paused: bool, last: object = None) -> None:
        """Start paused when an earlier generation's costs say drafting loses even read
        optimistically, or it ended paused and they predict no gain; on costs each one sample
        there (maybe a GPU's first decodes), only for a draft too dear to pay at the plain
        step's price per batch, all accepted. A new answer may read another text: where the
        budget's gap fits in the last answer (``last`` tokens) the first probe comes at once,
        where it tells the most, and the next ones while a credit of ``early_share`` of that
        answer's budget, times the share of a step drafting could save at best, covers them."""
        if not self.costs.known:
            return
        self.state = State.DRAFTING
        k_best, s_best = predict.best(self.curve(), self.k)
        self.predicted_speedup = s_best
        self._reason = "starting from the costs measured last time"
        if (self.can_pause and self.p.seeded_pause and s_best <= 1.0
                and not (self.p.lone_guard and self.costs.weak and not self._draft_alone_loses())
                and (ended_paused or self.bounds()[1] < 1.0)):
            self.k = k_best
            self._pause("from the last run", early=last if self.p.early_probe and isinstance(last, int) else 0)
            if isinstance(last, int):   # (of a plain round's time: the share all accepted would save)
                saves = max(1.0 - 1.0 / max(self.bounds()[2], 1.0), 0.0)
                self.credit = self.p.early_share * self.budget * last * self.curve()[0][1] * saves

    def _draft_alone_loses(self) -> bool:
        """Whether drafting loses with every verify batch at the plain step's cost and every
        token accepted: the draft's own cost decides."""
        c, (cont, acc), (first, step) = self.costs, self.acc.rates(1.0), self.costs.draft_seconds()
        flat = [0.0] + [c.plain()] * (self.ladder[-1] + 1)
        return max(predict.speedups(predict.curve(flat, self.ladder, cont, acc, first + c.loop(True), step,
                                                  c.loop(False))).values(), default=0.0) < 1.0

    @property
    def reason(self) -> str:   # the latest reasoning, in plain words
        if self._reason is None:
            self._reason = report.explain(self, None, self.state is State.PAUSED)
        return self._reason

    def describe(self) -> str:
        return (f"adaptive K in [{self.draft_min}, {self.draft_max}]" + (f", p_min {self.p_min}" if self.p_min else "")
                + ("" if self.can_pause else ", never paused"))

    def learned(self) -> dict | None:
        """What this generation measured, to seed the next one (JSON); None before a plain step."""
        return None if self.costs.plain() is None else {
            "version": SCHEMA, "costs": self.costs.to_dict(), "acceptance": self.acc.to_dict(),
            "k": self.k, "drafting": self.drafting, "tokens": self.tokens}

    def estimates(self) -> dict:
        return report.estimates(self)
