"""Sampling settings, the distributions they define, and lossless speculative acceptance.

One :class:`SamplingConfig` is applied to both models. The transforms follow llama.cpp's
default sampler order: top-k, then top-p, then min-p (all on the untempered distribution),
then temperature. Temperature 0 means greedy.

:func:`speculative_accept` is the rejection-sampling rule of Leviathan et al. / Chen et al.:
accept a draft token x with probability min(1, p(x)/q(x)); on rejection sample from the
normalised max(0, p - q). The output then follows the target's distribution exactly.
"""

from __future__ import annotations

import math

import numpy as np

from .sampling_config import SamplingConfig

__all__ = ["Dist", "SamplingConfig", "distribution", "speculative_accept"]


class Dist:
    """A probability distribution over token ids: sparse (``ids`` ascending) when truncated,
    dense over the vocabulary when ``ids`` is None."""

    __slots__ = ("ids", "probs", "_cdf")

    def __init__(self, ids: np.ndarray | None, probs: np.ndarray):
        self.ids = ids  # None: dense over the whole vocabulary; else sorted ascending
        self.probs = probs
        self._cdf = None

    @classmethod
    def onehot(cls, token: int) -> Dist:
        return cls(np.array([token], dtype=np.int64), np.array([1.0]))

    def top(self) -> tuple[int, float]:
        i = int(np.argmax(self.probs))
        tok = i if self.ids is None else int(self.ids[i])
        return tok, float(self.probs[i])

    def prob(self, token: int) -> float:
        if self.ids is None:
            return float(self.probs[token]) if 0 <= token < self.probs.shape[0] else 0.0
        i = int(np.searchsorted(self.ids, token))
        return float(self.probs[i]) if i < self.ids.shape[0] and self.ids[i] == token else 0.0

    def probs_of(self, ids: np.ndarray) -> np.ndarray:
        """The probabilities of many ids at once (0 for ids outside the support)."""
        if self.ids is None:
            inside = ids < self.probs.shape[0]
            return np.where(inside, self.probs[np.minimum(ids, self.probs.shape[0] - 1)], 0.0)
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.shape[0] - 1)
        return np.where(self.ids[pos] == ids, self.probs[pos], 0.0)

    def dense(self, n_vocab: int) -> np.ndarray:
        """The distribution as an ``n_vocab`` array (ids past a smaller vocabulary get 0)."""
        out = np.zeros(n_vocab, dtype=np.float64)
        if self.ids is None:
            m = min(n_vocab, self.probs.shape[0])
            out[:m] = self.probs[:m]
        else:
            inside = self.ids < n_vocab
            out[self.ids[inside]] = self.probs[inside]
        return out

    def sample(self, rng: np.random.Generator) -> int:
        if self._cdf is None:
            self._cdf = np.cumsum(self.probs, dtype=np.float64)
        i = int(np.searchsorted(self._cdf, rng.random() * self._cdf[-1], side="right"))
        i = min(i, len(self.probs) - 1)
        return i if self.ids is None else int(self.ids[i])


def infill(p: Dist, is_eog, piece, end: int) -> Dist:
    """llama.cpp's ``infill`` sampler (code completion, last in the chain before the draw)
    applied to ``p``, a truncated distribution: when the end-of-generation tokens hold enough of
    the mass (3 x their sum x the candidates > the rest) only they stay; else tokens whose text
    is a prefix of another's give their probability to the likelier of the two, those under
    0.2 go, then those under 1 / (tokens left + 1), end-of-generation tokens staying throughout
    (only ``end``, certain, when no other token is left). The draw is over the survivors' own
    probabilities renormalised (llama.cpp's draw reads their logits, which the merging leaves).

    Args:
        p: the distribution after top-k, top-p, min-p and temperature (``ids`` not None).
        is_eog: token id -> whether it ends generation; piece: token id -> its bytes;
        end: the end-of-text token (llama.cpp's EOT, else EOS).
    """
    order = np.argsort(-p.probs, kind="stable")          # llama.cpp's order: by descending logit
    ids, q = p.ids[order], p.probs[order].astype(np.float32)
    n = len(ids)
    eog = np.array([is_eog(int(t)) for t in ids], dtype=bool)
    if 3 * float(q[eog].sum()) * n > float(q[~eog].sum()):
        keep = eog
    else:
        alive = np.ones(n, dtype=bool)
        text = [piece(int(t)) for t in ids]
        for i0 in range(n):
            for i1 in range(n):
                if not alive[i0]:
                    break
                if i0 == i1 or not alive[i1]:
                    continue
                if text[i0] and len(text[i0]) <= len(text[i1]) and text[i1].startswith(text[i0]):
                    dst, src = (i1, i0) if q[i1] > q[i0] else (i0, i1)
                    q[dst] += q[src]
                    q[src], alive[src] = 0.0, False
        keep = (q >= 0.2) | eog
        others = int(np.count_nonzero(keep & ~eog))
        if not others:
            return Dist.onehot(end)
        q = q / q[keep].sum()
        keep &= (q >= 1.0 / (others + 1)) | eog
        keep &= alive                                      # (a merged-away token's logit is -inf)
    kept = ids[keep]
    back = np.argsort(kept)
    probs = p.probs[order][keep][back]
    return Dist(kept[back], probs / probs.sum())


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(), dtype=np.float64)
    return e / e.sum()


# How far below the top logit (in nats) candidates are gathered, one cut after the other, before
# the whole vocabulary is taken; a cut is kept once it decides the truncation exactly.
_CUTS = (8.0, 16.0, 32.0)
_BAND = 8.0    # the tokens under a cut are bounded by counting those within this band under it
_SLACK = 1e-6  # the min-p cut is taken a little low; the exact test runs on the candidates


def distribution(logits: np.ndarray, cfg: SamplingConfig, temperature: float | None = None) -> Dist:
    """The distribution a token is sampled from, given raw logits and the settings.

    The kept set of top-k, top-p and min-p is always a prefix of the tokens by descending
    logit, so it is found among the tokens within a cut below the top logit: one vectorised
    comparison over the vocabulary, then work on those candidates only (no full-vocabulary
    partition, sort or exponential). Top-p needs the normaliser over the top-k set (the whole
    vocabulary when top-k is off): the tokens under the cut are bounded (each lies under it),
    and when the bounds leave the top-p decision open a lower cut is tried, the whole
    vocabulary last. The result is exactly llama.cpp's chain (top-k, top-p, min-p on the
    untempered distribution, then temperature), never an approximation.
    """
    temp = cfg.temperature if temperature is None else temperature
    if temp <= 0.0:
        return Dist.onehot(int(np.argmax(logits)))
    n = logits.shape[0]
    k = cfg.top_k if 0 < cfg.top_k < n else n
    if k == n and cfg.top_p >= 1.0 and cfg.min_p <= 0.0:
        return Dist(None, _softmax(logits.astype(np.float64) / temp))  # nothing truncates
    top = float(logits.max())
    first = top - _CUTS[0]
    if cfg.min_p > 0.0:
        first = min(first, top + math.log(cfg.min_p) - _SLACK)
    cuts = [first] + [top - d for d in _CUTS if top - d < first] + [-math.inf]
    for cut in cuts:
        kept = _kept(logits, top, cut, k, cfg.top_p, cfg.min_p)
        if kept is not None:
            ids = np.sort(kept)
            return Dist(ids, _softmax(logits[ids].astype(np.float64) / temp))
    raise AssertionError("the whole vocabulary always decides")  # pragma: no cover


def candidate_distribution(ids: np.ndarray, logits: np.ndarray, cfg: SamplingConfig,
                           temperature: float | None = None) -> Dist:
    """The distribution over a top-k set that llama.cpp's backend sampler kept (ids in any
    order): top-p (normalised over the set, as llama.cpp's chain does after top-k), min-p,
    then temperature; what :func:`distribution` gives for the full row when top-k is on."""
    temp = cfg.temperature if temperature is None else temperature
    order = np.lexsort((ids, -logits))           # by descending logit, ties to the lower id
    x = logits[order].astype(np.float64)
    if temp <= 0.0:
        return Dist.onehot(int(ids[order[0]]))
    e = np.exp(x - x[0])
    m = x.shape[0]
    if cfg.min_p > 0.0:
        m = int(np.count_nonzero(e >= cfg.min_p))
    if cfg.top_p < 1.0:
        csum = np.cumsum(e)
        m = min(m, int(np.searchsorted(csum, cfg.top_p * csum[-1], side="left")) + 1)
    kept = ids[order[:m]]
    back = np.argsort(kept)
    return Dist(kept[back], _softmax(x[:m][back] / temp))


def kept_distribution(ids: np.ndarray, logits: np.ndarray, temperature: float) -> Dist:
    """The distribution over tokens that the filters already kept (llama.cpp's backend top-p
    and min-p, ids in any order): only temperature is left to apply."""
    order = np.argsort(ids)
    return Dist(ids[order], _softmax(logits[order].astype(np.float64) / temperature))


def _kept(x: np.ndarray, top: float, cut: float, k: int, top_p: float, min_p: float) -> np.ndarray | None:
    """The kept ids if the candidates at or above ``cut`` decide them, else None."""
    n = x.shape[0]
    cand = (x >= cut).nonzero()[0] if cut > -math.inf else np.arange(n)
    if cand.shape[0] > k:
        cand = _top_k(x, cand, k)
    below = min(k, n) - cand.shape[0]                       # top-k members under the cut
    e = np.exp(x[cand].astype(np.float64) - top)             # unnormalised untempered probabilities
    if min_p > 0.0:
        pre = (e >= min_p).nonzero()[0]     # min-p keeps these (all above the first cut)
        limit = pre.shape[0]
    else:
        pre = np.arange(cand.shape[0])
        limit = cand.shape[0] if below == 0 else None
    z_lo = float(e.sum())
    z_hi = z_lo + below * math.exp(cut - top)
    if top_p >= 1.0:
        return cand[pre[np.argsort(-e[pre], kind="stable")]] if limit is not None else None
    order = _descending_prefix(e, pre, top_p * z_hi)
    csum = np.cumsum(e[order])
    kept = _top_p_cut(csum, top_p, z_lo, z_hi, limit)
    if kept is None and below and k == n:
        # Tighter bound: count the tokens within a band under the cut (one more pass).
        near = int(np.count_nonzero(x >= cut - _BAND)) - cand.shape[0]
        z_hi = z_lo + near * math.exp(cut - top) + (below - near) * math.exp(cut - _BAND - top)
        kept = _top_p_cut(csum, top_p, z_lo, z_hi, limit)
    return None if kept is None else cand[order[:kept]]


_LEVELS = tuple(math.exp(-d) for d in (2.0, 4.0, 8.0, 12.0, 16.0, 24.0))


def _descending_prefix(e: np.ndarray, pre: np.ndarray, mass: float) -> np.ndarray:
    """``pre`` sorted by descending ``e`` (ties in ``pre``'s order), cut after the first
    prefix that holds ``mass``: the tokens at or above a level falling from the top are a
    prefix of that order, so only the first level that holds the mass is sorted (a flat row
    keeps the sort off the whole vocabulary). The whole of ``pre`` when no level holds it."""
    if pre.shape[0] > 256:
        ep = e[pre]
        top = float(ep.max())
        for level in _LEVELS:
            sel = (ep >= top * level).nonzero()[0]
            if float(ep[sel].sum()) >= mass:
                pre = pre[sel]
                break
    return pre[np.argsort(-e[pre], kind="stable")]


def _top_k(x: np.ndarray, cand: np.ndarray, k: int) -> np.ndarray:
    """The k candidates with the largest logits, ties going to the lower id (a stable sort's
    choice), in ascending id order like ``cand``."""
    vals = x[cand]
    kth = np.partition(vals, vals.shape[0] - k)[vals.shape[0] - k]
    above = vals > kth
    tied = np.flatnonzero(vals == kth)[:k - int(np.count_nonzero(above))]
    above[tied] = True
    return cand[above]


def _top_p_cut(csum: np.ndarray, top_p: float, z_lo: float, z_hi: float, limit: int | None) -> int | None:
    """How many candidates survive top-p (and the ``limit`` of the other filters) for every
    normaliser in [z_lo, z_hi]; None when that depends on where in the range it lies. Top-p
    keeps the smallest prefix whose share reaches top_p, whose length only grows with Z."""
    i_lo = int(np.searchsorted(csum, top_p * z_lo, side="left")) + 1
    i_hi = int(np.searchsorted(csum, top_p * z_hi, side="left")) + 1 if z_hi > z_lo else i_lo
    if limit is None:
        if i_hi > csum.shape[0]:
            return None
        limit = csum.shape[0]
    a, b = min(i_lo, limit), min(i_hi, limit)
    return a if a == b else None


def top_probability(logits: np.ndarray) -> float:
    """The top token's probability (a draft's confidence), from the logits within 16 nats of
    the top only: one comparison pass instead of an exponential over the whole vocabulary.
    Over-estimates by at most n_vocab * e^-16 relative (3% at 248K tokens, far less in
    practice); it steers drafting, never what is emitted."""
    top = float(logits.max())
    near = logits[logits >= top - 16.0]
    return 1.0 / float(np.exp(near.astype(np.float64) - top).sum())


def _residual(p: Dist, q: Dist) -> Dist | None:
    """norm(max(0, p - q)): where to sample after a rejection. It lives on p's support, so a
    truncated p needs no full-vocabulary array."""
    if p.ids is not None:
        w = np.maximum(p.probs - q.probs_of(p.ids), 0.0)
        ids = p.ids
    else:
        w = p.probs.astype(np.float64, copy=True)
        if q.ids is not None:
            inside = q.ids < w.shape[0]
            w[q.ids[inside]] -= q.probs[inside]
        else:
            m = min(w.shape[0], q.probs.shape[0])
            w[:m] -= q.probs[:m]
        np.maximum(w, 0.0, out=w)
        ids = None
    total = float(w.sum())
    return Dist(ids, w / total) if total > 0.0 else None


def speculative_accept(draft_tokens: list[int], q: list[Dist], p, n_vocab: int,
                       rng: np.random.Generator) -> tuple[int, int]:
    """Rejection-sample the draft against the target.

    ``p(i)`` gives the target distribution at verify position i (0..len(draft_tokens)); it is
    only called for the positions that are needed. ``q`` holds the draft's distribution at
    each drafted position. Returns (number accepted, next token): the next token is the
    residual sample on rejection, or a sample from the target's last distribution (the
    bonus) when every draft token was accepted. Draft tokens at or past ``n_vocab`` (a draft
    with a larger vocabulary) have p = 0 and are always rejected.
    """
    for i, x in enumerate(draft_tokens):
        pi = p(i)
        px = pi.prob(x) if x < n_vocab else 0.0
        qx = q[i].prob(x)
        accept = qx > 0.0 and rng.random() < min(1.0, px / qx)
        if not accept:
            resid = _residual(pi, q[i])
            return i, (resid or pi).sample(rng)
    return len(draft_tokens), p(len(draft_tokens)).sample(rng)
