"""How many tokens to draft next: a fixed K, or an adaptive choice that maximises tok/s.

The adaptive policy works on two levels.

* **Which K.** While drafting, it measures the tokens per second that each draft length
  really delivers (tokens emitted over draft + verify time, recent rounds weighing more)
  and climbs towards the best: every few rounds it tries a neighbouring K and moves there
  when that is measurably faster. Measured rates need no model of the hardware, so they
  stay right where a model would be off (batched verify costs on a CPU are far from linear).
* **Whether to draft at all.** It compares the drafting rate with a plain target step
  (K = 0). When drafting is slower, it pauses: the target generates alone, and the policy
  probes drafting again now and then. Whether a probe shows drafting paying again is
  predicted from what it measures: the cost of a draft decode, of a target decode per batch
  size, of catching the draft up on missed tokens, and the acceptance at each draft
  position. The gap between probes keeps probing under ``probe_budget`` (2%) of the time
  and doubles after each probe that does not pay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..errors import BadInput
from .events import Step

_EMA = 0.2
_RATE_EMA = 0.15         # memory of measured round rates (per K)
_DECAY = 0.98            # per drafting round: recent acceptance weighs more
_FIRST_K = 8             # the first round's draft length (it measures the costs)
_TRY_EVERY = 3           # rounds between tries of a neighbouring K
_MOVE_MARGIN = 0.02      # a neighbour must be this much faster to move there
_PAUSE_MARGIN = 0.03     # pause when drafting is measured this much slower than the target
_RESUME_MARGIN = 0.03    # a probe must predict this much gain to resume drafting
_PAUSE_EVIDENCE = 8      # ... over at least this many drafting rounds (unless clearly worse)
_CLEARLY_WORSE = 0.7
_PROBE_K = 4             # a probe drafts at least this many tokens
_PROBE_DECAY = 0.7       # probes are the only fresh data while paused: they count more
_PROBE_MIN = 16
_PROBE_BACKOFF_MAX = 256  # failed probes double the gap up to this; costlier probes wait longer
_PROBE_MAX = 4096
_CATCHUP_WINDOW = 32     # tokens a drafter re-reads after a long pause (ModelDrafter.window)
_LADDER = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)


class Policy(Protocol):
    """What the generator asks of a drafting policy each round."""

    adaptive: bool
    may_draft: bool          # whether this generation may draft at all (else no drafter prefill)
    drafting: bool           # False while drafting is paused
    probe: bool              # the K just returned is a probe of a paused drafter
    reason: str              # the latest reasoning, in plain words
    pauses: int
    probes: int

    @property
    def k_now(self) -> int: ...

    def next_k(self) -> int: ...

    def gate(self) -> Callable[[int, float], bool] | None: ...

    def observe(self, step: Step) -> str | None: ...

    def describe(self) -> str: ...

    def estimates(self) -> dict: ...


def _ema(old: float | None, new: float, alpha: float = _EMA) -> float:
    return new if old is None else old + alpha * (new - old)


class FixedPolicy:
    """Always allow K drafts (the user's explicit choice); p_min may end a draft early."""

    adaptive = False
    probe = False
    pauses = 0
    probes = 0

    def __init__(self, k: int, p_min: float | None = None):
        if k < 0:
            raise BadInput(f"draft length must be >= 0 (got {k})")
        self.k = k
        self.p_min = p_min or 0.0
        self.may_draft = k > 0
        self.drafting = k > 0
        self.reason = ""

    @property
    def k_now(self) -> int:
        return self.k

    def next_k(self) -> int:
        return self.k

    def gate(self):
        p_min = self.p_min
        return (lambda i, top: top >= p_min) if p_min > 0 else None

    def observe(self, r: Step) -> str | None:
        return None

    def describe(self) -> str:
        if not self.k:
            return "target only"
        return f"fixed K={self.k}" + (f", p_min {self.p_min}" if self.p_min else "")

    def estimates(self) -> dict:
        return {"adaptive": False, "k": self.k}


class _Cost:
    """An EMA whose first sample (a new graph being built) is replaced by the second."""

    __slots__ = ("value", "n")

    def __init__(self):
        self.value: float | None = None
        self.n = 0

    def add(self, x: float) -> None:
        self.value = _ema(self.value if self.n >= 2 else None, x)
        self.n += 1


class _Rate:
    """Measured tokens per second of one draft length: EMA of tokens over EMA of seconds."""

    __slots__ = ("tokens", "seconds", "n")

    def __init__(self):
        self.tokens: float | None = None
        self.seconds: float | None = None
        self.n = 0

    def add(self, tokens: float, seconds: float) -> None:
        first = self.n < 2  # the first sample may include building a new graph
        self.tokens = _ema(None if first else self.tokens, tokens, _RATE_EMA)
        self.seconds = _ema(None if first else self.seconds, seconds, _RATE_EMA)
        self.n += 1

    @property
    def value(self) -> float | None:
        return self.tokens / self.seconds if self.n and self.seconds else None


class AdaptivePolicy:
    """Choose K each round for the most tokens per second, pausing when drafting loses."""

    adaptive = True

    def __init__(self, draft_min: int = 1, draft_max: int = 8, p_min: float | None = None,
                 can_pause: bool = True, probe_budget: float = 0.02):
        if draft_min < 1 or draft_max < 1:
            raise BadInput("draft lengths must be >= 1")
        if draft_min > draft_max:
            raise BadInput(f"draft-min ({draft_min}) is larger than draft-max ({draft_max})")
        self.draft_min = draft_min
        self.draft_max = draft_max
        self.p_min = p_min or 0.0
        self.can_pause = can_pause
        self.probe_budget = probe_budget
        self.may_draft = True
        self.drafting = True
        self.probe = False
        ladder = [k for k in _LADDER if draft_min <= k <= draft_max]
        self._ladder = sorted(set(ladder + [draft_min, draft_max]))
        self._k = min(self._ladder, key=lambda k: abs(k - _FIRST_K))
        self._trial_up = True
        self._trial_model = True
        self._since_try = 0
        self._round = 0
        self._rates: dict[int, _Rate] = {}      # measured tok/s by K (0: the target alone)
        self._draft = _Cost()                   # one draft decode of one token
        self._catchup: float | None = None      # per extra token in a catch-up batch
        self._verify: dict[int, _Cost] = {}     # target decode cost by batch size
        n = max(self._ladder) + 1
        self._tried = [0.0] * n                 # rounds whose draft got to position i
        self._made = [0.0] * n                  # ... and drafted it (p_min did not stop it)
        self._judged = [0.0] * n                # rounds with position i drafted and i-1 accepted
        self._accepted = [0.0] * n              # ... whose position i was accepted
        self._drafting_rounds = 0
        self._since_probe = 0
        self._probe_every = _PROBE_MIN
        self.pauses = 0
        self.probes = 0
        self.reason = "starting: measuring draft and target costs"
        self.predicted_speedup = 1.0

    # -- measurements -----------------------------------------------------------------
    def verify_cost(self, n: int) -> float | None:
        """Seconds for a target decode of n tokens: measured, interpolated between measured
        sizes, or extended past the largest with the slope of the last segment."""
        pts = sorted((b, c.value) for b, c in self._verify.items())
        if not pts:
            return None
        sizes = [b for b, _ in pts]
        if n in sizes:
            return pts[sizes.index(n)][1]
        if len(pts) == 1:
            b, t = pts[0]
            return max(t * (1.0 + 0.15 * (n - b) / max(b, 1)), 1e-9)
        if n > sizes[-1]:
            (b0, t0), (b1, t1) = pts[-2], pts[-1]
            return t1 + max((t1 - t0) / (b1 - b0), 0.0) * (n - b1)
        if n < sizes[0]:
            (b0, t0), (b1, t1) = pts[0], pts[1]
            slope = max((t1 - t0) / (b1 - b0), 0.0)
            return max(t0 - slope * (b0 - n), t0 * n / b0)
        for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
            if b0 < n < b1:
                return t0 + (t1 - t0) * (n - b0) / (b1 - b0)
        return pts[-1][1]  # pragma: no cover

    def _pooled_accept(self) -> float:
        j = sum(self._judged)
        return (sum(self._accepted) + 0.7) / (j + 1.0)

    def _continue_rate(self, i: int) -> float:
        """P(the draft goes on to position i | it drafted position i - 1); p_min stops it."""
        return (self._made[i] + 1.0) / (self._tried[i] + 1.0)

    def _accept_rate(self, i: int) -> float:
        """P(position i accepted | drafted, with every earlier position accepted)."""
        prior = self._accept_rate(i - 1) if i > 1 and self._judged[i - 1] > 0 else self._pooled_accept()
        return (self._accepted[i] + prior) / (self._judged[i] + 1.0)

    def predict(self, k: int) -> tuple[float, float] | None:
        """(expected tokens, expected seconds) of a round allowing k drafts, from the
        measured costs and acceptance (used where no rate has been measured)."""
        c1 = self.verify_cost(1)
        if c1 is None:
            return None
        if k == 0:
            return 1.0, c1
        cd = self._draft.value
        if cd is None:
            return None
        tokens, exp_drafted = 1.0, 0.0
        p_made, p_ok = 1.0, 1.0     # P(position i drafted), P(positions 1..i all accepted)
        for i in range(1, min(k, len(self._tried) - 1) + 1):
            cont = self._continue_rate(i)
            p_made *= cont
            p_ok *= cont * self._accept_rate(i)
            exp_drafted += p_made
            tokens += p_ok
        lo = int(exp_drafted)
        cv_lo = self.verify_cost(1 + lo) or c1
        cv_hi = self.verify_cost(2 + lo) or cv_lo
        cv = cv_lo + (exp_drafted - lo) * (cv_hi - cv_lo)
        return tokens, cd * max(exp_drafted, 1.0) + cv

    def rate(self, k: int) -> float | None:
        """Tokens per second at draft length k: measured when it has been, else predicted."""
        r = self._rates.get(k)
        if r is not None and r.n >= 2 and r.value:
            return r.value
        pr = self.predict(k)
        return pr[0] / pr[1] if pr else None

    def _predicted_best(self) -> tuple[int, float]:
        best_k, best = self._k, 0.0
        for k in self._ladder:
            pr = self.predict(k)
            if pr and pr[0] / pr[1] > best:
                best_k, best = k, pr[0] / pr[1]
        return best_k, best

    def _probe_interval(self, k: int) -> int:
        """Tokens between probes so that probing costs at most ``probe_budget`` of the time."""
        c1 = self.verify_cost(1)
        pr = self.predict(k)
        if not c1 or not pr:
            return _PROBE_MIN
        catch = self._catchup if self._catchup is not None else 0.5 * (self._draft.value or 0.0)
        extra = catch * _CATCHUP_WINDOW + pr[1] - pr[0] * c1
        tokens = extra / (self.probe_budget * c1) if extra > 0 else _PROBE_MIN
        return int(min(max(tokens, _PROBE_MIN), _PROBE_MAX))

    def gate(self):
        """The per-token stop rule of a draft: only with an explicit p_min."""
        p_min = self.p_min
        return (lambda i, top: top >= p_min) if p_min > 0 else None

    # -- decisions --------------------------------------------------------------------
    @property
    def k_now(self) -> int:
        """The draft length in force (0 while paused)."""
        return self._k if self.drafting else 0

    def _neighbour(self) -> int | None:
        i = self._ladder.index(self._k)
        up = self._ladder[i + 1] if i + 1 < len(self._ladder) else None
        down = self._ladder[i - 1] if i > 0 else None
        self._trial_up = not self._trial_up
        return (up or down) if self._trial_up else (down or up)

    def next_k(self) -> int:
        self.probe = False
        if self._round == 0:
            return self._k
        if self._round == 1 and 1 not in self._verify:
            return 0                      # measure a plain target step once
        if not self.drafting:
            if self._since_probe >= self._probe_every:
                self.probe = True
                return max(self._k, min(_PROBE_K, self.draft_max))
            return 0
        if self._since_try >= _TRY_EVERY:
            self._since_try = 0
            # Alternate between the model's best guess and a neighbour of the current K.
            guess = self._predicted_best()[0] if self._trial_model else None
            self._trial_model = not self._trial_model
            n = guess if guess is not None and guess != self._k else self._neighbour()
            if n is not None:
                return n
        self._since_try += 1
        return self._k

    def observe(self, r: Step) -> str | None:
        """Learn from a finished round; return a sentence when drafting turns on or off."""
        self._round += 1
        self._verify.setdefault(r.verify_batch, _Cost()).add(r.verify_seconds)
        if r.k == 0:
            self._rates.setdefault(0, _Rate()).add(1.0, r.verify_seconds)
        if r.k > 0 and r.draft_steps > 0:
            self._drafting_rounds += 1
            self._learn_draft_costs(r)
            self._learn_acceptance(r)
            if not r.probe:
                self._rates.setdefault(r.k, _Rate()).add(r.accepted + 1.0, r.draft_seconds + r.verify_seconds)
        if not self.drafting:
            self._since_probe += r.emitted
        if self._draft.value is None or self.verify_cost(1) is None:
            return None
        if self.drafting and r.k != self._k and r.k > 0:
            # A neighbour was tried: move there once it is measurably faster.
            cur, new = self.rate(self._k), self.rate(r.k)
            if new and cur and self._rates.get(r.k, _Rate()).n >= 2 and new > cur * (1 + _MOVE_MARGIN):
                self._k = r.k
        base = self.rate(0) or 0.0
        was = self.drafting
        if was:
            current = self.rate(self._k) or 0.0
            ratio = current / base if base else 1.0
            self.predicted_speedup = ratio
            k_best, rate_best = self._k, current
            pause = ratio < 1.0 - _PAUSE_MARGIN and (self._drafting_rounds >= _PAUSE_EVIDENCE
                                                     or ratio < _CLEARLY_WORSE)
            if pause:
                # Before giving up, go where the model expects drafting to pay, if anywhere.
                k_pred, rate_pred = self._predicted_best()
                if k_pred != self._k and rate_pred > base and (self._rates.get(k_pred) or _Rate()).n < 2:
                    self._k, pause = k_pred, False
        else:
            # Paused: only a probe's fresh evidence can turn drafting back on, and only when
            # it predicts a clear gain (plain steps alone would make it flap on noise).
            k_best, rate_best = self._predicted_best()
            self.predicted_speedup = rate_best / base if base else 1.0
            pause = not r.probe or rate_best <= base * (1 + _RESUME_MARGIN)
        if pause and self.can_pause:
            if was:
                self.pauses += 1
                self._probe_every = self._probe_interval(k_best)
            elif r.probe:
                backoff = min(self._probe_every * 2, _PROBE_BACKOFF_MAX)
                self._probe_every = max(backoff, self._probe_interval(k_best))
            if was or r.probe:
                self._since_probe = 0
            self.drafting = False
            self._k = k_best
            self.reason = self._explain(k_best, rate_best, base, paused=True)
        else:
            if not was:
                self._k = k_best
                self._since_try = 0
                for k in list(self._rates):  # rates measured before the pause are stale
                    if k:
                        del self._rates[k]
            self.drafting = True
            self.reason = self._explain(self._k, rate_best, base, paused=False)
        return self.reason if was != self.drafting else None

    def _learn_draft_costs(self, r: Step) -> None:
        if r.draft_steps > 1:
            self._draft.add((r.draft_seconds - r.sync_seconds) / (r.draft_steps - 1))
        if r.sync_tokens <= 2:
            if r.draft_steps == 1 or self._draft.value is None:
                self._draft.add(r.sync_seconds)
        elif self._draft.value is not None:
            per = max(r.sync_seconds - self._draft.value, 0.0) / (r.sync_tokens - 1)
            self._catchup = _ema(self._catchup, per)

    def _learn_acceptance(self, r: Step) -> None:
        decay = _PROBE_DECAY if r.probe else _DECAY
        for arr in (self._tried, self._made, self._judged, self._accepted):
            for i in range(len(arr)):
                arr[i] *= decay
        for i in range(1, min(r.k, len(self._tried) - 1) + 1):
            if i > r.drafted + 1:
                break
            self._tried[i] += 1
            if i <= r.drafted:
                self._made[i] += 1
                if i <= r.accepted + 1:
                    self._judged[i] += 1
                    if i <= r.accepted:
                        self._accepted[i] += 1
        if r.probe:
            self.probes += 1

    def _explain(self, k: int, rate: float, base: float, paused: bool) -> str:
        c1 = self.verify_cost(1) or 0.0
        ratio = (self._draft.value / c1) if (c1 and self._draft.value) else 0.0
        head = (f"draft step costs {ratio:.2f} of a target step, acceptance {self.acceptance():.2f}; "
                f"K={k} {'predicted' if paused else 'measured'} {rate / base if base else 0:.2f}x")
        if paused:
            return f"{head}; drafting paused (next probe after {self._probe_every} tokens)"
        return head

    def acceptance(self) -> float:
        d = sum(self._made)
        return sum(self._accepted) / d if d else 0.0

    def describe(self) -> str:
        pause = "" if self.can_pause else ", never paused"
        stop = f", p_min {self.p_min}" if self.p_min else ""
        return f"adaptive K in [{self.draft_min}, {self.draft_max}]{stop}{pause}"

    def estimates(self) -> dict:
        c1 = self.verify_cost(1)
        cd = self._draft.value
        return {
            "adaptive": True,
            "k": self.k_now,
            "drafting": self.drafting,
            "reason": self.reason,
            "predicted_speedup": self.predicted_speedup,
            "draft_step_seconds": cd,
            "target_step_seconds": c1,
            "draft_cost_ratio": (cd / c1) if (c1 and cd) else None,
            "catchup_seconds_per_token": self._catchup,
            "verify_seconds_by_batch": {str(b): c.value for b, c in sorted(self._verify.items())},
            "tokens_per_second_by_k": {str(k): r.value for k, r in sorted(self._rates.items()) if r.value},
            "acceptance_recent": self.acceptance(),
            "pauses": self.pauses,
            "probes": self.probes,
            "probe_every_tokens": self._probe_every,
        }
