"""Pairs whose vocabulary sizes differ (Qwen2.5 0.5B vs 7B: 151936 vs 152064 tokens), in both
directions: greedy output identical to the target's, lossless sampling with truncation off
(where a dense draft distribution used to be the wrong length), and no draft id the target
lacks ever reaching its batch."""

import pytest
from conftest import make_engine, run_to_done
from test_sampling import ALPHA, chi_square_p, exact_two_tokens, sample_pairs
from tiny import TinySpec

from localspec.engine import DrafterKind, SamplingConfig, Token
from localspec.engine.compat import check_files

# One llama.cpp thread per context: target and draft spinning on every core of a small shared
# machine slow the tiny models many times over.
pytestmark = pytest.mark.usefixtures("one_llama_thread")

GREEDY = SamplingConfig(temperature=0.0)
EXTRA = 100   # within the 128 the compatibility check allows
PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time there was"]


@pytest.fixture(scope="module")
def pairs(zoo):
    """(target, draft) with the larger vocabulary on either side, for greedy and sampling."""
    big = dict(extra_tokens=EXTRA)
    return {
        "target-larger": (zoo.get(TinySpec(**big), "v-target-big.gguf"),
                          zoo.get(TinySpec(noise=0.15), "v-draft.gguf")),
        "draft-larger": (zoo.get(TinySpec(), "v-target.gguf"),
                         zoo.get(TinySpec(noise=0.15, **big), "v-draft-big.gguf")),
        "s-target-larger": (zoo.get(TinySpec(scale=0.6, **big), "vs-target-big.gguf"),
                            zoo.get(TinySpec(scale=0.6, noise=0.3), "vs-draft.gguf")),
        "s-draft-larger": (zoo.get(TinySpec(scale=0.6), "vs-target.gguf"),
                           zoo.get(TinySpec(scale=0.6, noise=0.3, **big), "vs-draft-big.gguf")),
    }


def record_drafts(engine):
    """Wrap the model drafter to keep every token it proposes."""
    drafter = engine.drafter(DrafterKind.MODEL)
    seen = []
    inner = drafter.draft

    def draft(*a, **kw):
        d = inner(*a, **kw)
        seen.extend(d.tokens)
        return d

    drafter.draft = draft
    return seen


@pytest.mark.parametrize("direction", ["target-larger", "draft-larger"])
def test_greedy_identical(pairs, direction):
    target, draft = pairs[direction]
    report = check_files(target, draft)
    assert report.compatible, report.summary()
    with make_engine(target, draft, draft_max=4) as e:
        n_target = e.target_model.n_vocab
        n_draft = e.draft_model.n_vocab
        assert abs(n_target - n_draft) == EXTRA
        proposed = record_drafts(e)
        emitted = []
        for prompt in PROMPTS:
            toks = e.tokenize(prompt)
            e.reset()
            base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=40, speculative=False)
            e.reset()
            spec, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=40)
            assert spec.token_ids == base.token_ids, prompt
            assert spec.summary.accepted > 0
            emitted += spec.token_ids
    assert proposed and max(proposed) < n_target, "a draft id the target lacks was proposed"


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["s-target-larger", "s-draft-larger"])
def test_sampling_with_truncation_off_is_lossless(pairs, direction):
    """Dense distributions (top-k, top-p and min-p off) on both sides of a size difference."""
    target, draft = pairs[direction]
    cfg = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    with make_engine(target, draft, draft_max=3) as e:
        n_target, n_draft = e.target_model.n_vocab, e.draft_model.n_vocab
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(target, prompt, cfg)
        n = 2500
        counts, drafted, accepted = sample_pairs(e, prompt, cfg, n)
        if n_target > n_draft:
            # The target emits ids the draft lacks, and the draft still follows along.
            run = list(e.run(prompt, e.test_spec.with_(sampling=SamplingConfig(**(cfg.to_dict() | {"seed": 1})),
                                                       max_tokens=200)))
            ids = [ev.id for ev in run if isinstance(ev, Token)]
            assert any(t >= n_draft for t in ids)
    assert drafted > 0 and 0 < accepted < drafted, "both acceptance and rejection must occur"
    pval = chi_square_p(counts, expected, n)
    assert pval > ALPHA, f"speculative samples do not follow the target (p = {pval:.2e})"
