"""How many tokens to draft next: a fixed K, or an adaptive choice proven in simulation.

:func:`policy_for` builds the policy a :class:`~localspec.engine.spec.RunSpec` asks for.
The adaptive one is small parts with one job each: :mod:`.params` (every tunable),
:mod:`.costs` (what rounds cost), :mod:`.acceptance` (how far drafts get accepted),
:mod:`.predict` (pure predictions), :mod:`.adaptive` (the controller and its states),
:mod:`.report` (what it says of itself) and
:mod:`.chain` (a lookup -> model chain), :mod:`.pair` (two draft models), :mod:`.layered`
(two draft models, one drafting for the other). See docs/adaptive-policy.md.
"""

from __future__ import annotations

from ..spec import DrafterKind, RunSpec
from .adaptive import SCHEMA, AdaptivePolicy, State
from .chain import CATCHUP, LOOKUP, MODEL, ChainPolicy
from .layered import LAYERED, LayeredPair
from .pair import LARGE, SMALL, PairPolicy
from .params import DEFAULT, Params
from .protocol import QUIET_ALWAYS, FixedPolicy, Policy

__all__ = ["AdaptivePolicy", "ChainPolicy", "PairPolicy", "LayeredPair", "LAYERED", "FixedPolicy", "Policy",
           "Params", "State", "DEFAULT",
           "SCHEMA", "LOOKUP", "MODEL", "CATCHUP", "SMALL", "LARGE", "QUIET_ALWAYS", "policy_for"]


def policy_for(spec: RunSpec, learned: dict | None = None, size_ratio: float | tuple | None = None) -> Policy:
    """The drafting policy for one generation of ``spec``.

    Args:
        spec: a validated RunSpec.
        learned: what an earlier generation's adaptive policy learned (:meth:`Policy.learned`).
        size_ratio: the draft model's weights over the target's on one device (see AdaptivePolicy);
            for two draft models, a (small, large) pair of them.
    Returns:
        A FixedPolicy (target alone, or a fixed K), a ChainPolicy, a LayeredPair or an AdaptivePolicy.
    """
    if not spec.speculative:
        return FixedPolicy(0)
    if not spec.adaptive:
        return FixedPolicy(spec.draft_max, spec.p_min)
    if spec.drafter is DrafterKind.MODELS:
        ratios = size_ratio if isinstance(size_ratio, tuple) else None
        return LayeredPair.build(spec.draft_min, spec.draft_max, spec.p_min, spec.can_pause, learned,
                                 size_ratios=ratios)
    if spec.drafter is DrafterKind.NGRAM_MODEL:
        return ChainPolicy.build(spec.draft_min, spec.draft_max, spec.p_min, spec.can_pause, learned,
                                 size_ratio=size_ratio)
    return AdaptivePolicy(spec.draft_min, spec.draft_max, spec.p_min, can_pause=spec.can_pause, learned=learned,
                          size_ratio=size_ratio if spec.drafter is DrafterKind.MODEL else None)
