"""What one decode hands back per output position: a row of logits, or what llama.cpp's
backend sampler kept of it.

With backend sampling (``llama_set_sampler``) the sampler chain runs inside the model's graph,
so on a GPU only the chosen token or the top-k candidates leave the device, instead of a
full row of logits (600 KB to 1 MB at 152K-248K tokens) per position, and Python never
touches a full-vocabulary array. The chain is chosen from the run's :class:`SamplingConfig`
(:func:`chain_for`); both kinds of rows answer the same three questions (the top token, the
sampling distribution, the top probability), so the speculative loop and the drafters do
not care which they hold.

Exactness: greedy takes llama.cpp's argmax. With top-k on, the device keeps the top-k
candidates and their logits, and top-p, min-p and temperature run on those (llama.cpp's
chain order: top-p normalises over the top-k set), so the distribution is the one the
numpy path computes from the full row. With top-k off, top-p needs the normaliser over the
whole vocabulary, so the device runs top-p and min-p themselves: llama.cpp's backend top-p
sorts the row and masks what it drops with -inf, so the kept tokens are the row's finite
prefix and Python reads only that prefix (a few hundred bytes of a 1 MB row); temperature
is applied to them here. A draft sampling on the device proposes from its top 40 instead
(:func:`draft_settings`), which is cheaper on the device and as good for acceptance.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, replace

import llama_cpp.llama_cpp as ll
import numpy as np

from .sampling import Dist, SamplingConfig, candidate_distribution, distribution, kept_distribution, top_probability

# A draft's confidence (the top token's probability) comes from this many candidates: it
# steers drafting, never what is emitted, and over-estimates only by the mass outside them.
CONFIDENCE_K = 16

# With top-k off, a draft sampling on the device proposes from this many of its most likely
# tokens (llama.cpp's default top-k).
DRAFT_TOP_K = 40


@dataclass(frozen=True)
class DeviceChain:
    """A backend sampler chain: "greedy" (llama.cpp's argmax), "top_k" (keep k candidates)
    or "top_p" (top-p ``p`` then min-p ``min_p`` over the whole row, which comes back
    sorted, the dropped tokens at -inf)."""

    kind: str
    k: int = 0
    p: float = 1.0
    min_p: float = 0.0

    def build(self):
        """A new llama.cpp sampler chain (one chain object serves one context, once)."""
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if self.kind == "greedy":
            parts = [ll.llama_sampler_init_greedy()]
        elif self.kind == "top_k":
            parts = [ll.llama_sampler_init_top_k(self.k)]
        else:
            parts = [ll.llama_sampler_init_top_p(self.p, 1)]
            if self.min_p > 0.0:
                parts.append(ll.llama_sampler_init_min_p(self.min_p, 1))
        for part in parts:
            ll.llama_sampler_chain_add(chain, part)
        return chain


def chain_for(cfg: SamplingConfig, *, confidence: bool) -> DeviceChain | None:
    """The backend chain for these settings, or None when full rows are needed.
    ``confidence``: the caller also needs the top probability (a draft's gate), which a
    top-p chain does not give (its kept set is all that comes back)."""
    if cfg.greedy:
        return DeviceChain("top_k", CONFIDENCE_K) if confidence else DeviceChain("greedy")
    if cfg.top_k > 0:
        return DeviceChain("top_k", cfg.top_k)
    if cfg.top_p < 1.0 and not confidence:
        # Only top-p sorts the row; min-p alone would leave the kept tokens scattered.
        return DeviceChain("top_p", p=cfg.top_p, min_p=cfg.min_p)
    return None


def draft_settings(cfg: SamplingConfig, on_device: bool) -> SamplingConfig:
    """The settings a draft proposes with. Rejection sampling makes the output the target's
    for any proposal distribution, as long as the draft samples from the distribution it
    reports; so with top-k off a draft that samples on the device proposes from its top
    :data:`DRAFT_TOP_K` tokens (top-p, min-p and temperature as set): k candidates leave
    the device instead of a whole sorted row, and a confidence comes with them. On full
    rows the draft keeps the run's own settings (the same cost either way, and the
    acceptance of an untruncated draft)."""
    if on_device and not cfg.greedy and cfg.top_k <= 0:
        return replace(cfg, top_k=DRAFT_TOP_K)
    return cfg


def token_logprobs(row: np.ndarray, token: int, n: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """The log-probability of ``token`` under one row of logits (its log-softmax: the model's
    own distribution, before temperature or truncation), and the ``n`` most likely tokens' as
    (id, logprob), best first. About 0.5 ms a row of 152K logits on one CPU core: the
    exponentials are summed in place, and the top ones are looked for first among the tokens
    near the best one."""
    top = float(row.max())
    work = np.subtract(row, top, dtype=np.float32)
    np.exp(work, out=work)
    norm = top + math.log(float(work.sum(dtype=np.float64)))
    if n <= 0:
        return max(float(row[token]) - norm, _FLOOR), ()
    ids = np.flatnonzero(row >= top - _NEAR)
    if len(ids) < n:
        ids = np.argpartition(row, len(row) - n)[len(row) - n:] if n < len(row) else np.arange(len(row))
    ids = ids[np.argsort(-row[ids], kind="stable")][:n]
    return max(float(row[token]) - norm, _FLOOR), tuple((int(i), max(float(row[i]) - norm, _FLOOR)) for i in ids)


_NEAR = 8.0       # logits this close to the best are searched first for the top tokens
_FLOOR = -9999.0  # a token the model rules out (a -inf logit): OpenAI's figure for it, JSON has no -inf


def target_dist(rows: Rows, i: int, cfg: SamplingConfig, model) -> Dist:
    """The target's distribution at row ``i``: the settings' chain, then llama.cpp's infill
    sampler with ``model``'s vocabulary when they ask for it (the one place a draw goes through it)."""
    p = rows.dist(i, cfg)
    return model.infilled(p) if cfg.infill else p


class LogitRows:
    """Full rows of logits (a numpy view of llama.cpp's buffer, valid until the next decode)."""

    __slots__ = ("x",)

    def __init__(self, logits: np.ndarray):
        self.x = logits if logits.ndim == 2 else logits.reshape(1, -1)

    def __len__(self) -> int:
        return self.x.shape[0]

    def argmax(self, j: int, limit: int | None = None) -> int:
        return int(self.x[j, :limit].argmax())

    def dist(self, j: int, cfg: SamplingConfig, limit: int | None = None) -> Dist:
        return distribution(self.x[j, :limit], cfg)

    def top_probability(self, j: int, limit: int | None = None) -> float:
        return top_probability(self.x[j, :limit])


def _array(ptr, n: int, dtype) -> np.ndarray:
    """A copy of ``n`` items at a C pointer (cheaper than numpy's ctypes bridge)."""
    return np.frombuffer(ctypes.string_at(ptr, n * 4), dtype=dtype)


_PREFIX_FIRST = 256   # logits read first from a sorted row; then 16 times more, as needed


def _finite_prefix(ptr, n: int) -> np.ndarray:
    """The finite head of a row of ``n`` logits sorted in descending order (-inf after it),
    read in growing pieces so a short head costs a short read."""
    m = _PREFIX_FIRST
    while True:
        x = _array(ptr, min(m, n), np.float32)
        if x.shape[0] == n or x[-1] == -np.inf:
            break
        m *= 16
    k = int(np.count_nonzero(x > -np.inf))
    if k == 0:
        raise RuntimeError("the backend sampler kept no token")
    return x[:k]


class SampledRows:
    """The last decode's output rows as the backend sampler left them: the chosen token
    ("greedy"), the top-k candidates with their logits ("top_k"), or the tokens top-p and
    min-p kept, in descending order ("top_p")."""

    __slots__ = ("ptr", "n", "chain", "_cand")

    def __init__(self, ctx_ptr, n: int, chain: DeviceChain):
        self.ptr = ctx_ptr
        self.n = n
        self.chain = chain
        self._cand: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return self.n

    def candidates(self, j: int, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, logits) of the candidates at row ``j`` (ids below ``limit`` only)."""
        got = self._cand.get(j)
        if got is None:
            i = j - self.n
            c = ll.llama_get_sampled_candidates_count_ith(self.ptr, i)
            m = ll.llama_get_sampled_logits_count_ith(self.ptr, i)
            if c == 0 or c != m:
                raise RuntimeError(f"the backend sampler left {c} candidates and {m} logits")
            logits_ptr = ll.llama_get_sampled_logits_ith(self.ptr, i)
            if self.chain.kind == "top_p":
                logits = _finite_prefix(logits_ptr, c)
                c = logits.shape[0]
            else:
                logits = _array(logits_ptr, c, np.float32)
            ids = _array(ll.llama_get_sampled_candidates_ith(self.ptr, i), c, np.int32).astype(np.int64)
            got = self._cand[j] = (ids, logits)
        if limit is not None and int(got[0].max()) >= limit:
            keep = got[0] < limit
            if not keep.any():
                raise RuntimeError("every candidate lies past the vocabulary limit")
            return got[0][keep], got[1][keep]
        return got

    def argmax(self, j: int, limit: int | None = None) -> int:
        if self.chain.kind == "greedy":
            return int(ll.llama_get_sampled_token_ith(self.ptr, j - self.n))
        ids, logits = self.candidates(j, limit)
        return int(ids[int(logits.argmax())])

    def dist(self, j: int, cfg: SamplingConfig, limit: int | None = None) -> Dist:
        if cfg.greedy:
            return Dist.onehot(self.argmax(j, limit))
        ids, logits = self.candidates(j, limit)
        if self.chain.kind == "top_p":
            if limit is not None:
                raise ValueError("a top-p chain's kept set cannot be cut to a smaller vocabulary")
            return kept_distribution(ids, logits, cfg.temperature)
        return candidate_distribution(ids, logits, cfg)

    def top_probability(self, j: int, limit: int | None = None) -> float:
        return top_probability(self.candidates(j, limit)[1])


Rows = LogitRows | SampledRows   # what Context.decode_rows hands back
