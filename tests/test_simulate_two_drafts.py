"""The two-draft policy in the simulator: deterministic figures on the shipped scenarios,
and the scenario format's errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.bench import simulate_drafts as sd
from localspec.bench.simulate import params_with
from localspec.engine.events import Step
from localspec.engine.policy import LARGE, LAYERED, SMALL, LayeredPair, PairPolicy, Params
from localspec.engine.policy.predict import greedy_rounds
from localspec.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scripts" / "two_draft_scenarios.json"


@pytest.fixture(scope="module")
def scenarios():
    return {s.name: s for s in sd.load(str(SCENARIOS))}


@pytest.mark.parametrize("name", ["large-better-everywhere", "easy", "small-as-good-everywhere"])
def test_where_one_draft_is_clearly_better_the_pair_keeps_up(scenarios, name):
    r = sd.evaluate(scenarios[name])
    assert r["both_over_better_single"] >= 0.97, r


def test_the_pair_moves_to_the_draft_that_holds_up(scenarios):
    """Small starts; on text where it fails the large draft ends up drafting most tokens."""
    tokens, seconds, learned, drafted = sd.simulate(scenarios["large-better-everywhere"], "both", 0)
    assert drafted[LARGE] > 3 * drafted[SMALL] and learned["in_use"] == LARGE
    assert tokens == scenarios["large-better-everywhere"].base.tokens and seconds > 0


def test_simulation_is_deterministic(scenarios):
    a = sd.simulate(scenarios["mixed-128"], "both", 3)
    b = sd.simulate(scenarios["mixed-128"], "both", 3)
    assert a[:2] == b[:2] and a[3] == b[3]


def test_a_pair_starts_with_the_draft_in_use_last():
    seed = PairPolicy.build(1, 8, None, True)
    assert seed.use == SMALL
    for i in range(3):
        seed.next_k()
        seed.observe(Step(index=i, k=3, drafted=3, accepted=2, emitted=3, draft_seconds=0.003, verify_seconds=0.02,
                          drafting=True, draft_steps=3, verify_batch=4, sync_tokens=1, sync_seconds=0.001,
                          source=seed.route))
    learned = (seed.learned() or {}) | {"in_use": LARGE}
    assert PairPolicy.build(1, 8, None, True, learned).use == LARGE


def test_bad_two_draft_scenario_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "x", "target_ms": [10], "tokens": 64, "stretches": [["easy", 8]],
                                "drafts": [{"name": "small", "draft_ms": 1, "accept": {"hard": [0.5]}},
                                           {"name": "large", "draft_ms": 2, "accept": {"easy": [0.5]}}]}]))
    with pytest.raises(BadInput, match="every kind of stretch"):
        sd.load(str(bad))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_policy.py"), "--scenarios", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "every kind of stretch" in r.stderr and "Traceback" not in r.stderr


def test_oracle_uses_the_faster_draft_of_each_stretch(scenarios):
    s = scenarios["mixed-256"]
    assert sd.best_single(s, "easy")[0] == SMALL and sd.best_single(s, "hard")[0] == LARGE
    oracle = sd.simulate(s, "oracle", 0)
    assert oracle[3][SMALL] > 0 and oracle[3][LARGE] > 0 and oracle[0] == s.base.tokens
    for single in (SMALL, LARGE):
        r = sd.simulate(s, single, 0)
        assert oracle[0] / oracle[1] > r[0] / r[1]


def test_layered_round_counts_the_large_drafts_batches(scenarios):
    """Drafts right everywhere: the large draft holds K after ceil(K / (block + 1)) batches,
    the last block only as long as needed, and the target keeps all K."""
    s = scenarios["mixed-256"]
    sure = sd.TwoDrafts(s.base, tuple(sd.Draft(d.name, d.draft_ms, {"easy": (1.0,)}) for d in s.drafts),
                        (("easy", 1),))
    accepted, seconds, small_n, blocks = sd._layered_round(sure, 7, 2, [0.5] * 16, 0, "easy")
    assert (accepted, blocks, small_n) == (7, [(2, 2), (2, 2), (1, 1)], 5) and seconds > 0
    nothing = sd.TwoDrafts(s.base, tuple(sd.Draft(d.name, d.draft_ms, {"easy": (0.0,)}) for d in s.drafts),
                           (("easy", 1),))
    assert sd._layered_round(nothing, 3, 2, [0.5] * 16, 0, "easy")[0] == 0


def test_report_gives_the_reachable_next_to_the_pair(scenarios):
    r = sd.evaluate(scenarios["short-hard"])
    assert {"oracle", "layered"} <= set(r["settings"])
    assert r["both_over_oracle"] == pytest.approx(r["settings"]["both"] / r["settings"]["oracle"], abs=2e-4)
    assert r["per_stretch"]["hard"][LARGE] > r["per_stretch"]["hard"][SMALL]


def _switching_answers(s, monkeypatch, earlier: int, what):
    """For seeds 0-4: the rounds of one answer of ``s`` by the pair switching alone (never
    layered), learned from an answer at seed ``earlier`` + seed; each round as ``what(pair,
    step)`` says, read before the pair observes it."""
    rounds: list = []

    class Recorded(LayeredPair):
        def observe(self, step):
            rounds.append(what(self, step))
            return super().observe(step)

    monkeypatch.setattr(sd, "LayeredPair", Recorded)
    switching = params_with({"layer_switches": 10**6})
    for seed in range(5):
        learned = sd.simulate(s, "both", earlier + seed, switching)[2]
        rounds.clear()
        sd.simulate(s, "both", seed, switching, learned)
        yield list(rounds)


def test_the_pair_leaves_the_small_draft_soon_after_its_text_turns_hard(scenarios, monkeypatch):
    """On mixed text the small draft, in use when an easy stretch turns hard, hands over
    within a few rounds: it drafts under 15% of the hard stretches' tokens (13% here). (The
    switching alone: the pair never goes layered here.)"""
    s = scenarios["mixed-256"]
    hard = small_in_hard = 0
    for rounds in _switching_answers(s, monkeypatch, 5, lambda pair, step: (step.source, step.emitted)):
        at = 0
        for source, emitted in rounds:
            if s.kind(at) == "hard":
                hard += emitted
                small_in_hard += emitted if source == SMALL else 0
            at += emitted
    assert hard > 2000 and small_in_hard < 0.15 * hard, (small_in_hard, hard)


def test_a_score_reads_the_rounds_a_greedy_draft_would_have_drafted():
    """Predictions on the text, in rounds of K: a miss ends a round (the target's token
    follows it), a full round is followed by the target's bonus token, and a round that
    runs past the text's end is left out."""
    hits = (True, True, False, True, True, True, False, False, True, True)
    assert greedy_rounds(hits, 3) == [(2, 1), (3, 0), (0, 1)]
    assert greedy_rounds((), 3) == [] and greedy_rounds((True,) * 3, 4) == []


def test_stale_evidence_gives_way_to_a_score(scenarios):
    """An answer starts with the large draft in use and evidence from text where it was the
    better one; on text where the small draft is as good and cheaper, a score of the small
    one on the tokens it missed finds it faster, and the small draft drafts the rest."""
    learned = sd.simulate(scenarios["large-better-everywhere"], "both", 0)[2]
    assert learned["in_use"] == LARGE
    notes: list[str] = []

    class Noted(LayeredPair):
        def _switch(self, why):
            notes.append(why)
            super()._switch(why)

    s = scenarios["small-as-good-everywhere"]
    original = sd.LayeredPair
    sd.LayeredPair = Noted
    try:
        _, _, after, drafted = sd.simulate(s, "both", 1, None, learned)
    finally:
        sd.LayeredPair = original
    assert notes and "small draft does better on the same text" in notes[0], notes
    assert drafted[SMALL] > 3 * drafted[LARGE] and after["in_use"] == SMALL


def test_where_the_text_alternates_the_pair_goes_layered(scenarios):
    """Text that alternates faster than a switch pays (64-token stretches): the pair goes
    layered after a few switches and the next answer starts layered (what that gains: see
    test_without_layered_rounds_short_stretches_lose); on uniform text the pair never goes
    layered."""
    s = scenarios["mixed-64"]
    ends = [sd.simulate(s, "both", seed)[2] for seed in range(10)]
    assert sum(e["in_use"] == LAYERED for e in ends) >= 6
    first = next(e for e in ends if e["in_use"] == LAYERED)
    assert LayeredPair.build(1, 8, None, True, first).layered
    ends = [sd.simulate(s, "both", seed, learned=first)[2] for seed in range(4)]
    assert sum(e["in_use"] == LAYERED for e in ends) >= 3
    for name in ("easy", "hard", "large-better-everywhere", "small-as-good-everywhere"):
        for seed in range(3):
            assert sd.simulate(scenarios[name], "both", seed)[2]["in_use"] != LAYERED, (name, seed)


def test_layered_drafting_gives_way_to_the_draft_that_suits_uniform_text(scenarios):
    """An answer that starts layered (the last one's text alternated) on easy text, where the
    small draft alone is 11% faster: the next answer starts with the small draft. On hard
    text, where the large draft alone is faster by less than ``layer_margin``, layered
    rounds go on within that margin of it."""
    after_mixed = sd.simulate(scenarios["mixed-256"], "both", 5)[2]
    assert after_mixed["in_use"] == LAYERED
    learned = sd.simulate(scenarios["easy"], "both", 1, learned=after_mixed)[2]
    assert learned["in_use"] == SMALL
    pol = LayeredPair.build(1, 8, None, True, learned)
    assert not pol.layered and pol.use == SMALL
    hard = scenarios["hard"]
    tokens, seconds, _, _ = sd.simulate(hard, "both", 1, learned=after_mixed)
    large = sd.simulate(hard, LARGE, 1, learned=sd.simulate(hard, LARGE, 2)[2])
    assert tokens / seconds > 0.95 * large[0] / large[1]


def test_without_layered_rounds_short_stretches_lose(scenarios):
    """The layered mode earns its place: without it (never entered) the pair is 1% and more
    slower on 64-token stretches (over 10 answers, each after an earlier one)."""
    never = sd._both_tps(scenarios["mixed-64"], 10, params_with({"layer_switches": 10**6}))
    both = sd._both_tps(scenarios["mixed-64"], 10, None)
    assert never < 0.99 * both, (never, both)


def test_no_layered_rounds_where_they_would_not_make_the_large_drafts_tokens_cheaper(scenarios):
    """The same alternating text, but a small draft nearly as dear as the large one, or a
    target (and so a device) whose batches cost half a step more a token: layered rounds
    would draft the large draft's own tokens dearer than it does alone, and the pair switches
    (3-4 times an answer) without going layered."""
    from dataclasses import replace

    s = scenarios["mixed-64"]
    small, large = s.drafts
    dear_small = replace(s, drafts=(replace(small, draft_ms=large.draft_ms * 0.95), large))
    linear = replace(s, base=replace(s.base, target_ms=tuple(20.0 + 10.0 * (b - 1) for b in range(1, 10))))
    for case in (dear_small, linear):
        for seed in range(6):
            assert sd.simulate(case, "both", seed)[2]["in_use"] != LAYERED, seed
    assert sum(sd.simulate(s, "both", seed)[2]["in_use"] == LAYERED for seed in range(6)) >= 3


def test_ablation_switches_each_mechanism_off(scenarios):
    """`simulate_policy.py --ablate` on two-draft scenarios: each mechanism of the pair's
    policy off in turn, against the full policy; layered rounds carry 64-token stretches."""
    out = sd.ablate([scenarios["mixed-64"]], 4)
    assert [a["mechanism"] for a in out["ablations"]] == list(sd.ABLATIONS)
    layered = out["ablations"][0]
    assert layered["mechanism"] == "layered rounds" and layered["earns_its_place"], layered


def test_the_trio_where_the_large_draft_is_right_everywhere(scenarios):
    """The generated trio's costs (a CPU's verify, steeper than a GPU's): the large draft is
    right on all text, so its rounds never tell that the text got easy again, and scores of
    the small draft are the way back to it. On 128- and 256-token stretches the pair keeps up
    with or beats the large draft alone; on uniform text it keeps up with the better one."""
    for name in ("trio-mixed-64", "trio-mixed-128", "trio-easy", "trio-hard"):
        assert sd.evaluate(scenarios[name], 3)["both_over_better_single"] >= 0.97, name
    assert sd.evaluate(scenarios["trio-mixed-256"], 3)["both_over_better_single"] >= 1.03


def test_first_tokens_failing_against_the_odds_shorten_k_at_once(scenarios, monkeypatch):
    """The small draft, right on ~every easy token, meets a hard stretch: within two rounds
    of first tokens failing it drafts fewer tokens (a failed round costs its K's decodes, and
    its acceptance, ~50 rounds of memory, would keep K long for rounds: five at K=8 before)."""
    s = scenarios["trio-mixed-64"]
    steps = []
    observe = sd.LayeredPair.observe
    monkeypatch.setattr(sd.LayeredPair, "observe", lambda self, step: steps.append(step) or observe(self, step))
    sd.simulate(s, "both", 0, learned=sd.simulate(s, "both", 1)[2])
    runs, run = [], []
    for a, b in zip(steps, steps[1:]):
        if b.source == SMALL and b.drafted > 1 and not b.accepted and (run or a.accepted == a.drafted > 1):
            run.append(b.k)
        elif run:
            runs.append(run)
            run = []
    assert len(runs) >= 2, runs
    for run in runs:
        assert run.count(run[0]) <= 2, runs


def test_first_tokens_failing_far_against_the_odds_call_a_score_at_once(scenarios, monkeypatch):
    """First tokens of the small draft failing in a row where it was right on ~every token,
    less likely than ``shift_z`` errors, mean the text changed: a score of the large draft is
    due within four rounds of the run's first on average (its last rounds' bounds, which hold
    its rounds before the run, take about five)."""
    s = scenarios["trio-mixed-128"]
    steps, told = [], []
    observe, changed = sd.LayeredPair.observe, sd.LayeredPair._text_changed
    monkeypatch.setattr(sd.LayeredPair, "observe", lambda self, step: steps.append(step) or observe(self, step))
    monkeypatch.setattr(sd.LayeredPair, "_text_changed", lambda self: told.append(len(steps)) or changed(self))
    delays = []
    for seed in range(5):
        learned = sd.simulate(s, "both", seed + 10)[2]
        steps.clear(), told.clear()
        sd.simulate(s, "both", seed, learned=learned)
        for i in range(1, len(steps) - 2):
            if (steps[i - 1].source == SMALL == steps[i].source == steps[i + 1].source
                    and steps[i - 1].accepted == steps[i - 1].drafted > 1 and steps[i].drafted
                    and not steps[i].accepted and not steps[i + 1].accepted):
                delays.append(min((t - i for t in told if t > i), default=99))
    assert len(delays) >= 3 and sum(delays) / len(delays) <= 4.0, delays


def test_the_small_drafts_stays_that_lost_time_stop_switches_to_it(scenarios):
    """On 32-token stretches a switch to the small draft comes late in its easy stretch, and
    its failures at the hard one plus the large draft's return cost more than it saved: once
    its last stays lost time in all, scores no longer send the pair to it."""
    s = scenarios["trio-mixed-32"]
    on = sd.evaluate(s, 5)["both_over_better_single"]
    off = sd.evaluate(s, 5, Params(route_stays=0))["both_over_better_single"]
    assert on >= 0.97 and on > off + 0.01, (on, off)


def test_once_its_stays_lost_time_the_small_draft_is_not_scored(scenarios, monkeypatch):
    """A score of the small draft after its last stays lost time in all cannot send the pair
    to it, so none is made: on the real trio's 64-token stretches such scores cost ~6 ms an
    answer for nothing."""
    barred_scores, barred_rounds = 0, 0
    for rounds in _switching_answers(scenarios["trio-mixed-32"], monkeypatch, 10,
                                     lambda pair, step: (sum(pair._stays) < 0.0, pair.use, step.scored)):
        for barred, use, scored in rounds:
            if barred and use == LARGE:
                barred_rounds += 1
                barred_scores += scored == SMALL
    assert barred_rounds >= 50 and barred_scores == 0, (barred_rounds, barred_scores)


def test_after_a_stay_that_saved_time_the_pair_finds_the_next_easy_stretch_soon(scenarios, monkeypatch):
    """On the trio's 128-token stretches the large draft accepts everything, easy or hard, so
    only scores of the small one can tell that an easy stretch came back. Once the small
    draft's last stays saved time, a score that keeps the large one in use does not make the
    next one rarer: the pair is back on the small draft ~33 tokens into its second easy
    stretch (~106 when each such score halved the budget)."""
    s = scenarios["trio-mixed-128"]
    lags = []
    for rounds in _switching_answers(s, monkeypatch, 10, lambda pair, step: (pair.use, step.emitted)):
        at, back = 0, 128
        for use, emitted in rounds:
            if 256 <= at < 384 and use == SMALL:
                back = min(back, at - 256)
            at += emitted
        lags.append(back)
    assert sum(lags) / len(lags) < 50, lags


def test_a_switch_answers_the_change_that_called_for_it(scenarios, monkeypatch):
    """A change of text calls for a score; the score that switches answers it, and the new
    draft's acceptance shifts are counted afresh. The draft just left is not scored within a
    few rounds: such a score of a token or two kept the new draft in use and priced the next
    score of the old one at a short score's rate per token (~5x a long one's), so that on the
    real trio the next easy stretch was found ~300 tokens late."""
    s = scenarios["trio-mixed-128"]
    for rounds in _switching_answers(s, monkeypatch, 10, lambda pair, step: (pair.use, step.scored, step.scored_hits)):
        for i, ((before, _, _), (after, _, _)) in enumerate(zip(rounds, rounds[1:])):
            if after != before:                          # a switch away from ``before``
                soon = [len(hits) for _, scored, hits in rounds[i + 1:i + 4] if scored == before]
                assert not any(n < 4 for n in soon), (i, before, soon)


def test_layered_rounds_are_entered_at_what_they_cost_where_they_ran(scenarios):
    """A layered round's drafting is priced on the drafts' steps and the device's batch shape;
    where such rounds ran, what they cost over that price is learned and carried into the
    next answer, so a pair whose large draft batches dearer than the target does (a real CPU's
    small model) does not go layered again on a price it never pays."""
    from localspec.engine.policy.layered import PAID

    learned = sd.simulate(scenarios["cpu-mixed-256"], "both", 1)[2]
    paid, priced = learned[PAID]
    assert priced > 0 and paid == pytest.approx(priced, rel=0.01)   # the simulator runs them as priced
    assert sd.LayeredPair.build(1, 8, None, True, learned)._cheaper()
    dear = sd.LayeredPair.build(1, 8, None, True, learned | {PAID: [3 * priced, priced]})
    assert dear._paid == [3 * priced, priced] and not dear._cheaper()
    assert sd.LayeredPair.build(1, 8, None, True, learned | {PAID: "x"})._paid == [0.0, 0.0]


def test_a_paused_idle_draft_is_still_scored(scenarios, monkeypatch):
    """The small draft pauses itself in a hard stretch while the large one drafts; it is still
    scored (a paused draft's own probes come rarely and may fall on hard text), and a score that
    finds it faster resumes it: it drafts in the later easy stretches too."""
    s = scenarios["trio-mixed-256"]
    learned = sd.simulate(s, "both", 1)[2]
    pair = []
    build = sd.LayeredPair.build
    monkeypatch.setattr(sd.LayeredPair, "build", lambda *a, **kw: pair.append(build(*a, **kw)) or pair[-1])
    sd.simulate(s, "both", 0, learned=learned)
    assert pair[0].small.pauses >= 1 and pair[0].switches >= 3
    assert pair[0].layerings == 0          # (layered rounds would not pay here: see the next test)


def test_a_paused_idle_draft_does_not_probe_while_the_other_drafts(scenarios, monkeypatch):
    """Text the small draft fails everywhere and the large one gets right (the trio's hard
    text): the small draft pauses itself, and a probe of it would fail a whole round, a target
    verify for one token, where the large draft's round gives nine. While the large one
    drafts, the small one does not probe (scores of it tell as much, for a catch-up): it
    drafts no round after its first answer, and the pair keeps up with the large draft alone
    (without the rule it loses more than the 0.5% a mechanism must earn)."""
    s = scenarios["trio-hard"]
    rounds = []
    observe = sd.LayeredPair.observe
    monkeypatch.setattr(sd.LayeredPair, "observe",
                        lambda self, step: (step.source == SMALL and rounds.append(step)) or observe(self, step))
    learned = sd.simulate(s, "both", 1)[2]
    rounds.clear()
    sd.simulate(s, "both", 0, learned=learned)
    assert not rounds, rounds
    sd.simulate(s, "both", 0, Params(quiet_idle=False), learned=learned)
    assert len(rounds) >= 3 and all(r.probe for r in rounds), rounds
    assert sum(r.accepted == 0 for r in rounds) >= len(rounds) - 1, rounds   # (it gets 1% of this text right)
    monkeypatch.undo()
    on = sd.evaluate(s, 3)["both_over_better_single"]
    off = sd.evaluate(s, 3, Params(quiet_idle=False))["both_over_better_single"]
    assert on >= 0.99 and on > off + 0.005, (on, off)


def test_layered_rounds_are_priced_on_the_small_drafts_hits():
    """Text half easy (the small draft drafts it, right on every token) and half hard (the
    large one drafts it; a score finds the small draft wrong on every token): layered blocks
    there would bring 3 tokens in the easy half and 1 in the hard, more blocks a token than
    the small draft's mean agreement says. The scores' hits stand for all the large draft's text."""
    from localspec.engine.policy.recent import SmallHits

    hits = SmallHits(512)
    for use in [SMALL] * 8 + [LARGE] * 8:
        hits.add(Step(index=0, k=8, drafted=8, accepted=8, emitted=9, draft_seconds=0.0, verify_seconds=0.0,
                      drafting=True, draft_steps=8, verify_batch=9, source=use,
                      scored=SMALL if use == LARGE else "", scored_hits=(False,) * (3 if use == LARGE else 0)), use)
    blocks, tokens = hits.blocks(2)
    # easy: 64 hits, 22 blocks bringing 65 tokens, standing for 72 tokens; hard: 24 hits, one a block, for 72
    assert blocks == pytest.approx(22 * 72 / 64 + 72) and tokens == pytest.approx(65 * 72 / 64 + 72)
    a = 64 / 88                             # the mean agreement over the hits
    assert blocks / tokens > 1.2 / (1 + a + a * a)


def test_layered_rounds_on_text_neither_draft_predicts_give_way_at_once(scenarios):
    """An answer that starts layered (the last one's text alternated) on text neither draft
    predicts (2% accepted): even the large draft's acceptance at its upper bound loses to the
    target alone, so layered rounds leave within a few dozen tokens and the large draft's
    policy pauses. Left to the window's verdict (``layer_quit`` off) they ran ~470 of 512
    tokens at 0.79 of the target alone."""
    from dataclasses import replace

    s = scenarios["mixed-64"]
    neither = replace(s, base=replace(s.base, tokens=512), stretches=(("neither", 4096),),
                      drafts=tuple(replace(d, accept={**d.accept, "neither": (0.02,)}) for d in s.drafts))
    target = sd.simulate(neither, "target", 0)
    for params, least, most, large in ((None, 0.93, 1.0, range(0, 64)),
                                       (params_with({"layer_quit": False}), 0.0, 0.85, range(400, 513))):
        after_mixed = sd.simulate(s, "both", 10, params)[2]
        assert after_mixed["in_use"] == LAYERED
        tokens, seconds, _, used = sd.simulate(neither, "both", 0, params, after_mixed)
        ratio = tokens / seconds / (target[0] / target[1])
        assert least <= ratio <= most and used[LARGE] in large, (params, ratio, used)
