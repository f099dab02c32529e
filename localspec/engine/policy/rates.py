"""A draft policy's best expected rate, read off its curve: what a pair of drafts compares."""

from __future__ import annotations

from .adaptive import AdaptivePolicy


def _best_round(pol: AdaptivePolicy, alpha: float | None = None) -> tuple[float, float] | None:
    """(tokens, seconds) of ``pol``'s round at its best K (acceptance ``alpha`` if given); None
    until its costs are known."""
    if not pol.costs.known:
        return None
    curve = [v for k, v in pol.curve(alpha).items() if k > 0 and v[1] > 0]
    return max(curve, key=lambda v: v[0] / v[1]) if curve else None


def best_rate(pol: AdaptivePolicy, alpha: float | None = None) -> float | None:
    """The highest expected tokens per second over K of ``pol`` (acceptance ``alpha`` if
    given); None until its costs are known."""
    best = _best_round(pol, alpha)
    return best[0] / best[1] if best else None


def rate_after_catchup(pol: AdaptivePolicy, missed: int, rounds: int) -> float | None:
    """``pol``'s expected tokens per second over ``rounds`` rounds at its best K, its catch-up
    on the ``missed`` tokens (as measured) included; None until its costs are known."""
    best = _best_round(pol)
    if best is None:
        return None
    catchup = (pol.costs.catchup_seconds(missed) or 0.0) - (pol.costs.first.value or 0.0)
    return rounds * best[0] / (rounds * best[1] + catchup)
