"""The adaptive drafting policy on synthetic measurements."""

import pytest

from localspec.engine.policy import AdaptivePolicy, FixedPolicy, RoundResult
from localspec.errors import BadInput


def simulate(policy, *, target_step, draft_step, accept, per_token_verify, rounds=200):
    """Feed the policy rounds whose costs and acceptance follow a simple model."""
    import random

    rnd = random.Random(0)
    ks = []
    for _ in range(rounds):
        k = policy.next_k()
        ks.append(k)
        drafted = k
        a = 0
        while a < drafted and rnd.random() < accept:
            a += 1
        note = policy.observe(RoundResult(
            k=k, drafted=drafted, accepted=a, draft_seconds=draft_step * drafted, draft_steps=drafted,
            verify_seconds=target_step * (1 + per_token_verify * drafted), verify_batch=drafted + 1,
            emitted=a + 1, probe=policy.probe))
    return ks


def test_cheap_accurate_draft_keeps_drafting_long():
    p = AdaptivePolicy(1, 8, p_min=0.0)
    ks = simulate(p, target_step=0.030, draft_step=0.002, accept=0.9, per_token_verify=0.05)
    assert p.drafting
    assert sum(ks[-50:]) / 50 >= 5


def test_expensive_draft_pauses_and_probes_rarely():
    p = AdaptivePolicy(1, 8, p_min=0.0)
    ks = simulate(p, target_step=0.010, draft_step=0.012, accept=0.6, per_token_verify=0.5, rounds=600)
    assert not p.drafting
    assert "drafting paused" in p.reason
    late = ks[100:]
    assert sum(1 for k in late if k > 0) / len(late) < 0.05


def test_poor_acceptance_uses_short_drafts():
    p = AdaptivePolicy(1, 8, p_min=0.0, can_pause=False)
    ks = simulate(p, target_step=0.030, draft_step=0.003, accept=0.35, per_token_verify=0.1)
    assert 1 <= sum(ks[-50:]) / 50 <= 3


def test_fixed_and_bad_values():
    assert FixedPolicy(5).next_k() == 5
    with pytest.raises(BadInput):
        AdaptivePolicy(4, 2)
    with pytest.raises(BadInput):
        AdaptivePolicy(0, 2)
