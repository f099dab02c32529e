"""Sampling settings, the distributions they define, and lossless speculative acceptance.

One :class:`SamplingConfig` is applied to both models. The transforms follow llama.cpp's
default sampler order: top-k, then top-p, then min-p (all on the untempered distribution),
then temperature. Temperature 0 means greedy.

:func:`speculative_accept` is the rejection-sampling rule of Leviathan et al. / Chen et al.:
accept a draft token x with probability min(1, p(x)/q(x)); on rejection sample from the
normalised max(0, p - q). The output then follows the target's distribution exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings shared by target and draft (llama.cpp's defaults); validated as part
    of :class:`~localspec.engine.spec.RunSpec`."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    draft_temperature: float | None = None  # None: same as temperature

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def for_draft(self) -> SamplingConfig:
        """The settings the draft samples with (its own temperature, if one is set)."""
        if self.draft_temperature is None:
            return self
        return replace(self, temperature=self.draft_temperature, draft_temperature=None)

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "min_p": self.min_p, "seed": self.seed,
                "draft_temperature": self.draft_temperature}


class Dist:
    """A probability distribution over token ids, sparse when truncated."""

    __slots__ = ("ids", "probs", "_cdf")

    def __init__(self, ids: np.ndarray | None, probs: np.ndarray):
        self.ids = ids  # None: dense over the whole vocabulary
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
            return float(self.probs[token])
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def dense(self, n_vocab: int) -> np.ndarray:
        if self.ids is None:
            return self.probs.astype(np.float64, copy=False)
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out

    def sample(self, rng: np.random.Generator) -> int:
        if self._cdf is None:
            self._cdf = np.cumsum(self.probs, dtype=np.float64)
        i = int(np.searchsorted(self._cdf, rng.random() * self._cdf[-1], side="right"))
        i = min(i, len(self.probs) - 1)
        return i if self.ids is None else int(self.ids[i])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(), dtype=np.float64)
    return e / e.sum()


def _top_p_keep(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Indices (into probs) of the smallest prefix, by descending probability, reaching top_p."""
    n = probs.shape[0]
    k = 64
    while True:
        if k >= n:
            order = np.argsort(-probs, kind="stable")
            break
        part = np.argpartition(-probs, k)[:k]
        if probs[part].sum() >= top_p:
            order = part[np.argsort(-probs[part], kind="stable")]
            break
        k *= 8
    csum = np.cumsum(probs[order])
    n_keep = int(np.searchsorted(csum, top_p, side="left")) + 1
    return order[:min(n_keep, order.shape[0])]


def distribution(logits: np.ndarray, cfg: SamplingConfig, temperature: float | None = None) -> Dist:
    """The distribution a token is sampled from, given raw logits and the settings."""
    temp = cfg.temperature if temperature is None else temperature
    if temp <= 0.0:
        return Dist.onehot(int(np.argmax(logits)))
    n = logits.shape[0]
    ids: np.ndarray | None = None
    vals = logits
    if 0 < cfg.top_k < n:
        ids = np.argpartition(-logits, cfg.top_k)[:cfg.top_k]
        vals = logits[ids]
    if cfg.top_p < 1.0 or cfg.min_p > 0.0:
        p1 = _softmax(vals.astype(np.float64))
        keep = _top_p_keep(p1, cfg.top_p) if cfg.top_p < 1.0 else np.arange(p1.shape[0])
        if cfg.min_p > 0.0:
            keep = keep[p1[keep] >= cfg.min_p * p1.max()]
        keep = np.sort(keep)
        ids = keep if ids is None else ids[keep]
        vals = vals[keep]
    probs = _softmax(vals.astype(np.float64) / temp)
    return Dist(ids, probs)


def speculative_accept(draft_tokens: list[int], q: list[Dist], p, n_vocab: int,
                       rng: np.random.Generator) -> tuple[int, int]:
    """Rejection-sample the draft against the target.

    ``p(i)`` gives the target distribution at verify position i (0..len(draft_tokens)); it is
    only called for the positions that are needed. ``q`` holds the draft's distribution at
    each drafted position. Returns (number accepted, next token): the next token is the
    residual sample on rejection, or a sample from the target's last distribution (the
    bonus) when every draft token was accepted.
    """
    for i, x in enumerate(draft_tokens):
        pi = p(i)
        px, qx = pi.prob(x), q[i].prob(x)
        accept = qx > 0.0 and rng.random() < min(1.0, px / qx)
        if not accept:
            resid = np.maximum(pi.dense(n_vocab) - q[i].dense(n_vocab), 0.0)
            if resid.sum() <= 0.0:
                return i, pi.sample(rng)
            cdf = np.cumsum(resid)
            tok = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
            return i, min(tok, n_vocab - 1)
    return len(draft_tokens), p(len(draft_tokens)).sample(rng)
