"""qwen35 (Qwen 3.5/3.6, the ``qwen-27b`` architecture) at toy size: the tiny GGUFs load in
llama.cpp as hybrids, a qwen35 target rolls rejected drafts back through recurrent-state
snapshots (``rs``), and speculation on qwen35 targets and drafts is lossless: greedy output
identical to the target alone, sampled output distributed as the target's."""

from pathlib import Path

import pytest
from conftest import make_engine
from test_hybrid import assert_greedy_identical, compare
from test_sampling import ALPHA, chi_square_p, exact_two_tokens, sample_pairs
from tiny import REAL_VOCAB, TinySpec, qwen35_spec

from localspec.engine import SamplingConfig
from localspec.engine.backend import Model, Rollback
from localspec.engine.gguf_meta import read_metadata

PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time there was"]
BIG = dict(n_vocab=REAL_VOCAB, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=64, d_state=8, f16=True)


pytestmark = pytest.mark.usefixtures("one_llama_thread")


@pytest.fixture(scope="module")
def models(zoo):
    return {
        "q35": zoo.get(qwen35_spec(), "q35.gguf"),
        "q35-d": zoo.get(qwen35_spec(noise=0.1, n_layer=2, full_attention_interval=2), "q35-d.gguf"),
        "q35-mtp": zoo.get(qwen35_spec(mtp=True), "q35-mtp.gguf"),
        "llama-d": zoo.get(TinySpec(noise=0.1), "llama-d.gguf"),
        "big": zoo.get(qwen35_spec(**BIG), "q35-big.gguf"),
        "big-d": zoo.get(qwen35_spec(**BIG, noise=0.1, n_layer=2, full_attention_interval=2), "q35-big-d.gguf"),
    }


def test_tiny_models_load_as_qwen35_hybrids(models):
    for name in ("q35", "q35-d", "q35-mtp", "big"):
        meta = read_metadata(models[name])
        assert meta.architecture == "qwen35"
        m = Model(models[name], gpu_layers=0)
        try:
            assert m.info.hybrid and not m.info.recurrent, name
            assert m.info.description.startswith("qwen35")
            assert m.n_layer_nextn == (1 if name == "q35-mtp" else 0)
            assert m.info.n_layer == 2 if name == "q35-d" else 4
        finally:
            m.close()
    # Gated DeltaNet layers with full attention every 4th layer, as the real model.
    meta = read_metadata(models["q35"])
    assert meta.arch_key("full_attention_interval") == 4 and meta.arch_key("ssm.group_count") == 2


def test_real_vocabulary_size_in_a_small_file(models):
    m = Model(models["big"], gpu_layers=0)
    try:
        assert m.n_vocab == REAL_VOCAB
        assert m.tokenize("The quick brown fox") == Model(models["q35"], gpu_layers=0).tokenize("The quick brown fox")
    finally:
        m.close()
    assert Path(models["big"]).stat().st_size < 40 * 1024 * 1024


def test_target_rolls_back_with_state_snapshots(models):
    """A qwen35 target takes the `rs` path qwen-27b uses: the rejected tail comes off by
    llama.cpp's recurrent-state snapshots, never by re-decoding."""
    with make_engine(models["q35"], models["q35-d"], draft_max=4) as e:
        assert e.target_ctx.rollback is Rollback.RS and e.target_ctx.rs_depth >= 5
        _, spec, _ = compare(e, PROMPTS[0], 60)
        s = spec.summary
        assert 0 < s.accepted < s.drafted, "partial acceptance happened"
        assert s.target_memory == "rs"
        assert s.rollbacks > 0 and s.restarts == 0 and s.redecoded_tokens == 0


@pytest.mark.parametrize("target,draft", [("q35", "q35-d"), ("q35", "llama-d"), ("q35-mtp", "q35-d")])
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_identical(models, target, draft, k):
    assert_greedy_identical(models[target], models[draft], k)


def test_greedy_identical_with_the_real_vocabulary(models):
    """248320 tokens: every verify row and draft step carries logits of the real size."""
    with make_engine(models["big"], models["big-d"], draft_max=4) as e:
        _, spec, _ = compare(e, PROMPTS[0], 24)
        assert spec.summary.drafted > 0 and e.target_ctx.rollback is Rollback.RS


def test_adaptive_policy_on_qwen35(models):
    with make_engine(models["q35"], models["q35-d"], fixed_k=False, draft_max=6) as e:
        compare(e, PROMPTS[1], 60)


@pytest.mark.slow
def test_lossless_sampling_qwen35_pair(zoo):
    t = zoo.get(qwen35_spec(scale=0.35), "q35-flat.gguf")
    d = zoo.get(qwen35_spec(scale=0.35, noise=0.3), "q35-flat-d.gguf")
    cfg = SamplingConfig(temperature=1.0, top_k=8)
    with make_engine(t, d, draft_max=3) as e:
        assert e.target_ctx.rollback is Rollback.RS
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(t, prompt, cfg)
        counts, drafted, accepted = sample_pairs(e, prompt, cfg, 2000)
    assert 0 < accepted < drafted
    pval = chi_square_p(counts, expected, 2000)
    assert pval > ALPHA, f"speculative samples do not follow the target (p = {pval:.2e})"
