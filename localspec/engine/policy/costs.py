"""What rounds cost: the target's decode by batch size, the drafter's decodes, the loop.

Each cost is a window of recent samples with a robust mean. The target's sizes share a
*level* that follows every round, so sizes not decoded lately move with the context's
growth and the machine's mood instead of keeping an old price.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque

from .params import Params


class Samples:
    """Recent samples of one cost (``window`` of them): a robust mean, worked out once per
    sample (it is read many times a round), and its relative error when first read after one;
    ``prior`` (an earlier generation's value) stands in until a sample arrives.

    Attributes:
        n: samples ever added; n_used: how many the mean reads (see :meth:`add`), n_kept: of
            them, how many it averages (the outer quarters left out).
        rel_sd: one sample's relative error, as the mean reads them; rel_se: the mean's
            (0.5, little is known, below two kept).
    """

    __slots__ = ("xs", "n", "prior", "_sorted", "mean", "n_used", "n_kept", "_kept", "_rel_sd")

    def __init__(self, window: int, prior: float | None = None):
        self.xs: deque[float] = deque(maxlen=window)
        self.n = self.n_used = self.n_kept = 0
        self.prior = prior
        self._sorted: list[float] = []
        self.mean: float | None = None
        self._kept: list[float] = []
        self._rel_sd: float | None = 0.0

    def add(self, x: float) -> None:
        """One sample. The mean leaves out the very first (maybe a graph being built) while it
        is in the window and not alone, and the outer quarters (a busy machine's spikes)."""
        x = max(x, 0.0)
        if len(self.xs) == self.xs.maxlen:
            del self._sorted[bisect_left(self._sorted, self.xs[0])]
        self.xs.append(x)
        insort(self._sorted, x)
        self.n += 1
        xs = self._sorted
        if self.n == len(self.xs) >= 2:
            xs = xs.copy()
            del xs[bisect_left(xs, self.xs[0])]
        q = len(xs) // 4
        kept = self._kept = xs[q:len(xs) - q] if q else xs
        self.n_used, self.n_kept = len(xs), len(kept)
        self.mean = sum(kept) / self.n_kept
        self._rel_sd = None

    @property
    def rel_sd(self) -> float:
        """From the winsorized samples (the outer quarters at the kept ones' ends): the kept
        ones' own spread reads the middle half's, about 0.4 of the noise."""
        if self._rel_sd is None:     # (``_kept`` is as the last add left it: nothing else changes it)
            kept, n, m, u = self._kept, self.n_kept, self.mean, self.n_used
            self._rel_sd = 0.0
            if n >= 2 and m > 0:
                q = (u - n) // 2
                w = [kept[0]] * q + kept + [kept[-1]] * q
                wm = sum(w) / u
                self._rel_sd = math.sqrt(sum([(v - wm) ** 2 for v in w]) / (u - 1)) * u / n / m
        return self._rel_sd

    @property
    def rel_se(self) -> float:
        return self.rel_sd / math.sqrt(self.n_used) if self.n_kept >= 2 else 0.5

    @property
    def value(self) -> float | None:
        return self.prior if self.mean is None else self.mean


def middle(ratios: list[float], empty: float) -> float:
    """The median of positive ratios (the geometric mean of the middle two), ``empty`` without any."""
    r, m = sorted(ratios), len(ratios)
    return math.sqrt(r[(m - 1) // 2] * r[m // 2]) if m else empty


def monotone(points: list[tuple[int, float, float]]) -> list[tuple[int, float]]:
    """The weighted least-squares fit of (size, seconds, weight) points that never falls with
    the size (pooling adjacent violators): noise must not make a larger batch look cheaper,
    nor, clamped to its neighbour, dearer."""
    means = [t * w / w for _, t, w in points]      # (each point alone: its block's mean)
    if all(a <= b for a, b in zip(means, means[1:])):
        return [(p[0], m) for p, m in zip(points, means)]      # nothing to pool (most rounds)
    blocks: list[list[float]] = []      # [weighted sum, weight, first index, last index]
    for i, (_, t, w) in enumerate(points):
        blocks.append([t * w, w, i, i])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, w2, _, last = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w2
            blocks[-1][3] = last
    out = []
    for s, w, first, last in blocks:
        out += [(points[i][0], s / w) for i in range(first, last + 1)]
    return out


def costs_by_size(points: list[tuple[int, float]], top: int, lone_slope: float = 0.15) -> list[float]:
    """Target seconds for every batch size 1..top (index 0 unused; [] without points) from
    (size, seconds) points sorted by size: linear between them, the nearest segment's slope
    beyond them but never more per token than the largest (batching only shares a step's
    cost); with one point, ``lone_slope`` of it more a token."""
    if not points:
        return []
    out = [0.0] * (top + 1)
    if len(points) == 1:
        b, t = points[0]
        for n in range(1, top + 1):
            out[n] = max(t * (1.0 + lone_slope * (n - b) / b), t * n / b if n < b else 0.0, 1e-9)
        return out
    (b0, t0), (b1, t1) = points[0], points[1]
    first_slope = (t1 - t0) / (b1 - b0)
    (c0, u0), (c1, u1) = points[-2], points[-1]
    last_slope = (u1 - u0) / (c1 - c0)
    j = 0
    for n in range(1, top + 1):
        if n <= b0:
            out[n] = max(t0 - first_slope * (b0 - n), t0 * n / b0, 1e-9)
        elif n >= c1:
            out[n] = min(u1 + last_slope * (n - c1), u1 * n / c1)
        else:
            while points[j + 1][0] < n:
                j += 1
            (lo, t_lo), (hi, t_hi) = points[j], points[j + 1]
            out[n] = t_lo + (t_hi - t_lo) * (n - lo) / (hi - lo)
    return out


class CostModel:
    """The measured costs of one drafter's rounds and of the target under it; tables cover
    verify batches up to ``top + 1`` (``top``: the longest draft)."""

    def __init__(self, params: Params, top: int):
        self.p = params
        self.top = top
        self.verify: dict[int, Samples] = {}       # per batch size, at level 1
        self.level = 1.0
        self.first = Samples(params.window)        # the drafter's first decode of a round (or its lookup)
        self.next = Samples(params.window)         # each further draft decode
        self.multi = False                         # the drafter decodes once per drafted token
        self.catchup: float | None = None          # seconds per extra token of a long first decode
        self.overhead = {True: Samples(params.window), False: Samples(params.window)}   # drafting, plain
        self.own = Samples(params.window)          # the policy's own time in a round it observes
        self.round_extra = 0.0                     # every drafting round's extra (a chain's catch-up)
        self.noise_prior: float | None = None
        self.lone: set[int] = set()                # carried costs that were one sample (0: the draft's)
        # A size's first decode in a generation over its second (seconds, and as a share of the
        # second), the target's and the drafter's (carried from answer to answer: a drafter gives
        # one a generation).
        self.build: tuple[deque, deque] = (deque(maxlen=params.window), deque(maxlen=params.window))
        self._tables: dict[float, list[float]] = {}
        self._noise: float | None = None
        self._ratio: float | None = None           # (cache of _value's: the re-measured sizes' move)

    def add_verify(self, batch: int, seconds: float) -> None:
        """One target decode of ``batch`` tokens took ``seconds``."""
        s = self.verify.get(batch)
        if s is None:
            s = self.verify[batch] = Samples(self.p.window)
        elif s.n == 1:
            x = seconds / self.level
            self.build[0].append((s.xs[0] - x, (s.xs[0] - x) / x if x > 0 else 0.0))
        elif s.n >= 2:   # (a size's first sample may be a graph being built: it moves nothing)
            ratio = seconds / (s.value * self.level)
            self.level *= min(max(ratio, 0.5), 2.0) ** self.p.level_rate
        s.add(seconds / self.level)
        self._tables, self._noise, self._ratio = {}, None, None

    def add_draft(self, steps: int, seconds: float, first_seconds: float, first_tokens: int) -> None:
        """A round's draft: ``steps`` decodes in ``seconds``, the first of ``first_tokens``."""
        if steps > 1:
            self.multi = True
            self.next.add((seconds - first_seconds) / (steps - 1))
        if first_tokens <= self.p.short_sync:
            x = first_seconds if first_seconds > 0 else seconds / steps
            if self.first.n == 1:
                self.build[1].append((self.first.xs[0] - x, (self.first.xs[0] - x) / x if x > 0 else 0.0))
            self.first.add(x)
        else:
            self.add_catchup(first_tokens, first_seconds)
        self._tables = {}

    def add_catchup(self, tokens: int, seconds: float) -> None:
        """A decode of ``tokens`` the drafter had missed (a catch-up) in ``seconds``."""
        if self.first.value is not None and tokens > 1:
            per = max(seconds - self.first.value, 0.0) / (tokens - 1)
            self.catchup = per if self.catchup is None else self.catchup + 0.2 * (per - self.catchup)

    def catchup_seconds(self, tokens: int) -> float | None:
        """What a catch-up decode of ``tokens`` is expected to cost; None before a draft decode."""
        first = self.first.value
        if first is None:
            return None
        per = self.catchup if self.catchup is not None else first * self.p.lone_slope
        return first + per * max(tokens - 1, 0)

    def add_overhead(self, drafting: bool, seconds: float) -> None:
        """A round's wall time beyond its decodes (the loop's own Python and its readers)."""
        self.overhead[drafting].add(seconds)
        self._tables = {}

    def add_own(self, seconds: float) -> None:
        """The policy's own time on one round (its observation and decision)."""
        self.own.add(seconds)
        self._tables = {}

    def first_extra(self) -> float:
        """What a batch size's first decode in a generation costs beyond its later ones
        (a GPU building its graph), as measured; 0 until measured."""
        return self._extra(self.build[0]) * self.level

    def _extra(self, build: deque) -> float:
        """The low third of the first-decode extras measured, two or more (one difference of
        two samples may be a spike), where the low third of them as shares of the decode they
        were measured on is ``build_min`` or more (a CPU's noise on a long decode is not); else 0."""
        if len(build) < 2:
            return 0.0
        third = len(build) // 3
        if sorted(r for _, r in build)[third] < self.p.build_min:
            return 0.0
        return max(sorted(x for x, _ in build)[third], 0.0)

    def decoded(self, batch: int) -> bool:
        """Whether this generation decoded a batch of ``batch`` tokens (its first decode is paid)."""
        s = self.verify.get(batch)
        return s is not None and s.n > 0

    def _value(self, s: Samples, draft: bool = False) -> float | None:
        """A cost: a lone first sample of this generation less the measured first-decode extra.
        The plain step, every prediction's reference, read from one sample so far is averaged
        with its carried cost moved as the sizes measured again moved: one sample three errors
        off would turn a decision alone. Carried costs of one sample (maybe a GPU building its
        graph) take no part."""
        v = s.value
        if s.n_used != 1 or v is None:
            return v
        if s.n == 1:
            extra = self._extra(self.build[1]) if draft else self._extra(self.build[0])
            v = max(v - extra, 0.25 * v) if extra else v
        if s.prior and not draft and self.p.carried_blend and s is self.verify.get(1) and 1 not in self.lone:
            if self._ratio is None:   # (not from carried costs of one sample: maybe a graph being built)
                self._ratio = middle([u.mean / u.prior for b, u in self.verify.items()
                                      if u.n_used >= 2 and u.prior and b not in self.lone], 0.0)
            v = (v + s.prior * self._ratio) / 2 if self._ratio else v
        return v

    @property
    def known(self) -> bool:
        """Whether a plain step and a draft decode are known: predictions can be made."""
        return self.first.value is not None and self.plain() is not None

    def plain(self) -> float | None:
        s = self.verify.get(1)
        v = None if s is None else self._value(s)
        return None if v is None else v * self._moved(s)

    def _moved(self, s: Samples) -> float:
        """The level, and for a cost carried from an earlier generation and not measured
        since, how far the sizes measured again have moved from theirs (their median)."""
        if s.n or not s.prior:
            return self.level
        return self.level * middle([self._value(v) / v.prior for v in self.verify.values() if v.n and v.prior], 1.0)

    def error(self, s: Samples | None) -> float:
        """A cost's relative standard error: its own samples', never below the machine's
        noise over as many samples (a few samples can agree by chance)."""
        n = 0 if s is None else s.n_used
        return self.noise() / math.sqrt(max(n, 1)) if n < 3 else max(s.rel_se, self.noise() / math.sqrt(n))

    def noise(self) -> float:
        """The relative error of one sample of the best-sampled target cost (the machine's noise)."""
        if self._noise is None:
            best = max(self.verify.values(), key=lambda s: len(s.xs), default=None)
            if best is not None and best.n_kept >= 3:
                self._noise = best.rel_sd
            else:
                self._noise = self.p.noise if self.noise_prior is None else self.noise_prior
        return self._noise

    def table(self, z: float = 0.0) -> list[float]:
        """Target seconds by batch size 1..top+1 (index 0 unused; [] until one is known); with
        ``z`` > 0, batches beyond the plain step ``z`` errors cheaper and the plain step ``z``
        errors dearer (both favour drafting)."""
        out = self._tables.get(z)
        if out is None:
            level, pts, moved = self.level, [], None
            for b, s in self.verify.items():     # (_value and _moved, inlined: every round reads this)
                v = s.prior if s.mean is None else s.mean
                if v is None:
                    continue
                carried = not s.n and bool(s.prior)     # (not measured since: moved, the same for all)
                if carried and moved is None:
                    moved = self._moved(s)
                t = (self._value(s) if s.n_used == 1 else v) * (moved if carried else level)
                pts.append((b, t * self._end(s, z, b > 1) if z else t, s.n_kept or 1))
            pts.sort()
            fit = monotone(pts) if self.p.monotone else [(b, t) for b, t, _ in pts]
            if fit and fit[0][0] == 1:   # one decode of b tokens costs no more than b plain steps
                fit = [(b, min(t, b * fit[0][1])) for b, t in fit]
            out = self._tables[z] = costs_by_size(fit, self.top + 1, self.p.lone_slope)
        return out

    def _end(self, s: Samples, z: float, low: bool = True) -> float:
        """A cost ``z`` errors below (or above) its estimate, as a factor."""
        err = self.error(s)
        return max(1.0 - z * err, 0.5) if low else min(1.0 + z * err, 1.5)

    def draft_seconds(self, z: float = 0.0) -> tuple[float, float]:
        """(first decode, each further one) of a round's draft, ``z`` errors cheaper; further
        ones cost nothing for a one-step drafter (a lookup)."""
        first = self.draft_first() or 0.0
        nxt = (self.next.value if self.next.value is not None else first) if self.multi else 0.0
        if z:
            first, nxt = first * self._end(self.first, z), nxt * self._end(self.next, z)
        return first, nxt

    def draft_first(self) -> float | None:
        """The drafter's first decode of a round (its first-decode extra taken out)."""
        return self._value(self.first, draft=True)

    def loop(self, drafting: bool) -> float:
        """A round's seconds beyond its decodes; a drafting round's includes the chain's extra
        and the policy's own time (a paused run's plain rounds skip the policy)."""
        plain, draft = self.overhead[False].value, self.overhead[True].value
        if not drafting:
            return plain if plain is not None else (draft or 0.0)
        return self.round_extra + (draft if draft is not None else (plain or 0.0)) + (self.own.value or 0.0)

    def by_size(self) -> dict[int, float]:
        """The target's decode seconds by batch size, as measured (priors until then)."""
        return {b: self._value(s) * self._moved(s) for b, s in sorted(self.verify.items()) if s.value is not None}

    @property
    def weak(self) -> bool:
        """Whether every carried drafting batch was one sample: first decodes (a GPU's graph
        being built: 5-50x the step on an H200) read as costs make drafting look dearer than
        it is. (A lone plain step only makes it look cheaper: no wrong pause.)"""
        lone = self.lone
        drafting = [b for b in self.verify if b > 1]
        return bool(drafting) and all(b in lone for b in drafting)

    def _lone(self, s: Samples, draft: bool = False) -> bool:
        """Whether a cost rests on one sample of this generation, with no first-decode extra
        measured to take out: it may be a GPU building its graph (5-50x the cost)."""
        return s.n == 1 and not self._extra(self.build[1 if draft else 0])

    def to_dict(self) -> dict:
        lone = [b for b, s in sorted(self.verify.items()) if self._lone(s)]
        lone += [0] if self._lone(self.first, True) else []
        return {"verify": {str(b): v for b, v in self.by_size().items()}, "lone": lone,
                "first_extra": [list(self.build[0]), list(self.build[1])],
                "draft_first": self.draft_first(), "draft_next": self.next.value, "multi": self.multi,
                "catchup": self.catchup, "noise": self.noise() if self.verify else None,
                "loop": [self.overhead[True].value, self.overhead[False].value, self.own.value]}

    def seed(self, d: dict) -> None:
        """Take an earlier generation's costs as priors (real samples replace them).
        Raises TypeError, ValueError or KeyError on a damaged entry."""
        verify = {int(b): float(v) for b, v in d["verify"].items() if v and float(v) > 0}
        first, nxt, catchup = (None if d.get(x) is None else float(d[x])
                               for x in ("draft_first", "draft_next", "catchup"))
        self.verify = {b: Samples(self.p.window, v) for b, v in verify.items()}
        self.lone = {int(b) for b in d.get("lone") or ()}
        self.first.prior, self.next.prior, self.catchup = first, nxt, catchup
        self.multi = bool(d.get("multi"))
        for own, xs in zip(self.build, d.get("first_extra") or ()):
            own.extend((float(x), float(r)) for x, r in xs)
        noise = d.get("noise")
        if isinstance(noise, (int, float)) and 0.0 <= noise < 0.5:
            self.noise_prior, self._noise = float(noise), None
        loop = d.get("loop") or [None, None]
        for own, v in zip((self.overhead[True], self.overhead[False], self.own), loop):
            if isinstance(v, (int, float)) and 0.0 <= v < 1.0:
                own.prior = float(v)
        self._tables, self._ratio = {}, None
