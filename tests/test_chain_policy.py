"""The chain's policy: prompt lookup and the draft model each adapt and pause on their own."""

import random

import pytest

from localspec.engine.events import Step
from localspec.engine.policy import LOOKUP, MODEL, ChainPolicy, State


def simulate_chain(policy: ChainPolicy, *, target_step, model_step, model_accept, lookup_hit, lookup_accept,
                   per_token_verify=0.05, rounds=400, catchup_per_token=0.0, lookup_step=0.00005,
                   totals: dict | None = None):
    """Rounds of a chain under a simple cost model, as ChainDrafter plays them: the lookup
    (when allowed) finds a match with chance ``lookup_hit`` and drafts it unless the policy
    gives the round to the model (``lookup_first`` False: the proposal is then judged as if
    verified, and reported); on a miss the draft model drafts when allowed, else the round
    is a plain step, the lookup's round if it looked. The model's first decode catches up
    on the tokens emitted since its last round (``catchup_per_token`` each).
    ``lookup_accept``: a number, or a function of the round's index. Returns the source of
    each round ("" for a plain step nobody drafted); ``totals`` gets the tokens and the
    seconds. The policies read a simulated clock: rounds take what their decodes take."""
    rnd = random.Random(0)
    sources = []
    behind = 0
    now = [0.0]
    tokens = 0
    policy.lookup.clock = policy.model.clock = lambda: now[0]
    for i in range(rounds):
        k = policy.next_k()
        k_l, k_m = policy.k_lookup, policy.k_model
        sync_tokens = 0
        lookup_rate = lookup_accept(i) if callable(lookup_accept) else lookup_accept
        hit = bool(k_l) and rnd.random() < lookup_hit
        if hit and k_m and not policy.lookup_first:
            unused = 0
            while unused < k_l and rnd.random() < lookup_rate:
                unused += 1
            policy.lookup_unused(k_l, k_l, unused)
            hit = False
        if hit:
            source, drafted, rate, draft_s, steps, sync_s = LOOKUP, k_l, lookup_rate, lookup_step, 1, lookup_step
        elif k_m:
            source, drafted, rate, steps = MODEL, k_m, model_accept, k_m
            sync_tokens = behind + 1
            sync_s = model_step + catchup_per_token * behind
            draft_s = sync_s + model_step * (k_m - 1)
        elif k_l:   # a miss, the model paused: the lookup's round, which drafted nothing
            source, drafted, rate, draft_s, steps, sync_s = LOOKUP, 0, 0.0, lookup_step, 1, lookup_step
        else:
            source, drafted, rate, draft_s, steps, sync_s = "", 0, 0.0, 0.0, 0, 0.0
        a = 0
        while a < drafted and rnd.random() < rate:
            a += 1
        verify_s = target_step * (1 + per_token_verify * drafted)
        now[0] += draft_s + verify_s
        policy.observe(Step(index=i, k=k, drafted=drafted, accepted=a, emitted=a + 1, draft_seconds=draft_s,
                            verify_seconds=verify_s, drafting=policy.drafting, draft_steps=steps,
                            verify_batch=drafted + 1, probe=policy.probe, sync_tokens=sync_tokens,
                            sync_seconds=sync_s, source=source))
        behind = 0 if source == MODEL else behind + a + 1
        sources.append(source)
        tokens += a + 1
    if totals is not None:
        totals.update(tokens=tokens, seconds=now[0])
    return sources


def test_a_losing_draft_model_pauses_while_lookups_go_on():
    """Draft model as dear as the target: it pauses; the lookups, which pay, keep drafting.
    The model drafts only its probes (of one token, the K in force) and the few rounds a
    lucky one resumes it for."""
    p = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(p, target_step=0.020, model_step=0.018, model_accept=0.6, lookup_hit=0.4,
                             lookup_accept=0.9)
    assert not p.model.drafting and p.model.pauses >= 1
    assert p.lookup.drafting and p.lookup.pauses == 0
    late = sources[150:]
    assert late.count(LOOKUP) / len(late) > 0.25
    assert late.count(MODEL) / len(late) < 0.15         # probes, and rounds a lucky one resumes
    est = p.estimates()
    assert est["chain"] and est[MODEL]["drafting"] is False and est[LOOKUP]["drafting"] is True
    assert "draft model:" in p.reason and "paused" in p.reason


def test_a_paying_draft_model_drafts_where_lookups_find_nothing():
    p = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(p, target_step=0.020, model_step=0.001, model_accept=0.85, lookup_hit=0.05,
                             lookup_accept=0.9)
    assert p.model.drafting and p.model.pauses == 0
    assert sources[100:].count(MODEL) / len(sources[100:]) > 0.8


def test_lookups_that_lose_pause_while_the_model_drafts():
    """Lookups whose matches the target rejects cost verify time: the lookup pauses, the draft
    model (which pays) takes every round."""
    p = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(p, target_step=0.020, model_step=0.001, model_accept=0.85, lookup_hit=0.5,
                             lookup_accept=0.05, per_token_verify=0.3, rounds=600)
    assert p.model.drafting and p.lookup.speedup(p.lookup.k) < 1.0
    late = sources[200:]
    assert late.count(MODEL) / len(late) > 0.85


def test_lookups_that_find_nothing_pause_with_the_model_on_a_fast_target():
    """A target step of 0.1 ms, a lookup that costs a fifth of it and never finds anything,
    a draft model as dear as the target: like a lone lookup, the chain's lookup pauses on
    its own misses, and most rounds then cost no lookup at all."""
    p = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(p, target_step=0.0001, model_step=0.0001, model_accept=0.3, lookup_hit=0.0,
                             lookup_accept=0.9, lookup_step=0.00002, rounds=600)
    assert not p.lookup.drafting and not p.model.drafting
    late = sources[200:]
    assert late.count("") / len(late) > 0.8


def test_a_chain_is_quiet_only_while_both_its_drafters_are_paused():
    """The generator skips a chain's rounds only when neither drafter would draft them, and
    each drafter counts the rounds that went by towards its next probe."""
    p = ChainPolicy.build(1, 8, None, True)
    simulate_chain(p, target_step=0.0001, model_step=0.0001, model_accept=0.3, lookup_hit=0.0,
                   lookup_accept=0.9, lookup_step=0.00002, rounds=600)
    assert not p.lookup.drafting and not p.model.drafting
    assert p.quiet_rounds() == min(p.lookup.quiet_rounds(), p.model.quiet_rounds()) > 0
    before = (p.lookup.since_probe, p.model.since_probe, p.model.tokens)
    p.passed(3, 3)
    assert (p.lookup.since_probe, p.model.since_probe, p.model.tokens) == tuple(x + 3 for x in before)
    p.model.state = State.DRAFTING
    assert p.quiet_rounds() == 0


def test_lookup_misses_cost_nothing_next_to_a_real_target_step():
    """The same misses next to a 20 ms target step: the lookups go on, and find the rare match."""
    p = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(p, target_step=0.020, model_step=0.018, model_accept=0.3, lookup_hit=0.05,
                             lookup_accept=0.9, lookup_step=0.00001, rounds=600)
    assert p.lookup.drafting and p.lookup.pauses == 0 and not p.model.drafting
    assert sources[200:].count(LOOKUP) / len(sources[200:]) > 0.9


def test_what_a_chain_learned_seeds_the_next_one():
    first = ChainPolicy.build(1, 8, None, True)
    simulate_chain(first, target_step=0.020, model_step=0.030, model_accept=0.6, lookup_hit=0.4, lookup_accept=0.9)
    learned = first.learned()
    assert {LOOKUP, MODEL} <= set(learned)
    second = ChainPolicy.build(1, 8, None, True, learned=learned)
    assert second.lookup.seeded and second.model.seeded
    assert not second.model.drafting and second.lookup.drafting   # the losing model starts paused
    assert second.model_drafting is False


def test_a_model_round_pays_for_catching_up_on_the_lookups_tokens():
    """A draft model that pays alone, but whose every round must first decode what the
    lookups' rounds emitted at a dear batch cost: the chain counts that catch-up as part of
    a model round, and the model pauses while the lookups go on; without the catch-up cost
    the same model keeps drafting."""
    common = dict(target_step=0.020, model_step=0.004, model_accept=0.7, lookup_hit=0.6, lookup_accept=0.95,
                  rounds=500)
    cheap = ChainPolicy.build(1, 8, None, True)
    simulate_chain(cheap, catchup_per_token=0.0, **common)
    assert cheap.model.drafting and cheap.model.round_extra == 0.0
    dear = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(dear, catchup_per_token=0.015, **common)
    assert not dear.model.drafting and dear.model.round_extra > 0.03
    assert dear.lookup.drafting and sources[200:].count(LOOKUP) > 0.4 * len(sources[200:])
    seeded = ChainPolicy.build(1, 8, None, True, learned=dear.learned())
    assert seeded.model.round_extra == dear.model.round_extra


def test_a_wait_for_the_catch_up_alongside_is_the_chains_cost_not_the_drafts_decode():
    """A model round that first waited for its catch-up running alongside: the wait is part
    of what a model round costs in a chain (its catch-up), not of the draft's first decode,
    which the model's policy prices every K with."""
    chain = ChainPolicy.build(1, 8, None, True)
    for i in range(6):
        chain.next_k()
        chain.observe(Step(i, 0, 0, 0, 1, 0.0, 0.030, True))
    for i in range(6, 10):
        chain.next_k()
        wait = 0.050 if i == 8 else 0.0
        chain.observe(Step(i, 3, 3, 3, 4, 0.060 + wait, 0.036, True, draft_steps=3, verify_batch=4,
                           sync_tokens=2, sync_seconds=0.020 + wait, wait_seconds=wait, source=MODEL))
    assert chain.model.costs.first.value == pytest.approx(0.020)
    assert chain.model.round_extra > 0.005, "the wait is a model round's cost in the chain"


def _rate(policy, **kw) -> float:
    totals = {}
    simulate_chain(policy, totals=totals, **kw)
    return totals["tokens"] / totals["seconds"]


def test_lookups_that_barely_pay_leave_their_matches_to_a_model_that_pays_more():
    """Lookups that find a match every other round but are accepted little (each barely beats
    a plain step), a draft model that pays well: the model takes the rounds the lookups found
    something for, the lookups' unused proposals keep their acceptance measured, and the
    chain runs at least as fast as the draft model alone (before, each match displaced a
    model round: the chain ran ~11% slower than the model alone)."""
    common = dict(target_step=0.020, model_step=0.002, model_accept=0.85, lookup_hit=0.5, lookup_accept=0.3,
                  rounds=500)
    chain = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(chain, **common)
    late = sources[150:]
    assert late.count(MODEL) / len(late) > 0.9
    assert chain.routed > 100 and chain.lookup.drafting
    assert 0.15 < chain.lookup.acc.mean < 0.5, "unused proposals keep the lookups' acceptance current"
    alone = ChainPolicy.build(1, 8, None, True)
    alone.lookup.state = State.PAUSED          # the model alone: no lookup drafts, no probes
    alone.lookup.since_probe, alone.lookup.probe_every = -10 ** 9, 10 ** 9
    model_alone = _rate(alone, **common)
    assert _rate(ChainPolicy.build(1, 8, None, True), **common) >= 0.97 * model_alone


def test_lookups_that_pay_more_keep_their_matches_and_take_them_back():
    """The same model next to lookups that are accepted little for 200 rounds, then almost
    always (the answer starts copying its context): the model drafts the matches first, then
    the judged proposals show the lookups paying more, and the matches are theirs again."""
    chain = ChainPolicy.build(1, 8, None, True)
    sources = simulate_chain(chain, target_step=0.020, model_step=0.002, model_accept=0.85, lookup_hit=0.6,
                             lookup_accept=lambda i: 0.35 if i < 200 else 0.97, rounds=600)
    early, late = sources[80:200], sources[350:]
    assert early.count(MODEL) / len(early) > 0.85
    assert late.count(LOOKUP) / len(late) > 0.45    # ~0.6 of the rounds find a match
    assert chain.lookup.acc.mean > 0.8


def test_with_nothing_measured_a_lookups_match_drafts():
    chain = ChainPolicy.build(1, 8, None, True)
    chain.next_k()
    assert chain.lookup_first


def test_lookups_asking_for_a_plain_step_draft_while_the_model_drafts_every_round():
    """The lookups' policy asks for a plain round now and then (to measure the target's step,
    or the loop's time in a plain round, which a chain seeded by a generation that had none
    does not know); in a chain whose draft model drafts every round no round is plain, so
    the lookups waited ~100 rounds (~800 tokens) for the model's own refresh of the plain
    step. They draft as usual instead."""
    common = dict(target_step=0.020, model_step=0.0005, model_accept=0.95, lookup_hit=0.5, lookup_accept=0.99,
                  rounds=300)
    first = ChainPolicy.build(1, 8, None, True)
    simulate_chain(first, **common)
    learned = first.learned()
    learned[LOOKUP]["costs"]["loop"] = [0.0001, None]    # no plain round seen
    chain = ChainPolicy.build(1, 8, None, True, learned=learned)
    sources = simulate_chain(chain, **common)
    assert sources[5:100].count(LOOKUP) > 0.3 * 95


def _paused_one_asked(which: str, quiet: bool, **sim):
    """A chain run in which one of its drafters (``which``: "model" or "lookup") pauses:
    the rounds' sources, the rounds at which that drafter's policy was asked for a K, and
    its state at the end. ``quiet=False``: the chain asks it every round."""
    p = ChainPolicy.build(1, 8, None, True)
    pol = getattr(p, which)
    if not quiet:
        pol.quiet_rounds = lambda: 0
    asked = []
    next_k = pol.next_k
    pol.next_k = lambda: asked.append((pol.round, pol.drafting)) or next_k()
    sources = simulate_chain(p, rounds=600, **sim)
    state = (pol.drafting, pol.pauses, pol.probes, pol.round, pol.tokens, pol.since_probe, pol.probe_every)
    return sources, asked, state


def test_a_paused_draft_model_is_asked_nothing_between_its_measured_rounds():
    """Lookups that pay and a draft model as dear as the target: the model pauses, and from
    then on the chain asks it nothing in the rounds it would not measure (as the generator
    does for a whole policy: only its probes and the round before each), and only counts them towards its
    next probe. The rounds and the model's state are those of a chain that tells it every round."""
    sim = dict(target_step=0.020, model_step=0.018, model_accept=0.6, lookup_hit=0.4, lookup_accept=0.9)
    sources, asked, state = _paused_one_asked("model", True, **sim)
    every_sources, every_asked, every_state = _paused_one_asked("model", False, **sim)
    assert not state[0] and state[1] >= 1                    # paused
    assert sources == every_sources and state == every_state
    # Paused, it is asked for its probes and the round before each (a lucky probe may resume
    # it for a few rounds: it is asked every round then, as any drafting policy).
    late_paused = [r for r, drafting in asked if r >= 200 and not drafting]
    assert len(late_paused) <= 2 * state[2]
    assert len([r for r, _ in every_asked if r >= 200]) == 400


def test_paused_lookups_are_asked_nothing_between_their_measured_rounds():
    """The other way round: a draft model that pays and lookups the target rejects, on a
    fast step. The lookups pause, and the chain asks them nothing between their measured
    rounds and probes; the rounds and the lookups' state are those of a chain that tells
    them every round."""
    sim = dict(target_step=0.0004, model_step=0.00002, model_accept=0.9, lookup_hit=0.5, lookup_accept=0.0,
               lookup_step=0.0002)
    sources, asked, state = _paused_one_asked("lookup", True, **sim)
    every_sources, every_asked, every_state = _paused_one_asked("lookup", False, **sim)
    assert not state[0] and state[1] >= 1                    # paused
    assert sources == every_sources and state == every_state
    assert sources[-100:].count(MODEL) >= 90
    late = [r for r, _ in asked if r >= 200]   # the round before each probe and the probe
    assert len(late) < 0.3 * len([r for r, _ in every_asked if r >= 200])


def test_a_draft_model_that_starts_paused_says_so_before_the_first_round():
    first = ChainPolicy.build(1, 8, None, True)
    simulate_chain(first, target_step=0.020, model_step=0.018, model_accept=0.6, lookup_hit=0.4,
                   lookup_accept=0.9, rounds=300)
    assert not first.model.drafting
    p = ChainPolicy.build(1, 8, None, True, learned=first.learned())
    assert not p.model.drafting and p.model.probe_every == 1, "paused, its first probe at once (the gap fits)"
    note = p.opening_note()
    assert note and "draft model: from the last run" in note and "paused" in note
    assert p.opening_note() is None, "said once"
