"""A draft policy's best expected rate, read off its curve: what a pair of drafts compares."""

from __future__ import annotations

from .adaptive import AdaptivePolicy


def best_rate(pol: AdaptivePolicy, alpha: float | None = None) -> float | None:
    """The highest expected tokens per second over K of ``pol`` (acceptance ``alpha`` if
    given); None until its costs are known."""
    if not pol.costs.known:
        return None
    rates = [t / s for k, (t, s) in pol.curve(alpha).items() if k > 0 and s > 0]
    return max(rates) if rates else None


def rate_after_catchup(pol: AdaptivePolicy, missed: int, rounds: int) -> float | None:
    """``pol``'s expected tokens per second over ``rounds`` rounds at its best K, its catch-up
    on the ``missed`` tokens (as measured) included; None until its costs are known."""
    if not pol.costs.known:
        return None
    curve = [v for k, v in pol.curve().items() if k > 0 and v[1] > 0]
    if not curve:
        return None
    tokens, seconds = max(curve, key=lambda v: v[0] / v[1])
    catchup = (pol.costs.catchup_seconds(missed) or 0.0) - (pol.costs.first.value or 0.0)
    return rounds * tokens / (rounds * seconds + catchup)
