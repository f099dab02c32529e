"""Several generations stepped together (engine/batch.py), without HTTP: each answer is the
one the target gives alone, cancelling one leaves the others whole, each sequence rolls back
on its own, and the batch guard stops drafting that loses for the batch (injected clock)."""

from __future__ import annotations

import threading

import llama_cpp.llama_cpp as ll
import pytest
from conftest import GREEDY

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, Token
from localspec.engine.batch import SlotsFull
from localspec.engine.policy import Params
from localspec.engine.policy.batch import BatchGuard

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "List three colors:"]


@pytest.fixture(scope="module")
def engine(smollm2_f16, smollm2_q4_1):
    with Engine(EngineConfig(target=str(smollm2_f16), draft=str(smollm2_q4_1), n_ctx=512, parallel=3,
                             threads=1, remember=False)) as e:
        yield e


@pytest.fixture(scope="module")
def alone(engine) -> dict[str, tuple[int, ...]]:
    """Each prompt's greedy answer from the target alone, through Engine.run."""
    spec = RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY, max_tokens=40)
    return {p: list(engine.run(engine.tokenize(p), spec))[-1].token_ids for p in PROMPTS}


def _spec(kind: DrafterKind, **kw) -> RunSpec:
    return RunSpec(drafter=kind, sampling=GREEDY, max_tokens=40, adaptive=False, draft_max=4, **kw)


def _check_mirrors(engine: Engine) -> None:
    """Every sequence's KV cache holds exactly what the runner's mirror says."""
    r = engine.runner()
    for seqs in (r.target, r.draft):
        for s in range(engine.parallel):
            held = len(seqs.mirror(s))
            assert int(ll.llama_memory_seq_pos_max(seqs.ctx.mem, s)) + 1 == held, (s, held)


@pytest.mark.parametrize("kind", [DrafterKind.NONE, DrafterKind.MODEL, DrafterKind.NGRAM])
def test_concurrent_greedy_answers_are_the_targets_alone(engine, alone, kind):
    r = engine.runner()
    gens = [r.start(engine.tokenize(p), _spec(kind)) for p in PROMPTS[:3]]
    with pytest.raises(SlotsFull):
        r.start(engine.tokenize(PROMPTS[3]), _spec(kind))
    r.run_all()
    for p, g in zip(PROMPTS, gens):
        assert g.result().token_ids == alone[p]
    if kind is DrafterKind.MODEL:
        assert sum(g.done.summary.drafted for g in gens) > 0
        assert any(g.done.summary.accepted < g.done.summary.drafted for g in gens)   # rollbacks happened
    _check_mirrors(engine)
    # a freed slot takes the next request, which is answered as alone too
    g = r.start(engine.tokenize(PROMPTS[3]), _spec(kind))
    r.run_all()
    assert g.result().token_ids == alone[PROMPTS[3]]


def test_prompts_admitted_together_are_read_in_one_decode(engine, alone, monkeypatch):
    r = engine.runner()
    calls = []
    real = r.target.decode
    monkeypatch.setattr(r.target, "decode", lambda items: calls.append(len(items)) or real(items))
    gens = [r.admit(engine.tokenize(p), _spec(DrafterKind.MODEL)) for p in PROMPTS[:3]]
    assert all(not g.generated for g in gens)      # nothing read before the next round
    r.step()
    assert calls[:2] == [3, 3]    # the three prompts in one decode, then the round's one verify
    r.run_all()
    for p, g in zip(PROMPTS, gens):
        assert g.result().token_ids == alone[p]
    _check_mirrors(engine)


def test_a_continued_prompt_goes_to_the_slot_holding_its_prefix(engine, alone):
    r = engine.runner()
    first = r.start(engine.tokenize(PROMPTS[1]), _spec(DrafterKind.NONE))
    r.run_all()
    held = list(first.prompt) + list(first.result().token_ids)
    again = engine.tokenize(PROMPTS[1]) + list(first.done.token_ids) + engine.tokenize(" more")[1:]
    assert r.pick_slot(again) == first.slot
    g = r.start(again, _spec(DrafterKind.NONE))
    r.run_all()
    assert g.slot == first.slot
    assert g.done.summary.n_cached >= len(held) - 1


def test_cancelling_one_leaves_the_others_whole(engine, alone):
    r = engine.runner()
    cancel = threading.Event()
    seen = []

    def on_event(ev):
        seen.append(ev)
        if isinstance(ev, Token) and sum(isinstance(e, Token) for e in seen) == 5:
            cancel.set()

    ended = r.ended
    gens = [r.start(engine.tokenize(PROMPTS[1]), _spec(DrafterKind.MODEL), cancel, on_event)]
    gens += [r.start(engine.tokenize(p), _spec(DrafterKind.MODEL)) for p in PROMPTS[2:4]]
    r.run_all()
    assert r.ended == ended + 3       # each slot freed once (a server answers its job then)
    stopped = gens[0].result()
    assert stopped.stop_reason.value == "cancelled"
    assert 5 <= len(stopped.token_ids) < len(alone[PROMPTS[1]])
    assert isinstance(seen[-1], Done)
    for p, g in zip(PROMPTS[2:4], gens[1:]):
        assert g.result().token_ids == alone[p]
    _check_mirrors(engine)


def test_only_a_generation_that_ran_alone_seeds_the_next(engine):
    """A shared round's verify carries every slot's tokens, so its costs are the batch's: a
    generation that shared one is not remembered (it would seed a lone request with a draft
    dearer than it is), a lone one is."""
    r = engine.runner()
    spec = RunSpec(drafter=DrafterKind.MODEL, sampling=GREEDY, max_tokens=24)   # adaptive
    engine.memory.forget()
    gens = [r.start(engine.tokenize(p), spec) for p in PROMPTS[1:3]]
    r.run_all()
    assert all(len(g.result().token_ids) == 24 and g.shared for g in gens)
    assert engine.memory.get(DrafterKind.MODEL.value) is None
    lone = r.start(engine.tokenize(PROMPTS[2]), spec)
    r.run_all()
    assert lone.result().token_ids == gens[1].result().token_ids and not lone.shared
    assert engine.memory.get(DrafterKind.MODEL.value) == lone.policy.learned()


def test_sampled_slots_each_keep_their_own_seed(engine):
    r = engine.runner()
    spec = _spec(DrafterKind.MODEL).with_(sampling=SamplingConfig(temperature=0.8, seed=7))
    one = r.start(engine.tokenize(PROMPTS[0]), spec)
    r.run_all()
    gens = [r.start(engine.tokenize(PROMPTS[0]), spec.with_(sampling=SamplingConfig(temperature=0.8, seed=s)))
            for s in (7, 8)]
    r.run_all()
    assert [g.result().summary.seed for g in gens] == [7, 8]
    assert gens[0].done.summary.n_generated > 0 and gens[1].done.summary.n_generated > 0
    assert one.result().summary.seed == 7


def test_a_recurrent_target_keeps_one_slot(zoo):
    from tiny import TinySpec

    path = zoo.get(TinySpec(arch="mamba"), "mamba.gguf")
    with Engine(EngineConfig(target=str(path), n_ctx=64, parallel=4, threads=1, remember=False)) as e:
        assert e.parallel == 1
        assert "recurrent" in e.describe()["parallel_note"]


# -- the batch guard -----------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _round(guard: BatchGuard, clock: Clock, n_busy: int, seconds_plain: float, seconds_draft: float,
           tokens_draft: int) -> bool:
    """One round: drafting (if allowed) emits ``tokens_draft`` in ``seconds_draft``; plain n_busy
    tokens in ``seconds_plain``. Returns whether it drafted."""
    drafted = guard.allow(n_busy)
    clock.t += seconds_draft if drafted else seconds_plain
    guard.observe(n_busy, drafted, tokens_draft if drafted else n_busy)
    return drafted


def test_the_guard_stops_drafting_that_loses_for_the_batch_and_tries_again():
    clock = Clock()
    p = Params(guard_off_rounds=20)
    guard = BatchGuard(p, clock=clock)
    # 4 slots: plain 4 tokens in 10 ms (400 tok/s); drafting 6 tokens in 20 ms (300 tok/s)
    drafted = [_round(guard, clock, 4, 0.010, 0.020, 6) for _ in range(25)]
    assert guard.stops == 1 and guard.stopped
    assert sum(drafted) <= 10 and not any(drafted[-10:])   # stopped within a few rounds, and it holds
    more = [_round(guard, clock, 4, 0.010, 0.020, 6) for _ in range(80)]
    assert any(more)                           # drafting was tried again ...
    assert guard.stops >= 2                    # ... and stopped again, for longer
    assert sum(more) < 20


def test_the_guard_leaves_winning_drafting_on_and_a_lone_slot_alone():
    clock = Clock()
    guard = BatchGuard(clock=clock)
    # drafting: 12 tokens in 20 ms (600 tok/s) beats plain 400 tok/s
    drafted = [_round(guard, clock, 4, 0.010, 0.020, 12) for _ in range(200)]
    assert guard.stops == 0
    assert sum(drafted) > 0.9 * len(drafted)   # a plain round now and then, to measure it
    lone = BatchGuard(clock=clock)
    assert all(_round(lone, clock, 1, 0.010, 0.050, 1) for _ in range(100))   # a lone slot: its own policy's
    assert lone.stops == 0
