"""Greedy speculative decoding is token-for-token the target's greedy output, and the KV
caches stay exact in every corner: all drafts accepted, none accepted, end-of-generation
inside a draft, max tokens reached mid-step, a full context, cancellation."""

import threading

import llama_cpp.llama_cpp as ll
import pytest
from conftest import make_engine, run_spec, run_to_done
from tiny import TinySpec

from localspec.engine import Origin, SamplingConfig, Step, StopReason, Token

# One llama.cpp thread per context: target and draft spinning on every core of a small shared
# machine slow the tiny models many times over.
pytestmark = pytest.mark.usefixtures("one_llama_thread")

GREEDY = SamplingConfig(temperature=0.0)
PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time there was", "x"]


def kv_positions(ctx) -> int:
    """How many positions llama.cpp's cache really holds for sequence 0."""
    return ll.llama_memory_seq_pos_max(ctx.mem, 0) + 1


def assert_kv_exact(engine):
    assert kv_positions(engine.target_ctx) == len(engine.target_ctx.tokens)
    if engine.draft_ctx is not None:
        assert kv_positions(engine.draft_ctx) == len(engine.draft_ctx.tokens)


def baseline(engine, tokens, n, **kw):
    engine.reset()
    done, _ = run_to_done(engine, tokens, sampling=GREEDY, max_tokens=n, speculative=False, **kw)
    return done


@pytest.mark.parametrize("noise", [0.05, 0.15, 0.4])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_identical_fixed_k(zoo, tiny_target, noise, k):
    draft = zoo.get(TinySpec(noise=noise), f"draft-{noise}.gguf")
    with make_engine(tiny_target, draft, draft_max=k) as e:
        for prompt in PROMPTS:
            toks = e.tokenize(prompt)
            base = baseline(e, toks, 60)
            e.reset()
            spec, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60)
            assert spec.token_ids == base.token_ids, prompt
            assert spec.text == base.text
            assert spec.summary.drafted > 0
            assert_kv_exact(e)


def test_partial_agreement_is_partial(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        done, _ = run_to_done(e, e.tokenize(PROMPTS[0]), sampling=GREEDY, max_tokens=80)
    s = done.summary
    assert 0.05 < s.acceptance_rate < 0.95, s.acceptance_rate


def test_greedy_identical_adaptive_and_ngram(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, fixed_k=False, draft_max=6, p_min=0.3) as e:
        toks = e.tokenize(PROMPTS[1])
        base = baseline(e, toks, 80)
        e.reset()
        spec, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=80)
        assert spec.token_ids == base.token_ids
        assert_kv_exact(e)
    with make_engine(tiny_target, drafter="ngram", draft_max=5) as e:
        # A repetitive prompt gives the n-gram drafter something to copy.
        toks = e.tokenize("the the the and and the the the and and the the")
        base = baseline(e, toks, 80)
        e.reset()
        spec, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=80)
        assert spec.token_ids == base.token_ids
        assert spec.summary.drafter == "ngram"


def test_all_drafts_accepted(tiny_target):
    """The target drafting for itself: every draft is accepted and the bonus token follows."""
    with make_engine(tiny_target, tiny_target, draft_max=4) as e:
        toks = e.tokenize(PROMPTS[0])
        base = baseline(e, toks, 40)
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=40)
        assert done.token_ids == base.token_ids
        s = done.summary
        assert s.acceptance_rate == 1.0
        steps = [ev for ev in events if isinstance(ev, Step)]
        assert all(st.accepted == st.drafted for st in steps)
        assert sum(st.drafted == 4 for st in steps) >= 7
        origins = [ev.origin for ev in events if isinstance(ev, Token)]
        assert Origin.BONUS in origins and Origin.DRAFT in origins
        # The first token comes from the prompt's logits; drafting starts after it.
        assert origins[:6] == [Origin.TARGET] + [Origin.DRAFT] * 4 + [Origin.BONUS]
        # The draft never decoded its last draft token; it catches up in the next round.
        assert_kv_exact(e)


def test_no_draft_accepted(zoo, tiny_target):
    """A draft whose logits are all equal always proposes token 0, which the target never picks."""
    blind = zoo.get(TinySpec(blind_output=True), "blind.gguf")
    with make_engine(tiny_target, blind, draft_max=3) as e:
        toks = e.tokenize(PROMPTS[2])
        base = baseline(e, toks, 30)
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=30)
        assert done.token_ids == base.token_ids
        s = done.summary
        assert s.drafted >= 25 and s.accepted == 0
        assert all(ev.origin == Origin.TARGET for ev in events if isinstance(ev, Token))
        assert_kv_exact(e)


def test_end_of_generation_inside_a_draft(zoo, tiny_target):
    """Make the 6th greedy token the end-of-generation token; the self-draft proposes it mid-draft."""
    with make_engine(tiny_target, drafter="none") as e:
        ids = baseline(e, e.tokenize(PROMPTS[0]), 20).token_ids
    j = next(i for i in range(5, len(ids)) if ids[i] not in ids[:i] and ids[i] > 2)
    eos = ids[j]
    model = zoo.get(TinySpec(eos_id=eos), f"eos-{eos}.gguf")
    with make_engine(model, model, draft_max=8) as e:
        toks = e.tokenize(PROMPTS[0])
        base = baseline(e, toks, 50)
        assert base.stop_reason == StopReason.EOG and len(base.token_ids) == j
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=50)
        assert done.stop_reason == StopReason.EOG
        assert done.token_ids == base.token_ids == tuple(ids[:j])
        steps = [ev for ev in events if isinstance(ev, Step)]
        # The end token came inside a round that drafted past it... or stopped drafting at it.
        assert steps[-1].drafted >= 1 and steps[-1].emitted < steps[-1].drafted + 1
        assert eos not in done.token_ids
        assert_kv_exact(e)


@pytest.mark.parametrize("n", [1, 2, 5, 7, 13])
def test_max_tokens_reached_mid_step(tiny_target, n):
    with make_engine(tiny_target, tiny_target, draft_max=4) as e:
        toks = e.tokenize(PROMPTS[1])
        base = baseline(e, toks, n)
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=n)
        assert len(done.token_ids) == n
        assert done.token_ids == base.token_ids
        assert done.stop_reason == StopReason.MAX_TOKENS
        assert sum(isinstance(ev, Token) for ev in events) == n
        assert_kv_exact(e)


def test_context_full(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, n_ctx=48, draft_max=6) as e:
        toks = e.tokenize(PROMPTS[0])
        base = baseline(e, toks, 500)
        assert base.stop_reason == StopReason.CONTEXT_FULL
        assert "context full" in base.message
        e.reset()
        done, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=500)
        assert done.stop_reason == StopReason.CONTEXT_FULL
        assert done.token_ids == base.token_ids
        # llama.cpp pads the context to a multiple of 256; every position is used.
        assert len(toks) + len(done.token_ids) == e.target_ctx.n_ctx + 1
        assert_kv_exact(e)


def test_prompt_longer_than_context(tiny_target):
    from localspec.errors import ContextOverflow

    with make_engine(tiny_target, tiny_target, n_ctx=32) as e:
        toks = e.tokenize("the quick brown fox " * 100)
        assert len(toks) > e.target_ctx.n_ctx
        with pytest.raises(ContextOverflow, match=f"context holds {e.target_ctx.n_ctx}"):
            list(e.run(toks, run_spec(e)))


def test_stop_string(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        toks = e.tokenize(PROMPTS[0])
        full = baseline(e, toks, 60).text
        stop = full[20:23]
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, stop=[stop])
        assert done.stop_reason == StopReason.STOP_STRING
        assert done.text == full[:full.index(stop)]
        streamed = "".join(ev.text for ev in events if isinstance(ev, Token))
        assert streamed == done.text


def test_cancel_from_another_thread_within_one_step(tiny_target, tiny_draft):
    cancel = threading.Event()
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        toks = e.tokenize(PROMPTS[0])
        steps_after_cancel = 0
        done = None
        for ev in e.run(toks, run_spec(e, max_tokens=400), cancel):
            if isinstance(ev, Step):
                if cancel.is_set():
                    steps_after_cancel += 1
                elif ev.index == 5:
                    t = threading.Thread(target=cancel.set)
                    t.start()
                    t.join()
            done = ev
        assert done.stop_reason == StopReason.CANCELLED
        assert steps_after_cancel == 0
        assert len(done.token_ids) < 400
        assert_kv_exact(e)


def test_chat_turns_reuse_the_cache(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        msgs = [{"role": "user", "content": "The quick brown fox"}]
        toks = e.chat_prompt(msgs)
        assert toks[0] == 1  # <|im_start|>
        first, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=20)
        msgs += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "and then?"}]
        toks2 = e.chat_prompt(msgs)
        second, _ = run_to_done(e, toks2, sampling=GREEDY, max_tokens=20)
        assert second.summary.n_cached > len(toks) // 2
        assert second.token_ids == baseline(e, toks2, 20).token_ids
        assert_kv_exact(e)


def test_target_only_path_is_the_same_loop(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        done, events = run_to_done(e, e.tokenize(PROMPTS[0]), sampling=GREEDY, max_tokens=10,
                                   speculative=False)
    assert done.summary.drafted == 0
    assert done.summary.steps == 10
    assert all(ev.origin == Origin.TARGET for ev in events if isinstance(ev, Token))


def test_a_paused_lookup_indexes_its_prompt_only_when_it_drafts():
    """Prompt lookup that starts paused leaves the prompt's index to its first draft (a few
    target steps' time on a fast target), and that draft compares the whole context: a new
    prompt that only ends like the last one is not taken for its extension."""
    import numpy as np

    from localspec.engine.drafters import NgramDrafter

    rng = np.random.default_rng(0)
    d = NgramDrafter()
    d.prefill([1, 2, 3, 4, 1, 2, 3])
    assert d.draft([1, 2, 3, 4, 1, 2, 3], 2, GREEDY, rng).tokens == [4, 1]
    prompt = [7, 7, 7, 7, 7, 7, 3, 9, 1, 2, 3]    # its 7th token is the last prompt's last
    d.prefill(prompt, now=False)
    assert d._seen == [1, 2, 3, 4, 1, 2, 3]       # nothing indexed yet
    assert d.draft(prompt, 2, GREEDY, rng).tokens == []
    assert d.draft(prompt + [7, 7], 2, GREEDY, rng).tokens == [3, 9]   # after its own "7 7"


def test_a_lookup_learns_which_match_lengths_are_right_and_a_gate_skips_the_others():
    """Each match is judged against what followed it, per match length class and position; a
    gate that asks for a token expected right skips a length that keeps being wrong, proposes
    one that is right, and goes on judging the skipped one (its record stays current)."""
    import numpy as np

    from localspec.engine.drafters import NgramDrafter

    rng = np.random.default_rng(0)
    d = NgramDrafter(n_max=3, n_min=2)
    assert d.expected(2, 1) == d.expected(3, 1) == 0.5      # nothing judged: one in two
    # "1 2" is followed by 9, then by 3, 4, 5...: each 2-token match proposes the last
    # follower, which the next one refutes.
    context = [1, 2, 9]
    d.prefill(context)
    for tok in (3, 4, 5, 6, 7, 8):
        context += [1, 2]
        assert d.draft(context, 1, GREEDY, rng).tokens            # a 2-token match: "1 2"
        context += [tok]
    d.draft(context, 1, GREEDY, rng)                              # judges the last one
    assert d.expected(2, 1) < 0.2 and d.expected(3, 1) == d.expected(8, 1) == 0.5
    one = lambda n, expected: expected >= 0.7                     # noqa: E731
    judged = d._judged[2][1]
    context += [1, 2]
    assert d.draft(context, 1, GREEDY, rng, one).tokens == []     # skipped ...
    context += [11]
    d.draft(context, 1, GREEDY, rng, one)
    assert d._judged[2][1] > judged                               # ... and judged all the same
    # A match found at n_max tokens is measured back to its full length: a passage being
    # copied (12 tokens match here) has a record of its own, which its right tokens raise.
    passage = list(range(30, 50))
    context += passage + [7] + passage[:12]
    more = lambda n, expected: expected >= 1.2                    # noqa: E731
    assert d.draft(context, 2, GREEDY, rng, more).tokens == []    # nothing known of long matches yet
    assert d._pending[-1][2] == 8
    for _ in range(3):
        context = context[:-12] + passage[:12]   # the same copy, judged right each time
        d.draft(context + passage[12:14], 2, GREEDY, rng)
        d.draft(context, 2, GREEDY, rng)
    assert d.expected(12, 2) > 1.4 and d.expected(2, 2) < 0.3
    assert d.draft(context, 2, GREEDY, rng, more).tokens == passage[12:14]
    # A match is judged as far as it was right: one whose second token is wrong.
    right, judged = d._right[8][2], d._judged[8][2]
    d.draft(context + [passage[12], 99], 2, GREEDY, rng)
    assert d._right[8][2] == pytest.approx(right * 0.95)          # decayed, nothing added
    assert d._judged[8][2] == pytest.approx(judged * 0.95 + 1.0)  # but judged there
    # A new prompt drops the matches still waiting to be judged.
    d.draft(context + [20, 21, 22], 2, GREEDY, rng)
    d.prefill([5, 6])
    assert not d._pending


def test_no_tokens_asked_reads_the_prompt_only(tiny_target):
    """max_tokens 0 (llama-server's n_predict 0, an editor's cache warm-up): the prompt is read
    and kept, nothing is generated; in a slot as in a single run."""
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec

    engine = make_engine(tiny_target, drafter="none")
    try:
        tokens = engine.tokenize("The quick brown fox")
        done, events = run_to_done(engine, tokens, max_tokens=0, speculative=False)
        assert done.token_ids == () and done.stop_reason is StopReason.MAX_TOKENS
        assert not [e for e in events if isinstance(e, Token)]
        again, _ = run_to_done(engine, tokens, max_tokens=2, speculative=False)
        assert again.summary.n_cached == len(tokens) - 1
    finally:
        engine.close()
    slots = Engine(EngineConfig(target=str(tiny_target), n_ctx=128, threads=1, remember=False, parallel=2))
    try:
        g = slots.runner().start(tokens, RunSpec(drafter=DrafterKind.NONE, max_tokens=0))
        slots.runner().run_all()
        assert g.done.token_ids == () and g.done.stop_reason is StopReason.MAX_TOKENS
    finally:
        slots.close()
