"""Drafters propose the next few tokens; the target then verifies them in one batch.

* :class:`ModelDrafter` runs a small model on its own KV cache and keeps that cache exact:
  before each draft it drops whatever the target rejected and decodes, in one batch, the
  tokens it has not seen yet (the target's correction, or its own last draft token when
  everything was accepted).
* :class:`NgramDrafter` (prompt lookup) copies what followed the latest earlier occurrence
  of the last few tokens; it needs no model.
* :class:`NoDrafter` proposes nothing: the target-only baseline through the same loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .backend import Context
from .sampling import Dist, SamplingConfig, distribution


@dataclass
class Draft:
    tokens: list[int]
    dists: list[Dist] | None   # the draft distribution q of each token; None: deterministic
    seconds: float
    steps: int                 # decodes it took (for per-step cost accounting)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class NoDrafter:
    name = "none"
    deterministic = True

    def prefill(self, tokens: list[int]) -> None:
        pass

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, p_min: float) -> Draft:
        return Draft([], None, 0.0, 0)

    def close(self) -> None:
        pass


class ModelDrafter:
    """Drafts with a small model that shares the target's tokenizer."""

    name = "model"
    deterministic = False

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._eog = ctx.model.eog_mask

    def _sync(self, context: list[int]) -> np.ndarray:
        """Bring the cache to ``context`` and return the logits after its last token."""
        ctx = self.ctx
        n = min(_common_prefix(ctx.tokens, context), len(context) - 1)
        ctx.truncate(n)
        n = ctx.n_past  # a recurrent cache may have been cleared entirely
        return ctx.decode(context[n:], logits="last")

    def prefill(self, tokens: list[int]) -> None:
        """Decode a prompt (all but its last token, which each draft starts from)."""
        ctx = self.ctx
        n = _common_prefix(ctx.tokens, tokens[:-1])
        ctx.truncate(n)
        n = ctx.n_past
        if len(tokens) - 1 > n:
            ctx.decode(tokens[n:-1], logits="none")

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, p_min: float) -> Draft:
        t0 = time.perf_counter()
        room = self.ctx.n_ctx - len(context)
        k = min(k, room)
        if k <= 0:
            return Draft([], [], 0.0, 0)
        logits = self._sync(context)
        steps = 1
        tokens: list[int] = []
        dists: list[Dist] = []
        greedy = cfg.greedy
        for i in range(k):
            if greedy:
                tok = int(np.argmax(logits))
                if p_min > 0.0:
                    top = float(1.0 / np.exp(logits - logits[tok]).sum())
                    if top < p_min:
                        break
                dist = Dist.onehot(tok)
            else:
                dist = distribution(logits, cfg)
                if p_min > 0.0 and dist.top()[1] < p_min:
                    break
                tok = dist.sample(rng)
            tokens.append(tok)
            dists.append(dist)
            if i == k - 1 or self._eog[tok]:
                break
            logits = self.ctx.decode([tok], logits="last")
            steps += 1
        return Draft(tokens, dists, time.perf_counter() - t0, steps)

    def close(self) -> None:
        self.ctx.close()


class NgramDrafter:
    """Prompt-lookup drafting: reuse what followed the last n-gram's latest earlier occurrence."""

    name = "ngram"
    deterministic = True

    def __init__(self, n_max: int = 4, n_min: int = 2):
        self.n_max = n_max
        self.n_min = n_min
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _rebuild(self, context: list[int]) -> None:
        keep = _common_prefix(self._seen, context)
        if keep < len(self._seen):
            self._seen = []
            self._index = {}
        for tok in context[len(self._seen):]:
            self._seen.append(tok)
            end = len(self._seen) - 1  # the n-grams ending just before this token now have a follower
            for n in range(self.n_min, self.n_max + 1):
                s = end - n
                if s >= 0:
                    self._index[tuple(self._seen[s:end])] = s

    def prefill(self, tokens: list[int]) -> None:
        self._rebuild(tokens)

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, p_min: float) -> Draft:
        t0 = time.perf_counter()
        self._rebuild(context)
        seen = self._seen
        out: list[int] = []
        if k > 0:
            for n in range(self.n_max, self.n_min - 1, -1):
                if len(seen) < n:
                    continue
                s = self._index.get(tuple(seen[-n:]))
                if s is not None:
                    out = seen[s + n:s + n + k]
                    break
        return Draft(out, None, time.perf_counter() - t0, 0)

    def close(self) -> None:
        pass
