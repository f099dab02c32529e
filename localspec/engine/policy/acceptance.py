"""How far drafts get accepted: per-position rates with their uncertainty, and shifts.

A Beta posterior on a drafted token's acceptance (recent rounds weigh more) pools every
position; each position's own counts are pulled towards it. Whether the drafter goes on to
the next position (p_min, a lookup whose match ends) is counted too. Rounds whose accepted
tokens are far off their prediction mean the text changed: the older evidence is thinned.
Evidence carried from an earlier answer stands trial at each position until it decays:
this answer's verdicts there refuting it drop it.
"""

from __future__ import annotations

import math
from collections import deque

from .params import Params


def beta_bounds(succ: float, fail: float, z: float) -> tuple[float, float, float]:
    """(mean, lower, upper) of a Beta(succ, fail), the bounds ``z`` sd away (normal
    approximation, clipped to [0, 1])."""
    n = succ + fail
    mean, sd = succ / n, math.sqrt(succ * fail / (n * n * (n + 1.0)))
    return mean, max(mean - z * sd, 0.0), min(mean + z * sd, 1.0)


def beyond(z: float) -> float:
    """1 - Φ(z): how likely an outcome ``z`` standard deviations out or more is (one-sided)."""
    return math.erfc(z / math.sqrt(2.0)) / 2.0


class AcceptanceModel:
    """Per-position acceptance of one drafter's tokens.

    Args:
        params: the policy's parameters.
        top: the longest draft.
    """

    def __init__(self, params: Params, top: int):
        self.p = params
        self.succ, self.fail = 1.0, 1.0
        n = top + 1
        # Rounds whose draft got to position i / drafted it / had it judged (i-1 accepted) /
        # accepted it: stored values times ``scale``, so decaying them all is one product.
        self.tried, self.made, self.judged, self.accepted = ([0.0] * n for _ in range(4))
        self.scale = 1.0
        self.shift: deque[tuple[float, float]] = deque(maxlen=params.shift_rounds)
        self.shifts = 0
        self.version = 0          # changes with every change of the evidence (rates are cached on it)
        self._rates: tuple = (None, None)
        self.fresh: AcceptanceModel | None = None   # this text's evidence alone, while carried evidence is on trial
        self.odds: list[float] = []                 # ... per position, how much likelier its verdicts are under it
        self.carried = 0.0                          # ... its weight, over ``scale`` [tokens]

    @property
    def mean(self) -> float:
        return self.succ / (self.succ + self.fail)

    def bounds(self) -> tuple[float, float, float]:
        return beta_bounds(self.succ, self.fail, self.p.z)

    def rates(self, alpha: float | None = None) -> tuple[list[float], list[float]]:
        """(cont, acc) per position i >= 1: P(the draft goes on to i | it drafted i-1) and
        P(i accepted | drafted, all before accepted); ``alpha`` replaces every acceptance."""
        key = (self.version, alpha)
        if self._rates[0] == key:
            return self._rates[1]
        sc, prior = self.scale, self.p.position_prior
        cont = [(m * sc + 1.0) / (t * sc + 1.0) for m, t in zip(self.made, self.tried)]
        if alpha is not None:
            acc = [alpha] * len(cont)
        else:
            acc, last = [0.0] * len(cont), self.mean   # each position pulled towards the one before it
            for i in range(1, len(cont)):
                last = acc[i] = (self.accepted[i] * sc + prior * last) / (self.judged[i] * sc + prior)
        self._rates = (key, (cont, acc))
        return cont, acc

    def judge(self, k: int, drafted: int, accepted: int, probe: bool = False) -> None:
        """A verified draft of ``drafted`` tokens (``k`` allowed): ``accepted`` leading ones kept."""
        refuted = self._try_carried(k, drafted, accepted, probe) if self.fresh is not None and drafted else []
        decay = self.p.probe_decay if probe else self.p.decay
        self.version += 1
        self._rescale(decay)
        self.succ, self.fail = max(self.succ * decay, 0.05), max(self.fail * decay, 0.05)
        one = 1.0 / self.scale
        for i in range(1, min(k, drafted + 1, len(self.tried) - 1) + 1):
            self.tried[i] += one
            if i <= drafted:
                self.made[i] += one
                if i <= accepted + 1:
                    self.judged[i] += one
                    if i <= accepted:
                        self.accepted[i] += one
        if drafted:
            self.succ += accepted
            self.fail += 1.0 if accepted < drafted else 0.0
        if self.fresh is not None:
            self._adopt(refuted)
            if self.carried * self.scale < self.p.position_prior:   # (moot now: the trial ends)
                self.fresh = None

    def _try_carried(self, k: int, drafted: int, accepted: int, probe: bool) -> list[int]:
        """Weigh each judged position's carried evidence by how likely this text's verdicts
        there are with it (its counts and this text's, pooled) and without it (this text's
        alone), each count read with a uniform prior: once the odds reach 1/beyond(trial_z) the
        evidence read another text and is dropped (:meth:`_adopt`; a few tokens' worth would
        hold the estimate for tens of rounds); once they reach the inverse, it stands.

        Returns:
            The positions whose carried evidence this round refuted (call before the update).
        """
        fresh, sc, fs, bar = self.fresh, self.scale, self.fresh.scale, beyond(self.p.trial_z)
        refuted = []
        for i in range(1, min(accepted + 1, drafted, len(self.odds) - 1) + 1):
            if self.odds[i] > 0.0:
                ok = i <= accepted
                mine = (self.accepted[i] * sc + 1.0) / (self.judged[i] * sc + 2.0)
                theirs = (fresh.accepted[i] * fs + 1.0) / (fresh.judged[i] * fs + 2.0)
                self.odds[i] *= (theirs if ok else 1.0 - theirs) / (mine if ok else 1.0 - mine)
                if self.odds[i] * bar >= 1.0:
                    refuted.append(i)
                elif self.odds[i] <= bar:
                    self.odds[i] = 0.0      # (the carried evidence stands)
        fresh.judge(k, drafted, accepted, probe)
        return refuted

    def _adopt(self, refuted: list[int]) -> None:
        """This text's own evidence in place of the carried at the ``refuted`` positions."""
        fresh = self.fresh
        f = fresh.scale / self.scale
        for i in refuted:
            for own, a in zip((self.tried, self.made, self.judged, self.accepted),
                              (fresh.tried, fresh.made, fresh.judged, fresh.accepted)):
                own[i] = a[i] * f
            if i == 1:
                self.succ, self.fail = fresh.succ, fresh.fail
            self.odds[i] = 0.0

    def _rescale(self, f: float) -> None:
        self.scale *= f
        if self.scale < 1e-60:   # fold the common factor into the counts before it underflows
            for arr in (self.tried, self.made, self.judged, self.accepted):
                arr[:] = [x * self.scale for x in arr]
            self.carried *= self.scale
            self.scale = 1.0

    def shifted(self, drafted: int, accepted: int) -> bool:
        """Whether the recent rounds' accepted tokens are so far off what the evidence
        predicted that the text has changed; if so the evidence is thinned (call before
        :meth:`judge`). Decay alone leaves the positions beyond the first unrefuted once
        drafts fail at the first, and drafting runs on long after acceptance collapsed."""
        _, acc = self.rates()
        q, mean, moment = 1.0, 0.0, 0.0
        for i in range(1, min(drafted, len(acc) - 1) + 1):
            q *= acc[i]                     # P(a >= i)
            mean += q
            moment += (2 * i - 1) * q       # E[a^2] = sum (2i - 1) P(a >= i)
        self.shift.append((mean - accepted, moment - mean * mean))
        off = sum(x for x, _ in self.shift)
        var = sum(v for _, v in self.shift)
        if abs(off) >= self.p.shift_min and off * off > self.p.shift_z ** 2 * max(var, 0.25):
            self.shifts += 1
            self.thin()
            return True
        return False

    def thin(self, weight: float | None = None, resumed: bool = False) -> None:
        """Keep ``weight`` (default ``resume_weight``) tokens' worth of evidence so that fresh
        rounds decide; ``resumed`` (by this text's verdicts): carried evidence on trial that
        read the text as harder than they do goes."""
        if resumed and self.fresh is not None and self.fresh.mean > self.mean:
            self._adopt(list(range(1, len(self.odds))))
            self.fresh, self.version = None, self.version + 1
        self.shift.clear()
        n = self.succ + self.fail
        weight = self.p.resume_weight if weight is None else weight
        if n > weight:
            f = weight / n
            self.succ, self.fail = self.succ * f, self.fail * f
            self._rescale(f)
            self.version += 1

    def to_dict(self) -> dict:
        return {"beta": [self.succ, self.fail],
                "positions": [[x * self.scale for x in a] for a in (self.tried, self.made, self.judged, self.accepted)]}

    def seed(self, d: dict) -> None:
        """An earlier generation's evidence, weighed down to ``seed_weight`` (a new prompt).

        Raises:
            TypeError, ValueError: a damaged entry.
        """
        succ, fail = (float(x) for x in d["beta"])
        f = min(1.0, self.p.seed_weight / max(succ + fail, 1e-9))
        self.succ, self.fail = max(succ * f, 0.05), max(fail * f, 0.05)
        n = len(self.tried)
        arrays = [[float(x) for x in a][:n] for a in d["positions"]]
        if len(arrays) != 4 or any(min(a, default=-1) < 0 for a in arrays):
            raise ValueError("positions")
        g = min(1.0, self.p.seed_weight / max(arrays[0][1] if len(arrays[0]) > 1 else 0.0, 1e-9))
        for own, a in zip((self.tried, self.made, self.judged, self.accepted), arrays):
            own[:len(a)] = [x * g for x in a]
        self.scale = 1.0
        self.version += 1
        if self.p.carried_trial:
            self.fresh, self.odds, self.carried = AcceptanceModel(self.p, n - 1), [1.0] * n, self.succ + self.fail
