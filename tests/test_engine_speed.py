"""What makes the engine ready for a GPU, checked by structure (no test asserts a speed):
every timed region ends synchronised, the first token does not wait for the drafter, a
failed decode leaves cache and mirror consistent, per-round work does not scan the context,
a hybrid target keeps a checkpoint at the end of its prompt, and a recurrent draft saves its
state once per round."""

import time

import llama_cpp.llama_cpp as ll
import numpy as np
import pytest
from conftest import make_engine, run_to_done
from tiny import TinySpec, hybrid_spec, mamba_spec

from localspec.engine import DrafterKind, SamplingConfig, Token
from localspec.engine import drafters as drafters_mod
from localspec.engine.backend import Context, Model
from localspec.errors import LocalspecError

GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=0.9, seed=3)
LONG = ("The quick brown fox jumps over the lazy dog. The dog sleeps in the sun and the fox runs "
        "into the forest. Once upon a time there was a little robot who wanted to paint the sky. ") * 3


def kv_exact(ctx) -> bool:
    return ll.llama_memory_seq_pos_max(ctx.mem, 0) + 1 == len(ctx.tokens)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_every_timed_region_ends_synchronised(monkeypatch, tiny_target, tiny_draft, sampling):
    """Record llama_decode, llama_synchronize and every clock read in call order: no clock
    is read while a context has a decode that was not synchronised (on CUDA, llama_decode
    returns before the work is done)."""
    log = []
    real_decode, real_sync, real_clock = ll.llama_decode, ll.llama_synchronize, time.perf_counter

    def decode(ctx, batch):
        log.append(("decode", ctx))
        return real_decode(ctx, batch)

    def sync(ctx):
        log.append(("sync", ctx))
        return real_sync(ctx)

    def clock():
        log.append(("clock", None))
        return real_clock()

    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        toks = e.tokenize(LONG)
        monkeypatch.setattr(ll, "llama_decode", decode)
        monkeypatch.setattr(ll, "llama_synchronize", sync)
        monkeypatch.setattr(time, "perf_counter", clock)
        for speculative in (True, False):
            done, _ = run_to_done(e, toks, sampling=sampling, max_tokens=30, speculative=speculative)
            assert done.summary.n_generated > 0
        monkeypatch.undo()
    assert sum(1 for kind, _ in log if kind == "decode") > 20
    unsynced: set = set()
    clocks = 0
    for kind, ctx in log:
        if kind == "decode":
            unsynced.add(ctx)
        elif kind == "sync":
            unsynced.discard(ctx)
        else:
            clocks += 1
            assert not unsynced, f"clock read after an unsynchronised decode (event {clocks})"


def test_first_token_does_not_wait_for_the_drafter(tiny_target, tiny_draft):
    """The first token comes from the prompt's logits, before the drafter reads the prompt
    or drafts anything."""
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        drafter = e.drafter(DrafterKind.MODEL)
        order = []
        prefill, draft = drafter.prefill, drafter.draft
        drafter.prefill = lambda tokens, **kw: (order.append("prefill"), prefill(tokens, **kw))[1]
        drafter.draft = lambda *a, **kw: (order.append("draft"), draft(*a, **kw))[1]
        toks = e.tokenize(LONG)
        for ev in e.run(toks, e.test_spec.with_(sampling=GREEDY, max_tokens=12)):
            if isinstance(ev, Token):
                order.append("token")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=12, speculative=False)
        e.reset()
        spec, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=12)
    assert order[0] == "token" and order.index("prefill") == 1 and "draft" in order
    assert spec.token_ids == base.token_ids


@pytest.mark.parametrize("mode", ["refused", "partly-done"])
@pytest.mark.parametrize("kind", ["transformer", "hybrid"])
def test_failed_decode_keeps_cache_and_mirror_consistent(monkeypatch, tiny_target, zoo, mode, kind):
    """The second chunk of a three-chunk decode fails: either llama.cpp refuses it (nothing
    decoded) or it fails after decoding part of it. The mirror then matches the cache, and
    decoding the rest gives the same logits as one clean decode."""
    path = tiny_target if kind == "transformer" else zoo.get(hybrid_spec(), "lfm2.gguf")
    model = Model(path)
    toks = model.tokenize(LONG)[:40]
    ctx = Context(model, n_ctx=128, n_batch=16)
    calls = {"n": 0}
    real_decode = ll.llama_decode

    def failing(c, batch):
        calls["n"] += 1
        if calls["n"] != 2:
            return real_decode(c, batch)
        if mode == "refused":
            return 1
        real_decode(c, batch)
        return -3

    monkeypatch.setattr(ll, "llama_decode", failing)
    with pytest.raises(LocalspecError):
        ctx.decode(toks, logits="last")
    monkeypatch.undo()
    assert kv_exact(ctx)
    kept = len(ctx.tokens)
    assert ctx.tokens == toks[:kept] and kept in ((16, 0) if kind == "hybrid" else (16,))
    got = ctx.decode(toks[kept:], logits="last").copy()
    assert kv_exact(ctx) and ctx.tokens == toks
    clean = Context(model, n_ctx=128, n_batch=16)
    want = clean.decode(toks, logits="last").copy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for c in (ctx, clean):
        c.close()
    model.close()


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_per_round_work_does_not_scan_the_context(monkeypatch, tiny_target, tiny_draft, drafter):
    """Within a generation the drafters compare only the tokens after their sync position:
    no comparison during a draft covers more than a round's worth of tokens."""
    sizes = []
    real = drafters_mod.common_prefix
    monkeypatch.setattr(drafters_mod, "common_prefix",
                        lambda a, b: (sizes.append(min(len(a), len(b))), real(a, b))[1])
    with make_engine(tiny_target, tiny_draft, drafter=drafter, draft_max=4) as e:
        d = e.drafter(DrafterKind(drafter))
        inner = d.draft
        in_draft = []

        def draft(*a, **kw):
            start = len(sizes)
            out = inner(*a, **kw)
            in_draft.extend(sizes[start:])
            return out

        d.draft = draft
        toks = e.tokenize(LONG * 2)
        assert len(toks) > 200
        done, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, drafter=drafter)
    assert done.summary.steps > 5
    assert max(in_draft, default=0) <= 4 + 2


def test_hybrid_target_checkpoints_the_end_of_its_prompt(zoo):
    """A next prompt that differs from the cached sequence only after the previous prompt (a
    re-rendered chat turn) restarts from the prompt's end, not from the beginning."""
    target = zoo.get(hybrid_spec(), "lfm2.gguf")
    with make_engine(target, drafter="none") as e:
        assert e.target_ctx.rollback.value != "kv"
        p1 = e.tokenize(LONG)
        first, _ = run_to_done(e, p1, sampling=GREEDY, max_tokens=20, speculative=False)
        p2 = p1 + list(first.token_ids[:8]) + e.tokenize(" and then")
        second, _ = run_to_done(e, p2, sampling=GREEDY, max_tokens=20, speculative=False)
        assert second.summary.n_cached >= len(p1)
        assert kv_exact(e.target_ctx)
        e.reset()
        fresh, _ = run_to_done(e, p2, sampling=GREEDY, max_tokens=20, speculative=False)
    assert second.token_ids == fresh.token_ids


def test_recurrent_draft_saves_its_state_once_per_round(zoo):
    target = zoo.get(TinySpec(), "llama.gguf")
    draft = zoo.get(mamba_spec(noise=0.1), "mamba-d.gguf")
    with make_engine(target, draft, draft_max=5) as e:
        toks = e.tokenize("The quick brown fox")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=40, speculative=False)
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=40)
    s = done.summary
    rounds = sum(1 for ev in events if getattr(ev, "draft_steps", 0) > 1)
    assert done.token_ids == base.token_ids
    assert s.drafted > 2 * rounds > 0, "rounds drafted several tokens each"
    assert s.checkpoints <= rounds + 1   # one per drafting round, plus the prompt's end
