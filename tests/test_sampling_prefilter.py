"""The prefiltered sampling transforms give exactly the brute-force chain on large vocabularies,
in the cases that take each of its paths: the first cut decides, a lower cut is needed, the
band bound decides, and only the whole vocabulary decides."""

import numpy as np
import pytest
from test_sampling import brute_force

from localspec.engine.sampling import Dist, SamplingConfig, distribution, speculative_accept

CONFIGS = [(40, 0.95, 0.05), (0, 0.95, 0.05), (40, 1.0, 0.0), (0, 0.9, 0.0), (5, 0.5, 0.0),
           (0, 1.0, 0.1), (100, 0.99, 0.01), (0, 0.999, 0.001)]


def llm_like(rng, n, peak, spread):
    """A bulk of logits with a few tokens standing out, like a language model's."""
    x = rng.standard_normal(n) * spread
    hot = rng.choice(n, 8, replace=False)
    x[hot] = x.max() + peak * rng.random(8)
    return x.astype(np.float32)


@pytest.mark.parametrize("top_k,top_p,min_p", CONFIGS)
def test_matches_brute_force_on_large_vocabularies(top_k, top_p, min_p):
    rng = np.random.default_rng(7)
    cfg = SamplingConfig(temperature=0.8, top_k=top_k, top_p=top_p, min_p=min_p)
    for n in (3000, 49152):
        for peak, spread in ((0.0, 1.0), (0.5, 3.0), (3.0, 2.0), (12.0, 3.0), (30.0, 1.0)):
            x = llm_like(rng, n, peak, spread)
            got = distribution(x, cfg)
            want = brute_force(x.astype(np.float64), top_k, top_p, min_p, 0.8)
            np.testing.assert_allclose(got.dense(n), want, atol=1e-9)
            if got.ids is not None:
                assert np.all(np.diff(got.ids) > 0), "sparse ids are kept ascending"


def test_near_ties_at_the_top_p_boundary():
    """Distributions built so that top-p lands right at a candidate boundary, where only a
    lower cut (or the whole vocabulary) can decide."""
    rng = np.random.default_rng(3)
    n = 20000
    for _ in range(40):
        x = (rng.standard_normal(n) - 14.0).astype(np.float32)
        x[:3] = [0.0, np.log(0.9) + rng.normal(0, 0.01), np.log(0.05)]
        cfg = SamplingConfig(temperature=1.0, top_k=0, top_p=0.95, min_p=0.04)
        got = distribution(x, cfg).dense(n)
        want = brute_force(x.astype(np.float64), 0, 0.95, 0.04, 1.0)
        np.testing.assert_allclose(got, want, atol=1e-9)


def test_a_full_vocabulary_decision_sorts_only_the_kept_prefix():
    """At a 152K vocabulary: the top token's share right at top-p (only the whole row's
    normaliser decides), a flat row whose kept set spans thousands of tokens, and ties at a
    level the prefix search stops at: each exactly the brute-force chain."""
    rng = np.random.default_rng(11)
    n = 151936
    rows = []
    for share in (0.9502, 0.9498):
        x = (rng.standard_normal(n) * 2.0 - 20.0).astype(np.float32)
        rest = float(np.exp(x.astype(np.float64)).sum())
        x[17] = np.float32(np.log(share / (1.0 - share) * rest))
        rows.append(x)
    rows.append((rng.standard_normal(n) * 0.5).astype(np.float32))
    tied = (rng.standard_normal(n) * 3.0).astype(np.float32)
    tied[rng.choice(n, 500, replace=False)] = tied.max() - 4.0
    rows.append(tied)
    for x in rows:
        for top_p in (0.95, 0.5):
            cfg = SamplingConfig(temperature=0.7, top_k=0, top_p=top_p, min_p=0.0)
            got = distribution(x, cfg)
            want = brute_force(x.astype(np.float64), 0, top_p, 0.0, 0.7)
            np.testing.assert_allclose(got.dense(n), want, atol=1e-9)


def test_residual_stays_sparse_and_exact():
    """The rejection residual of two truncated distributions uses only p's support, and a
    draft id past the target's vocabulary is always rejected."""
    rng = np.random.default_rng(5)
    n = 50
    p = Dist(np.array([3, 7, 9, 20]), np.array([0.4, 0.3, 0.2, 0.1]))
    q = Dist(np.array([7, 9, 45]), np.array([0.5, 0.3, 0.2]))
    counts = np.zeros(n)
    trials = 20000
    for _ in range(trials):
        x = q.sample(rng)
        a, nxt = speculative_accept([x], [q], lambda i: p, 40, rng)
        counts[x if a else nxt] += 1
    assert counts[45] == 0, "id 45 is past the target's 40-token vocabulary"
    np.testing.assert_allclose(counts / trials, p.dense(n), atol=0.015)
