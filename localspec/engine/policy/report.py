"""What the adaptive controller says about itself: its reason in plain words and its
estimates (``--json``, the app's gauges)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .adaptive import AdaptivePolicy


def explain(pol: AdaptivePolicy, why: str | None, paused: bool) -> str:
    """The policy's reasoning in a sentence; ``why`` leads it (a pause from the start)."""
    c1, cd = pol.costs.plain(), pol.costs.draft_first()
    mean, lo, hi = pol.acc.bounds()
    head = (f"draft step costs {cd / c1:.2f} of a target step, acceptance {mean:.2f} ({lo:.2f}-{hi:.2f}); "
            f"K={pol.k} predicted {pol.predicted_speedup:.2f}x") if c1 and cd else ""
    if why:
        head = f"{why}: {head}" if head else why
    if paused:
        when = "a probe on the next round" if pol.probe_every <= 1 else f"next probe after {pol.probe_every} tokens"
        return f"{head}; drafting paused ({when})"
    return head


def estimates(pol: AdaptivePolicy) -> dict:
    """Everything the policy measured and predicts (JSON)."""
    c, (mean, lo, up) = pol.costs, pol.acc.bounds()
    c1, cd = c.plain(), c.draft_first()
    exp, hi, cost_only = pol.bounds() if c.known else (None, None, None)
    return {"adaptive": True, "k": pol.k_now, "state": pol.state.value, "drafting": pol.drafting,
            "reason": pol.reason, "seeded": pol.seeded, "predicted_speedup": pol.predicted_speedup,
            "speedup_upper_bound": hi, "speedup_if_all_accepted": cost_only,
            "draft_step_seconds": cd, "draft_next_step_seconds": c.next.value if c.multi else None,
            "target_step_seconds": c1, "target_step_samples": c.verify[1].n if 1 in c.verify else 0,
            "draft_cost_ratio": (cd / c1) if (c1 and cd) else None, "catchup_seconds_per_token": c.catchup,
            "first_decode_extra_seconds": c.first_extra(),
            "verify_seconds_by_batch": {str(b): v for b, v in c.by_size().items()},
            "round_seconds_beyond_decodes": {"drafting": c.overhead[True].value, "plain": c.overhead[False].value,
                                             "policy": c.own.value},
            "acceptance": mean, "acceptance_interval": [lo, up], "pauses": pol.pauses, "probes": pol.probes,
            "acceptance_shifts": pol.acc.shifts, "probe_every_tokens": pol.probe_every}
