"""The adaptive drafting policy on synthetic measurements."""

import json

import pytest

from localspec.engine.events import Step
from localspec.engine.policy import _PAUSED_SAMPLE, AdaptivePolicy, FixedPolicy
from localspec.errors import BadInput


def simulate(policy, *, target_step, draft_step, accept, per_token_verify, rounds=200,
             catchup_per_token=0.0, log=None, lookup_hit=None, overhead=None, batch_cost=None,
             decide_cost=0.0):
    """Feed the policy rounds whose costs and acceptance follow a simple model.

    ``accept`` and ``target_step`` are numbers or functions of the token count so far (the
    context grows: so do the target's costs); ``log`` collects
    (k, seconds, emitted, probe) per round. With ``lookup_hit`` the drafter is an n-gram
    lookup: one cheap step (``draft_step``) that finds a k-token match with that chance.
    The policy reads a simulated clock: a round takes its decodes' time plus ``overhead``,
    (drafting, plain) seconds beyond them (none unless given). ``batch_cost(n)``: a verify
    batch of n in plain steps (else ``1 + per_token_verify * (n - 1)``). ``decide_cost``:
    seconds each of the policy's decisions takes on the clock (its Python between two CPU
    decodes, which have evicted it from the caches).
    """
    import random

    rnd = random.Random(0)
    now = [0.0]
    overhead = overhead or (0.0, 0.0)
    policy._clock = lambda: now[0]
    if decide_cost:
        decide = policy._decide

        def deciding(r, note):
            now[0] += decide_cost
            return decide(r, note)

        policy._decide = deciding
    ks = []
    tokens = 0
    behind = 0   # tokens the draft has not seen (it only reads while drafting)
    for _ in range(rounds):
        k = policy.next_k()
        probe = policy.probe
        ks.append(k)
        drafted = k
        if lookup_hit is not None and rnd.random() >= lookup_hit:
            drafted = 0
        rate = accept(tokens) if callable(accept) else accept
        a = 0
        while a < drafted and rnd.random() < rate:
            a += 1
        if lookup_hit is not None:
            sync_tokens, steps = 0, 1 if k else 0
            sync_s = draft_s = draft_step if k else 0.0
        else:
            sync_tokens, steps = (min(behind + 1, 32) if drafted else 0), drafted
            sync_s = (draft_step + catchup_per_token * (sync_tokens - 1)) if drafted else 0.0
            draft_s = sync_s + draft_step * max(drafted - 1, 0)
        step_s = target_step(tokens) if callable(target_step) else target_step
        verify_s = step_s * (batch_cost(drafted + 1) if batch_cost else 1 + per_token_verify * drafted)
        now[0] += draft_s + verify_s + overhead[0 if k and steps else 1]
        policy.observe(Step(
            index=len(ks) - 1, k=k, drafted=drafted, accepted=a, emitted=a + 1, draft_seconds=draft_s,
            verify_seconds=verify_s, drafting=policy.drafting, draft_steps=steps, verify_batch=drafted + 1,
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
    drafting = [k for k in ks[-50:] if k]   # less the plain steps that refresh the target's cost
    assert len(drafting) >= 45
    assert 1 <= sum(drafting) / len(drafting) <= 3


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


def test_one_bad_first_round_does_not_pause():
    """The issue's case: nothing accepted in the first round of a pair where drafting pays.
    A moderate first draft, no pause on one round's evidence, and drafting all along."""
    p = AdaptivePolicy(1, 8)
    log = []
    simulate(p, target_step=0.030, draft_step=0.006, per_token_verify=0.05, rounds=60, log=log,
             accept=lambda tokens: 0.0 if tokens == 0 else 0.77)
    assert log[0][0] <= 4, "the first round drafts a moderate length, not the maximum"
    assert log[0][2] == 1, "the scripted first round had nothing accepted"
    assert p.pauses == 0 and p.drafting
    assert sum(1 for k, *_ in log if k > 0) >= 0.9 * len(log)


def test_one_slow_draft_decode_does_not_pause_a_draft_that_pays():
    """The draft's first decode of a round, slow once (a spike of a busy machine, a wait for a
    read alongside taken for a decode): one sample of a cost proves little, so drafting goes
    on; the same cost measured again and again does pause it. Drafting pays here (all
    accepted, each draft decode 2/3 of a target step; a chain's lookups have measured the
    target's plain step well before the draft model's first round)."""
    def run(syncs):
        p = AdaptivePolicy(1, 8)
        for i in range(12):
            p.observe_other(Step(i, 0, 0, 0, 1, 0.0, 0.030 * (1 + 0.02 * (i % 3)), True))
        for i in range(12, 40):
            k = p.next_k()
            if k == 0:
                p.observe(Step(i, 0, 0, 0, 1, 0.0, 0.030, p.drafting))
                continue
            sync = syncs[min(p._draft_rounds, len(syncs) - 1)]
            draft = sync + 0.020 * (k - 1)
            p.observe(Step(i, k, k, k, k + 1, draft, 0.030 * (1 + 0.05 * k), True, draft_steps=k,
                           verify_batch=k + 1, sync_tokens=2, sync_seconds=sync))
        return p

    assert run([0.020, 0.120, 0.020]).pauses == 0, "one slow sample"
    assert run([0.020, 0.120]).pauses >= 1, "slow every time: the draft's first decode loses"


def test_resume_followed_by_noise_keeps_drafting():
    """Hard text pauses drafting; once a probe brings it back, two bad rounds right after the
    resume do not pause it again (the evidence is reset, fresh rounds decide)."""
    p = AdaptivePolicy(1, 8)
    state = {"was": True, "bad": 0, "resumes": 0, "pauses_at_resume": None}

    def accept(tokens):
        if tokens < 400:
            return 0.05
        if not state["was"] and p.drafting:       # the last round resumed drafting
            state["bad"] = 2
            state["resumes"] += 1
            state["pauses_at_resume"] = state["pauses_at_resume"] or p.pauses
        state["was"] = p.drafting
        if state["bad"]:
            state["bad"] -= 1
            return 0.0
        return 0.9

    # Long enough for a second probe after the text gets easy (one probe may draw a miss).
    simulate(p, target_step=0.030, draft_step=0.0015, per_token_verify=0.05, rounds=800, accept=accept)
    assert state["resumes"] == 1, state
    assert p.pauses == state["pauses_at_resume"], "no pause after the resume"
    assert p.drafting


def test_short_hard_start_is_probed_soon():
    """Early in a generation probes come soon: a hard first stretch does not cost the answer."""
    p = AdaptivePolicy(1, 8)
    log = []
    simulate(p, target_step=0.030, draft_step=0.0015, per_token_verify=0.05, rounds=120, log=log,
             accept=lambda tokens: 0.0 if tokens < 30 else 0.9)
    tokens, resumed_at = 0, None
    for k, _, emitted, probe in log:
        if tokens >= 30 and k > 0 and not probe and resumed_at is None:
            resumed_at = tokens
        tokens += emitted
    assert resumed_at is not None and resumed_at <= 90, resumed_at


def test_lookups_the_target_keeps_rejecting_are_not_probed_early():
    """Early probes are for a drafter that could plausibly pay: lookups that always find a
    match the target rejects, on a CPU where each token in a verify batch costs 60% of a
    step, pause and are probed at the budget's pace (the first after ~125 tokens), not at
    the tokens so far (13, 28, 58...: each probe cost three plain steps for one token)."""
    p = AdaptivePolicy(1, 8)
    log = []
    simulate(p, target_step=0.012, draft_step=0.00005, accept=0.02, per_token_verify=0.6, lookup_hit=1.0,
             rounds=300, log=log)
    tokens, probes = 0, []
    for _k, _, emitted, probe in log:
        if probe:
            probes.append(tokens)
        tokens += emitted
    assert not p.drafting and p.pauses == 1
    assert probes and probes[0] >= 100 and len(probes) <= 3, probes


def test_ngram_drafter_that_loses_pauses():
    """Prompt lookup costs next to nothing, but verifying its poor guesses costs target time:
    the policy learns that from the lookups it sees, pauses, and probes rarely."""
    p = AdaptivePolicy(1, 8)
    log = []
    simulate(p, target_step=0.020, draft_step=0.00005, per_token_verify=0.3, accept=0.1, lookup_hit=0.6,
             rounds=600, log=log)
    assert p.pauses >= 1 and not p.drafting
    est = p.estimates()
    assert est["draft_cost_ratio"] < 0.01 and est["acceptance"] < 0.3
    late = log[100:]
    assert sum(1 for k, *_ in late if k > 0) / len(late) < 0.1


def test_rounds_that_cost_more_than_their_decodes_say_are_counted():
    """Next to a fast target step (0.1 ms) the loop's own time decides: lookups that cost
    5 us by their own clock but 150 us more a round than a plain round in all (the loop's
    Python) lose, though their decodes alone say they pay; next to a 20 ms step the same
    150 us is noise and drafting goes on."""
    fast = AdaptivePolicy(1, 8)
    simulate(fast, target_step=0.0001, draft_step=0.000005, accept=0.5, per_token_verify=0.05,
             lookup_hit=0.5, rounds=120, overhead=(0.00018, 0.00003))
    assert not fast.drafting
    beyond = fast.estimates()["round_seconds_beyond_decodes"]
    assert beyond["drafting"] == pytest.approx(0.00018) and beyond["plain"] == pytest.approx(0.00003)
    unaware = AdaptivePolicy(1, 8)
    simulate(unaware, target_step=0.0001, draft_step=0.000005, accept=0.5, per_token_verify=0.05,
             lookup_hit=0.5, rounds=120)
    assert unaware.drafting, "by the decodes alone the lookups pay"
    slow = AdaptivePolicy(1, 8)
    simulate(slow, target_step=0.020, draft_step=0.000005, accept=0.5, per_token_verify=0.05,
             lookup_hit=0.5, rounds=120, overhead=(0.00018, 0.00003))
    assert slow.drafting


def test_ngram_drafter_that_pays_keeps_drafting():
    p = AdaptivePolicy(1, 8)
    log = []
    simulate(p, target_step=0.020, draft_step=0.00005, per_token_verify=0.05, accept=0.9, lookup_hit=0.5,
             rounds=300, log=log)
    assert p.pauses == 0 and p.drafting
    assert sum(k for k, *_ in log[-50:]) / 50 >= 4


def test_a_lookup_that_finds_long_matches_now_and_then_pays_where_a_batch_of_two_costs_two_steps():
    """On a CPU a batch of two costs about two plain steps and one of nine about three. A
    lookup that finds a match in one round of ten, accepted 90% a token, pays there at
    K=8 (1.51 tokens for 1.21 plain steps a round). Priced as the cost of the mean batch
    (~2: two steps) it looked like a loss at every K, and the lookups paused."""
    p = AdaptivePolicy(1, 8, lookup=True)
    log = []

    def cpu(n):
        return 1.0 if n == 1 else 1.9 + 0.17 * (n - 2)

    simulate(p, target_step=0.010, draft_step=0.00002, per_token_verify=0.0, accept=0.9, lookup_hit=0.1,
             rounds=400, log=log, batch_cost=cpu)
    assert p.pauses == 0 and p.drafting
    assert p.k_now == 8 and p.predicted_speedup > 1.15
    assert sum(k == 8 for k, *_ in log[-200:]) >= 180


def test_pair_with_known_costs_starts_where_the_last_run_ended():
    """A second generation seeded with the first one's measurements: a losing pair starts
    paused (and says why), a winning one drafts at the learned K with no measuring rounds."""
    first = AdaptivePolicy(1, 8)
    simulate(first, target_step=0.010, draft_step=0.5, accept=1.0, per_token_verify=0.1, rounds=40)
    assert not first.drafting
    second = AdaptivePolicy(1, 8, learned=first.learned())
    log = []
    simulate(second, target_step=0.010, draft_step=0.5, accept=1.0, per_token_verify=0.1, rounds=200, log=log)
    assert all(k == 0 for k, *_ in log), "no round spent re-learning that drafting loses"
    assert second.pauses == 1 and "from the last run" in second.reason
    assert second.estimates()["seeded"]

    win = AdaptivePolicy(1, 8)
    simulate(win, target_step=0.030, draft_step=0.002, accept=0.95, per_token_verify=0.05, rounds=200)
    learned = win.learned()
    assert learned["k"] >= 6 and learned["drafting"]
    again = AdaptivePolicy(1, 8, learned=learned)
    log = []
    simulate(again, target_step=0.030, draft_step=0.002, accept=0.95, per_token_verify=0.05, rounds=20, log=log)
    assert log[0][0] == learned["k"], "starts at the learned K"
    # the target step is known: no plain measuring rounds at once; the refresh budget holds
    # over both generations (200 drafting rounds already since the last plain step)
    assert all(k > 0 for k, *_ in log[:12]) and sum(1 for k, *_ in log if k == 0) <= 1


def test_costs_carried_over_many_generations_do_not_wander_off():
    """A pair that pays drafts K=8 in short answers: the plain step is never measured again,
    only batches of 9 (and of 3, the answer's last round). Carried over 40 generations of
    noisy ratios it had grown from 2 ms to 0.3 s, and the drafter's wait budget (a plain
    step) with it. It now stays between its measured neighbours, and a refresh the budget
    makes due comes a few rounds into a generation."""
    import random

    rnd = random.Random(1)
    learned = {"version": 1, "verify": {"1": 0.002, "3": 0.003, "9": 0.005}, "draft_sync": 0.00002,
               "draft_step": 0.00002, "multi": True, "catchup": None, "accept": [50, 1], "k": 8, "drafting": True,
               "noise": 0.05, "overhead": [0.0001, 0.0001]}
    now = [0.0]
    plain = 0
    for _ in range(40):
        p = AdaptivePolicy(1, 8, learned=learned)
        p._clock = lambda: now[0]
        for i in range(14):
            k = p.next_k()
            batch = 9 if k else 1
            v = (0.005 if k else 0.002) * rnd.uniform(0.8, 1.25)
            now[0] += v + 0.0002
            plain += not k
            p.observe(Step(i, k, min(k, 8), min(k, 8), 9 if k else 1, 0.00016 if k else 0.0, v, True,
                           draft_steps=8 if k else 0, verify_batch=batch, sync_tokens=1 if k else 0,
                           sync_seconds=0.00002 if k else 0.0))
        v = 0.003 * rnd.uniform(0.7, 1.4)
        now[0] += v
        p.observe(Step(14, 2, 2, 2, 3, 0.00004, v, True, draft_steps=2, verify_batch=3, sync_tokens=1,
                       sync_seconds=0.00002))
        learned = p.learned()
    verify = learned["verify"]
    assert 0.0015 < verify["1"] <= verify["3"] < verify["9"] < 0.007, verify
    assert 1 <= plain <= 10     # refreshed (~1 round in 60 here: ~0.4% of the time lost)


def _concave_cost(n: int) -> float:
    """A batch of n on a CPU that pays to draft: each of the first few extra tokens costs a
    quarter of a plain step, later ones half that (ms, at the start of an answer)."""
    return 2.3 + 0.6 * min(n - 1, 5) + 0.3 * max(n - 6, 0)


def _answer(p, rnd, now, tokens=128, noise=0.25) -> str:
    """One 128-token answer of a draft the target always agrees with; the context makes each
    batch dearer as it grows. The K of each round, as digits."""
    p._clock = lambda: now[0]
    ks, t = [], 0
    while t < tokens:
        k = min(p.next_k(), tokens - t - 1)
        ks.append(k)
        v = _concave_cost(k + 1) * (1 + t / 256) * rnd.uniform(1 - noise, 1 + noise) / 1000
        d = (0.02 + 0.02 * k) / 1000 if k else 0.0
        now[0] += v + d + 0.0002
        p.observe(Step(len(ks) - 1, k, k, k, k + 1, d, v, True, draft_steps=k, verify_batch=k + 1,
                       sync_tokens=1 if k else 0, sync_seconds=0.00002 if k else 0.0))
        t += k + 1
    return "".join(map(str, ks))


def test_a_draft_length_that_noise_made_look_slow_is_tried_again():
    """Carried from answer to answer, a batch of 9 had come to look 1.6x a batch of 6 (it
    costs 1.2x): the pair that pays at K=8 drafted K=5 in every answer, and nothing ever
    measured a batch of 9 again. The costs carried for it now stay at most a smaller
    batch's cost per token, and an answer tries once a K whose batch it has not measured
    when that K is predicted close to the one in force."""
    import random

    learned = {"version": 1, "verify": {"1": 0.00297, "2": 0.00451, "3": 0.00451, "4": 0.00614, "5": 0.00614,
                                        "6": 0.00614, "9": 0.00998},
               "draft_sync": 0.00002, "draft_step": 0.00002, "multi": True, "catchup": None, "accept": [100, 1],
               "k": 5, "drafting": True, "noise": 0.05, "overhead": [0.0002, 0.0002]}
    rnd, now = random.Random(1), [0.0]
    answers = []
    for _ in range(3):
        p = AdaptivePolicy(1, 8, learned=learned)
        answers.append(_answer(p, rnd, now))
        learned = p.learned()
    assert "8" in answers[0][:4], answers          # tried early in the first answer, and kept
    assert answers[0].count("8") > answers[0].count("5"), answers
    assert all(set(a[:-1]) <= {"0", "8"} for a in answers[1:]), answers
    assert learned["verify"]["9"] < 1.5 * learned["verify"]["6"]


def test_the_draft_length_does_not_settle_low_over_many_answers():
    """Sixty answers, each seeded by the last, on a pair whose best K is 8 throughout: with
    every size's cost carried and moved by noisy ratios, two starts in five had settled at
    K=6 for good (a batch of 9 carried at 2x a batch of 7)."""
    import random

    for seed in range(5):
        rnd, now, learned = random.Random(seed), [0.0], None
        answers = []
        for _ in range(60):
            p = AdaptivePolicy(1, 8, learned=learned)
            answers.append(_answer(p, rnd, now))
            learned = p.learned()
        late = "".join(answers[20:])
        assert late.count("8") / len(late) > 0.85, (seed, answers[-3:])


def test_a_carried_batch_costs_no_more_per_token_than_a_measured_smaller_one():
    p = AdaptivePolicy(1, 8, learned={"version": 1, "verify": {"1": 0.002, "7": 0.005, "9": 0.012},
                                      "draft_sync": 0.00002, "draft_step": 0.00002, "multi": True,
                                      "accept": [50, 1], "k": 6})
    p._clock = lambda: 0.0
    for i in range(3):
        p.next_k()
        p.observe(Step(i, 6, 6, 6, 7, 0.0001, 0.005, True, draft_steps=6, verify_batch=7, sync_tokens=1,
                       sync_seconds=0.00002))
    values = p._verify_values()
    assert values[9] <= values[7] * 9 / 7 + 1e-12
    assert values[9] >= values[7]


def test_a_lookup_that_found_nothing_starts_the_next_generation_paused():
    """Next to a 45 us target step, lookups that found nothing paused; the next generation
    knows how far their drafts went (not only their acceptance, which nothing judged) and
    starts paused instead of drafting a few losing rounds first. Next to a 2 ms step the
    same misses cost little: the last generation ended paused, so this one starts paused too,
    but probes early and drafts from there once the lookups find matches."""
    def first(step):
        p = AdaptivePolicy(1, 8)
        simulate(p, target_step=step, draft_step=0.000005, accept=0.9, per_token_verify=0.1, lookup_hit=0.0,
                 rounds=128, overhead=(0.0001, 0.00001))
        return p

    fast = first(0.000045)
    assert not fast.drafting
    learned = fast.learned()
    assert learned["positions"][0][1] > 0 and learned["positions"][1][1] == 0   # tried, never drafted
    assert not AdaptivePolicy(1, 8, learned=learned).drafting
    # acceptance alone, from a generation that ended drafting, is too weak to pause on
    assert AdaptivePolicy(1, 8, learned={**learned, "positions": None, "drafting": True}).drafting
    cheap = AdaptivePolicy(1, 8, learned=first(0.002).learned())
    log = []
    simulate(cheap, target_step=0.002, draft_step=0.000005, accept=0.9, per_token_verify=0.1, lookup_hit=0.9,
             rounds=40, log=log, overhead=(0.0001, 0.00001))
    assert cheap.drafting and any(k > 0 for k, *_ in log[:10])


def test_a_seeded_generation_near_break_even_measures_its_plain_step_at_once():
    """The last generation's plain step, moved by how much the batch sizes measured again
    have moved, can be wrong (here the verify batches grew dearer than the plain step did:
    it reads ~30% too dear, so drafting looks 1.2x where it loses ~5%). A seeded generation
    whose predicted gain is small measures the plain step at once, and pauses within a few
    rounds; one that gains clearly spends no round on it."""
    last = AdaptivePolicy(1, 8)
    simulate(last, target_step=0.050, draft_step=0.012, per_token_verify=0.05, rounds=100, accept=0.95)
    p = AdaptivePolicy(1, 8, learned=last.learned())
    log = []
    simulate(p, target_step=0.050, draft_step=0.045, per_token_verify=0.12, rounds=60, log=log, accept=0.9)
    assert p.pauses >= 1 and not p.drafting
    assert sum(1 for k, *_ in log if k > 0) <= 8
    pays = AdaptivePolicy(1, 8, learned=last.learned())
    log = []
    simulate(pays, target_step=0.050, draft_step=0.012, per_token_verify=0.05, rounds=30, log=log, accept=0.95)
    # a clear gain: no plain step spent at once (one may come later, the refresh budget
    # counting the last generation's rounds too)
    assert all(k > 0 for k, *_ in log[:12]) and sum(1 for k, *_ in log if k == 0) <= 1


def test_costs_learned_at_a_longer_context_move_with_the_fresh_ones():
    """The last generation ended at a long context where every target step cost 3x what it
    costs now. Seeded at K=5, only the batch of 6 is measured again; the batch of 9 must not
    keep its stale cost (it would never look worth trying), so K grows to where it pays."""
    def cost(b, level):
        return level * 0.010 * (1 + 0.3 * (b - 1))
    learned = {"version": 1, "verify": {"1": cost(1, 3), "6": cost(6, 3), "9": cost(9, 3)},
               "draft_sync": 0.0003, "draft_step": 0.0003, "multi": True, "catchup": None,
               "accept": [50.0, 1.0], "k": 5, "drafting": True, "speedup": 1.5, "noise": 0.02}
    p = AdaptivePolicy(1, 8, learned=learned)
    ks = simulate(p, target_step=0.010, draft_step=0.0003, accept=0.98, per_token_verify=0.3, rounds=60)
    assert ks[0] == 5
    late = [k for k in ks[-30:] if k]
    assert sum(k >= 6 for k in late) > 0.8 * len(late), ks
    assert p.verify_cost(9) == pytest.approx(cost(9, 1), rel=0.05)


def _seconds_to(log, tokens):
    total = seconds = 0
    for _, s, emitted, _ in log:
        if total >= tokens:
            break
        total, seconds = total + emitted, seconds + s
    return seconds


def test_costs_rising_with_the_context_keep_long_drafts_worth_it():
    """Every target step costs more as the answer grows (3.7x after 400 tokens here, as on a
    tiny CPU model), so a batch size decoded early looks cheap and one decoded lately dear,
    unless all sizes move together. Neither the generation that learns this nor the next
    ones it seeds (which start at a short context again) may settle on a draft length
    slower than the best fixed one."""
    def run(make, generations=3):
        out, learned = [], None
        for _ in range(generations):
            p, log = make(learned), []
            simulate(p, target_step=lambda tokens: 0.010 * (1 + tokens / 150), draft_step=0.0006,
                     accept=0.98, per_token_verify=0.15, rounds=150, log=log)
            out.append(_seconds_to(log, 400))
            learned = p.learned() if isinstance(p, AdaptivePolicy) else None
        return out
    best = min(run(lambda _, k=k: FixedPolicy(k), 1)[0] for k in (3, 5, 8))
    adaptive = run(lambda learned: AdaptivePolicy(1, 8, learned=learned))
    assert all(best / s >= 0.98 for s in adaptive[1:]), [round(best / s, 3) for s in adaptive]
    assert best / adaptive[0] >= 0.94, [round(best / s, 3) for s in adaptive]


def test_damaged_learned_state_is_ignored():
    p = AdaptivePolicy(1, 8, learned={"verify": {"1": "x"}, "draft_sync": None})
    assert not p.seeded and p.next_k() == 3
    for damaged in ("x", [1, 2], 7):   # a chain's entry for one of its drafters, hand-edited
        p = AdaptivePolicy(1, 8, learned=damaged, size_ratio=114.0)
        assert not p.seeded and not p.drafting and "cannot pay" in p.opening_note()


def test_fixed_and_bad_values():
    assert FixedPolicy(5).next_k() == 5
    with pytest.raises(BadInput):
        AdaptivePolicy(4, 2)
    with pytest.raises(BadInput):
        AdaptivePolicy(0, 2)


def test_a_steep_noisy_segment_does_not_make_long_drafts_look_dear():
    """Past the largest measured batch a verify costs at most that batch's cost per token:
    one noisy pair of samples must not stop K from growing on a pair that pays."""
    from localspec.engine.policy import _Samples

    p = AdaptivePolicy(1, 16)
    p._verify = {1: _Samples(0.010), 4: _Samples(0.011), 5: _Samples(0.020)}   # 5 spiked
    assert p.verify_cost(9) == pytest.approx(0.020 * 9 / 5)     # not 0.020 + 4 * 0.009
    p._points = {}
    p._verify[5] = _Samples(0.0115)
    assert p.verify_cost(9) == pytest.approx(0.0115 + 4 * 0.0005)   # a gentle slope stands


def test_a_pair_near_break_even_that_loses_pauses():
    """Drafting that loses ~8% on average (good acceptance, a draft half as dear as the target,
    noisy costs) pauses once enough rounds say so, although no single reading is 95% sure (a
    loss this clear within a dozen rounds: the clearer the loss, the fewer it needs); a pair
    that gains as little keeps drafting."""
    loses = AdaptivePolicy(1, 8)
    log = []
    simulate(loses, target_step=0.050, draft_step=0.040, per_token_verify=0.12, rounds=200, log=log,
             accept=0.8)
    assert loses.pauses >= 1 and not loses.drafting
    assert sum(1 for k, *_ in log if k > 0 and not _[-1]) < 12, "it stops within a dozen rounds"
    gains = AdaptivePolicy(1, 8)
    simulate(gains, target_step=0.050, draft_step=0.012, per_token_verify=0.05, rounds=200, accept=0.8)
    assert gains.pauses == 0 and gains.drafting


def test_a_pair_near_break_even_that_ended_paused_does_not_draft_its_way_back_each_answer():
    """The demo pair on a machine where its draft costs about a target step (drafting loses
    ~5%), answers of 128 tokens, each seeded with the last one's costs. Its acceptance,
    weakened for each new prompt, left an optimistic reading above break-even, so every answer
    drafted four or more losing rounds before pausing again (0.95 of the target alone). An
    answer after one that ended paused now starts paused and resumes only on a probe that
    predicts a clear gain; probes that do not come no closer together."""
    import random

    verify = {1: 24.0, 2: 36.6, 3: 47.8, 4: 50.0, 5: 54.0, 6: 56.7, 7: 62.0, 8: 67.0, 9: 75.0}   # ms
    rnd = random.Random(0)
    now = [0.0]
    learned, spent, drafted_rounds = None, 0.0, []
    for answer in range(20):
        p = AdaptivePolicy(1, 8, learned=learned)
        p._clock = lambda: now[0]
        t, behind, rounds, drafted = 0, 0, 0, 0
        while t < 128:
            want, probe = p.next_k(), p.probe
            k = min(want if rounds >= 6 else 0, 127 - t)   # the draft reads the prompt for 6 rounds
            probe = probe and k > 0
            rounds += 1
            a = 0
            while a < k and rnd.random() < 0.97:
                a += 1
            sync_tokens = min(behind + 1, 64) if k else 0
            sync = (22.0 + 4.0 * (sync_tokens - 1)) / 1000 if k else 0.0
            d = sync + 0.017 * max(k - 1, 0)
            v = verify[k + 1] * rnd.uniform(0.95, 1.05) / 1000
            now[0] += d + v + 0.0003
            if answer:
                spent += d + v + 0.0003
            drafted += k > 0 and not probe
            p.observe(Step(rounds - 1, k, k, a, a + 1, d, v, p.drafting, draft_steps=k, verify_batch=k + 1,
                           probe=probe, sync_tokens=sync_tokens, sync_seconds=sync))
            behind = 0 if k else behind + a + 1
            t += a + 1
        learned = p.learned()
        drafted_rounds.append(drafted)
    alone = 19 * 128 * 0.0243
    assert alone / spent >= 0.98, alone / spent
    assert sum(drafted_rounds[1:]) <= 8, drafted_rounds


def test_a_draft_that_pays_only_if_every_token_were_accepted_is_not_probed_early():
    """The demo pair on a 2-core CPU: a draft step costs ~0.7 of a target step and a batch of
    two ~1.8 steps, so drafting gains only if nearly every token is accepted (it is 86%).
    The upper credible bound of an answer's weakened acceptance is ~1.0, at which drafting
    would gain a few percent, and the first probe used to come at the eighth token of every
    answer (a catch-up and a losing round each; in a chain, on the first lookup miss).
    What a probe may find, averaged over the acceptance evidence, is worth too little to
    probe soon: answers of 128 tokens, each seeded by the last, probe at the budget's pace.
    A short hard stretch of a draft that pays is still probed soon
    (test_short_hard_start_is_probed_soon)."""
    cpu = {1: 1.0, 2: 1.8, 3: 1.91, 4: 2.05, 5: 2.21, 6: 2.3, 7: 2.7, 8: 2.85, 9: 2.91}
    learned, probes_at = None, []
    for answer in range(6):
        p = AdaptivePolicy(1, 8, learned=learned)
        log = []
        simulate(p, target_step=0.010, draft_step=0.0068, accept=0.86, per_token_verify=0.0, rounds=128,
                 log=log, batch_cost=lambda n: cpu[min(n, 9)])
        learned = p.learned()
        tokens = 0
        for _k, _, emitted, probe in log:
            if probe:
                probes_at.append((answer, tokens))
            tokens += emitted
        if answer == 0:
            assert p.pauses >= 1 and not p.drafting
    later = [at for answer, at in probes_at if answer > 0]
    assert not later or min(later) >= 100, probes_at
    assert len(later) <= 2, probes_at


def test_a_draft_no_smaller_than_the_target_starts_paused():
    """Nothing measured yet, but the draft's weights are twice the target's (same device): it
    cannot decode faster, so the first generation starts paused and only probes; a small
    draft starts drafting as usual."""
    p = AdaptivePolicy(1, 8, size_ratio=2.0)
    assert not p.drafting and "cannot pay" in p.reason
    log = []
    simulate(p, target_step=0.010, draft_step=0.020, accept=1.0, per_token_verify=0.1, rounds=120, log=log)
    assert not p.drafting
    drafted = [k for k, _, _, probe in log if k > 0]
    assert drafted and all(probe for k, _, _, probe in log if k > 0)     # probes only
    assert len(drafted) <= 6
    # the dearer the draft, the later its first probe (a 100x draft: none in a short answer)
    first = [i for i, (k, _, _, _) in enumerate(log) if k > 0][0]
    assert 12 <= first <= 20
    assert AdaptivePolicy(1, 8, size_ratio=100.0)._probe_every >= 800
    assert AdaptivePolicy(1, 8, size_ratio=0.1).drafting
    assert AdaptivePolicy(1, 8, size_ratio=2.0, can_pause=False).drafting


def test_rounds_of_another_drafter_only_add_the_targets_cost():
    """In a chain, a round the other drafter drafted tells this one the target's costs and moves
    a paused one towards its next probe, but decides nothing about it (paused, it measures one
    such round in _PAUSED_SAMPLE: nothing is decided until the probe)."""
    p = AdaptivePolicy(1, 8)
    simulate(p, target_step=0.010, draft_step=0.5, accept=1.0, per_token_verify=0.1, rounds=40)
    assert not p.drafting
    gap, before = p._probe_every, p._since_probe
    other = Step(index=0, k=0, drafted=0, accepted=0, emitted=1, draft_seconds=0.0, verify_seconds=0.010,
                 drafting=False, verify_batch=1)
    rounds = p._verify[1].n
    for _ in range(gap):
        assert p.observe_other(other) is None
    assert p._verify[1].n == pytest.approx(rounds + gap / _PAUSED_SAMPLE, abs=1) and p._since_probe == before + gap
    assert not p.drafting and p.next_k() > 0 and p.probe      # due for a probe, still paused


def test_paused_rounds_are_counted_and_a_sample_of_them_measured():
    """While paused nothing is decided until the next probe: every round counts towards it,
    one in _PAUSED_SAMPLE is measured (its own time, not the unmeasured rounds' before it), and a probe
    is timed from its own start."""
    p = AdaptivePolicy(1, 8)
    now = [0.0]
    p._clock = lambda: now[0]
    simulate(p, target_step=0.010, draft_step=0.5, accept=1.0, per_token_verify=0.1, rounds=40)
    assert not p.drafting
    p._clock = lambda: now[0]
    tokens, measured = p._tokens, p._verify[1].n
    plain = Step(index=0, k=0, drafted=0, accepted=0, emitted=1, draft_seconds=0.0, verify_seconds=0.010,
                 drafting=False, verify_batch=1)
    for _ in range(160):
        assert p.next_k() == 0
        now[0] += 0.010 + 0.0002          # the decode and 200 us of the loop's own
        p.observe(plain)
    assert p._tokens == tokens + 160 and p._verify[1].n == measured + 160 // _PAUSED_SAMPLE
    assert p.estimates()["round_seconds_beyond_decodes"]["plain"] == pytest.approx(0.0002)


def test_a_paused_policy_next_to_a_fast_target_step_measures_rarer():
    """One paused round in _PAUSED_SAMPLE is measured next to a real model's step; next to a
    40 us one that bookkeeping (~100 us a measured round between CPU decodes) would be a few
    percent of the time, so it measures few enough to keep it under half a percent."""
    def paused(step):
        p = AdaptivePolicy(1, 8)
        simulate(p, target_step=step, draft_step=50 * step, accept=1.0, per_token_verify=0.1, rounds=40)
        assert not p.drafting
        return p

    slow, fast = paused(0.010), paused(40e-6)
    assert slow._sample_every == _PAUSED_SAMPLE
    assert fast._sample_every == 512 and fast.estimates()["paused_rounds_per_measured"] == 512
    for p, step in ((slow, 0.010), (fast, 40e-6)):
        measured = p._verify[1].n
        ks, _ = _paused_run_at(p, 4096, step)
        assert not any(ks)
        assert p._verify[1].n - measured == pytest.approx(4096 / p._sample_every, abs=1)


def test_a_pair_paused_from_the_start_keeps_the_target_step_it_measured():
    """A draft no cheaper than the target starts paused and never drafts: what it measures is
    the target's step alone. That is kept (no draft cost in it), so the next generation starts
    paused for the same reason but samples as rarely as that step allows from its first round;
    a generation that measured nothing keeps nothing, and a cheaper draft is not paused by the
    target's costs alone."""
    first = AdaptivePolicy(1, 8, size_ratio=114.0)
    assert not first.drafting and first._sample_every == _PAUSED_SAMPLE
    assert AdaptivePolicy(1, 8, size_ratio=114.0).learned() is None
    _paused_run_at(first, 64, 40e-6)
    learned = first.learned()
    assert learned["draft_sync"] is None and learned["verify"]["1"] == pytest.approx(40e-6)
    nxt = AdaptivePolicy(1, 8, learned=json.loads(json.dumps(learned)), size_ratio=114.0)
    assert not nxt.drafting and "cannot pay" in nxt.opening_note()
    assert nxt._sample_every == 512 and nxt.quiet_rounds() == 510
    cheap = AdaptivePolicy(1, 8, learned=learned, size_ratio=0.3)
    assert cheap.drafting and cheap.next_k() > 0


def _paused_run_at(policy, rounds: int, step: float) -> tuple[list, int]:
    """Plain rounds of ``step`` seconds into a paused policy that is never due to probe, as
    the generator drives it (quiet rounds go by unseen)."""
    policy._probe_every = 10**9
    now = [0.0]
    policy._clock = lambda: now[0]
    ks, quiet, passed = [], 0, 0
    for i in range(rounds):
        now[0] += step
        if quiet:
            quiet -= 1
            passed += 1
            continue
        if passed:
            policy.passed(passed, passed)
            passed = 0
        ks.append(policy.next_k())
        policy.observe(Step(index=i, k=0, drafted=0, accepted=0, emitted=1, draft_seconds=0.0,
                            verify_seconds=step, drafting=False, verify_batch=1))
        quiet = policy.quiet_rounds()
    return ks, len(ks)


def _paused_run(policy, rounds: int, honour_quiet: bool) -> tuple[list, int]:
    """Plain 10 ms rounds into a paused ``policy`` (a probe drafts one 8 ms token, rejected),
    as the generator drives it: with ``honour_quiet`` the rounds quiet_rounds announces go
    by without next_k or observe and are reported with passed(). Returns each round's k (None
    for a quiet round) and the observe calls."""
    now = [0.0]
    policy._clock = lambda: now[0]
    ks, observed, quiet, passed = [], 0, 0, [0, 0]
    for i in range(rounds):
        if quiet:
            quiet -= 1
            ks.append(None)
            now[0] += 0.0102
            passed[0] += 1
            passed[1] += 1
            continue
        if passed[0]:
            policy.passed(*passed)
            passed = [0, 0]
        k = policy.next_k()
        ks.append(k)
        drafted = min(k, 1)
        now[0] += 0.0102 + 0.008 * drafted
        policy.observe(Step(index=i, k=k, drafted=drafted, accepted=0, emitted=1, draft_seconds=0.008 * drafted,
                            verify_seconds=0.010, drafting=policy.drafting, draft_steps=drafted,
                            verify_batch=drafted + 1, probe=policy.probe, sync_tokens=drafted,
                            sync_seconds=0.008 * drafted))
        observed += 1
        if honour_quiet:
            quiet = policy.quiet_rounds()
    if passed[0]:
        policy.passed(*passed)      # as the generator does when the answer ends
    return ks, observed


def test_quiet_paused_rounds_change_nothing_the_policy_decides():
    """A paused policy lets the generator run most plain rounds without asking it or showing
    it them (next to a 40 us target step its bookkeeping was a few percent); the rounds it
    probes and measures, and what it counts, stay those of a policy that sees every round."""
    def paused():
        p = AdaptivePolicy(1, 8)
        simulate(p, target_step=0.010, draft_step=0.008, accept=0.3, per_token_verify=0.1, rounds=40)
        assert not p.drafting
        return p

    every, quiet = paused(), paused()
    ks_every, n_every = _paused_run(every, 2000, honour_quiet=False)
    ks_quiet, n_quiet = _paused_run(quiet, 2000, honour_quiet=True)
    drafted = [i for i, k in enumerate(ks_every) if k]
    assert drafted and [i for i, k in enumerate(ks_quiet) if k] == drafted   # the same probes
    assert all(k in (0, None) for i, k in enumerate(ks_quiet) if i not in drafted)
    assert n_quiet < 0.35 * n_every
    assert (quiet._tokens, quiet._round, quiet.probes) == (every._tokens, every._round, every.probes)
    assert quiet._verify[1].n == every._verify[1].n        # the same rounds measured
    assert quiet.estimates()["round_seconds_beyond_decodes"] == every.estimates()["round_seconds_beyond_decodes"]
    assert FixedPolicy(4).quiet_rounds() == 0 and FixedPolicy(0).quiet_rounds() > 10**6
    drafting = AdaptivePolicy(1, 8)
    assert drafting.quiet_rounds() == 0


def test_costs_by_size_interpolate_and_extend():
    """The target's cost at every batch size from a few measured ones, as verify_cost gives it."""
    from localspec.engine.policy import _costs_by_size

    assert _costs_by_size([], 5) == []
    one = _costs_by_size([(2, 0.010)], 4)
    assert one[2] == pytest.approx(0.010) and one[4] == pytest.approx(0.010 * 1.15)
    t = _costs_by_size([(2, 0.010), (4, 0.014), (6, 0.022)], 9)
    assert t[2] == 0.010 and t[4] == 0.014 and t[3] == pytest.approx(0.012)
    assert t[5] == pytest.approx(0.018)
    assert t[1] == pytest.approx(0.008)                       # the first segment's slope, below
    assert t[8] == pytest.approx(min(0.022 + 2 * 0.004, 0.022 * 8 / 6))   # capped per token above
    p = AdaptivePolicy(1, 8)
    from localspec.engine.policy import _Samples
    p._verify = {2: _Samples(0.010), 4: _Samples(0.014), 6: _Samples(0.022)}
    assert [p.verify_cost(n) for n in range(1, 10)] == pytest.approx(t[1:])
    assert p.verify_cost(40) == pytest.approx(0.022 * 40 / 6)  # past the table: extended on demand


def test_the_first_round_is_timed_from_its_start():
    """A generation's first round (a plain step measuring the target) gives the plain
    round's overhead at once, so drafting rounds are not weighed against nothing."""
    p = AdaptivePolicy(1, 8)
    simulate(p, target_step=0.010, draft_step=0.001, accept=0.8, per_token_verify=0.05, rounds=2,
             overhead=(0.002, 0.001))
    beyond = p.estimates()["round_seconds_beyond_decodes"]
    assert beyond["plain"] == pytest.approx(0.001) and beyond["drafting"] == pytest.approx(0.002)


def test_lookup_misses_do_not_stand_in_for_a_plain_round():
    """A lookup that misses most rounds decodes the target's plain batch of one token, so the
    plain step's cost is known without a plain round; the time beyond the decodes is not: the
    loop's own 0.5 ms a round (next to a 10 ms step) was all charged to drafting, and lookups
    that pay (10% of the rounds find a match, 60% accepted) paused for good (99.9 tok/s
    against 112.7 drafting). One plain round, early, measures it (until then the drafting
    rounds' own time stands in for it); then only what a lookup adds (0.02 ms) counts
    against it, and what was learned carries both to the next generation."""
    p = AdaptivePolicy(1, 8)
    log = []
    ks = simulate(p, target_step=0.010, draft_step=0.00001, accept=0.6, per_token_verify=0.03, lookup_hit=0.1,
                  overhead=(0.00052, 0.0005), rounds=300, log=log)
    assert 0 in ks[1:6], "a plain round early"
    assert p.drafting and p.pauses == 0
    assert sum(x[2] for x in log) / sum(x[1] for x in log) > 105
    plain = p.estimates()["round_seconds_beyond_decodes"]["plain"]
    assert plain == pytest.approx(0.0005)
    seeded = AdaptivePolicy(1, 8, learned=p.learned())
    assert seeded.estimates()["round_seconds_beyond_decodes"]["plain"] == pytest.approx(plain)


def _decisions(policy) -> list:
    calls = []
    decide = policy._decide

    def counted(r, note):
        calls.append(r)
        return decide(r, note)

    policy._decide = counted
    return calls


def test_a_drafting_lookup_decides_at_its_matches_and_is_charged_for_deciding():
    """A drafting lookup that finds a match in one round of ten decides at its matches and
    after eight misses, not at every miss (each decision ~90 us of Python between two CPU
    decodes: more than a near break-even lookup gains). What deciding costs is timed apart:
    it is charged to drafting rounds at its mean over the rounds, and not to a plain round,
    which costs the target alone no decision."""
    p = AdaptivePolicy(1, 8, lookup=True)
    calls = _decisions(p)
    simulate(p, target_step=0.010, draft_step=0.00002, accept=0.9, per_token_verify=0.05, lookup_hit=0.1,
             rounds=400, decide_cost=0.0002)
    assert p.drafting and p.pauses == 0
    share = len(calls) / 400
    assert 0.1 < share < 0.3, len(calls)
    beyond = p.estimates()["round_seconds_beyond_decodes"]
    assert beyond["plain"] == pytest.approx(0.0, abs=1e-9), "a plain round's time holds no decision"
    assert beyond["deciding"] == pytest.approx(0.0002 * share, rel=0.5)
    assert beyond["drafting"] == pytest.approx(beyond["deciding"])
    seeded = AdaptivePolicy(1, 8, lookup=True, learned=p.learned())
    assert seeded.estimates()["round_seconds_beyond_decodes"]["deciding"] == pytest.approx(beyond["deciding"])


def test_lookups_whose_gain_goes_to_deciding_pause():
    """Next to a fast target step (35 us), lookups that pay by their decodes (a match in one
    round of ten, 90% accepted: 1.3x) lose once their decisions (0.3 ms each, at a match or
    after eight misses) are counted, and pause; a paused policy decides nothing between its
    probes. Counted in each round's own time instead, a decision taken one round in five is
    trimmed away as a spike (drafting looked free, and lookups that never paid drafted whole
    answers); counted in the plain rounds too, it cancels out."""
    costly = AdaptivePolicy(1, 8, lookup=True)
    simulate(costly, target_step=0.000035, draft_step=0.000002, accept=0.9, per_token_verify=0.1,
             lookup_hit=0.1, rounds=600, decide_cost=0.0003)
    assert not costly.drafting and costly.pauses >= 1
    free = AdaptivePolicy(1, 8, lookup=True)
    simulate(free, target_step=0.000035, draft_step=0.000002, accept=0.9, per_token_verify=0.1,
             lookup_hit=0.1, rounds=600)
    assert free.drafting and free.pauses <= 1, "by its decodes the lookups pay"


def test_a_paused_cheap_lookup_probes_what_it_finds_on_a_new_prompt():
    """Lookups the target rejected on one prompt (a 2 ms step, a 10 us lookup) start the
    next answer paused; on a prompt that repeats itself they came back only after a probe
    fired into a round with no match, counted as failed, and backed off. A lookup this cheap
    now probes at its first match in a new answer, and a probe that finds nothing stays due."""
    first = AdaptivePolicy(1, 8)
    simulate(first, target_step=0.002, draft_step=0.00001, accept=0.05, per_token_verify=0.6, lookup_hit=0.3,
             rounds=60, overhead=(0.00002, 0.00001))
    assert not first.drafting
    p = AdaptivePolicy(1, 8, learned=first.learned())
    assert not p.drafting
    log = []
    simulate(p, target_step=0.002, draft_step=0.00001, accept=0.95, per_token_verify=0.6, lookup_hit=0.3,
             rounds=40, overhead=(0.00002, 0.00001), log=log)
    looks = [i for i, (k, _, _, probe) in enumerate(log) if probe]
    assert looks[:4] == [0, 1, 2, 3], log[:6]      # due from the start: one look a round until a match
    assert log[3][2] > 1                            # ... whose proposal the target took
    assert p.drafting
    # next to a 40 us step looking is a quarter of a round: a probe that finds nothing still fails
    fast = AdaptivePolicy(1, 8)
    simulate(fast, target_step=0.00004, draft_step=0.00001, accept=0.05, per_token_verify=0.6, lookup_hit=0.3,
             rounds=60, overhead=(0.00002, 0.00001))
    assert not fast._looking_is_cheap()


def test_a_clear_steady_gain_decides_one_round_in_four_and_still_sees_a_turn_for_the_worse(monkeypatch):
    """Drafting at a settled K with a clear gain, a round only learns and one in four decides
    (the predictions cost several times their replayed ~20 us between two CPU decodes), at the
    same K as one that decides every round; when the text turns hard it still pauses, at most
    a few rounds after that one."""
    import localspec.engine.policy as policy_module

    def hard_after(tokens):
        return 0.9 if tokens < 400 else 0.05

    def run():
        p = AdaptivePolicy(1, 8, p_min=0.0)
        calls = []
        best = p._best
        p._best = lambda: calls.append(p._round) or best()
        log = []
        simulate(p, target_step=0.010, draft_step=0.002, accept=hard_after, per_token_verify=0.05,
                 rounds=400, log=log)
        return p, calls, log

    p, calls, log = run()
    monkeypatch.setattr(policy_module, "_STEADY_ROUNDS", 0)
    every, every_calls, every_log = run()

    def first_pause(log):
        tokens = 0
        for i, (k, _, emitted, _) in enumerate(log):
            if tokens >= 400 and k == 0 and all(x[0] == 0 or x[3] for x in log[i:i + 8]):
                return i
            tokens += emitted
        return None

    # Before the turn (~90 rounds at K=4): far fewer decisions than rounds.
    steady = [r for r in calls if 20 <= r < 60]
    assert len(steady) <= 0.4 * 40 and len([r for r in every_calls if 20 <= r < 60]) >= 38
    # The same K before the turn, and the turn for the worse seen: drafting pauses, a few
    # rounds later at most.
    ks, every_ks = [x[0] for x in log[:60]], [x[0] for x in every_log[:60]]
    k = max(set(every_ks), key=every_ks.count)
    assert every_ks.count(k) >= 50 and ks.count(k) >= 50
    assert not p.drafting and not every.drafting
    a, b = first_pause(log), first_pause(every_log)
    assert a is not None and b is not None and b <= a <= b + 4, (a, b)


def test_a_text_that_turns_hard_pauses_within_a_few_rounds():
    """A long easy stretch (acceptance 0.9) leaves every draft position's acceptance high;
    when the text turns hard (0.05) the drafts fail at their first token, so nothing refutes
    the later positions, and decayed evidence alone kept drafting ~80 rounds at a loss. The
    rounds' accepted tokens, far below what was predicted, show the change: the evidence is
    thinned and fresh rounds pause drafting within a dozen or so."""
    p = AdaptivePolicy(1, 8, p_min=0.0)
    log = []
    simulate(p, target_step=0.010, draft_step=0.002, accept=lambda t: 0.9 if t < 400 else 0.05,
             per_token_verify=0.05, rounds=400, log=log)
    tokens, drafted_after, lost = 0, 0, 0.0
    for k, seconds, emitted, probe in log:
        if tokens >= 400 and k and not probe:
            drafted_after += 1
            lost += seconds - 0.010 * emitted     # over what plain steps would have cost
        tokens += emitted
    assert p.shifts >= 1
    assert not p.drafting
    assert drafted_after <= 20, drafted_after
    assert lost < 0.15, lost


def test_steady_acceptance_is_not_taken_for_a_change():
    """The change watch must not thin the evidence where acceptance does not change, at any
    level and draft length the policy settles on."""
    for accept in (0.3, 0.6, 0.8, 0.9, 0.97):
        p = AdaptivePolicy(1, 8, p_min=0.0, can_pause=False)
        simulate(p, target_step=0.010, draft_step=0.002, accept=accept, per_token_verify=0.05, rounds=1000)
        assert p.shifts == 0, accept
        assert p.estimates()["acceptance_shifts"] == 0


def test_a_lookup_match_must_be_expected_to_pay_for_its_place_in_the_batch():
    """Prompt lookup's policy gates its matches by cost: where each token of a batch costs
    half a step (a CPU) a one-token match must be expected right about half the time; next
    to a GPU's nearly free batch a few percent do. Where the batch's cost flattens out, a
    long match needs fewer right tokens per token proposed. A draft model's policy has no
    such gate (its stop rule is p_min), nor does a lookup's before its costs are known."""
    for per_token, lo, hi in ((0.5, 0.5, 0.6), (0.02, 0.0, 0.06)):
        p = AdaptivePolicy(1, 8, lookup=True)
        assert p.gate() is None
        simulate(p, target_step=0.010, draft_step=0.00001, accept=0.5, per_token_verify=per_token,
                 rounds=60, lookup_hit=0.5)
        floor = p.match_floors()[1]
        assert lo < floor < hi, floor
        gate = p.gate()
        assert gate(1, floor + 0.01) and not gate(1, floor - 0.01)
    # A batch of two costs two steps, one of seven 3.66 (measured on a 2-core CPU with a
    # 135M F16 target), the machine's noise 2%.
    learned = {"verify": {"1": 0.010, "2": 0.020, "7": 0.0366}, "draft_sync": 1e-5, "accept": [90.0, 10.0],
               "noise": 0.02}
    p = AdaptivePolicy(1, 8, lookup=True, learned=learned)
    floors = p.match_floors()
    assert floors[1] >= 0.9 and floors[6] < 3.0 and floors[6] / 6 < floors[1] / 2, floors
    gate = p.gate()
    assert gate(6, 5.0) and not gate(6, 1.0) and not gate(1, 0.6)
    # A floor rests only on costs measured: a batch larger than all of them costs what the
    # largest does (a skipped match would never measure it), and with none beyond the plain
    # step there is no gate at all.
    p = AdaptivePolicy(1, 8, lookup=True, learned=dict(learned, verify={"1": 0.010, "2": 0.020}))
    floors = p.match_floors()
    assert floors[6] == floors[1] > 0.9, floors
    p = AdaptivePolicy(1, 8, lookup=True, learned=dict(learned, verify={"1": 0.010}))
    assert p.match_floors() is None and p.gate() is None
    model = AdaptivePolicy(1, 8)
    simulate(model, target_step=0.010, draft_step=0.002, accept=0.5, per_token_verify=0.5, rounds=60)
    assert model.gate() is None


def test_position_counts_decay_as_one_factor_exactly():
    """A round's decay of the per-position counts is one factor they are read through (a
    lookup's miss decays 4 x 33 counts): the counts, and what is predicted from them, are
    those of multiplying every count each round, across the factor's folding into them."""
    from localspec.engine import policy as P

    pol = AdaptivePolicy(1, 32, lookup=True)
    n = len(pol._tried)
    ref = [[0.0] * n for _ in range(4)]
    rounds = [(8, d, a) for d, a in ((0, 0), (8, 8), (3, 1), (0, 0), (8, 2), (16, 16))] * 1400
    for j, (k, drafted, accepted) in enumerate(rounds):
        decay = P._PROBE_DECAY if j % 7 == 0 else P._DECAY
        pol._judge(max(k, drafted), drafted, accepted, decay)
        for arr in ref:
            for i in range(n):
                arr[i] *= decay
        for i in range(1, min(max(k, drafted), n - 1) + 1):
            if i > drafted + 1:
                break
            ref[0][i] += 1
            if i <= drafted:
                ref[1][i] += 1
                if i <= accepted + 1:
                    ref[2][i] += 1
                    if i <= accepted:
                        ref[3][i] += 1
    assert pol._pos_scale > P._SCALE_FOLD and pol._pos_scale != 1.0   # folded at least once, then decayed
    stored = [[x * pol._pos_scale for x in a] for a in (pol._tried, pol._made, pol._judged, pol._accepted)]
    for mine, theirs in zip(stored, ref):
        assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12)
    twin = AdaptivePolicy(1, 32, lookup=True)
    twin._tried, twin._made, twin._judged, twin._accepted = (list(a) for a in ref)
    twin._succ, twin._fail = pol._succ, pol._fail
    for p in (pol, twin):
        p._verify = {1: P._Samples(0.01), 9: P._Samples(0.02), 17: P._Samples(0.03)}
        p._sync.prior = 1e-5
    for k in (1, 4, 8, 16, 32):
        assert pol.predict(k) == pytest.approx(twin.predict(k), rel=1e-9)


@pytest.mark.parametrize("spike", [1.0, 10.0, 100.0])
def test_one_spiky_plain_step_does_not_keep_a_losing_draft_drafting(spike):
    """A draft 20x the target's step, every token accepted: drafting loses. When the one plain
    step measured so far is a spike (the process descheduled mid-decode: it read 100x its
    cost), the plain step looked dearer than the verify batches measured beside it, every
    drafted token looked like a gain and a refresh too dear to take: the policy drafted ~70
    rounds (a flaky `test_expensive_draft_ends_up_target_only`). A plain step dearer than a
    measured larger batch is measured again, so the spike costs one plain round."""
    p = AdaptivePolicy(1, 8)
    now = [0.0]
    p._clock = lambda: now[0]
    target, draft, plain, ks = 0.001, 0.020, 0, []
    for i in range(200):
        k = p.next_k()
        ks.append(k)
        if k == 0:
            v, d = target * (spike if plain == 0 else 1.0), 0.0
            plain += 1
        else:
            v, d = target * (1 + 0.05 * k), draft * k
        now[0] += v + d
        p.observe(Step(index=i, k=k, drafted=k, accepted=k, emitted=k + 1, draft_seconds=d, verify_seconds=v,
                       drafting=p.drafting, draft_steps=k, verify_batch=k + 1, sync_tokens=1 if k else 0,
                       sync_seconds=draft if k else 0.0, probe=p.probe))
    assert not p.drafting and p.pauses >= 1
    assert sum(1 for k in ks[:40] if k) <= 3, ks[:40]
