"""How many tokens to draft next: a fixed K, or an adaptive choice that maximises tok/s.

The adaptive policy predicts the tokens per second of each draft length K from what it
measures, and acts on that prediction with stated confidence:

* **Costs.** A draft decode (the first, catch-up one and each further one), a target decode
  per batch size (the plain target step, K = 0, among them) and catching the draft up on
  missed tokens. Each is a window of recent samples (the very first of a shape, which may
  build a graph, and the worst, a busy machine's spike, left out), so a rate never rests on
  one measurement; the plain step is measured several times early and refreshed now and then.
* **Acceptance.** A Beta posterior on the chance that a drafted token is accepted (a prior
  plus the tokens judged, recent rounds weighing more), refined per draft position; the
  chance that the drafter goes on to the next position (p_min, or an n-gram lookup that
  finds nothing or a short match) is counted as well. Recent rounds whose accepted tokens
  are far off their prediction mean the text changed: the older evidence is thinned.
* **Which K.** The K with the best expected rate; a new K moves only for a clear gain.
  Settled at a K with a clear gain, three rounds in four only learn and the fourth decides
  (between two CPU decodes the predictions cost ~100 us of Python a round); a drafting
  lookup decides at its matches and after every eighth miss. What deciding costs is timed
  apart and charged to drafting rounds (a plain round decides nothing for the target alone).
* **Whether to draft.** Drafting pauses only when even an optimistic reading of the evidence
  (acceptance at its upper credible bound and costs at the low end of their intervals, about
  95% one-sided) says it loses; so one bad round, or noise just after resuming, cannot pause
  it. A pair near break-even also pauses once a dozen fresh rounds expect a 3% loss (a
  clearer loss after fewer, four at least). While paused, short probes test drafting again,
  at gaps that keep probing under ``probe_budget`` of the time, and sooner early in a
  generation when what a probe may find (the saving where drafting pays, averaged over the
  acceptance posterior) over the tokens so far repays its cost. A probe whose evidence
  predicts a clear gain resumes drafting, and the evidence is then thinned so that fresh
  rounds decide.

What a generation learned (:meth:`AdaptivePolicy.learned`) seeds the next one (``learned=``):
the Engine keeps it per drafter and :mod:`localspec.engine.memory` keeps it on disk, so a new
generation starts from the last one's costs and (weakly) its acceptance.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ..errors import BadInput
from .events import Step

_FIRST_K = 3             # the first round's draft length when nothing is known
_Z = 1.645               # one-sided ~95%: pause only when drafting loses with this confidence
_DECAY = 0.98            # per drafting round: recent acceptance weighs more (~50 rounds)
_PROBE_DECAY = 0.7       # probes are the only fresh data while paused: they count more
_PRIOR = (1.0, 1.0)      # Beta prior on acceptance (successes, failures)
_POSITION_PRIOR = 2.0    # pseudo-counts pulling each position's acceptance to the pooled one
_SEED_WEIGHT = 6.0       # acceptance evidence carried into a new generation (prompts differ)
_RESUME_WEIGHT = 8.0     # acceptance evidence kept when drafting resumes (fresh rounds decide)
_SHIFT_Z = 3.5           # accepted tokens this many standard deviations off their prediction ...
_SHIFT_ROUNDS = 8        # ... over this many recent drafting rounds: the text changed
_MIN_AFTER_RESUME = 4    # drafting rounds after a resume before acceptance alone may pause it
_MOVE_MARGIN = 0.02      # a new K must be predicted this much faster to move there
_EXPLORE_GAP = 0.05      # a K whose batch is not measured in this answer is tried once if predicted this close
_EXPLORE_AFTER = 2       # ... after this many drafting rounds at the K in force
_RESUME_MARGIN = 0.03    # a probe must predict this much gain to resume drafting
_EXPECTED_LOSS = 0.03    # drafting pauses when it is expected to lose this much ...
_EXPECTED_ROUNDS = 12    # ... after this many drafting rounds since it (re)started (a larger loss, fewer)
_REFRESH_BUDGET = 0.005  # plain steps that refresh the target step's cost: this share of the time
_REFRESH_FIRST = 0.02    # ... while the plain step has fewer than three samples
_SEEDED_CHECK = 0.15     # a seeded generation predicting less gain than this measures its plain step
_REFRESH_MIN = 12        # drafting rounds between plain-step measurements, at least
_REFRESH_MAX = 400
_SPIKE = 1.5             # a plain step measured this much dearer than a larger batch is re-measured
_WINDOW = 16             # samples kept per cost
_PROBE_K = 4             # a probe drafts at least this many tokens
_PROBE_MIN = 8
_PROBE_BACKOFF_MAX = 128  # failed probes double the gap up to this (or the tokens so far)
_PROBE_MAX = 4096
_CATCHUP_WINDOW = 32     # tokens a drafter is assumed to re-read for a probe after a long pause
# Acceptances at which a probe's worth is read: (standard deviations from the mean, weight),
# a normal density on a grid of half a standard deviation, highest first.
_PROBE_NODES = tuple((z / 2, math.exp(-z * z / 8) / sum(math.exp(-j * j / 8) for j in range(-6, 7)))
                     for z in range(6, -7, -1))
_LOOK_SHARE = 0.02       # a lookup costing less than this share of a plain round: its probes wait for a match
_LADDER = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)
_PAUSED_SAMPLE = 32      # while paused, one round in this many is measured (nothing to decide), ...
_SAMPLE_SECONDS = 1e-4   # ... or fewer: what measuring one costs between two CPU decodes (see _paused_sampling)
_SAMPLE_SHARE = 0.005    # ... kept under this share of the paused rounds' time
_PAUSED_SAMPLE_MAX = 1024
_QUIET_ALWAYS = 1 << 30  # quiet rounds of a policy that never drafts
_LEVEL_RATE = 0.2        # how fast the target's common cost level follows each round's cost
_STEADY_GAIN = 0.10      # drafting predicted at least this much faster, K settled: ...
_STEADY_ROUNDS = 3       # ... the next this many rounds only learn, and the one after decides
_MISS_ROUNDS = 8         # a drafting lookup decides at a match, or after this many misses
_DECIDE_RATE = 0.03      # how fast the mean cost of deciding follows each round's (~30 rounds)
_SCALE_FOLD = 1e-60     # the position counts' common factor is folded into them below this
_FLOOR_ROUNDS = 8        # rounds between two workings-out of a lookup's match floor (costs move slowly)
SHORT_SYNC = 4          # a draft's first decode of at most this many tokens costs about one decode


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

    def plain_step_seconds(self) -> float | None:
        """What a plain target step costs, as measured (None: unknown, or not measured)."""

    def observe(self, step: Step) -> str | None: ...

    def opening_note(self) -> str | None:
        """A sentence this policy can say before the first round (a pause it starts in, from
        what an earlier generation learned), once; else None."""

    def quiet_rounds(self) -> int:
        """How many of the next rounds (asked before the first and after each ``observe``)
        will be plain target steps this policy need neither choose nor see: the generator
        runs them without calling ``next_k`` or ``observe`` and reports them with
        :meth:`passed`. Next to a fast target step (tens of microseconds) a paused policy's
        bookkeeping every round is a cost of its own."""

    def passed(self, rounds: int, tokens: int) -> None:
        """``rounds`` quiet plain rounds went by, emitting ``tokens``."""

    def describe(self) -> str: ...

    def estimates(self) -> dict: ...

    def learned(self) -> dict | None: ...


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

    def plain_step_seconds(self) -> float | None:
        return None

    def observe(self, r: Step) -> str | None:
        return None

    def opening_note(self) -> str | None:
        return None

    def quiet_rounds(self) -> int:
        return _QUIET_ALWAYS if not self.k else 0

    def passed(self, rounds: int, tokens: int) -> None:
        pass

    def describe(self) -> str:
        if not self.k:
            return "target only"
        return f"fixed K={self.k}" + (f", p_min {self.p_min}" if self.p_min else "")

    def estimates(self) -> dict:
        return {"adaptive": False, "k": self.k}

    def learned(self) -> dict | None:
        return None


def _ema(old: float | None, new: float, alpha: float = 0.2) -> float:
    return new if old is None else old + alpha * (new - old)


class _Samples:
    """Recent samples of one cost: a robust mean and its relative standard error.

    The first sample (possibly a new graph being built, or pages of the model still being
    read) is dropped once there is another; from four samples on, the mean is taken over the
    middle half (a shared, busy machine makes spikes both ways). ``prior`` (a value from an
    earlier generation) stands in until a sample arrives.
    """

    __slots__ = ("xs", "n", "prior", "_sorted", "_cut", "_value")

    def __init__(self, prior: float | None = None):
        self.xs: deque[float] = deque(maxlen=_WINDOW)
        self.n = 0
        self.prior = prior
        self._sorted: list[float] = []   # xs in order, kept so as each sample comes and goes
        self._cut: list[float] | None = None
        self._value: float | None = None

    def add(self, x: float) -> None:
        x = max(x, 0.0)
        xs, ordered = self.xs, self._sorted
        if len(xs) == _WINDOW:
            del ordered[bisect_left(ordered, xs[0])]
        xs.append(x)
        insort(ordered, x)
        self.n += 1
        self._cut = self._value = None

    def _kept(self) -> list[float]:
        if self._cut is None:
            xs = self._sorted
            if self.n == len(self.xs) and self.n >= 2:   # the very first sample is still here
                xs = xs.copy()
                del xs[bisect_left(xs, self.xs[0])]
            q = len(xs) // 4
            self._cut = xs[q:len(xs) - q] if q else xs
        return self._cut

    @property
    def value(self) -> float | None:
        if self._value is None:
            xs = self._kept()
            self._value = sum(xs) / len(xs) if xs else None
        return self._value if self._value is not None else self.prior

    @property
    def rel_se(self) -> float:
        """Relative standard error of ``value`` (0.5, little is known, below two samples)."""
        xs = self._kept()
        if len(xs) < 2:
            return 0.5
        m = sum(xs) / len(xs)
        var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
        return math.sqrt(var / len(xs)) / m if m > 0 else 0.0


def beta_mean_sd(succ: float, fail: float) -> tuple[float, float]:
    """Mean and standard deviation of a Beta(succ, fail) posterior."""
    n = succ + fail
    return succ / n, math.sqrt(succ * fail / (n * n * (n + 1.0)))


def beta_bounds(succ: float, fail: float, z: float = _Z) -> tuple[float, float, float]:
    """(mean, lower, upper) of a Beta(succ, fail) posterior, the bounds z sd away (normal
    approximation, clipped to [0, 1])."""
    mean, sd = beta_mean_sd(succ, fail)
    return mean, max(mean - z * sd, 0.0), min(mean + z * sd, 1.0)


def _costs_by_size(pts: list[tuple[int, float]], top: int) -> list[float]:
    """Target seconds for every batch size 1..top from the measured (size, seconds) points:
    measured, interpolated between measured sizes, or extended past the largest with the
    slope of the last segment (capped at the largest batch's cost per token) and below the
    smallest with the first segment's. Index 0 is unused; empty without points."""
    if not pts:
        return []
    out = [0.0] * (top + 1)
    if len(pts) == 1:
        b, t = pts[0]
        for n in range(1, top + 1):
            out[n] = max(t * (1.0 + 0.15 * (n - b) / max(b, 1)), 1e-9)
        return out
    (b0, t0), (b1, t1) = pts[0], pts[1]
    first_slope = max((t1 - t0) / (b1 - b0), 0.0)
    (c0, u0), (c1, u1) = pts[-2], pts[-1]
    last_slope = max((u1 - u0) / (c1 - c0), 0.0)
    j = 0
    for n in range(1, top + 1):
        if n < b0:
            out[n] = max(t0 - first_slope * (b0 - n), t0 * n / b0, 1e-9)
        elif n > c1:
            # Never more per token than the largest measured batch: batching only shares a
            # step's cost (a noisy steep segment must not make every longer draft look dear,
            # which kept K low on a pair that pays).
            out[n] = min(u1 + last_slope * (n - c1), u1 * n / c1)
        else:
            while pts[j + 1][0] < n:
                j += 1
            (lo, t_lo), (hi, t_hi) = pts[j], pts[j + 1]
            if n == lo or n == hi:
                out[n] = max(t_lo if n == lo else t_hi, 1e-9)
            else:
                out[n] = t_lo + (t_hi - t_lo) * (n - lo) / (hi - lo)
    return out


class AdaptivePolicy:
    """Choose K each round for the most tokens per second, pausing when drafting loses."""

    adaptive = True

    def __init__(self, draft_min: int = 1, draft_max: int = 8, p_min: float | None = None,
                 can_pause: bool = True, probe_budget: float = 0.02, learned: dict | None = None,
                 size_ratio: float | None = None, lookup: bool = False):
        if draft_min < 1 or draft_max < 1:
            raise BadInput("draft lengths must be >= 1")
        if draft_min > draft_max:
            raise BadInput(f"draft-min ({draft_min}) is larger than draft-max ({draft_max})")
        self.draft_min = draft_min
        self.draft_max = draft_max
        self.p_min = p_min or 0.0
        self.can_pause = can_pause
        self.probe_budget = probe_budget
        self.lookup = lookup          # the drafter is prompt lookup: its matches are gated by cost
        self._floors: list[float] | None = None   # match_floors(), as last worked out ...
        self._floor_at: int | None = None         # ... at this round (None: not yet)
        self.may_draft = True
        self.drafting = True
        self.probe = False
        ladder = [k for k in _LADDER if draft_min <= k <= draft_max]
        self._ladder = sorted(set(ladder + [draft_min, draft_max]))
        self._k = self._on_ladder(_FIRST_K)
        self._round = 0
        self._tokens = 0
        # Target decode seconds by batch size (1: a plain step), as multiples of a level that
        # all sizes share: a step costs more as the context grows (~3x over 512 tokens on a
        # tiny CPU model), or as the machine slows. Each round moves the level by what its
        # size cost against that size's own record, so the sizes not decoded lately move
        # with it; a size measured long ago (or in the last generation, at the end of its
        # answer) would otherwise look cheap or dear for good.
        self._verify: dict[int, _Samples] = {}
        self._level = 1.0
        self._sync = _Samples()                 # the drafter's first decode of a round (or its lookup)
        self._step = _Samples()                 # each further draft decode
        self._multi = False                     # the drafter decodes once per drafted token
        self._catchup: float | None = None      # per extra token in a catch-up batch
        self._seed_noise: float | None = None   # the machine's noise as the last generation measured it
        # Seconds every drafting round costs beyond its draft and verify decodes (a chain's
        # draft model catching up on what the lookups drafted; set by ChainPolicy).
        self.round_extra = 0.0
        # A round's wall time beyond its decodes (the loop's Python, this policy's included,
        # and whoever reads the events), measured from one round's observe to the next (the
        # first round's from its next_k), for drafting rounds (True) and plain ones (False):
        # next to a fast target step it decides whether drafting pays; next to a real
        # model's, it is noise.
        self._clock = time.perf_counter
        self._t_last: float | None = None
        self._overhead = {True: _Samples(), False: _Samples()}
        self._succ, self._fail = _PRIOR         # Beta posterior on acceptance
        n = max(self._ladder) + 1
        self._tried = [0.0] * n                 # rounds whose draft got to position i
        self._made = [0.0] * n                  # ... and drafted it (p_min / the lookup did not stop it)
        self._judged = [0.0] * n                # rounds with position i drafted and i-1 accepted
        self._accepted = [0.0] * n              # ... whose position i was accepted
        self._pos_scale = 1.0                   # the four counts are their stored values times this
        self._draft_rounds = 0
        # Verify costs by batch size (and, under None, _verify_values()), until the next round.
        self._points: dict = {}
        self._curves: dict[tuple, dict] = {}    # predictions, until the next round
        self._ladder_set = set(self._ladder)
        self._since_plain = 0                   # drafting rounds since the last plain step
        self._since_resume = 0                  # drafting rounds since drafting (re)started
        self._since_probe = 0
        self._steady = 0                        # rounds left that learn without deciding
        self._misses = 0                        # a drafting lookup's misses since its last decision
        self._lazy = False                      # the last round only learned (a miss, another's round)
        self._decided = 0.0                     # seconds the last decision took (timed apart)
        self._decide_cost: float | None = None  # mean seconds a drafting round spends deciding
        self._shift: deque[tuple[float, float]] = deque(maxlen=_SHIFT_ROUNDS)  # (predicted - accepted, variance)
        self.shifts = 0                         # times the text changed under a drafting policy
        self._every: float | None = None        # drafting rounds between plain steps, as last worked out
        self._explored = False                  # this generation has tried its one other K
        self._probe_every = _PROBE_MIN
        self._sample_every = _PAUSED_SAMPLE     # while paused: one round in this many is measured
        self._last_probe_speedup = 0.0
        self._note: str | None = None           # a seeded pause, said once (opening_note, else observe)
        self.pauses = 0
        self.probes = 0
        self._reason: str | None = "starting: measuring draft and target costs"
        self.predicted_speedup = 1.0
        self.seeded = False
        if isinstance(learned, dict) and learned:   # (anything else: a damaged store, start from nothing)
            self._seed(learned)
        if self.drafting and self._sync.value is None and size_ratio is not None and size_ratio >= 1.0 and can_pause:
            # The draft's costs are not measured yet (a last generation may have measured the
            # target's alone), but a draft whose weights are no smaller than the target's
            # (on the same device) cannot decode faster than it: drafting cannot pay. Start
            # paused; probes measure the real costs now and then, the first after more tokens
            # the dearer the draft (each of a probe's draft steps costs about the ratio).
            self.drafting = False
            self.pauses = 1
            self._paused_sampling()   # as rarely from the first round as a known plain step allows
            self._probe_every = int(min(_PROBE_MIN * size_ratio, _PROBE_MAX))
            self._reason = (f"the draft's weights are {size_ratio:.1f}x the target's: drafting cannot pay; "
                            f"drafting paused (next probe after {self._probe_every} tokens)")
            self._note = self._reason

    def _on_ladder(self, k: int) -> int:
        return min(self._ladder, key=lambda x: (abs(x - k), x))

    # -- what is carried between generations ---------------------------------------------
    def learned(self) -> dict | None:
        """What this generation measured, to seed the next one (JSON-serialisable). The
        target's costs alone (``draft_sync`` None) when its draft never ran: a pause from the
        start (a draft no cheaper than the target) then knows from its first round how rarely
        to measure next to that target step."""
        if self.verify_cost(1) is None:
            return None
        return {
            "version": 1,
            "verify": {str(b): v for b, v in sorted(self._verify_values().items())},
            "draft_sync": self._sync.value,
            "draft_step": self._step.value,
            "multi": self._multi,
            "catchup": self._catchup,
            "accept": [self._succ, self._fail],
            "k": self._k,
            "drafting": self.drafting,
            "speedup": self.predicted_speedup,
            "noise": self._noise(),
            "overhead": [self._overhead[True].value, self._overhead[False].value],
            "deciding": self._decide_cost,
            # Per draft position: rounds that got there, drafted it, had it judged, accepted it
            # (a lookup that found nothing is known by these, not by its acceptance).
            "positions": [[x * self._pos_scale for x in a]
                          for a in (self._tried, self._made, self._judged, self._accepted)],
            "since_plain": self._since_plain,
        }

    def _seed(self, d: dict) -> None:
        """Start from an earlier generation's measurements: its costs as priors (real samples
        replace them), its acceptance as weak evidence, its K, and paused when even an
        optimistic reading of them says drafting loses, or when the last generation ended
        paused and they predict no clear gain."""
        try:
            verify = {int(b): float(v) for b, v in (d.get("verify") or {}).items() if v}
            sync, step, catchup = (None if d.get(x) is None else float(d[x])
                                   for x in ("draft_sync", "draft_step", "catchup"))
            succ, fail = (float(x) for x in d.get("accept", _PRIOR))
            k = int(d.get("k", _FIRST_K))
        except (TypeError, ValueError):
            return   # a damaged entry: start from nothing
        self._verify = {b: _Samples(v) for b, v in verify.items()}
        self._points = {}
        self._sync.prior, self._step.prior, self._catchup = sync, step, catchup
        self._multi = bool(d.get("multi"))
        noise = d.get("noise")
        if isinstance(noise, (int, float)) and 0.0 <= noise < 0.5:
            self._seed_noise = float(noise)
        overhead = d.get("overhead")
        if isinstance(overhead, list) and len(overhead) == 2:
            for key, v in zip((True, False), overhead):
                if isinstance(v, (int, float)) and 0.0 <= v < 1.0:
                    self._overhead[key].prior = float(v)
        deciding = d.get("deciding")
        if isinstance(deciding, (int, float)) and 0.0 <= deciding < 1.0:
            self._decide_cost = float(deciding)
        scale = min(1.0, _SEED_WEIGHT / max(succ + fail, 1e-9))
        self._succ, self._fail = max(succ * scale, 0.05), max(fail * scale, 0.05)
        self._seed_positions(d.get("positions"))
        self._k = self._on_ladder(k)
        self.seeded = True
        # The plain step's refresh budget holds over a conversation, not one answer: answers
        # shorter than the rounds between refreshes would otherwise never measure it again.
        since = d.get("since_plain", 0)
        self._since_plain = int(since) if isinstance(since, int) and 0 <= since < 10**6 else 0
        if self.verify_cost(1) is None or self._sync.value is None:
            return
        base = self.verify_cost(1)
        k_best, expected = self._best()
        self._reason = "starting from the costs measured last time"
        # A generation that ended paused resumes as a paused one does: on a probe predicting a
        # clear gain (its acceptance, weakened for a new prompt, brings that probe early), not
        # by drafting the rounds it takes to be sure it loses again: on a pair near break-even
        # (the demo pair where its draft costs a target step) those rounds came in every answer.
        # Else it pauses when even the optimistic reading loses. That reading is never below
        # the expected one, so it is worked out (three more curves) only below break-even.
        ended_paused = d.get("drafting") is False
        if self.can_pause and ((ended_paused and expected <= 1.0 + _RESUME_MARGIN)
                               or (expected < 1.0 and self._bounds()[1] < 1.0)):
            self.drafting = False
            self.pauses = 1
            self._paused_sampling()
            self._k = k_best
            # A new prompt may repeat itself where the last one did not: a lookup that costs
            # next to nothing to try probes at its first match.
            self._probe_every = (0 if self._looking_is_cheap()
                                 else self._probe_interval(max(self._k, min(_PROBE_K, self.draft_max))))
            rate = (self.predict(self._k) or (1.0, base))
            self.predicted_speedup = rate[0] / rate[1] * base
            self._reason = self._explain(self._k, self.predicted_speedup, paused=True, seeded=True)
            self._note = self._reason

    def _seed_positions(self, positions) -> None:
        """The last generation's per-position counts, weighed down to ``_SEED_WEIGHT`` rounds
        like its acceptance: how far its drafts went (a lookup that found nothing drafts
        nothing, whatever its acceptance), as weak evidence for a new prompt."""
        n = len(self._tried)
        try:
            arrays = [[float(x) for x in a][:n] for a in positions]
        except (TypeError, ValueError):
            return
        if len(arrays) != 4 or any(len(a) < 2 or min(a) < 0 for a in arrays):
            return
        f = min(1.0, _SEED_WEIGHT / max(arrays[0][1], 1e-9))
        self._pos_scale = 1.0
        for own, a in zip((self._tried, self._made, self._judged, self._accepted), arrays):
            for i, x in enumerate(a):
                own[i] = x * f

    # -- measurements -----------------------------------------------------------------
    def verify_cost(self, n: int, optimistic: bool = False) -> float | None:
        """Seconds for a target decode of n tokens: measured, interpolated between measured
        sizes, or extended past the largest with the slope of the last segment (capped at
        the largest batch's cost per token). Optimistic: verify batches (not the plain step)
        at the low end of their intervals."""
        table = self._verify_table(optimistic, n)
        return None if table is None else table[n]

    def _verify_table(self, optimistic: bool, upto: int = 0) -> list[float] | None:
        """verify_cost(n) for every n from 1 to at least the longest draft + 2 (index 0
        unused), worked out once per round: each round's predictions read it many times."""
        table = self._points.get(optimistic)
        if table is None or len(table) <= upto:
            low = self._low() if optimistic else 1.0
            pts = sorted((b, v * (low if b > 1 else 1.0)) for b, v in self._verify_values().items())
            table = self._points[optimistic] = _costs_by_size(pts, max(upto, self._ladder[-1] + 2))
        return table or None

    def _verify_values(self) -> dict[int, float]:
        """The target's cost by batch size at the current level (see ``_verify``). A size not
        measured in this generation keeps the last one's cost, moved by as much as the sizes
        measured again have moved since (the median of their ratios): the last generation
        ended at a longer context than this one began, and on another spell of the machine.
        Carried from one generation to the next, such a cost must not wander off: it stays
        between the measured costs of the nearest smaller and larger sizes (a batch costs no
        less than a smaller one), and costs no more per token than a smaller one. Without that
        a plain step never measured again went from 2 ms to 0.3 s over 40 generations of
        noisy ratios, and a batch of 9 grew to twice a batch of 7's cost."""
        cached = self._points.get(None)
        if cached is not None:
            return cached
        sizes = []                      # (size, cost at the level, measured in this generation)
        moved = []                      # a measured size's cost over its carried one
        for b, smp in self._verify.items():
            v = smp.value
            if v is not None:
                sizes.append((b, v, smp.n > 0))
                if smp.n and smp.prior:
                    moved.append(v / smp.prior)
        n_measured = sum(measured for _, _, measured in sizes)
        moved.sort()
        m = len(moved)
        drift = math.sqrt(moved[(m - 1) // 2] * moved[m // 2]) if m else 1.0
        level = self._level
        out = {b: v * (level if measured else drift * level) for b, v, measured in sizes}
        if 0 < n_measured < len(sizes):
            # No less than a smaller measured batch, no more than a larger one, nor more per
            # token than a smaller one (batching only shares a step's cost): one pass up the
            # sizes, one down.
            sizes.sort()
            lo, per, bounds = 0.0, math.inf, {}
            for b, _, measured in sizes:
                if measured:
                    lo, per = max(lo, out[b]), min(per, out[b] / b)
                else:
                    bounds[b] = (lo, per * b)
            above = math.inf
            for b, _, measured in reversed(sizes):
                if measured:
                    above = min(above, out[b])
                else:
                    lo, hi = bounds[b]
                    out[b] = max(min(out[b], above, hi), lo)
        self._points[None] = out
        return out

    def _noise(self) -> float | None:
        """The relative error of the best-sampled target cost (the machine's noise), once it
        has three samples; before that, the one an earlier generation measured (None: unknown)."""
        best = max(self._verify.values(), key=lambda s: len(s.xs), default=None)
        return best.rel_se if best is not None and len(best.xs) >= 3 else self._seed_noise

    def _low(self) -> float:
        """The low end of a cost's interval as a factor of its estimate, about 95% one-sided."""
        noise = self._noise()
        return max(1.0 - _Z * (0.5 if noise is None else noise), 0.5)

    def _low_of(self, s: _Samples) -> float:
        """:meth:`_low` for a draft cost, or lower while its own samples say less: one sample
        (a round slow for reasons of its own, a spike of a busy machine) proves little."""
        low = self._low()
        kept = len(s._kept())
        if kept == 0:
            return low           # carried from the last generation
        return min(low, max(1.0 - _Z * s.rel_se, 0.5))

    def _drafting_overhead(self) -> float | None:
        """A drafting round's time beyond its decodes: its own, and its share of deciding."""
        v = self._overhead[True].value
        return None if v is None else v + (self._decide_cost or 0.0)

    def _curve(self, alpha: float | None = None, optimistic: bool = False) -> dict[int, tuple[float, float]]:
        """(expected tokens, expected seconds) of a round for every K on the ladder, in one pass
        over the draft positions; ``alpha`` replaces the measured acceptance at every position,
        ``optimistic`` takes the low end of each cost's interval. Empty until costs are known."""
        key = (alpha, optimistic)
        out = self._curves.get(key)
        if out is not None:
            return out
        out = self._curves[key] = {}
        table = self._verify_table(optimistic)
        sync = self._sync.value
        if table is None or sync is None:
            return out
        drafting = self._drafting_overhead()
        plain = self._overhead[False].value
        if plain is None:
            # No plain round measured yet (one is asked for at once, but a chain's model may
            # draft the round): the drafting rounds' own time stands in for it, so drafting
            # is charged nothing beyond its decodes rather than all of the loop's time.
            plain = drafting or 0.0
        out[0] = (1.0, table[1] + plain)
        step = (self._step.value if self._step.value is not None else sync) if self._multi else 0.0
        if optimistic:
            sync, step = sync * self._low_of(self._sync), step * self._low_of(self._step)
        fixed = self.round_extra + sync + (plain if drafting is None else drafting)
        # Per position i: cont = P(the draft goes on to i | it drafted i - 1); the acceptance
        # P(i accepted | drafted, all before accepted) is the position's own counts pulled
        # towards the pooled posterior mean. Inlined: every round builds a few curves.
        # The verify batch is priced as the mean of its cost over how many tokens get drafted,
        # not as the cost of the mean batch: a lookup drafts nothing in most rounds and a long
        # match in a few, and where a batch of two costs two plain steps but one of nine three
        # (a CPU), the cost of the mean (a batch of ~2) made every K look like a loss.
        made, tried, accepted, judged = self._made, self._tried, self._accepted, self._judged
        sc = self._pos_scale
        pool = _POSITION_PRIOR * self._succ / (self._succ + self._fail)
        ladder = self._ladder_set
        tokens, drafted = 1.0, 0.0
        p_made, p_ok = 1.0, 1.0     # P(position i drafted), P(positions 1..i all accepted)
        stopped = 0.0               # sum over j < i of P(exactly j drafted) * cost(batch j + 1)
        # P(position 1 drafted): the sync decode is the first step
        p_first = (made[1] * sc + 1.0) / (tried[1] * sc + 1.0)
        for i in range(1, self._ladder[-1] + 1):
            cont = (made[i] * sc + 1.0) / (tried[i] * sc + 1.0)
            stopped += p_made * (1.0 - cont) * table[i]
            p_made *= cont
            p_ok *= cont * ((accepted[i] * sc + pool) / (judged[i] * sc + _POSITION_PRIOR) if alpha is None else alpha)
            drafted += p_made
            tokens += p_ok
            if i in ladder:
                verify = stopped + p_made * table[i + 1]
                out[i] = (tokens, fixed + step * (drafted - p_first) + verify)
        return out

    def predict(self, k: int, alpha: float | None = None, optimistic: bool = False) -> tuple[float, float] | None:
        """(expected tokens, expected seconds) of a round allowing k drafts (k on the ladder)."""
        return self._curve(alpha, optimistic).get(k)

    def rate(self, k: int) -> float | None:
        """Expected tokens per second of a round allowing k drafts (k on the ladder)."""
        pr = self._curve().get(k)
        return pr[0] / pr[1] if pr and pr[1] > 0 else None

    def speedup(self, k: int, alpha: float | None = None, optimistic: bool = False) -> float | None:
        """Predicted tok/s at draft length k over the plain target step's."""
        curve = self._curve(alpha, optimistic)
        pr, base = curve.get(k), curve.get(0)
        return pr[0] / pr[1] * base[1] if pr and base else None

    def _best(self) -> tuple[int, float]:
        """The K with the best predicted speed-up, and that speed-up (one curve read once:
        this runs every drafting round)."""
        best_k, best = self._k, 0.0
        curve = self._curve()
        base = curve.get(0)
        if not base:
            return best_k, best
        for k in self._ladder:
            pr = curve.get(k)
            s = pr[0] / pr[1] * base[1] if pr else 0.0
            if s > best * (1 + 1e-9):
                best_k, best = k, s
        return best_k, best

    def _bounds(self) -> tuple[float, float, float]:
        """(expected, optimistic, cost-only) best speed-up over K. Optimistic: acceptance at
        its upper credible bound and costs at the low end of theirs, combined as independent
        errors; cost-only: every draft accepted (no acceptance can beat it)."""
        mean, _, a_hi = beta_bounds(self._succ, self._fail)
        exp = hi = cost_only = 0.0
        curves = (self._curve(), self._curve(max(a_hi, mean)),
                  self._curve(optimistic=True),             # low costs, measured acceptance
                  self._curve(1.0, optimistic=True))
        if any(0 not in c for c in curves):
            return exp, hi, cost_only
        for k in self._ladder:
            s, sa, sc, so = (c[k][0] / c[k][1] * c[0][1] for c in curves)
            exp = max(exp, s)
            hi = max(hi, s + math.hypot(max(sa - s, 0.0), max(sc - s, 0.0)))
            cost_only = max(cost_only, so)
        return exp, hi, cost_only

    def _probe_interval(self, k: int) -> int:
        """Tokens between probes so that probing costs at most ``probe_budget`` of the time;
        sooner early in a generation, once what a probe may find (:meth:`_probe_value`) over
        the tokens so far repays its cost: then finding out soon is worth more than the
        budget. Neither lookups the target kept rejecting nor a draft model that would pay
        only if nearly every token were accepted (a draft step costing most of a target
        step) are probed early on that chance: on a CPU each such probe costs a catch-up and
        a losing round, two or three plain steps."""
        base = self._curve().get(0)   # a plain round: one token
        pr = self.predict(k)
        if not base or not pr or base[1] <= 0:
            return _PROBE_MIN
        c1 = base[1]
        catch = self._catchup if self._catchup is not None else 0.5 * (self._sync.value or 0.0)
        extra = catch * _CATCHUP_WINDOW + pr[1] - pr[0] * c1
        tokens = extra / (self.probe_budget * c1) if extra > 0 else _PROBE_MIN
        soonest = max(_PROBE_MIN, self._tokens)
        value = self._probe_value(k) if tokens > soonest else 0.0   # (else nothing is sooner)
        if value > 0.0:
            # Early: as soon as the tokens so far (a stand-in for those still to come) at the
            # saving a probe may reveal repay what the probe costs beyond plain steps.
            early = extra / (value * c1) if extra > 0 else 0.0
            tokens = min(tokens, max(soonest, early))
        return int(min(max(tokens, _PROBE_MIN), _PROBE_MAX))

    def _probe_value(self, k: int) -> float:
        """What finding out is worth: the share of a plain step per token that drafting at
        ``k`` saves where it pays, averaged over the posterior on acceptance (its normal
        approximation; nothing where drafting loses, which a probe would leave paused). A
        drafter that pays only at acceptances the evidence makes unlikely (a draft costing
        nearly a target step, which would need every token accepted) is worth little; one
        whose loss rests on a round or two is worth much."""
        mean, sd = beta_mean_sd(self._succ, self._fail)
        total = 0.0
        for z, w in _PROBE_NODES:          # from the top: the saving only falls with acceptance
            s = self.speedup(k, alpha=min(max(mean + z * sd, 0.0), 1.0)) or 0.0
            if s <= 1.0:
                break
            total += w * (1.0 - 1.0 / s)
        return total

    def _looking_is_cheap(self) -> bool:
        """Whether this is a lookup (one step, whatever K) that costs, with its round's extra
        bookkeeping, under ``_LOOK_SHARE`` of a plain round: then a paused one can look for a
        match every round while a probe is due, and probe what it finds. Next to a fast
        target step (40 us) a lookup and its bookkeeping are a large share of a round:
        looking is not free."""
        if self._multi or self._sync.value is None:
            return False
        plain = self._curve().get(0)
        if not plain:
            return False
        extra = max((self._drafting_overhead() or 0.0) - (self._overhead[False].value or 0.0), 0.0)
        return self._sync.value + extra <= _LOOK_SHARE * plain[1]

    def gate(self):
        """The per-token stop rule of a draft: an explicit p_min; for prompt lookup, else, the
        tokens a match must be expected to get accepted to pay for its place in the batch
        (:meth:`match_floors`): the lookup asks ``gate(tokens proposed, tokens expected
        accepted)``."""
        p_min = self.p_min
        if p_min > 0:
            return lambda i, top: top >= p_min
        if self.lookup:
            if self._floor_at is None or self._round - self._floor_at >= _FLOOR_ROUNDS:
                self._floors, self._floor_at = self.match_floors(), self._round
            floors = self._floors
            if floors is not None:
                last = len(floors) - 1
                return lambda n, expected: expected >= floors[min(n, last)]
        return None

    def match_floors(self) -> list[float] | None:
        """``floors[n]``: the tokens an n-token match must be expected to get accepted to break
        even: what its verify batch, the lookup and a drafting round's own time cost beyond a
        plain round, in plain rounds. Next to a GPU's verify batch a few hundredths of a
        token; on a CPU whose batch of two costs two steps, a whole token for a one-token
        match. A skipped match measures no batch, so a floor must not rest on a cost nobody
        measured (extrapolated, or one sample, maybe a graph being built): only batch sizes
        measured twice (or carried from the last generation) count, read at the low end of
        their intervals, and a batch larger than all of them is taken to cost what the
        largest does. None (no gate) until a batch beyond the plain step is known."""
        values = self._verify_values()
        low = self._low()
        pts = sorted((b, v * (low if b > 1 else 1.0)) for b, v in values.items()
                     if b == 1 or self._verify[b].n >= 2 or self._verify[b].prior is not None)
        sync = self._sync.value
        if len(pts) < 2 or pts[0][0] != 1 or sync is None:
            return None
        plain = self._overhead[False].value or 0.0
        drafting = self._drafting_overhead()
        base = pts[0][1] + plain
        if base <= 0:
            return None
        fixed = sync + self.round_extra + (plain if drafting is None else drafting)
        top = self._ladder[-1] + 1
        costs = _costs_by_size(pts, top)
        largest, dearest = pts[-1]
        for size in range(largest + 1, top + 1):
            costs[size] = dearest          # no dearer than the largest batch measured
        return [0.0] + [max((costs[n + 1] + fixed) / base - 1.0, 0.0) for n in range(1, top)]

    # -- decisions --------------------------------------------------------------------
    @property
    def k_now(self) -> int:
        """The draft length in force (0 while paused)."""
        return self._k if self.drafting else 0

    def next_k(self) -> int:
        if self._t_last is None:   # the first round's time beyond its decodes counts too
            self._t_last = self._clock()
        self.probe = False
        if not self.drafting:
            if self._since_probe >= self._probe_every:
                self.probe = True
                return max(self._k, min(_PROBE_K, self.draft_max))
            return 0
        if self._round and not self._plain_step_known():
            return 0                      # measure the plain target step (again)
        if not self._explored and self._since_resume >= _EXPLORE_AFTER:
            return self._explore()
        return self._k

    def _explore(self) -> int:
        """Once a generation: the K (other than the one in force) predicted fastest among
        those whose verify batch this generation has not measured, when it is predicted
        within ``_EXPLORE_GAP`` of the K in force; else the K in force. A carried cost moves
        with the sizes measured again, so without a measurement of its own it wanders, and a
        K it makes look slow is never drafted to find out: a pair that pays at K=8 stayed at
        K=5 for good once noise had made a batch of 9 look dear."""
        self._explored = True
        k_now = self._k
        if not self._multi:       # a lookup's batch follows its match, not K
            return k_now
        now = self.speedup(k_now)
        best_k, best = k_now, 0.0
        for k in self._ladder:
            s = self._verify.get(k + 1)
            if k != k_now and (s is None or not s.n):
                sp = self.speedup(k) or 0.0
                if sp > best:
                    best_k, best = k, sp
        return best_k if now and best >= now * (1.0 - _EXPLORE_GAP) else k_now

    def _plain_step_known(self) -> bool:
        """Whether the plain step is measured well enough not to spend a round on it now: once
        it is known, a plain step (it costs what drafting would have gained in its time) comes
        only as often as keeps those costs under a small share of the time."""
        s = self._verify.get(1)
        if s is None or (s.n == 0 and s.prior is None):
            return False
        if self._overhead[False].value is None and self._overhead[True].value is not None:
            # A drafting round's time beyond its decodes is known but a plain round's is not
            # (a lookup's misses measure the target's plain decode, not a plain round): one
            # plain round tells what drafting adds to the loop's own time.
            return False
        if s.n and s.prior is None and len(s.xs) < _WINDOW and s.value > _SPIKE * self._cheapest_batch():
            # A plain step dearer than a measured batch of several tokens is a spike (the
            # process descheduled mid-decode) that a few samples cannot trim away: believed,
            # it made every drafted token look like a gain and a refresh look too dear to take
            # (a draft 20x the target drafted ~70 rounds). Measure it again.
            return False
        if (self._steady or self._lazy) and self._every is not None:
            return self._since_plain < self._every   # no decision last round: as the last one worked out
        self._every = None
        curve = self._curve()
        best = curve.get(self._k)
        if not best:
            return True
        tokens, seconds = best
        lost = max(curve[0][1] - seconds / tokens, 0.0)   # a plain round instead of a drafted token
        if s.n == 0 and lost < _SEEDED_CHECK * curve[0][1]:
            # Only the last generation's plain step, moved by the drift of the sizes measured
            # again (which need not move alike), and a gain too small to be sure of: one
            # plain step now costs next to nothing and may turn the decision.
            self._every = 0.0
            return False
        if s.n == 0 and self._round < _REFRESH_MIN:
            return True   # a refresh the carried round count makes due waits for a few rounds
        budget = _REFRESH_FIRST if s.n < 3 and s.prior is None else _REFRESH_BUDGET
        every = lost / (budget * seconds) if seconds > 0 else _REFRESH_MIN
        self._every = min(max(every, _REFRESH_MIN), _REFRESH_MAX)
        return self._since_plain < self._every

    def _cheapest_batch(self) -> float:
        """The lowest measured cost of a verify batch larger than one (inf: none measured)."""
        return min((v.value for b, v in self._verify.items() if b > 1 and v.n), default=math.inf)

    def _count_round(self, r: Step, own: bool = True) -> None:
        """Every round: the tokens it emitted, what its target decode cost, and its time
        outside the decodes (``own``: this policy's drafter drafted it, if anyone did)."""
        now = self._clock()
        if self._t_last is not None:
            # (the last decision is timed apart: _learn_decide)
            rest = max(now - self._t_last - r.draft_seconds - r.verify_seconds - self._decided, 0.0)
            if r.k == 0:
                self._overhead[False].add(rest)
            elif own and r.draft_steps > 0:
                self._overhead[True].add(rest)
        self._t_last = now
        self._decided = 0.0
        self._round += 1
        self._tokens += r.emitted
        samples = self._verify.get(r.verify_batch)
        if samples is None:
            samples = self._verify[r.verify_batch] = _Samples()
        elif samples.n >= 2:
            # (a size's first sample may be a new graph being built: it moves nothing)
            ratio = r.verify_seconds / (samples.value * self._level)
            self._level *= min(max(ratio, 0.5), 2.0) ** _LEVEL_RATE
        samples.add(r.verify_seconds / self._level)
        self._points, self._curves = {}, {}

    def opening_note(self) -> str | None:
        note, self._note = self._note, None
        return note

    def quiet_rounds(self) -> int:
        """While paused: the rounds before the next one measured (and the one before it, which
        starts its clock) or the next probe. Each plain round emits at most one token, so the
        probe cannot be passed by."""
        if self.drafting:
            return 0
        every = self._sample_every
        nxt = (self._round + 1) % every
        quiet = every - 1 - nxt if nxt else 0
        return max(min(quiet, self._probe_every - self._since_probe - 1), 0)

    def passed(self, rounds: int, tokens: int) -> None:
        self._round += rounds
        self._tokens += tokens
        self._since_probe += tokens
        self._t_last = None

    def _count_paused(self, r: Step, own: bool = True) -> None:
        """A round while paused: counted, and one in ``_sample_every`` measured (timed from
        the round before it). Next to a fast target step the bookkeeping of every round
        would be a cost of its own; the costs measured stay plenty for the next probe. Which
        rounds go by the round count, which both policies of a chain share: their quiet
        rounds (:meth:`quiet_rounds`) coincide."""
        every = self._sample_every
        due = (self._round + 1) % every
        if due == 0:
            self._count_round(r, own)
            self._paused_sampling()
            return
        self._round += 1
        self._tokens += r.emitted
        # The next round is timed from here if it is the measured one; a probe from its next_k.
        self._t_last = self._clock() if due == every - 1 else None

    def _paused_sampling(self) -> None:
        """How often a paused policy measures a round: one in ``_PAUSED_SAMPLE``, or fewer
        where that would cost more than ``_SAMPLE_SHARE`` of the time. A measured round's
        bookkeeping (it and the round before it ask and tell the policy: ~50 us of Python
        between two CPU decodes, and the weights it evicts, which the next decode reads again)
        was 1.5-3% of the losing pair's 40 us rounds at one in 32; a real model's step is
        hundreds of times longer. A power of two times 32, so a chain's two policies, which
        share the rounds, measure the same ones (the rarer one's a subset of the other's)."""
        c1 = self.verify_cost(1)
        every = _PAUSED_SAMPLE
        if c1:
            plain = c1 + (self._overhead[False].value or 0.0)
            while every < _PAUSED_SAMPLE_MAX and every * _SAMPLE_SHARE * plain < _SAMPLE_SECONDS:
                every *= 2
        self._sample_every = every

    def observe_other(self, r: Step) -> str | None:
        """A round another drafter (of a chain) drafted, or a plain step: only the target's
        cost, and the tokens that went by (towards the next probe while paused). Decisions
        wait for this drafter's own rounds, which alone bring new evidence about it. Returns
        a sentence still unsaid (a seeded pause)."""
        if not self.drafting:
            self._since_probe += r.emitted
            self._count_paused(r, own=False)
            note, self._note = self._note, None
            return note
        self._count_round(r, own=False)
        if r.verify_batch == 1:
            self._since_plain = 0
            self._lazy = False   # a plain step changes when the next one is due: worked out again
        else:
            # Another drafter's round decided nothing here: when the next plain step is due
            # stands as last worked out, as after a lookup's miss (a chain's lookups beside a
            # model that drafts every round had worked it out every round, ~20 us).
            self._lazy = True
        note, self._note = self._note, None
        return note

    def observe(self, r: Step) -> str | None:
        """Learn from a finished round; return a sentence when drafting turns on or off."""
        if not self.drafting and (not r.probe or (r.drafted == 0 and self._looking_is_cheap())):
            # Paused between probes: nothing to decide. A cheap lookup's probe that found
            # nothing says nothing about its proposals: the probe stays due (the next round
            # looks again) instead of counting as one that failed.
            self._since_probe += r.emitted
            self._count_paused(r)
            note, self._note = self._note, None
            return note
        self._count_round(r)
        if r.verify_batch == 1:
            self._since_plain = 0
        elif self.drafting:
            self._since_plain += 1
        if r.k > 0 and r.draft_steps > 0:
            self._draft_rounds += 1
            self._learn_draft_costs(r)
            self._learn_acceptance(r)
            if self.drafting:
                self._since_resume += 1
        note, self._note = self._note, None
        if self._steady:
            # Drafting at a settled K with a clear gain: this round only learns. Working out the
            # predictions (~20 us of Python, several times that between two CPU decodes, which
            # evict its data from the caches) every round changed nothing here; a turn for the
            # worse is seen a few rounds later, well before the evidence could pause drafting.
            self._steady -= 1
            self._learn_decide(0.0)
            return note
        if self.lookup and self.drafting and r.drafted == 0 and not r.probe and r.k > 0:
            # A drafting lookup that found nothing (most of its rounds, where the answer does
            # not repeat its context) brings a plain step's cost and one more miss: decisions
            # wait for a match, or for _MISS_ROUNDS misses, which the decision after them reads
            # all together. Deciding at every miss cost a near break-even lookup more
            # (~90 us a round between CPU decodes) than its matches gained.
            self._misses += 1
            if self._misses < _MISS_ROUNDS:
                self._lazy = True
                self._learn_decide(0.0)
                return note
        self._misses = 0
        self._lazy = False
        if self._sync.value is None or self.verify_cost(1) is None:
            return note   # nothing to decide yet
        t0 = self._clock()
        out = self._decide(r, note)
        self._decided = self._clock() - t0
        self._learn_decide(self._decided)
        return out

    def _learn_decide(self, seconds: float) -> None:
        """What deciding costs a drafting round, on average over the rounds that decide and
        those that only learn. It is timed apart from the round's other time beyond its
        decodes (a plain round's decision is not what a plain round costs the target alone,
        and a decision taken every few rounds is not a spike to trim away): a drafting round
        costs its own time plus this, a plain round its own time."""
        self._decide_cost = _ema(self._decide_cost, seconds, _DECIDE_RATE)

    def _decide(self, r: Step, note: str | None) -> str | None:
        """The decision after a round: K, and whether to pause or resume; a sentence when
        drafting turns on or off (else ``note``)."""
        was = self.drafting
        if was:
            k_best, s_best = self._best()
            k_was = self._k
            s_now = self.speedup(k_was) or 0.0
            if k_best != k_was and s_best > s_now * (1 + _MOVE_MARGIN):
                self._k = k_best
                s_now = s_best
            self.predicted_speedup = s_now
            # The optimistic bound is above the expected speed-up: only a loss expected at
            # every K needs it worked out.
            hi, cost_only = self._bounds()[1:] if s_best < 1.0 else (s_best, s_best)
            # Acceptance alone needs a few fresh rounds; costs alone need two drafting rounds
            # (a first round may be slow for reasons of its own).
            pause = hi < 1.0 and (self._since_resume >= _MIN_AFTER_RESUME
                                  or (cost_only < 1.0 and self._draft_rounds >= 2))
            # A pair near break-even: once enough fresh rounds say drafting loses on average,
            # pause even short of 95% (probes can bring it back; resuming needs a clear gain,
            # so the two thresholds do not make it flap). A clearer loss needs fewer rounds
            # (the estimate's noise falls as the square root of them): 10% after four.
            n = self._since_resume
            pause = pause or (n >= _MIN_AFTER_RESUME and
                              s_best < 1.0 - _EXPECTED_LOSS * max(1.0, math.sqrt(_EXPECTED_ROUNDS / n)))
            if (not pause and k_best == k_was and s_now >= 1.0 + _STEADY_GAIN
                    and n >= _MIN_AFTER_RESUME and self._explored):
                self._steady = _STEADY_ROUNDS
        else:
            k_best, s_best = self._best()
            self.predicted_speedup = s_best
            pause = not r.probe or s_best <= 1.0 + _RESUME_MARGIN
        if pause and self.can_pause:
            if was:
                self.pauses += 1
                self._k = k_best
                self._probe_every = self._probe_interval(max(k_best, min(_PROBE_K, self.draft_max)))
                self._since_probe = 0
                self._last_probe_speedup = self.predicted_speedup
            elif r.probe:
                gap = self._probe_interval(max(k_best, min(_PROBE_K, self.draft_max)))
                if s_best > self._last_probe_speedup * 1.01:
                    self._probe_every = gap     # the evidence is improving: look again soon
                else:
                    cap = max(_PROBE_MIN, min(_PROBE_BACKOFF_MAX, self._tokens))
                    self._probe_every = max(gap, min(self._probe_every * 2, cap))
                self._since_probe = 0
                self._last_probe_speedup = s_best
                self._k = k_best
            self.drafting = False
            self._paused_sampling()
            self._reason = self._explain(self._k, self.predicted_speedup, paused=True)
        else:
            if not was:
                self._k = k_best
                self._last_probe_speedup = 0.0
                self._thin()             # keep what the probes said, but let fresh rounds decide
            self.drafting = True
            self._reason = None          # worded when asked for (most rounds nobody asks)
        if was != self.drafting:
            return self.reason
        return note

    @property
    def reason(self) -> str:
        """The latest reasoning, in plain words."""
        if self._reason is None:
            self._reason = self._explain(self._k, self.predicted_speedup, paused=not self.drafting)
        return self._reason

    def _learn_draft_costs(self, r: Step) -> None:
        if r.draft_steps > 1:
            self._multi = True
            self._step.add((r.draft_seconds - r.sync_seconds) / (r.draft_steps - 1))
        # A wait for a read alongside is no decode's cost (a chain counts it as catching up).
        sync = r.sync_seconds - r.wait_seconds
        if r.sync_tokens <= SHORT_SYNC:   # a short catch-up costs about one decode
            self._sync.add(sync if r.sync_seconds > 0 else r.draft_seconds / r.draft_steps)
        elif self._sync.value is not None:
            per = max(sync - self._sync.value, 0.0) / (r.sync_tokens - 1)
            self._catchup = _ema(self._catchup, per)

    def plain_step_seconds(self) -> float | None:
        return self.verify_cost(1)

    def one_decode_seconds(self) -> float | None:
        """What the drafter's first decode of a round costs when it has little to catch up."""
        return self._sync.value

    def _scale_positions(self, f: float) -> None:
        """Every position's counts times ``f``, kept as one factor they are read through: a
        lookup decays its 4 x 33 counts at every miss, ~40 us between two CPU decodes when
        each was multiplied. The stored counts take the factor in when it gets small."""
        scale = self._pos_scale * f
        if scale < _SCALE_FOLD:
            for arr in (self._tried, self._made, self._judged, self._accepted):
                for i in range(len(arr)):
                    arr[i] *= scale
            scale = 1.0
        self._pos_scale = scale

    def _learn_acceptance(self, r: Step) -> None:
        if self.drafting and not r.probe and r.drafted:
            self._watch(r.drafted, r.accepted)
        self._judge(r.k, r.drafted, r.accepted, _PROBE_DECAY if r.probe else _DECAY)
        if r.probe:
            self.probes += 1

    def _thin(self) -> None:
        """Keep ``_RESUME_WEIGHT`` tokens' worth of acceptance evidence, so that fresh rounds
        decide (and a few of them: counted from here, as after a resume)."""
        self._since_resume = 0
        self._shift.clear()
        n = self._succ + self._fail
        if n > _RESUME_WEIGHT:
            f = _RESUME_WEIGHT / n
            self._succ, self._fail = self._succ * f, self._fail * f
            self._scale_positions(f)
            self._curves = {}

    def _watch(self, drafted: int, accepted: int) -> None:
        """Compare the tokens a drafting round got accepted with what the evidence predicted
        for its draft (mean and variance, from each position's acceptance); when the recent
        rounds are far off, the text changed (code gave way to prose, a quote ended) and the
        evidence is thinned. Acceptance decays per round (~50), but a long easy stretch
        leaves the positions beyond the first with nothing that refutes them once drafts
        fail at the first: on decay alone, in simulation, drafting goes on for ~80 rounds
        after acceptance falls from 0.9 to 0.05."""
        accepted_at, judged, sc = self._accepted, self._judged, self._pos_scale
        pool = _POSITION_PRIOR * self._succ / (self._succ + self._fail)
        q, mean, moment = 1.0, 0.0, 0.0
        for i in range(1, min(drafted, len(judged) - 1) + 1):
            q *= (accepted_at[i] * sc + pool) / (judged[i] * sc + _POSITION_PRIOR)   # P(a >= i)
            mean += q
            moment += (2 * i - 1) * q                                       # E[a^2] = sum (2i-1) P(a >= i)
        w = self._shift
        w.append((mean - accepted, moment - mean * mean))
        off = sum(x for x, _ in w)
        var = sum(v for _, v in w)
        if abs(off) >= 2.0 and off * off > _SHIFT_Z * _SHIFT_Z * max(var, 0.25):
            self.shifts += 1
            self._steady = 0
            self._thin()

    def observe_unused(self, k: int, drafted: int, accepted: int) -> None:
        """A deterministic draft that was proposed but not verified (a chain gave the round to
        its other drafter), judged afterwards against the tokens the target emitted there:
        ``accepted`` leading tokens matched. For a one-hot draft that is what verifying it
        would have accepted, in distribution, greedy or sampled (the emitted tokens follow the
        target's distribution whoever drafted them), so the acceptance stays current while
        the drafter is not chosen. Costs and decisions wait for rounds it drafts."""
        if k > 0 and drafted > 0:
            self._judge(k, drafted, accepted, _DECAY)

    def _judge(self, k: int, drafted: int, accepted: int, decay: float) -> None:
        self._curves = {}
        self._scale_positions(decay)
        self._succ = max(self._succ * decay, 0.05)
        self._fail = max(self._fail * decay, 0.05)
        one = 1.0 / self._pos_scale     # a count of one, as stored
        for i in range(1, min(k, len(self._tried) - 1) + 1):
            if i > drafted + 1:
                break
            self._tried[i] += one
            if i <= drafted:
                self._made[i] += one
                if i <= accepted + 1:
                    self._judged[i] += one
                    if i <= accepted:
                        self._accepted[i] += one
        if drafted:
            self._succ += accepted
            self._fail += 1.0 if accepted < drafted else 0.0

    def _explain(self, k: int, speedup: float, paused: bool, seeded: bool = False) -> str:
        c1 = self.verify_cost(1) or 0.0
        cd = self._sync.value
        ratio = (cd / c1) if (c1 and cd) else 0.0
        mean, lo, hi = beta_bounds(self._succ, self._fail)
        head = (f"draft step costs {ratio:.2f} of a target step, acceptance {mean:.2f} "
                f"({lo:.2f}-{hi:.2f}); K={k} predicted {speedup:.2f}x")
        if seeded:
            head = "from the last run: " + head
        if paused:
            return f"{head}; drafting paused (next probe after {self._probe_every} tokens)"
        return head

    def acceptance(self) -> float:
        return self._succ / (self._succ + self._fail)

    def describe(self) -> str:
        pause = "" if self.can_pause else ", never paused"
        stop = f", p_min {self.p_min}" if self.p_min else ""
        return f"adaptive K in [{self.draft_min}, {self.draft_max}]{stop}{pause}"

    def estimates(self) -> dict:
        c1 = self.verify_cost(1)
        cd = self._sync.value
        exp, hi, cost_only = self._bounds() if (c1 and cd is not None) else (None, None, None)
        mean, lo, up = beta_bounds(self._succ, self._fail)
        return {
            "adaptive": True,
            "k": self.k_now,
            "drafting": self.drafting,
            "reason": self.reason,
            "seeded": self.seeded,
            "predicted_speedup": self.predicted_speedup,
            "speedup_upper_bound": hi,
            "speedup_if_all_accepted": cost_only,
            "draft_step_seconds": cd,
            "draft_next_step_seconds": self._step.value if self._multi else None,
            "target_step_seconds": c1,
            "target_step_samples": self._verify[1].n if 1 in self._verify else 0,
            "draft_cost_ratio": (cd / c1) if (c1 and cd) else None,
            "catchup_seconds_per_token": self._catchup,
            "verify_seconds_by_batch": {str(b): v for b, v in sorted(self._verify_values().items())},
            "round_seconds_beyond_decodes": {"drafting": self._drafting_overhead(),
                                             "plain": self._overhead[False].value,
                                             "deciding": self._decide_cost},
            "acceptance": mean,
            "acceptance_interval": [lo, up],
            "acceptance_recent": self.acceptance(),
            "pauses": self.pauses,
            "probes": self.probes,
            "acceptance_shifts": self.shifts,
            "probe_every_tokens": self._probe_every,
            "paused_rounds_per_measured": self._sample_every,
        }
