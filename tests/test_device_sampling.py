"""Backend sampling (llama.cpp samples inside its graph; only the chosen token or the top-k
candidates leave the device) gives exactly what the full rows of logits give: the same
greedy output, the same sampling distributions, lossless speculative sampling. On a GPU it
is on by default; here it is forced on, on the CPU, to run the same code."""

import llama_cpp.llama_cpp as ll
import numpy as np
import pytest
from conftest import make_engine, run_to_done
from test_sampling import ALPHA, chi_square_p, exact_two_tokens, sample_pairs
from test_vocab_sizes import EXTRA
from tiny import TinySpec

from localspec.engine import SamplingConfig, outputs
from localspec.engine.backend import Context, Model, _runs_on_backend
from localspec.engine.outputs import CONFIDENCE_K, DRAFT_TOP_K, DeviceChain, LogitRows, SampledRows, chain_for
from localspec.engine.sampling import candidate_distribution, distribution

# One llama.cpp thread per context: target and draft spinning on every core of a small shared
# machine slow the tiny models many times over.
pytestmark = pytest.mark.usefixtures("one_llama_thread")

GREEDY = SamplingConfig(temperature=0.0)
CONFIGS = [
    SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    SamplingConfig(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
    SamplingConfig(temperature=1.5, top_k=10, top_p=0.5, min_p=0.1),
    SamplingConfig(temperature=0.3, top_k=3, top_p=0.99, min_p=0.0),
]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_candidates_give_the_full_rows_distribution(cfg):
    rng = np.random.default_rng(0)
    for trial in range(20):
        logits = (rng.standard_normal(3000) * (0.5 + trial)).astype(np.float32)
        top = np.argsort(-logits, kind="stable")[:cfg.top_k]
        shuffled = rng.permutation(top)                 # the device keeps them in no order
        got = candidate_distribution(shuffled.astype(np.int64), logits[shuffled], cfg)
        want = distribution(logits, cfg)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_allclose(got.probs, want.probs, rtol=1e-12, atol=1e-15)


def test_the_chain_follows_the_settings():
    assert chain_for(GREEDY, confidence=False) == DeviceChain("greedy")
    assert chain_for(GREEDY, confidence=True) == DeviceChain("top_k", CONFIDENCE_K)
    assert chain_for(CONFIGS[0], confidence=False) == DeviceChain("top_k", 40)
    # Top-k off: the device runs top-p and min-p over the whole row; a draft's gate needs
    # the top probability, which the kept set alone does not give.
    assert chain_for(SamplingConfig(top_k=0), confidence=False) == DeviceChain("top_p", p=0.95, min_p=0.05)
    assert chain_for(SamplingConfig(top_k=0), confidence=True) is None
    # Min-p alone would leave the kept tokens scattered through the row: full rows.
    assert chain_for(SamplingConfig(top_k=0, top_p=1.0), confidence=False) is None


TOP_K_OFF = [
    SamplingConfig(temperature=0.8, top_k=0, top_p=0.95, min_p=0.05),
    SamplingConfig(temperature=1.2, top_k=0, top_p=0.5, min_p=0.0),
    SamplingConfig(temperature=1.0, top_k=0, top_p=0.999, min_p=0.0),
]


def test_a_top_p_chain_keeps_what_the_full_row_keeps(tiny_target, monkeypatch):
    """The device's top-p and min-p keep the tokens the numpy path keeps, with the same
    probabilities, whether the kept set is one token or a large part of the vocabulary
    (read from the sorted row in growing pieces: 16 logits first here, then 256, ...)."""
    monkeypatch.setattr(outputs, "_PREFIX_FIRST", 16)
    m = Model(str(tiny_target))
    full = Context(m, n_ctx=256)
    dev = Context(m, n_ctx=256, device_sampling=True)
    prompt = m.tokenize("The quick brown fox jumps over")
    sizes = set()
    try:
        for cfg in TOP_K_OFF:
            full.clear()
            dev.clear()
            dev.sample_on_device(chain_for(cfg, confidence=False))
            assert dev.device_chain is not None and dev.device_chain.kind == "top_p"
            want = full.decode_rows(prompt, 4)
            got = dev.decode_rows(prompt, 4)
            assert isinstance(got, SampledRows)
            for j in range(4):
                a, b = got.dist(j, cfg), distribution(want.x[j], cfg)
                np.testing.assert_array_equal(a.ids, b.ids)
                np.testing.assert_allclose(a.probs, b.probs, rtol=1e-5)
                assert got.argmax(j) == int(want.x[j].argmax())
                sizes.add(len(a.ids))
    finally:
        full.close()
        dev.close()
        m.close()
    assert min(sizes) <= 2 and max(sizes) > 16, "short and long kept sets"


def test_sampled_rows_match_full_rows(tiny_target):
    m = Model(str(tiny_target))
    full = Context(m, n_ctx=256)
    dev = Context(m, n_ctx=256, device_sampling=True)
    prompt = m.tokenize("The quick brown fox jumps over")
    try:
        for chain in (DeviceChain("greedy"), DeviceChain("top_k", 40), DeviceChain("top_k", CONFIDENCE_K)):
            full.clear()
            dev.clear()
            dev.sample_on_device(chain)
            assert dev.device_chain == chain
            want = full.decode_rows(prompt, 4)
            got = dev.decode_rows(prompt, 4)
            assert isinstance(want, LogitRows) and isinstance(got, SampledRows)
            want_x = want.x.copy()
            for j in range(4):
                assert got.argmax(j) == int(want_x[j].argmax())
                if chain.kind == "top_k":
                    ids, _ = got.candidates(j)
                    assert set(ids.tolist()) == set(np.argsort(-want_x[j])[:chain.k].tolist())
                    if chain.k == 40:
                        a, b = got.dist(j, CONFIGS[0]), distribution(want_x[j], CONFIGS[0])
                        np.testing.assert_array_equal(a.ids, b.ids)
                        np.testing.assert_allclose(a.probs, b.probs, rtol=1e-6)
                    limit = int(ids.max())          # a draft's vocabulary limit drops candidates
                    assert got.argmax(j, limit) == int(want_x[j, :limit].argmax())
            # The raw API takes the chain off and returns real logits again.
            full_again = dev.decode([7], logits="last").copy()
            assert dev.device_chain is None and np.isfinite(full_again).all()
    finally:
        full.close()
        dev.close()
        m.close()


def test_off_by_default_on_the_cpu(tiny_target):
    m = Model(str(tiny_target), gpu_layers=0)
    c = Context(m, n_ctx=64)
    c.sample_on_device(DeviceChain("greedy"))
    assert c.device_chain is None, "the CPU keeps full rows (backend sampling costs more there)"
    c.close()
    m.close()


@pytest.mark.parametrize("p_min", [0.0, 0.3])
def test_greedy_speculation_is_the_targets_output(tiny_target, tiny_draft, p_min):
    with make_engine(tiny_target, tiny_draft, device_sampling=False) as plain:
        toks = plain.tokenize("Once upon a time")
        base, _ = run_to_done(plain, toks, max_tokens=60, speculative=False)
    with make_engine(tiny_target, tiny_draft, device_sampling=True, p_min=p_min) as e:
        alone, _ = run_to_done(e, toks, max_tokens=60, speculative=False)
        e.reset()
        spec, _ = run_to_done(e, toks, max_tokens=60)
        assert e.target_ctx.device_chain == DeviceChain("greedy")
        want_draft = DeviceChain("top_k", CONFIDENCE_K) if p_min else DeviceChain("greedy")
        assert e.draft_ctx.device_chain == want_draft
    assert alone.token_ids == base.token_ids
    assert spec.token_ids == base.token_ids
    assert spec.summary.accepted > 0


def test_a_larger_draft_vocabulary_never_reaches_the_target(zoo):
    target = zoo.get(TinySpec(), "v-target.gguf")
    draft = zoo.get(TinySpec(noise=0.15, extra_tokens=EXTRA), "v-draft-big.gguf")
    with make_engine(target, draft, device_sampling=True, p_min=0.1) as e:
        toks = e.tokenize("def fibonacci(n):")
        base, _ = run_to_done(e, toks, max_tokens=40, speculative=False)
        e.reset()
        spec, _ = run_to_done(e, toks, max_tokens=40)
    assert spec.token_ids == base.token_ids


@pytest.mark.slow
@pytest.mark.parametrize("cfg, target_chain, draft_chain", [
    (SamplingConfig(temperature=1.0, top_k=8, top_p=0.9, min_p=0.02), DeviceChain("top_k", 8), DeviceChain("top_k", 8)),
    # Top-k off: the target's top-p runs on the device over the whole row, the draft
    # proposes from its top DRAFT_TOP_K, fewer tokens than the target keeps on these flat
    # models.
    (SamplingConfig(temperature=1.0, top_k=0, top_p=0.97, min_p=0.0), DeviceChain("top_p", p=0.97),
     DeviceChain("top_k", DRAFT_TOP_K)),
], ids=["top-k", "top-k-off"])
def test_speculative_sampling_is_lossless(zoo, cfg, target_chain, draft_chain):
    target = zoo.get(TinySpec(scale=0.35), "flat-target.gguf")
    draft = zoo.get(TinySpec(scale=0.35, noise=0.3), "flat-draft.gguf")
    with make_engine(target, draft, draft_max=3, device_sampling=True) as e:
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(target, prompt, cfg)
        n = 2500
        counts, drafted, accepted = sample_pairs(e, prompt, cfg, n)
        assert e.target_ctx.device_chain == target_chain and e.draft_ctx.device_chain == draft_chain
    if cfg.top_k == 0:   # the target keeps more tokens than the draft offers
        assert len({t1 for t1, _ in expected}) > DRAFT_TOP_K
    assert drafted > 0 and 0 < accepted < drafted, "both acceptance and rejection must occur"
    pval = chi_square_p(counts, expected, n)
    assert pval > ALPHA, f"speculative samples do not follow the target (p = {pval:.2e})"


def test_a_chain_only_partly_on_the_device_is_not_used(tiny_target):
    """Rows that one of the chain's samplers never touched would give the wrong distribution."""
    m = Model(str(tiny_target))
    c = Context(m, n_ctx=64, device_sampling=True)
    chains = []
    try:
        for second in (ll.llama_sampler_init_min_p(0.05, 1), ll.llama_sampler_init_typical(0.9, 1)):
            chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(0.9, 1))
            ll.llama_sampler_chain_add(chain, second)
            chains.append(chain)
            ll.llama_set_sampler(c.ptr, 0, chain)
            ll.llama_set_sampler(c.ptr, 0, None)
        on, partly = (_runs_on_backend(ch) for ch in chains)
        assert on and not partly, "typical sampling has no backend version"
    finally:
        for ch in chains:
            ll.llama_sampler_free(ch)
        c.close()
        m.close()
