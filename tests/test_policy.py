"""The adaptive drafting policy on synthetic measurements."""

import pytest

from localspec.engine.events import Step
from localspec.engine.policy import AdaptivePolicy, FixedPolicy
from localspec.errors import BadInput


def simulate(policy, *, target_step, draft_step, accept, per_token_verify, rounds=200,
             catchup_per_token=0.0, log=None):
    """Feed the policy rounds whose costs and acceptance follow a simple model.

    ``accept`` is a number or a function of the token count so far; ``log`` collects
    (k, seconds, emitted, probe) per round.
    """
    import random

    rnd = random.Random(0)
    ks = []
    tokens = 0
    behind = 0   # tokens the draft has not seen (it only reads while drafting)
    for _ in range(rounds):
        k = policy.next_k()
        probe = policy.probe
        ks.append(k)
        drafted = k
        rate = accept(tokens) if callable(accept) else accept
        a = 0
        while a < drafted and rnd.random() < rate:
            a += 1
        sync_tokens = min(behind + 1, 32) if drafted else 0
        sync_s = (draft_step + catchup_per_token * (sync_tokens - 1)) if drafted else 0.0
        draft_s = sync_s + draft_step * max(drafted - 1, 0)
        verify_s = target_step * (1 + per_token_verify * drafted)
        policy.observe(Step(
            index=len(ks) - 1, k=k, drafted=drafted, accepted=a, emitted=a + 1, draft_seconds=draft_s,
            verify_seconds=verify_s, drafting=policy.drafting, draft_steps=drafted, verify_batch=drafted + 1,
            probe=probe, sync_tokens=sync_tokens, sync_seconds=sync_s))
        behind = 0 if drafted else behind + a + 1
        tokens += a + 1
        if log is not None:
            log.append((k, draft_s + verify_s, a + 1, probe))
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


def test_resumes_when_text_gets_easy():
    """Hard text pauses drafting; when the text turns easy, a probe brings drafting back soon."""
    p = AdaptivePolicy(1, 8, p_min=0.0)
    log = []
    simulate(p, target_step=0.030, draft_step=0.0015, per_token_verify=0.05, rounds=1200, log=log,
             accept=lambda tokens: 0.05 if tokens < 1000 else 0.95)
    tokens, resumed_at = 0, None
    for k, _, emitted, probe in log:
        if tokens >= 1000 and k > 0 and not probe and resumed_at is None:
            resumed_at = tokens
        tokens += emitted
    assert p.pauses >= 1
    assert resumed_at is not None and resumed_at - 1000 <= 300, resumed_at
    assert p.drafting


def test_probing_costs_little_when_drafting_never_pays():
    """An expensive draft: after the first rounds, probes cost under 3% of the time."""
    p = AdaptivePolicy(1, 8, p_min=0.0)
    log = []
    step = 0.016
    simulate(p, target_step=step, draft_step=0.010, catchup_per_token=0.0037, accept=0.9,
             per_token_verify=0.35, rounds=3000, log=log)
    after = log[10:]
    total = sum(t for _, t, _, _ in after)
    lost = sum(t - e * step for k, t, e, _ in after if k > 0)
    assert p.probes >= 2, "it keeps probing"
    assert lost / total < 0.03, lost / total
    assert sum(1 for k, *_ in after if k > 0) < 0.02 * len(after)


def test_fixed_and_bad_values():
    assert FixedPolicy(5).next_k() == 5
    with pytest.raises(BadInput):
        AdaptivePolicy(4, 2)
    with pytest.raises(BadInput):
        AdaptivePolicy(0, 2)
