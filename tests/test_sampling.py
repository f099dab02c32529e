"""Sampling transforms match llama.cpp's order, and speculative sampling is lossless.

Losslessness is checked with chi-square goodness-of-fit tests, fixed seeds, at the 0.1%
level: the distribution of what speculative decoding emits must match the target's exact
distribution (computed from the target's own logits). Each test also shows the check has
teeth: naive "always accept the draft" sampling fails the same test.
"""

from collections import Counter

import numpy as np
import pytest
from conftest import make_engine, run_spec
from scipy import stats
from tiny import TinySpec

from localspec.engine import RunSpec, SamplingConfig
from localspec.engine.backend import Context, Model
from localspec.engine.events import Done
from localspec.engine.sampling import Dist, distribution, speculative_accept
from localspec.errors import BadInput

# One llama.cpp thread per context: target and draft spinning on every core of a small shared
# machine slow the tiny models many times over.
pytestmark = pytest.mark.usefixtures("one_llama_thread")

ALPHA = 0.001


def brute_force(logits, top_k, top_p, min_p, temp):
    """llama.cpp's chain, spelled out: top-k, top-p, min-p on the untempered softmax, then temperature."""
    ids = np.argsort(-logits, kind="stable")
    if top_k > 0:
        ids = ids[:top_k]
    p = np.exp(logits[ids] - logits[ids].max())
    p /= p.sum()
    if top_p < 1.0:
        n = int(np.searchsorted(np.cumsum(p), top_p)) + 1
        ids, p = ids[:n], p[:n]
    if min_p > 0.0:
        keep = p >= min_p * p.max()
        ids = ids[keep]
    out = np.zeros_like(logits, dtype=np.float64)
    z = logits[ids] / temp
    e = np.exp(z - z.max())
    out[ids] = e / e.sum()
    return out


@pytest.mark.parametrize("top_k,top_p,min_p,temp", [
    (0, 1.0, 0.0, 1.0), (40, 1.0, 0.0, 0.8), (0, 0.9, 0.0, 1.0), (0, 0.95, 0.05, 0.7),
    (10, 0.5, 0.1, 1.5), (0, 1.0, 0.2, 0.3), (3, 0.99, 0.0, 2.0),
])
def test_distribution_matches_brute_force(top_k, top_p, min_p, temp):
    rng = np.random.default_rng(0)
    for trial in range(5):
        logits = (rng.standard_normal(5000) * (1 + 3 * trial)).astype(np.float32)
        cfg = SamplingConfig(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p)
        got = distribution(logits, cfg).dense(5000)
        want = brute_force(logits.astype(np.float64), top_k, top_p, min_p, temp)
        np.testing.assert_allclose(got, want, atol=1e-9)


def test_greedy_is_argmax():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    d = distribution(logits, SamplingConfig(temperature=0.0))
    assert d.top() == (1, 1.0)


@pytest.mark.parametrize("bad", [dict(temperature=-0.1), dict(top_k=-1), dict(top_p=0.0),
                                 dict(top_p=1.5), dict(min_p=1.0), dict(draft_temperature=-1.0),
                                 dict(seed=-3), dict(temperature=float("nan"))])
def test_bad_settings_refused(bad):
    with pytest.raises(BadInput):
        RunSpec(sampling=SamplingConfig(**bad)).validate()


def chi_square_p(observed: Counter, expected_probs: dict, n: int) -> float:
    """Goodness of fit; cells expected below 5 are pooled."""
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for cell, p in expected_probs.items():
        e = p * n
        if e < 5:
            rest_o += observed.get(cell, 0)
            rest_e += e
        else:
            obs.append(observed.get(cell, 0))
            exp.append(e)
    unexpected = sum(c for cell, c in observed.items() if cell not in expected_probs)
    rest_o += unexpected
    if rest_e > 0 or rest_o > 0:
        obs.append(rest_o)
        exp.append(max(rest_e, 1e-9))
    exp = np.array(exp) * (sum(obs) / sum(exp))
    return float(stats.chisquare(obs, exp).pvalue)


# -- the acceptance rule on synthetic distributions ----------------------------------------

def _random_dist(rng, n, sparse=False):
    p = rng.dirichlet(np.ones(n) * 0.7)
    if sparse:
        p[rng.choice(n, n // 3, replace=False)] = 0.0
        p /= p.sum()
    return Dist(None, p)


@pytest.mark.parametrize("sparse", [False, True])
def test_acceptance_rule_reproduces_target(sparse):
    rng = np.random.default_rng(1)
    n_vocab = 12
    p = [_random_dist(rng, n_vocab, sparse) for _ in range(3)]
    q = [_random_dist(rng, n_vocab) for _ in range(2)]
    n = 40_000
    first = Counter()
    naive = Counter()
    accepted = 0
    for _ in range(n):
        drafts = [q[0].sample(rng), q[1].sample(rng)]
        a, nxt = speculative_accept(drafts, q, lambda i: p[i], n_vocab, rng)
        accepted += a
        first[drafts[0] if a >= 1 else nxt] += 1
        naive[drafts[0]] += 1
    expected = {t: float(p[0].probs[t]) for t in range(n_vocab) if p[0].probs[t] > 0}
    assert chi_square_p(first, expected, n) > ALPHA
    assert chi_square_p(naive, expected, n) < ALPHA, "the test must be able to fail"
    assert accepted > 0


def test_greedy_draft_with_sampled_target_is_lossless():
    """A one-hot q (a greedy or n-gram draft) still yields the target's distribution."""
    rng = np.random.default_rng(2)
    n_vocab = 10
    p0 = _random_dist(rng, n_vocab)
    p1 = _random_dist(rng, n_vocab)
    draft_tok = int(np.argmax(p0.probs))
    counts = Counter()
    n = 30_000
    for _ in range(n):
        a, nxt = speculative_accept([draft_tok], [Dist.onehot(draft_tok)], lambda i: (p0, p1)[i],
                                    n_vocab, rng)
        counts[draft_tok if a else nxt] += 1
    assert chi_square_p(counts, {t: float(p0.probs[t]) for t in range(n_vocab)}, n) > ALPHA


# -- end to end on real (tiny) models --------------------------------------------------------

def exact_two_tokens(target_path, prompt, cfg):
    """P(t1, t2) of target-only sampling, from the target's own logits."""
    m = Model(target_path)
    c = Context(m, n_ctx=256)
    p1 = distribution(c.decode(prompt, logits="last").copy(), cfg)
    c.mark()  # recurrent/hybrid models come back here through a checkpoint
    out = {}
    support1 = [(int(t), float(pr)) for t, pr in zip(p1.ids, p1.probs)] if p1.ids is not None else \
        [(t, float(pr)) for t, pr in enumerate(p1.probs) if pr > 0]
    for t1, pr1 in support1:
        assert c.truncate(len(prompt)) == len(prompt)
        p2 = distribution(c.decode([t1], logits="last").copy(), cfg)
        ids2 = p2.ids if p2.ids is not None else np.arange(len(p2.probs))
        for t2, pr2 in zip(ids2, p2.probs):
            if pr2 > 0:
                out[(t1, int(t2))] = pr1 * float(pr2)
    c.close()
    m.close()
    return out


def sample_pairs(engine, prompt, cfg, n, policy_k=3):
    counts = Counter()
    drafted = accepted = 0
    for seed in range(n):
        c = SamplingConfig(**(cfg.to_dict() | {"seed": seed}))
        done = None
        for ev in engine.run(prompt, run_spec(engine, sampling=c, max_tokens=3, speculative=policy_k > 0,
                                                 adaptive=False, draft_max=max(policy_k, 1))):
            done = ev
        assert isinstance(done, Done)
        counts[tuple(done.token_ids[:2])] += 1
        drafted += done.summary.drafted
        accepted += done.summary.accepted
    return counts, drafted, accepted


@pytest.mark.slow
@pytest.mark.parametrize("cfg", [
    SamplingConfig(temperature=1.0, top_k=8),
    SamplingConfig(temperature=0.7, top_k=0, top_p=0.9, min_p=0.02),
    SamplingConfig(temperature=1.0, top_k=8, draft_temperature=0.0),
    SamplingConfig(temperature=1.2, top_k=8, draft_temperature=0.5),
], ids=["top-k", "top-p+min-p", "greedy-draft", "cool-draft"])
def test_speculative_sampling_matches_target_distribution(zoo, cfg):
    target = zoo.get(TinySpec(scale=0.35), "flat-target.gguf")
    draft = zoo.get(TinySpec(scale=0.35, noise=0.3), "flat-draft.gguf")
    with make_engine(target, draft, draft_max=3) as e:
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(target, prompt, cfg)
        n = 2500
        counts, drafted, accepted = sample_pairs(e, prompt, cfg, n)
    assert drafted > 0 and 0 < accepted < drafted, "both acceptance and rejection must occur"
    pval = chi_square_p(counts, expected, n)
    assert pval > ALPHA, f"speculative samples do not follow the target (p = {pval:.2e})"


def test_the_end_to_end_check_has_teeth(zoo):
    """Sampling the draft alone (what a broken acceptance rule would do) fails the check."""
    cfg = SamplingConfig(temperature=1.0, top_k=8)
    target = zoo.get(TinySpec(scale=0.35), "flat-target.gguf")
    draft = zoo.get(TinySpec(scale=0.35, noise=0.3), "flat-draft.gguf")
    with make_engine(draft, drafter="none") as e:
        prompt = e.tokenize("Once upon a time")
        counts, _, _ = sample_pairs(e, prompt, cfg, 2500, policy_k=0)
    assert chi_square_p(counts, exact_two_tokens(target, prompt, cfg), 2500) < ALPHA


def test_same_seed_same_output(tiny_target, tiny_draft):
    cfg = SamplingConfig(temperature=0.9, top_k=20, seed=1234)
    with make_engine(tiny_target, tiny_draft) as e:
        prompt = e.tokenize("The quick")
        runs = []
        for _ in range(2):
            e.reset()
            runs.append([ev for ev in e.run(prompt, run_spec(e, sampling=cfg, max_tokens=30))][-1].token_ids)
    assert runs[0] == runs[1]
