"""The tiny recurrent (Mamba, Mamba-2) and hybrid (LFM2) models of the tiny package load and
decode through localspec's backend, and llama.cpp's rollback tools behave on them as the
engine expects: a partial ``llama_memory_seq_rm`` is refused, a sequence-state checkpoint
(``llama_state_seq_*_ext``) restores the state bit for bit, and on an LFM2 context with
``n_rs_seq`` snapshots a partial ``seq_rm`` within the last batch is an exact rollback."""

from __future__ import annotations

import ctypes

import llama_cpp.llama_cpp as ll
import numpy as np
import pytest
from tiny import RECURRENT_ARCHS, TinySpec, bigram_sigma

from localspec.engine.backend import Context, Model, init_backend
from localspec.engine.compat import check_files

PART = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
PROMPT = "The quick brown fox jumps over"
KIND = {"mamba": (True, False), "mamba2": (True, False), "lfm2": (False, True)}


@pytest.fixture(scope="module")
def models(zoo) -> dict[str, Model]:
    loaded = {arch: Model(zoo.get(TinySpec(arch=arch), f"{arch}.gguf"), gpu_layers=0) for arch in RECURRENT_ARCHS}
    loaded["llama"] = Model(zoo.get(TinySpec(), "llama.gguf"), gpu_layers=0)
    yield loaded
    for m in loaded.values():
        m.close()


def ctx(model: Model, n_ctx: int = 256) -> Context:
    return Context(model, n_ctx=n_ctx, threads=2, n_batch=64)


def greedy(c: Context, prompt: list[int], n: int) -> list[int]:
    logits = c.decode(prompt)
    out = []
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        logits = c.decode([t])
    return out


class RawCtx:
    """A context on the low-level API, for what backend.Context does not expose (n_rs_seq)."""

    def __init__(self, model: Model, n_rs_seq: int = 0, n_ctx: int = 256):
        init_backend()
        p = ll.llama_context_default_params()
        p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx, 64, 64, 1
        p.n_threads = p.n_threads_batch = 2
        p.n_rs_seq = n_rs_seq
        self.ptr = ll.llama_init_from_model(model.ptr, p)
        assert self.ptr
        self.mem = ll.llama_get_memory(self.ptr)
        self.nv = model.n_vocab
        self.batch = ll.llama_batch_init(64, 0, 1)

    def decode(self, toks: list[int], pos0: int) -> np.ndarray:
        b = self.batch
        for i, t in enumerate(toks):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, pos0 + i, 1, True
            b.seq_id[i][0] = 0
        b.n_tokens = len(toks)
        assert ll.llama_decode(self.ptr, b) == 0
        return np.ctypeslib.as_array(ll.llama_get_logits(self.ptr), shape=(len(toks), self.nv)).copy()

    def rm(self, p0: int) -> bool:
        return bool(ll.llama_memory_seq_rm(self.mem, 0, p0, -1))

    def pos(self) -> tuple[int, int]:
        return ll.llama_memory_seq_pos_min(self.mem, 0), ll.llama_memory_seq_pos_max(self.mem, 0)

    def close(self) -> None:
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ptr)


def checkpoint(ctx_ptr, flags: int = PART):
    n = ll.llama_state_seq_get_size_ext(ctx_ptr, 0, flags)
    buf = (ctypes.c_uint8 * n)()
    assert ll.llama_state_seq_get_data_ext(ctx_ptr, buf, n, 0, flags) == n
    return buf


def restore(ctx_ptr, buf, flags: int = PART) -> None:
    assert ll.llama_state_seq_set_data_ext(ctx_ptr, buf, len(buf), 0, flags) == len(buf)


# ---------------------------------------------------------------------------------------
# Loading and decoding


@pytest.mark.parametrize("arch", [*RECURRENT_ARCHS, "llama"])
def test_kind_is_reported(models, arch):
    m = models[arch]
    recurrent, hybrid = KIND.get(arch, (False, False))
    assert (m.info.recurrent, m.info.hybrid) == (recurrent, hybrid)
    assert bool(ll.llama_model_is_recurrent(m.ptr)) == recurrent
    assert bool(ll.llama_model_is_hybrid(m.ptr)) == hybrid
    assert m.info.description.startswith(arch)
    assert m.n_vocab == models["llama"].n_vocab


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_decodes_a_batch_and_single_tokens(models, arch):
    m = models[arch]
    toks = m.tokenize(PROMPT)
    with_batch = ctx(m)
    all_logits = with_batch.decode(toks, logits="all").copy()
    assert all_logits.shape == (len(toks), m.n_vocab)
    assert np.isfinite(all_logits).all() and all_logits.std() > 0.1
    one_by_one = ctx(m)
    singles = np.stack([one_by_one.decode([t]).copy() for t in toks])
    assert one_by_one.n_past == with_batch.n_past == len(toks)
    np.testing.assert_allclose(singles, all_logits, atol=1e-3)
    assert (singles.argmax(-1) == all_logits.argmax(-1)).all()
    assert ll.llama_memory_seq_pos_max(with_batch.mem, 0) == len(toks) - 1
    with_batch.close()
    one_by_one.close()


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_greedy_output_is_deterministic(zoo, models, arch):
    m = models[arch]
    toks = m.tokenize(PROMPT)
    c = ctx(m)
    first = greedy(c, toks, 24)
    c.clear()
    assert greedy(c, toks, 24) == first
    c.close()
    again = Model(zoo.get(TinySpec(arch=arch)), gpu_layers=0)   # a second load of the same file
    c2 = ctx(again)
    assert greedy(c2, toks, 24) == first
    c2.close()
    again.close()
    assert len(set(first)) > 3   # not stuck on one token


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_f16_weights_load(zoo, arch):
    m = Model(zoo.get(TinySpec(arch=arch, f16=True)), gpu_layers=0)
    c = ctx(m)
    assert np.isfinite(c.decode(m.tokenize(PROMPT))).all()
    c.close()
    m.close()


# ---------------------------------------------------------------------------------------
# Pairs


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_pairs_with_a_llama_are_tokenizer_compatible(zoo, arch):
    rec = zoo.get(TinySpec(arch=arch))
    llama = zoo.get(TinySpec())
    assert check_files(rec, llama).compatible
    assert check_files(llama, rec).compatible


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_noise_makes_a_draft_that_agrees_partly(zoo, models, arch):
    target = models[arch]
    draft = Model(zoo.get(TinySpec(arch=arch, noise=0.15)), gpu_layers=0)
    toks = target.tokenize(PROMPT)
    c = ctx(target)
    seq = greedy(c, toks, 40)
    c.close()
    d = ctx(draft)
    pred = d.decode(toks + seq, logits="all")[len(toks) - 1:-1].argmax(-1)
    d.close()
    draft.close()
    agreement = float(np.mean(pred == np.array(seq)))
    assert 0.1 < agreement < 0.95, agreement


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_bigram_models_agree_with_a_llama_bigram(zoo, arch):
    rec = Model(zoo.get(TinySpec(arch=arch, bigram_seed=5, layer_gain=0.05)), gpu_layers=0)
    llama = Model(zoo.get(TinySpec(bigram_seed=5, layer_gain=0.05)), gpu_layers=0)
    toks = rec.tokenize(PROMPT)
    a, b = ctx(rec), ctx(llama)
    out = greedy(a, toks, 20)
    assert out == greedy(b, toks, 20)
    sigma = bigram_sigma(5, rec.n_vocab)
    assert np.mean([sigma[x] == y for x, y in zip(out, out[1:])]) > 0.9
    a.close()
    b.close()
    rec.close()
    llama.close()


# ---------------------------------------------------------------------------------------
# Rollback on llama.cpp's memory


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_partial_seq_rm_is_refused(models, arch):
    m = models[arch]
    c = ctx(m)
    c.decode(list(range(10, 20)))
    mem = c.mem
    assert ll.llama_memory_seq_pos_min(mem, 0) == ll.llama_memory_seq_pos_max(mem, 0) == 9
    assert ll.llama_memory_seq_rm(mem, 0, 10, -1)          # nothing past the end: a no-op
    assert not ll.llama_memory_seq_rm(mem, 0, 5, -1)       # a tail: refused, state untouched
    assert not ll.llama_memory_seq_rm(mem, 0, 9, -1)
    assert ll.llama_memory_seq_pos_max(mem, 0) == 9
    assert ll.llama_memory_seq_rm(mem, 0, 0, -1)           # everything: fine
    assert ll.llama_memory_seq_pos_max(mem, 0) == -1
    c.close()


def test_partial_seq_rm_works_on_a_llama(models):
    c = ctx(models["llama"])
    c.decode(list(range(10, 20)))
    assert ll.llama_memory_seq_rm(c.mem, 0, 5, -1)
    assert (ll.llama_memory_seq_pos_min(c.mem, 0), ll.llama_memory_seq_pos_max(c.mem, 0)) == (0, 4)
    c.close()


@pytest.mark.parametrize("arch", RECURRENT_ARCHS)
def test_checkpoint_restore_rolls_back_exactly(models, arch):
    """Checkpoint, decode a speculative batch, restore, cut the KV tail: the next logits are
    those of a context that only ever saw the prompt."""
    m = models[arch]
    prompt = m.tokenize(PROMPT)
    n = len(prompt)
    fresh = ctx(m)
    fresh.decode(prompt)
    want = fresh.decode([77]).copy()
    fresh.close()

    c = ctx(m)
    c.decode(prompt)
    ck = checkpoint(c.ptr)
    c.decode([200, 201, 202, 203], logits="all")
    assert not ll.llama_memory_seq_rm(c.mem, 0, n, -1)
    restore(c.ptr, ck)
    assert ll.llama_memory_seq_rm(c.mem, 0, n, -1)   # after the restore; drops a hybrid's KV tail
    assert ll.llama_memory_seq_pos_max(c.mem, 0) == n - 1
    del c.tokens[n:]
    got = c.decode([77])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.argmax(got) == np.argmax(want)
    c.close()


def test_partial_only_checkpoint_covers_the_recurrent_part(models):
    """PARTIAL_ONLY leaves out a hybrid's attention KV: smaller, and the KV tail must be cut
    after the restore (before it the hybrid refuses the cut; without it the stale tail is
    attended to)."""
    m = models["lfm2"]
    prompt = m.tokenize(PROMPT)
    n = len(prompt)
    c = RawCtx(m)
    c.decode(prompt, 0)
    assert ll.llama_state_seq_get_size_ext(c.ptr, 0, PART) < ll.llama_state_seq_get_size_ext(c.ptr, 0, 0)
    want = c.decode([77], n)[-1]
    assert not c.rm(n)   # the hybrid refuses to cut the one-token tail
    c.close()

    c = RawCtx(m)
    c.decode(prompt, 0)
    ck = checkpoint(c.ptr)
    c.decode([200, 201, 202], n)
    assert not c.rm(n)
    restore(c.ptr, ck)
    assert c.pos() == (n - 1, n - 1)   # pos_max is min(attention, recurrent)
    stale = c.decode([77], n)[-1]      # KV tail not cut: wrong
    assert not np.allclose(stale, want, atol=1e-3)
    c.close()

    mamba = models["mamba"]
    c = RawCtx(mamba)
    c.decode(prompt, 0)
    assert ll.llama_state_seq_get_size_ext(c.ptr, 0, PART) == ll.llama_state_seq_get_size_ext(c.ptr, 0, 0)
    c.close()


def test_n_rs_seq_rollback_on_a_hybrid(models):
    """With n_rs_seq snapshots (LFM2 supports them) a partial seq_rm succeeds, and is exact,
    when it steps back at most n_rs_seq tokens and no further than the last decode's batch."""
    m = models["lfm2"]
    prompt = m.tokenize(PROMPT)
    n = len(prompt)
    batch = [200, 201, 202, 203, 204]

    def fresh_next(keep):
        f = RawCtx(m)
        f.decode(prompt, 0)
        f.decode(batch[:keep], n)
        out = f.decode([77], n + keep)[-1]
        f.close()
        return out

    for keep in (4, 2):
        c = RawCtx(m, n_rs_seq=4)
        assert ll.llama_n_rs_seq(c.ptr) == 4
        c.decode(prompt, 0)
        c.decode(batch, n)
        assert c.rm(n + keep)
        assert c.pos() == (n + keep - 1, n + keep - 1)
        np.testing.assert_allclose(c.decode([77], n + keep)[-1], fresh_next(keep), atol=1e-5)
        c.close()

    c = RawCtx(m, n_rs_seq=2)
    c.decode(prompt, 0)
    c.decode(batch, n)
    assert not c.rm(n + 2)        # 3 back > n_rs_seq
    assert c.rm(n + 3)            # 2 back
    assert not c.rm(n + 2)        # one pending rollback at a time
    c.close()

    # Snapshots only cover the last decode call: stepping back further "succeeds" but is wrong.
    c = RawCtx(m, n_rs_seq=4)
    c.decode(prompt, 0)
    c.decode(batch[:4], n)
    c.decode(batch[4:], n + 4)
    assert c.rm(n + 3)
    assert not np.allclose(c.decode([77], n + 3)[-1], fresh_next(3), atol=1e-3)
    c.close()

    for arch in ("mamba", "mamba2"):   # no rollback support: llama.cpp clamps n_rs_seq to 0
        c = RawCtx(models[arch], n_rs_seq=4)
        assert ll.llama_n_rs_seq(c.ptr) == 0
        c.close()


@pytest.mark.parametrize("target,draft", [("mamba", "llama"), ("lfm2", "lfm2-noisy"), ("llama", "mamba-noisy")])
def test_speculative_loop_with_checkpoints_is_greedy_exact(zoo, models, target, draft):
    """The checkpoint recipe in a whole greedy speculative loop (K=4) gives the target's own
    greedy output: checkpoint before verifying; on partial acceptance restore, cut, re-decode
    the accepted tokens. A recurrent draft keeps one checkpoint per drafted token."""
    def load(name):
        if name == "llama":
            return Model(zoo.get(TinySpec(noise=0.1)), gpu_layers=0)
        arch = name.split("-")[0]
        return Model(zoo.get(TinySpec(arch=arch, noise=0.05)), gpu_layers=0)

    mt, md = models[target], load(draft)
    rec = lambda m: m.info.recurrent or m.info.hybrid  # noqa: E731
    prompt = mt.tokenize(PROMPT)
    ref_ctx = ctx(mt)
    ref = greedy(ref_ctx, prompt, 40)
    ref_ctx.close()

    T, D = RawCtx(mt), RawCtx(md)
    T.decode(prompt[:-1], 0)
    D.decode(prompt[:-1], 0)
    n, last, out, K = len(prompt) - 1, prompt[-1], [], 4
    while len(out) < 40:
        cks, drafts, tok = [], [], last
        for i in range(K):
            tok = int(D.decode([tok], n + i)[-1].argmax())
            drafts.append(tok)
            if rec(md):
                cks.append(checkpoint(D.ptr))          # D holds [:n + i + 1]
        ck = checkpoint(T.ptr) if rec(mt) else None
        logits = T.decode([last] + drafts, n)
        j = 0
        while j < K and int(logits[j].argmax()) == drafts[j]:
            j += 1
        nxt = int(logits[j].argmax())
        if j < K:
            if rec(mt):
                restore(T.ptr, ck)
                assert T.rm(n)
                T.decode([last] + drafts[:j], n)
            else:
                assert T.rm(n + 1 + j)
            if rec(md):
                restore(D.ptr, cks[j])
                assert D.rm(n + 1 + j)
            else:
                assert D.rm(n + 1 + j)
        else:
            D.decode([drafts[-1]], n + K)
        n, last = n + 1 + j, nxt
        out += drafts[:j] + [nxt]
        assert T.pos()[1] == D.pos()[1] == n - 1
    T.close()
    D.close()
    md.close()
    assert out[:40] == ref
