"""How many tokens to draft next: a fixed K, or an adaptive choice that maximises tok/s.

The adaptive policy measures, while it runs, the cost of one draft decode, the cost of a
target decode for every batch size it has used (a plain target step is the batch of one),
and the acceptance at each draft position. From these it predicts tokens per second for
every K in ``{0} ∪ [draft_min, draft_max]`` and picks the best. K = 0 means drafting is
paused: the target generates alone, and the policy probes drafting again now and then
(after 16, 32, ... up to 256 tokens) so it comes back when the text becomes easy to guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput

_EMA = 0.2
_PRIOR_ACCEPT = 0.7      # optimistic prior for positions never drafted yet
_PRIOR_WEIGHT = 2.0
_PROBE_FIRST = 16
_PROBE_MAX = 256


@dataclass
class RoundResult:
    """What one round did, as the policy needs it."""

    k: int
    drafted: int
    accepted: int
    draft_seconds: float
    draft_steps: int
    verify_seconds: float
    verify_batch: int
    emitted: int
    probe: bool = False


def _ema(old: float | None, new: float) -> float:
    return new if old is None else old + _EMA * (new - old)


class FixedPolicy:
    """Always allow K drafts (the user's explicit choice)."""

    adaptive = False

    def __init__(self, k: int, p_min: float = 0.0):
        if k < 0:
            raise BadInput(f"draft length must be >= 0 (got {k})")
        self.k = k
        self.p_min = p_min
        self.may_draft = k > 0
        self.drafting = k > 0
        self.probe = False

    def next_k(self) -> int:
        return self.k

    def observe(self, r: RoundResult) -> str | None:
        return None

    def describe(self) -> str:
        return f"fixed K={self.k}" if self.k else "target only"

    def estimates(self) -> dict:
        return {}


class AdaptivePolicy:
    """Choose K each round to maximise predicted tokens per second."""

    adaptive = True

    def __init__(self, draft_min: int = 1, draft_max: int = 8, p_min: float = 0.5,
                 can_pause: bool = True):
        if draft_min < 1 or draft_max < 1:
            raise BadInput("draft lengths must be >= 1")
        if draft_min > draft_max:
            raise BadInput(f"draft-min ({draft_min}) is larger than draft-max ({draft_max})")
        self.draft_min = draft_min
        self.draft_max = draft_max
        self.p_min = p_min
        self.may_draft = True
        self.can_pause = can_pause
        self.drafting = True
        self.probe = False
        self._k = draft_max
        self._round = 0
        self._draft_step: float | None = None      # seconds per draft decode
        self._draft_samples = 0
        self._verify: dict[int, float] = {}         # batch size -> EMA seconds
        self._verify_n: dict[int, int] = {}
        self._reached = [0.0] * (draft_max + 1)     # rounds reaching position i with i-1 accepted
        self._drafted = [0.0] * (draft_max + 1)     # ... and drafting position i
        self._accepted = [0.0] * (draft_max + 1)    # ... and accepting it
        self._since_probe = 0
        self._probe_every = _PROBE_FIRST
        self.reason = "starting: measuring draft and target costs"
        self.predicted_speedup = 1.0

    # -- estimates --------------------------------------------------------------------
    def verify_cost(self, n: int) -> float | None:
        """Predicted seconds for a target decode of n tokens."""
        if self._verify_n.get(n, 0) >= 2:
            return self._verify[n]
        pts = [(b, t) for b, t in self._verify.items()]
        if not pts:
            return None
        if len(pts) == 1:
            b, t = pts[0]
            if n == b:
                return t
            # One size seen: assume a batch costs a bit more per token than nothing.
            return t * (1.0 + 0.15 * (n - b) / max(b, 1))
        mx = sum(b for b, _ in pts) / len(pts)
        my = sum(t for _, t in pts) / len(pts)
        sxx = sum((b - mx) ** 2 for b, _ in pts)
        slope = sum((b - mx) * (t - my) for b, t in pts) / sxx if sxx else 0.0
        slope = max(slope, 0.0)
        return max(my + slope * (n - mx), 1e-9)

    def _continue_rate(self, i: int) -> float:
        """P(draft goes on to position i | it reached position i with the previous accepted)."""
        reached, drafted = self._reached[i], self._drafted[i]
        return (drafted + 1.0) / (reached + 1.0)

    def _accept_rate(self, i: int) -> float:
        drafted, acc = self._drafted[i], self._accepted[i]
        prior = _PRIOR_ACCEPT
        if i > 1 and self._drafted[i - 1] > 0:
            prior = self._accept_rate(i - 1)
        return (acc + prior * _PRIOR_WEIGHT) / (drafted + _PRIOR_WEIGHT)

    def predict(self, k: int) -> tuple[float, float] | None:
        """(expected tokens, expected seconds) for a round allowing k drafts."""
        c1 = self.verify_cost(1)
        if c1 is None:
            return None
        if k == 0:
            return 1.0, c1
        if self._draft_step is None:
            return None
        tokens = 1.0
        reach = 1.0      # P(reaching position i with every earlier draft accepted)
        exp_drafted = 0.0
        for i in range(1, k + 1):
            p_draft = reach * self._continue_rate(i)
            exp_drafted += p_draft
            reach = p_draft * self._accept_rate(i)
            tokens += reach
        # Each drafted position costs about one draft decode (at least one: the catch-up);
        # the verify batch is 1 + drafted.
        lo = int(exp_drafted)
        frac = exp_drafted - lo
        cv_lo = self.verify_cost(1 + lo) or c1
        cv_hi = self.verify_cost(2 + lo) or cv_lo
        cv = cv_lo + frac * (cv_hi - cv_lo)
        return tokens, self._draft_step * max(exp_drafted, 1.0) + cv

    def _best(self) -> tuple[int, float]:
        base = self.predict(0)
        best_k, best_rate = 0, (base[0] / base[1]) if base else 0.0
        base_rate = best_rate
        for k in range(self.draft_min, self.draft_max + 1):
            pr = self.predict(k)
            if pr is None:
                continue
            rate = pr[0] / pr[1]
            if rate > best_rate:
                best_k, best_rate = k, rate
        self.predicted_speedup = best_rate / base_rate if base_rate else 1.0
        return best_k, best_rate

    # -- decisions --------------------------------------------------------------------
    def next_k(self) -> int:
        self.probe = False
        if self._round == 0:
            return self.draft_max
        if self._round == 1 and self.verify_cost(1) is None:
            return 0                      # measure a plain target step once
        if not self.drafting:
            if self._since_probe >= self._probe_every:
                self.probe = True
                return max(self.draft_min, min(self.draft_max, 4))
            return 0
        return self._k

    def observe(self, r: RoundResult) -> str | None:
        """Learn from a finished round; return a sentence when drafting turns on or off."""
        self._round += 1
        # The first decode of a new batch shape also builds its graph: a second sample
        # replaces the first instead of blending with it.
        seen = self._verify_n.get(r.verify_batch, 0)
        old = self._verify.get(r.verify_batch) if seen >= 2 else None
        self._verify[r.verify_batch] = _ema(old, r.verify_seconds)
        self._verify_n[r.verify_batch] = seen + 1
        if r.k > 0 and r.draft_steps > 0 and (not r.probe or self._draft_step is None):
            old = self._draft_step if self._draft_samples >= 2 else None
            self._draft_step = _ema(old, r.draft_seconds / r.draft_steps)
            self._draft_samples += 1
        if r.k > 0:
            for i in range(1, r.k + 1):
                if i > r.accepted + 1:
                    break
                if i > self.draft_max:
                    break
                self._reached[i] += 1
                if i <= r.drafted:
                    self._drafted[i] += 1
                    if i <= r.accepted:
                        self._accepted[i] += 1
        if not self.drafting:
            self._since_probe += r.emitted
        if self._round < 2 or (self._round == 2 and self._draft_step is None):
            return None
        best_k, _ = self._best()
        was = self.drafting
        if best_k == 0 and self.can_pause:
            if r.probe:          # the probe did not pay: wait longer before the next one
                self._probe_every = min(self._probe_every * 2, _PROBE_MAX)
                self._since_probe = 0
            elif was:            # just paused
                self._since_probe = 0
            self.drafting = False
            self.reason = self._explain(paused=True)
        else:
            self._k = max(best_k, self.draft_min)
            self.drafting = True
            self._probe_every = _PROBE_FIRST
            self.reason = self._explain(paused=False)
        if was != self.drafting:
            return self.reason
        return None

    def _explain(self, paused: bool) -> str:
        c1 = self.verify_cost(1) or 0.0
        ratio = (self._draft_step / c1) if (c1 and self._draft_step) else 0.0
        acc = self.acceptance()
        if paused:
            best = max((self.predict(k) for k in range(self.draft_min, self.draft_max + 1)),
                       key=lambda p: (p[0] / p[1]) if p else 0.0, default=None)
            pred = (best[0] / best[1]) * c1 if best else 0.0
            return (f"draft step costs {ratio:.2f} of a target step, acceptance {acc:.2f}; "
                    f"predicted {pred:.2f}x; drafting paused")
        return (f"draft step costs {ratio:.2f} of a target step, acceptance {acc:.2f}; "
                f"K={self._k} predicted {self.predicted_speedup:.2f}x")

    def acceptance(self) -> float:
        d = sum(self._drafted)
        return sum(self._accepted) / d if d else 0.0

    def describe(self) -> str:
        return f"adaptive K in [{self.draft_min}, {self.draft_max}], p_min {self.p_min}"

    def estimates(self) -> dict:
        c1 = self.verify_cost(1)
        return {
            "draft_step_seconds": self._draft_step,
            "target_step_seconds": c1,
            "draft_cost_ratio": (self._draft_step / c1) if (c1 and self._draft_step) else None,
            "verify_seconds_by_batch": {str(k): v for k, v in sorted(self._verify.items())},
            "predicted_speedup": self.predicted_speedup,
            "k": self._k if self.drafting else 0,
            "reason": self.reason,
        }
