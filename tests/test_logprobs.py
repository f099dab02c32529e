"""Log-probabilities (RunSpec.logprobs): each emitted token comes with the target's own
log-probability of it and of its most likely tokens, the same with speculation as without
(up to batch rounding), in a single run and in slots, and asking for them changes no token."""

import numpy as np
import pytest
from conftest import make_engine, run_to_done

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, SpecError, Token

pytestmark = pytest.mark.usefixtures("one_llama_thread")

PROMPT = "The quick brown fox"


def tokens_of(events) -> list[Token]:
    return [e for e in events if type(e) is Token]


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_draft):
    e = make_engine(tiny_target, tiny_draft, fixed_k=True, draft_max=4)
    yield e
    e.close()


def test_a_tokens_logprob_is_the_log_softmax_of_the_targets_logits(engine):
    prompt = engine.tokenize(PROMPT)
    engine.reset()
    row = engine.target_ctx.decode(prompt, logits="last").astype(np.float64)
    want = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
    engine.reset()
    _, events = run_to_done(engine, prompt, max_tokens=12, speculative=False, logprobs=3)
    toks = tokens_of(events)
    first = toks[0]
    assert first.logprob == pytest.approx(want[first.id], abs=1e-4)
    assert [i for i, _ in first.top] == list(np.argsort(-want, kind="stable")[:3])
    for t in toks:   # greedy: the token is the most likely one, and the top ones come best first
        assert len(t.top) == 3 and t.top[0] == (t.id, pytest.approx(t.logprob))
        assert t.logprob <= 0 and [lp for _, lp in t.top] == sorted((lp for _, lp in t.top), reverse=True)


def test_speculation_gives_the_same_tokens_and_logprobs(engine):
    prompt = engine.tokenize(PROMPT)
    runs = {}
    for kind in (DrafterKind.NONE, DrafterKind.MODEL):
        engine.reset()
        done, events = run_to_done(engine, prompt, max_tokens=40, drafter=kind.value, logprobs=2)
        runs[kind] = (done, tokens_of(events))
    (alone, a), (spec, s) = runs[DrafterKind.NONE], runs[DrafterKind.MODEL]
    assert spec.summary.accepted > 0 and spec.token_ids == alone.token_ids
    assert [t.logprob for t in s] == pytest.approx([t.logprob for t in a], abs=0.02)
    assert [t.top[0][0] for t in s] == [t.id for t in s]


def test_asking_for_logprobs_changes_no_sampled_token(engine):
    prompt = engine.tokenize(PROMPT)
    sampled = SamplingConfig(temperature=0.9, seed=7)
    ids = []
    for logprobs in (None, 0):
        engine.reset()
        done, events = run_to_done(engine, prompt, max_tokens=30, sampling=sampled, logprobs=logprobs)
        ids.append(done.token_ids)
        toks = tokens_of(events)
        assert all((t.logprob is None) == (logprobs is None) for t in toks)
        assert all(t.top == (None if logprobs is None else ()) for t in toks)
    assert ids[0] == ids[1]


def test_slots_give_the_logprobs_of_a_single_run(tiny_target, tiny_draft, engine):
    prompt = engine.tokenize(PROMPT)
    engine.reset()
    _, events = run_to_done(engine, prompt, max_tokens=20, logprobs=2)
    single = tokens_of(events)
    slots = Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=256, threads=1,
                                remember=False, parallel=2))
    try:
        runner = slots.runner()
        spec = RunSpec(drafter=DrafterKind.MODEL, sampling=SamplingConfig(temperature=0.0), max_tokens=20,
                       logprobs=2)
        gens = [runner.start(prompt, spec), runner.start(slots.tokenize("x"), spec)]
        runner.run_all()
        got = tokens_of(gens[0].events)
        assert [t.id for t in got] == [t.id for t in single]
        assert [t.logprob for t in got] == pytest.approx([t.logprob for t in single], abs=0.02)
        assert all(len(t.top) == 2 for g in gens for t in tokens_of(g.events))
    finally:
        slots.close()


@pytest.mark.parametrize("changes,match", [({"logprobs": 21}, "at most 20"), ({"logprobs": -1}, ">= 0"),
                                           ({"logprobs": 1, "cascade": 0.8}, "cascade")])
def test_logprobs_out_of_range_are_refused(changes, match):
    with pytest.raises(SpecError, match=match):
        RunSpec(**changes).validate()


def test_a_ruled_out_token_reads_minus_9999_and_a_short_row_gives_all_it_has():
    from localspec.engine.outputs import token_logprobs

    lp, top = token_logprobs(np.array([0.0, -np.inf, 1.0], np.float32), 1, 5)
    assert lp == -9999.0 and [i for i, _ in top] == [2, 0, 1] and top[-1][1] == -9999.0
    assert sum(np.exp(v) for _, v in top) == pytest.approx(1.0)
