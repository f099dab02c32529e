"""The adaptive policy's parts and its simulator: deterministic, on a simulated clock."""

import json
import random
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from localspec.bench import simulate as sim
from localspec.engine.events import Step
from localspec.engine.policy import DEFAULT, SCHEMA, AdaptivePolicy, Params, State
from localspec.engine.policy.acceptance import AcceptanceModel
from localspec.engine.policy.costs import CostModel, Samples, costs_by_size, monotone
from localspec.errors import BadInput

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scripts" / "policy_scenarios.json"
GPU_GRAPH = ROOT / "scripts" / "gpu_graph_scenarios.json"


def test_costs_by_size_interpolate_and_extend():
    assert costs_by_size([], 5) == []
    one = costs_by_size([(2, 0.010)], 4)
    assert one[2] == pytest.approx(0.010) and one[1] == pytest.approx(0.00925) and one[4] == pytest.approx(0.0115)
    t = costs_by_size([(1, 0.010), (4, 0.013), (6, 0.021)], 9)
    assert t[2] == pytest.approx(0.011) and t[5] == pytest.approx(0.017)
    assert t[9] == pytest.approx(0.021 * 9 / 6), "never more per token than the largest measured batch"


def test_noisy_costs_are_fitted_never_falling_with_the_batch_size():
    """A batch measured cheaper than a smaller one is pooled with it (weighted by samples),
    not clamped to it: clamping made every noisy reading of a flat GPU cost dearer."""
    fit = dict(monotone([(1, 0.020, 8), (2, 0.019, 8), (4, 0.022, 2)]))
    assert fit[1] == fit[2] == pytest.approx(0.0195) and fit[4] == pytest.approx(0.022)


def test_a_batch_measured_in_a_spike_costs_no_more_than_its_plain_steps():
    """Seen on a loaded CPU: a plain step of 2 ms and one sample of a batch of two at 20 ms
    (a spike) made even an all-accepted draft look like a loss, and paused a draft that
    pays. One decode of b tokens never costs more than b plain steps."""
    c = CostModel(DEFAULT, 8)
    for _ in range(3):
        c.add_verify(1, 0.002)
    c.add_verify(2, 0.020)
    assert c.table()[2] <= 2 * 0.002 + 1e-12


def test_a_first_decode_extra_needs_two_measurements_and_is_carried():
    """A GPU's first decode of each size costs more: measured as the first over the second,
    it is taken out of a size's lone first sample once two or more agree; one such
    difference was a spike on a CPU (10 ms over a 4 ms step) and froze K at 1-2."""
    c = CostModel(DEFAULT, 8)
    c.add_verify(1, 0.014)
    c.add_verify(1, 0.004)             # one extra of 10 ms: maybe a spike
    c.add_verify(9, 0.031)
    assert c.first_extra() == 0.0 and c.to_dict()["verify"]["9"] == pytest.approx(0.031)
    c.add_verify(9, 0.011)             # a second one: a graph build
    c.add_verify(5, 0.017)             # ... so a lone first sample of 5 reads 17 - 10 ms
    assert c.first_extra() == pytest.approx(0.010) and c.to_dict()["verify"]["5"] == pytest.approx(0.007)
    seeded = CostModel(DEFAULT, 8)
    seeded.seed(json.loads(json.dumps(c.to_dict())))
    seeded.add_verify(3, 0.016)
    assert seeded.first_extra() == pytest.approx(0.010) and seeded.to_dict()["verify"]["3"] == pytest.approx(0.006)
    small = CostModel(DEFAULT, 8)      # an extra under half its decode is noise (a CPU's long decodes)
    for b, first, second in ((1, 0.0040, 0.0038), (6, 0.017, 0.0145), (9, 0.018, 0.015)):
        small.add_verify(b, first)
        small.add_verify(b, second)
    assert small.first_extra() == 0.0


def test_a_cost_s_error_reads_its_samples_noise_not_their_middle_half_s():
    """The mean leaves out the outer quarters (a busy machine's spikes); their spread read from
    the kept middle half alone is about 0.4 of the noise, every cost read 2.6x too sure.
    Winsorized (the outer quarters at the kept ones' ends), one sample's error reads the noise
    and the mean's its spread over repeats."""
    rnd = random.Random(3)
    sds, ses, means = [], [], []
    for _ in range(400):
        s = Samples(16)
        for _ in range(16):
            s.add(1.0 + 0.1 * rnd.gauss(0.0, 1.0))
        sds.append(s.rel_sd)
        ses.append(s.rel_se)
        means.append(s.mean)
    assert 0.09 <= statistics.mean(sds) <= 0.115
    assert statistics.mean(ses) == pytest.approx(statistics.pstdev(means), rel=0.15)


@pytest.mark.parametrize("blend, expected", [(True, (0.0077 + 0.011) / 2), (False, 0.0077)])
def test_the_plain_step_s_one_fresh_sample_is_averaged_with_its_carried_cost(blend, expected):
    """Every prediction is over the plain step; one sample 30% low (three errors, after a
    refresh) read alone paused a pair that pays (cpu-compute-bound-half+noise10). Until a
    second sample is read, it is averaged with the carried cost, moved as the sizes measured
    again moved (10% dearer here: this context)."""
    params = replace(DEFAULT, carried_blend=blend)
    earlier = CostModel(params, 8)
    for _ in range(6):
        earlier.add_verify(1, 0.010)
        earlier.add_verify(5, 0.014)
    c = CostModel(params, 8)
    c.seed(json.loads(json.dumps(earlier.to_dict())))
    for _ in range(6):
        c.add_verify(5, 0.0154)
    c.add_verify(1, 0.0077)
    assert c.plain() == pytest.approx(expected)
    assert c.table()[1] == pytest.approx(c.plain())      # the predictions read it too
    c.add_verify(1, 0.0080)     # the first left out (maybe a graph build): still one read
    assert c.table()[1] == pytest.approx(c.plain()) == pytest.approx((0.0080 + 0.011) / 2 if blend else 0.0080)


def test_carried_costs_of_one_sample_do_not_move_the_plain_step_s_blend():
    """A GPU's first decode of a size (a graph being built) carried as that size's cost, read
    against its later decodes, says every cost moved down: the plain step blended with it
    read far cheaper than its own sample and paused a pair that pays (a predicted 1.43x read
    0.79x; gpu-1b-small-draft+h200-first-decodes+short-seed). Here a 0.51x move."""
    earlier = CostModel(DEFAULT, 8)
    for _ in range(6):
        earlier.add_verify(1, 0.010)
    earlier.add_verify(5, 0.030)          # its only decode there: maybe a graph build
    c = CostModel(DEFAULT, 8)
    c.seed(json.loads(json.dumps(earlier.to_dict())))
    assert c.lone == {5}
    for _ in range(6):
        c.add_verify(5, 0.0154)
    c.add_verify(1, 0.0077)
    assert c.plain() == pytest.approx(0.0077) == pytest.approx(c.table()[1])


@pytest.mark.parametrize("trial_z, dropped", [(DEFAULT.trial_z, True), (DEFAULT.z, False)])
def test_carried_acceptance_another_text_refutes_is_dropped_within_a_short_answer(trial_z, dropped):
    """A new answer may read another text: carried acceptance of 0.5 against twelve rounds of
    this one's first tokens all accepted. Dropping carried evidence on odds of ~6 (``trial_z``
    1, not a pause's 1.645: a wrong drop costs only that evidence) reads the text's own rate
    before a short answer ends."""
    p = replace(DEFAULT, trial_z=trial_z)
    earlier = AcceptanceModel(p, 8)
    for i in range(40):
        earlier.judge(2, 2, i % 2)
    a = AcceptanceModel(p, 8)
    a.seed(earlier.to_dict())
    for _ in range(12):
        a.judge(2, 2, 2)
    assert (a.rates()[1][1] > 0.95) is dropped
    assert a.rates()[1][1] > 0.8        # (kept, it yields more slowly)


def test_acceptance_decays_as_one_factor_exactly():
    a = AcceptanceModel(DEFAULT, 8)
    eager = [[0.0] * 9 for _ in range(4)]
    for i in range(3000):
        drafted, accepted = 8 if i % 3 else 0, i % 9
        a.judge(8, drafted, min(accepted, drafted))
        for arr in eager:
            arr[:] = [x * DEFAULT.decay for x in arr]
        for j in range(1, min(8, drafted + 1) + 1):
            eager[0][j] += 1
            if j <= drafted:
                eager[1][j] += 1
                if j <= min(accepted, drafted) + 1:
                    eager[2][j] += 1
                    if j <= min(accepted, drafted):
                        eager[3][j] += 1
    for own, ref in zip(a.to_dict()["positions"], eager):
        assert own == pytest.approx(ref, rel=1e-9, abs=1e-12)


def _judge_k4(model: AcceptanceModel, rate: float, stride: int, rounds: range) -> AcceptanceModel:
    """Rounds of K=4 where each position is accepted with chance ``rate`` (a fixed pattern of
    round index times ``stride``: deterministic)."""
    for i in rounds:
        accepted = 0
        while accepted < 4 and ((i * stride + accepted * 3) % 100) < rate * 100:
            accepted += 1
        model.judge(4, 4, accepted)
    return model


def _carried(rate: float, params: Params = DEFAULT) -> AcceptanceModel:
    """A model seeded with what 200 rounds of K=4 at ``rate`` learned."""
    earlier = _judge_k4(AcceptanceModel(params, 8), rate, 7, range(200))
    model = AcceptanceModel(params, 8)
    model.seed(json.loads(json.dumps(earlier.to_dict())))
    return model


def test_carried_acceptance_this_text_refutes_is_dropped_where_refuted():
    """An answer starts from another text's acceptance (3%, a few tokens' worth); this one's
    drafts are accepted. Once position 1's verdicts are 1/beyond(trial_z) (~6) times likelier on
    this text's counts alone than pooled with the carried ones, the carried are dropped there:
    it reads this text's at once, not a blend that takes tens of rounds to rise; positions
    this text has not judged keep theirs."""
    for trial in (True, False):
        model = _carried(0.03, replace(DEFAULT, carried_trial=trial))
        before = model.to_dict()["positions"]
        rounds = 0
        while rounds < 5 and not (trial and model.odds[1] == 0.0):
            model.judge(1, 1, 1)
            rounds += 1
        _, acc = model.rates()
        if trial:
            assert rounds == 2 and acc[1] > 0.7, (rounds, acc)   # (3 at odds of ~20)
            after = model.to_dict()["positions"]
            assert all(a[3] == pytest.approx(b[3] * DEFAULT.decay ** rounds) for a, b in zip(after, before))
        else:
            assert acc[1] < 0.5, acc


def test_carried_acceptance_this_text_bears_out_stays_and_the_trial_ends():
    model = _carried(0.7)
    carried = model.to_dict()["positions"]
    _judge_k4(model, 0.7, 11, range(1))
    assert model.fresh is not None
    _judge_k4(model, 0.7, 11, range(1, 200))
    assert model.fresh is None, "the carried evidence decayed below a position's prior: no more trial"
    fresh = _judge_k4(AcceptanceModel(DEFAULT, 8), 0.7, 11, range(200))
    own, alone = model.to_dict()["positions"], fresh.to_dict()["positions"]
    assert own[2][1] == pytest.approx(alone[2][1] + carried[2][1] * DEFAULT.decay ** 200), "never dropped"


def test_a_resume_by_this_texts_probe_drops_carried_acceptance_that_read_it_as_harder():
    """A resume is this text's verdict against carried evidence that kept drafting paused:
    where this text's own counts read it easier, they replace the carried at every position
    (a blend would hold K low for tens of rounds); carried evidence that read the text as
    easier than this text's counts stays on trial (the resume did not come from it)."""
    for rate, accepted, dropped in ((0.03, 1, True), (0.9, 0, False)):
        model = _carried(rate)
        model.judge(1, 1, accepted, probe=True)
        own = model.fresh.rates()[1][1:]
        model.thin(resumed=True)
        assert (model.fresh is None) is dropped, rate
        if dropped:
            assert model.rates()[1][1:] == pytest.approx(own)


def test_a_paused_start_resumed_by_a_probe_drafts_at_this_texts_acceptance():
    """An answer after one the draft could not predict (3% a token) starts paused and probes
    at once; every token of this text is accepted. The probe that resumes drafting sets K from
    this text's acceptance (K of 4 or more), not from a blend with the carried (K=1)."""
    for trial in (True, False):
        params = replace(DEFAULT, carried_trial=trial)
        first = _answer(AdaptivePolicy(1, 8, params=params), target=0.020, draft=0.0018, accept=0.03)
        p = AdaptivePolicy(1, 8, learned=first.learned(), params=params)
        assert p.state is State.PAUSED and p.probe_every == 1
        _answer(p, target=0.020, draft=0.0018, accept=1.0, rounds=2)
        assert p.drafting and p.probes == p.draft_rounds == 1, "a plain round, then the probe: all accepted, it resumes"
        assert (p.k >= 4 and p.acc.mean > 0.6) if trial else (p.k == 1 and p.acc.mean < 0.4), (p.k, p.acc.mean)


def _with_and_without(s: sim.Scenario, mechanism: str) -> tuple[float, float]:
    """The default's tokens per second on ``s`` (2 seeds), with every mechanism and with
    ``mechanism`` switched off (its entry in the simulator's ABLATIONS)."""
    return sim._default_tps(s, 2, Params()), sim._default_tps(s, 2, sim.params_with(sim.ABLATIONS[mechanism]))


def test_a_text_the_draft_cannot_predict_after_one_it_could_pauses_sooner():
    """The failure dropping refuted carried acceptance fixes, as a simulation (a draw of
    ``--random 300``): after an answer a draft predicted at 0.7-0.9 a position, one it
    predicts at 0-0.15, where the target alone is best; the carried evidence kept drafting
    going for rounds."""
    s = sim.Scenario.from_dict({"name": "hard-after-easy", "target_ms": [68.27, 80.39, 92.51, 104.63, 116.75,
                                128.87, 140.99, 153.11, 165.23], "draft_ms": 3.444,
                                "accept": [0.026, 0.092, 0.0, 0.022, 0.129, 0.156, 0.089, 0.141], "tokens": 128,
                                "seed": {"accept": [0.908, 0.909, 0.831, 0.859, 0.798, 0.687, 0.721, 0.78]}})
    with_it, without = _with_and_without(s, "carried acceptance on trial")
    assert with_it > 1.03 * without, (with_it, without)


def test_one_plain_step_sample_far_off_does_not_pause_a_pair_that_pays():
    """The failure averaging the plain step's lone fresh sample with its carried cost fixes, as
    a simulation: in cpu-compute-bound-half+noise10's answer 4 (after answer 12) the first plain
    step measured, at token 48, read 30% low; alone it turned K=2's predicted 1.23x into 0.88x
    and paused, for 85 tokens, a pair that pays."""
    s = next(x for x in sim.load(str(SCENARIOS)) if x.name == "cpu-compute-bound-half+noise10")

    def tps(params: Params) -> float:
        learned = sim.simulate(s.earlier(), "default", 12, params)[2]
        tokens, seconds, _ = sim.simulate(s, "default", 4, params, learned)
        return tokens / seconds
    without = tps(sim.params_with(sim.ABLATIONS["a plain step's lone fresh sample averaged with its carried cost"]))
    assert tps(Params()) > 1.04 * without


def test_a_text_the_draft_can_predict_after_one_it_could_not_is_probed_at_once():
    """The failure a paused start's early probe fixes, as a simulation (a draw of ``--random
    300``): an MTP head that predicted an answer's text at 0-0.25 a position, then one it
    predicts at 0.85-1.0; the next answer (128 tokens) started paused, and its first probe
    came at the budget's gap, 17-22 tokens in; at once, it resumes sooner."""
    s = sim.Scenario.from_dict({"name": "easy-after-hard", "target_ms": [6.7379, 8.1587, 9.5796, 11.0005, 12.4214,
                                13.8422, 15.2631, 16.684, 18.1049], "draft_ms": 0.1062, "drafter": "mtp",
                                "accept": [0.891, 0.927, 0.846, 0.898, 0.896, 0.933, 1.0, 1.0], "tokens": 128,
                                "then": {"at": 36, "accept": [0.802, 0.805, 0.8, 0.784, 0.79, 0.72, 0.61, 0.61]},
                                "seed": {"accept": [0.077, 0.13, 0.248, 0.175, 0.083, 0.038, 0.0, 0.024]}})
    with_it, without = _with_and_without(s, "... first probe at once")
    assert with_it > 1.10 * without, (with_it, without)


def _answer(policy, target=0.010, draft=0.008, accept=0.6, rounds=300, clock=None):
    """Rounds of a lone drafter under a simple cost model (every draft accepted with chance
    ``accept`` per token); the policy reads the simulated clock."""
    import random

    rnd, now = random.Random(1), [0.0]
    policy.clock = lambda: now[0]
    for i in range(rounds):
        quiet = policy.quiet_rounds()
        if quiet:
            now[0] += quiet * target
            policy.passed(quiet, quiet)
            continue
        k = policy.next_k()
        a = 0
        while a < k and rnd.random() < accept:
            a += 1
        v, d = target * (1 + 0.05 * k), draft * k
        now[0] += v + d
        policy.observe(Step(i, k, k, a, a + 1, d, v, policy.drafting, draft_steps=k, verify_batch=k + 1,
                            probe=policy.probe, sync_tokens=1 if k else 0, sync_seconds=draft if k else 0.0))
    return policy


def test_a_probe_whose_gain_pays_for_the_next_brings_it_at_once():
    """A paused start (the last answer's text not predicted at all), a draft at 0.3 of a
    target step: one accepted probe leaves the estimate below a gain, so drafting stays
    paused, but it saved 13 ms over its two plain steps, more than the next probe is expected
    to cost: the next comes on the next round (at the budget's gap, 19 tokens, without the
    rule). A failed probe after it spends the credit, and the gap is the budget's again."""
    for credit in (True, False):
        params = replace(DEFAULT, probe_credit=credit, early_share=0.0)   # (a paused start's own credit: below)
        first = _answer(AdaptivePolicy(1, 8, params=params), target=0.020, draft=0.006, accept=0.0)
        p = AdaptivePolicy(1, 8, learned=first.learned(), params=params)
        _answer(p, target=0.020, draft=0.006, accept=1.0, rounds=2)   # a plain round, then the probe
        assert p.state is State.PAUSED and p.probes == 1 and p.predicted_speedup < 1.0
        if not credit:
            assert p.probe_every >= DEFAULT.probe_min and p.credit == 0.0
            continue
        assert p.probe_every == 1 and p.credit == pytest.approx(2 * 0.020 - 0.006 - 0.021)
        _answer(p, target=0.020, draft=0.006, accept=0.0, rounds=2)
        assert p.state is State.PAUSED and p.probes == 2
        assert p.credit == 0.0 and p.probe_every >= DEFAULT.probe_min


def test_a_paused_start_probes_at_once_on_a_share_of_the_last_answer_s_budget():
    """A 27B target on a GPU and a 0.5B draft (a tenth of a step), paused from the start by
    a last answer (256 tokens) whose text it could not draft: the new answer may read
    another text, and the first probes tell the most. It opens with a quarter of that
    answer's probe budget as credit, scaled by the share of a step drafting could save at
    best; a failed probe spends its cost and the next comes at once while the rest covers
    it. A probe that drafted nothing (a lookup without a match) told nothing: the credit
    goes. Without the credit the gap after a failed probe is the budget's (8 tokens)."""
    s = next(x for x in sim.load(str(SCENARIOS)) if x.name == "gpu-pays-after-hard-prompt")
    learned = sim.simulate(s.earlier(), "default", 1)[2]
    assert learned["tokens"] == 256 and learned["drafting"] is False
    p = AdaptivePolicy(1, 8, learned=learned)
    step = p.plain_step_seconds()
    assert p.state is State.PAUSED and p.probe_every == 1
    assert 0.1 * step < p.credit < DEFAULT.early_share * DEFAULT.probe_budget * 256 * 1.1 * step
    opened = p.credit
    _answer(p, target=0.020, draft=0.0018, accept=0.0, rounds=2)   # a plain round, then the probe: failed
    assert p.state is State.PAUSED and p.probes == 1 and 0.0 < p.credit < opened and p.probe_every == 1
    assert p.next_k() == 0
    p.observe(Step(2, 0, 0, 0, 1, 0.0, 0.020, False))
    assert p.next_k() == 1 and p.probe
    p.observe(Step(3, 1, 0, 0, 1, 1e-4, 0.020, False, draft_steps=1, probe=True))   # it drafted nothing
    assert p.probes == 2 and p.credit == 0.0 and p.probe_every >= DEFAULT.probe_min
    off = AdaptivePolicy(1, 8, learned=learned, params=replace(DEFAULT, early_share=0.0))
    _answer(off, target=0.020, draft=0.0018, accept=0.0, rounds=2)
    assert off.state is State.PAUSED and off.probes == 1 and off.probe_every >= DEFAULT.probe_min


def test_a_losing_pair_learned_once_starts_the_next_answer_paused_and_quiet():
    first = _answer(AdaptivePolicy(1, 8), accept=0.5)     # K=1 reads 0.81 of the target alone
    assert first.state is State.PAUSED
    learned = json.loads(json.dumps(first.learned()))
    assert learned["version"] == SCHEMA
    second = AdaptivePolicy(1, 8, learned=learned)
    assert second.seeded and second.state is State.PAUSED
    note = second.opening_note()
    assert "from the last run" in note and "a probe on the next round" in note and second.opening_note() is None
    assert second.probe_every == 1, "the budget's gap fits in the last answer: a probe at once"
    learned["tokens"] = 20     # a short last answer: the probe waits for the gap
    second = AdaptivePolicy(1, 8, learned=learned)
    assert second.state is State.PAUSED and 20 < second.probe_every == AdaptivePolicy(
        1, 8, learned={**learned, "tokens": None}).probe_every
    quiet = second.quiet_rounds()
    assert quiet == second.probe_every - 1 > 0, "the generator runs these rounds without asking"
    second.passed(quiet, quiet)
    assert second.since_probe == quiet and second.next_k() == 0
    second.observe(Step(0, 0, 0, 0, 1, 0.0, 0.010, False))
    assert second.next_k() > 0 and second.probe, "the probe is due"


@pytest.mark.parametrize("learned", [{"version": 1, "verify": {"1": 0.01}}, {"version": SCHEMA, "costs": "x"},
                                     {"version": SCHEMA, "costs": {"verify": {"1": "a"}}, "acceptance": {}},
                                     "damaged", None])
def test_damaged_or_older_learned_state_starts_from_nothing(learned):
    p = AdaptivePolicy(1, 8, learned=learned)
    assert not p.seeded and p.state is State.MEASURING and p.k == DEFAULT.first_k


def test_bad_draft_lengths():
    with pytest.raises(BadInput):
        AdaptivePolicy(0, 8)
    with pytest.raises(BadInput):
        AdaptivePolicy(5, 2)


def test_scenarios_are_checked_with_one_line_errors():
    good = {"name": "x", "target_ms": [10, 11], "draft_ms": 1, "accept": [0.5], "tokens": 64}
    assert sim.Scenario.from_dict(good).drafter == "model"
    assert sim.Scenario.from_dict(dict(good, draft_ms=0)).drafter == "ngram"
    for bad in ({"name": "x"}, dict(good, accept=[1.5]), dict(good, tokens=0), dict(good, drafter="gpu"),
                dict(good, noise=1.0), dict(good, loop_ms=[1]), dict(good, then={"at": "soon"})):
        with pytest.raises(BadInput) as e:
            sim.Scenario.from_dict(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(BadInput, match="unknown policy parameter"):
        sim.params_with({"nope": 1})


def test_the_simulator_is_deterministic_and_shares_draws_between_settings():
    s = sim.Scenario.from_dict({"name": "n", "target_ms": [20, 20.3, 20.6], "draft_ms": 2, "noise": 0.1,
                                "accept": [0.8, 0.7], "tokens": 200})
    assert sim.simulate(s, "default", 3) == sim.simulate(s, "default", 3)
    assert sim.evaluate(s, 2) == sim.evaluate(s, 2)
    # the target alone's answer costs the same draws whoever else ran
    assert sim.simulate(s, "target", 3)[:2] == sim.simulate(s, "target", 3)[:2]


def test_no_setting_drafts_past_the_end_of_the_answer():
    """As the generator clamps K to max_tokens, the simulator drafts none past an answer's
    end: K=8 over 10 tokens, all accepted, is a round of 9 and a plain step (1 + 9 ms)."""
    s = sim.Scenario.from_dict({"name": "end", "target_ms": list(range(1, 10)), "draft_ms": 0,
                                "accept": [1.0], "tokens": 10})
    tokens, seconds, _ = sim.simulate(s, "K=8", 0)
    assert tokens == 10 and seconds == pytest.approx(0.010)


def test_random_scenarios_are_seeded_valid_and_varied():
    drawn = sim.random_scenarios(60, seed=5)
    assert drawn == sim.random_scenarios(60, seed=5) and drawn != sim.random_scenarios(60, seed=6)
    scenarios = [sim.Scenario.from_dict(d) for d in drawn]     # each passes the format's checks
    assert {s.drafter for s in scenarios} == {"model", "mtp", "ngram"}
    assert any(s.then_at for s in scenarios) and any(s.noise for s in scenarios)
    assert {s.tokens for s in scenarios} == {32, 64, 128, 256, 512, 1024}
    assert all(list(s.target_ms) == sorted(s.target_ms) for s in scenarios)
    with pytest.raises(BadInput):
        sim.random_scenarios(0)


def test_the_informed_setting_is_the_fixed_one_the_scenario_s_facts_predict_fastest():
    """Told the costs and acceptance: on a flat 20 ms step with a 1 ms draft and every token
    accepted the longest draft (K=8: 9 tokens in 28.4 ms); where a verify of b tokens costs b
    steps the target alone; across a change of acceptance the setting that serves the whole
    answer (K=8 where the first eighth rejects every draft and the rest accepts all; the
    target alone where 15 sixteenths reject); a lookup that matches one round in ten, a
    verify costing a step a token, pays nothing. The evaluation reads it on the draws
    beside the best fixed."""
    def told(**kw):
        d = {"name": "x", "target_ms": [20.0 + 0.3 * i for i in range(9)], "draft_ms": 1.0,
             "accept": [1.0], "tokens": 256} | kw
        return sim.informed(sim.Scenario.from_dict(d))
    assert told() == "K=8"
    assert told(target_ms=[2.0 * b for b in range(1, 10)], draft_ms=0.2, accept=[0.9]) == "target"
    assert told(accept=[0.0], then={"at": 32, "accept": [1.0]}) == "K=8"
    assert told(accept=[0.0], then={"at": 240, "accept": [1.0]}) == "target"
    assert told(draft_ms=0.0, match=0.1, accept=[0.5], target_ms=[1.0 * b for b in range(1, 10)]) == "target"
    s = sim.Scenario.from_dict({"name": "y", "target_ms": [20.0 + 0.3 * i for i in range(9)], "draft_ms": 1.0,
                                "accept": [0.8], "tokens": 64})
    out = sim.evaluate(s, 1)
    assert out["informed"]["setting"] == sim.informed(s)
    told_tps = out["settings"][out["informed"]["setting"]]
    assert out["informed"]["over_best"] == pytest.approx(told_tps / out["best"]["tps"], abs=1e-3)


def test_the_default_holds_its_place_in_the_shipped_noiseless_scenarios():
    """The goal (default / best fixed >= 0.97, median >= 0.99) is measured by the script with
    several seeds; here the noiseless scenarios with two seeds, deterministically (the least,
    cpu-context-drift, reads 0.966 on these seeds, 0.988 over the script's 8: which probe
    meets which draw moves a scenario by a point or two either way on two)."""
    scenarios = [s for s in sim.load(str(SCENARIOS)) if not s.noise]
    out = sim.report(scenarios, 2)
    assert out["min_default_over_best"] >= 0.96, out
    assert out["median_default_over_best"] >= 0.985, out
    by_name = {r["name"]: r for r in out["scenarios"]}
    assert by_name["draft-too-dear"]["best"]["setting"] == "target"
    assert by_name["near-break-even-loses"]["best"]["setting"] == "target"


@pytest.mark.parametrize("mechanism, scenario", [
    ("pause on a clear expected loss", "cpu-lookup-finds-nothing+noise10"),
    ("common cost level (drift with context)", "cpu-context-drift+noise10"),
    ("loop time priced", "cpu-tiny-target-python-bound"),
    ("probes weigh more while paused", "acceptance-recovers-halfway"),
    ("failed probes back off", "cpu-lookup-finds-nothing+noise10"),
    ("a probe paid for by the ones before: at once", "gpu-pays-after-hard-prompt+noise10"),
    ("... the next at once on a share of the last answer's budget", "gpu-pays-after-hard-prompt"),
    ("start paused from what was learned", "cpu-draft-loses-after-a-prompt-it-paid"),
    ("the policy's own time priced apart", "cpu-tiny-target-lookup-rare-matches"),
])
def test_each_mechanism_earns_its_place(mechanism, scenario):
    """Switched off, each mechanism costs its scenario at least 0.5% (the failure it fixes)."""
    s = next(x for x in sim.load(str(SCENARIOS)) if x.name == scenario)
    with_it, without = _with_and_without(s, mechanism)
    assert without < 0.995 * with_it, (with_it, without)


def test_a_probe_drafts_the_k_in_force_so_a_cheap_draft_is_probed_soon():
    """A 27B target on a GPU and a 0.5B draft whose last prompt's text it could not draft
    (5% accepted): the next answer starts paused, at K=1. Its text is one the draft knows. A
    probe of that K costs a tenth of a step beyond the plain step it replaces, so the budget
    allows one every 8 tokens (its floor); a probe of 4 costs about four times that, and came
    after ~40 tokens at the target's speed, most of a short answer (the gaps read here without
    the first probe at once). A draft as dear as the demo pair's is probed at the budget's
    pace all the same (test_a_draft_that_pays_only_if_every_token_were_accepted_probes_within_the_budget)."""
    s = next(x for x in sim.load(str(SCENARIOS)) if x.name == "gpu-pays-after-hard-prompt")
    learned = {**sim.simulate(s.earlier(), "default", 1)[2], "tokens": None}
    p = AdaptivePolicy(1, 8, learned=learned)
    assert p.state is State.PAUSED and p.probe_len == p.k == 1 and p.probe_every == DEFAULT.probe_min
    four = AdaptivePolicy(1, 8, learned=learned, params=Params(probe_k=4))
    assert four.state is State.PAUSED and four.probe_len == 4 and four.probe_every > 3 * DEFAULT.probe_min
    out = sim.evaluate(s, 2)
    assert out["default_over_best"] >= 0.9, out
    without = sim.evaluate(s, 2, Params(probe_k=4))
    assert without["default_over_best"] < out["default_over_best"] - 0.1, (out, without)


def test_a_lookup_that_rarely_matches_pauses_where_the_policy_costs_what_a_match_saves():
    """A 0.16 ms target, a lookup matching one round in five (all accepted), the policy's own
    0.12 ms a round: drafting loses, because a pause's plain rounds skip the policy. Priced
    into plain rounds as well, that time made drafting look as good as ever (0.70 of the
    target alone, as prompt lookup on the losing pair at 512 tokens read on the wall clock)."""
    s = next(x for x in sim.load(str(SCENARIOS)) if x.name == "cpu-tiny-target-lookup-rare-matches")
    out = sim.evaluate(s, 1)
    assert out["best"]["setting"] == "target" and out["default_over_best"] >= 0.97, out
    without = sim.evaluate(s, 1, sim.params_with(sim.ABLATIONS["the policy's own time priced apart"]))
    assert without["default_over_best"] < 0.8, without


def test_the_policy_s_own_time_is_a_drafting_round_s_cost_only():
    clock = sim.SimClock()
    pol = AdaptivePolicy(1, 8, clock=clock)
    for i in range(6):
        k = pol.next_k()
        clock.now += 0.0001 * k + 0.0009 + 0.00005    # the decodes, and 50 us of the loop's own
        clock.charge = 0.0002
        pol.observe(Step(index=i, k=k, drafted=k, accepted=k, emitted=k + 1, draft_seconds=0.0001 * k,
                         verify_seconds=0.0009, drafting=pol.drafting, draft_steps=k, verify_batch=k + 1))
    c = pol.costs
    assert c.own.value == pytest.approx(0.0002)
    assert c.loop(False) == pytest.approx(0.00005) and c.loop(True) == pytest.approx(0.00025)
    assert pol.learned()["costs"]["loop"][2] == pytest.approx(0.0002)
    assert pol.estimates()["round_seconds_beyond_decodes"]["policy"] == pytest.approx(0.0002)


def gpu_warm_up_learned(lone: bool) -> dict:
    """What an 8-token answer on an H200 handed on (scripts/gpu_diag.py's warm-up): each batch
    size decoded once, its graph built in that decode (the plain step 2.6 ms, 0.5 ms later)."""
    acc = AcceptanceModel(DEFAULT, 8)
    for _ in range(3):
        acc.judge(3, 3, 2)
    costs = {"verify": {"1": 0.00257, "2": 0.0119, "4": 0.0285}, "draft_first": 0.00042, "draft_next": 0.0001,
             "multi": True, "loop": [0.0001, 0.00006, 0.0003]}
    if lone:
        costs["lone"] = [1, 2, 4, 0]
    return {"version": SCHEMA, "costs": costs, "acceptance": acc.to_dict(), "k": 1, "drafting": False}


def test_costs_each_sampled_once_never_start_the_next_answer_paused():
    """On an H200 the answers after an 8-token warm-up started paused "from the last run" and,
    shorter than the probe gap, stayed paused (1.0x the target where K=8 ran 1.7x)."""
    assert AdaptivePolicy(1, 8, learned=gpu_warm_up_learned(lone=False)).state is State.PAUSED
    pol = AdaptivePolicy(1, 8, learned=gpu_warm_up_learned(lone=True))
    assert pol.state is not State.PAUSED and pol.next_k() > 0


def test_no_paused_start_on_first_decodes_read_as_costs_in_the_simulator():
    """An H200's first decodes (2 ms more for a plain step, 11-38 for batches of 2-9) in an
    8-token earlier answer: without the guard the next answers start paused (16% slower)."""
    s = next(x for x in sim.load(str(GPU_GRAPH)) if x.name == "gpu-1b-small-draft+h200-first-decodes+short-seed")
    with_it = sim._default_tps(s, 2, Params())
    without = sim._default_tps(s, 2, sim.params_with(sim.ABLATIONS["... not on costs each sampled once"]))
    assert without < 0.9 * with_it, (with_it, without)


def test_a_draft_too_dear_at_any_verify_price_still_starts_paused_on_costs_sampled_once():
    """The generated losing pair on a CPU: its 60-token answer sampled the plain step once too
    (a CPU's first decode of a size is dearer as well), but a draft 20x the target step loses
    even with every batch at the plain step's price and every token accepted."""
    learned = gpu_warm_up_learned(lone=True)
    learned["costs"] |= {"verify": {"1": 0.00024, "2": 0.00022, "4": 0.00066}, "lone": [1, 4],
                         "draft_first": 0.0045, "draft_next": 0.0045}
    assert AdaptivePolicy(1, 8, learned=learned).state is State.PAUSED


def test_only_a_cost_sampled_once_with_no_first_decode_extra_is_marked_lone():
    c = CostModel(DEFAULT, 8)
    c.add_verify(1, 0.002)
    c.add_verify(1, 0.0005)
    c.add_verify(4, 0.03)
    c.add_draft(1, 0.0004, 0.0004, 1)
    assert c.to_dict()["lone"] == [4, 0]


def test_a_first_decode_that_builds_a_graph_is_priced_once_not_carried_as_the_cost():
    """A GPU's first decode of each batch size costs 3 steps more: the default stays near the
    best fixed K instead of reading every size 4x dearer (and moving K to unbuilt sizes). (A
    64-token answer's last rounds, their drafts cut at its end, build new sizes in every
    setting: 0.97 of the best over 8 seeds, 0.94 over this one.)"""
    s = next(x for x in sim.load(str(GPU_GRAPH)) if x.name == "gpu-27b-short-answer+graph-build")
    ratio = sim.evaluate(s, 1)["default_over_best"]
    without = sim.evaluate(s, 1, sim.params_with(sim.ABLATIONS["a batch size's first decode priced as a one-off"]))
    assert ratio >= 0.93 and without["default_over_best"] < ratio - 0.1, (ratio, without)


def test_the_script_prints_the_contracted_json(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps([{"name": "gpu", "target_ms": [20, 20.3, 20.6, 20.9, 21.2], "draft_ms": 2,
                              "accept": [0.8, 0.7, 0.6], "tokens": 128}]))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_policy.py"), "--scenarios", str(f),
                        "--seeds", "1", "--json"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    row = out["scenarios"][0]
    assert {"name", "default_tps", "best", "default_over_best"} <= set(row)
    assert set(row["best"]) == {"setting", "tps"} and row["default_over_best"] > 0
    assert set(row["informed"]) == {"setting", "over_best"} and out["informed_below_0_97"] == 0
    table = subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_policy.py"), "--scenarios", str(f),
                            "--table"], capture_output=True, text=True, cwd=ROOT).stdout.splitlines()
    assert table[0].endswith("| informed | informed / best |") and table[2].startswith("| gpu |")
    assert table[2].count("|") == table[0].count("|") == 8
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_policy.py"), "--scenarios",
                          str(tmp_path / "missing.json")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    saved = tmp_path / "drawn.json"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_policy.py"), "--random", "2", "--seeds", "1",
                        "--random-seed", "3", "--save-scenarios", str(saved)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["name"] for x in out["scenarios"]] == [d["name"] for d in json.loads(saved.read_text())["scenarios"]]
    assert out["random_seed"] == 3 and isinstance(out["below_0_97"], list)


def test_a_graph_build_costs_once_per_batch_size_and_for_the_draft():
    """``first_ms``: the target alone pays it once (batch 1); a fixed K pays it for the plain
    size only if it ever decodes one, its verify size and the draft's first decode."""
    base = {"name": "g", "target_ms": [10.0] * 9, "draft_ms": 1.0, "accept": [1.0] * 8, "tokens": 64}
    plain, built = sim.Scenario.from_dict(base), sim.Scenario.from_dict({**base, "first_ms": 30.0})
    for setting, extra in (("target", 0.030), ("K=3", 0.060)):
        (n0, t0, _), (n1, t1, _) = sim.simulate(plain, setting, 0), sim.simulate(built, setting, 0)
        assert n0 == n1 == 64
        assert t1 - t0 == pytest.approx(extra)
    with pytest.raises(sim.BadInput):
        sim.Scenario.from_dict({**base, "first_ms": -1})


def test_the_earlier_answer_a_scenario_starts_from_can_be_another_prompts_text():
    """``seed``: the answer the default starts from read other text (another prompt): here it
    drafted at a gain, then its text turned hard and it paused; this answer's text is hard
    throughout. Without ``seed`` the earlier answer is this one's text."""
    base = {"name": "x", "target_ms": [10, 12, 13, 14, 15, 16, 17, 18, 19], "draft_ms": 4.0, "accept": [0.5],
            "tokens": 128, "seed_tokens": 256}
    s = sim.Scenario.from_dict(dict(base, seed={"accept": [0.99], "then": {"at": 160, "accept": [0.5]}}))
    earlier = s.earlier()
    assert (earlier.tokens, earlier.accept, earlier.then_at, s.accept) == (256, (0.99,), 160, (0.5,))
    _, _, learned = sim.simulate(earlier, "default", 1)
    assert learned["drafting"] is False
    assert sim.Scenario.from_dict(base).earlier().accept == (0.5,)
    for bad in ([1], {"accept": [1.5]}, {"accept": [0.5], "then": {"accept": [0.5]}}, {"then": {"at": 1}}):
        with pytest.raises(BadInput):
            sim.Scenario.from_dict(dict(base, seed=bad))
