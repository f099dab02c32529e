"""llama.cpp's logit bias and repetition penalties on the target's rows, per position.

llama.cpp runs these two samplers first in its chain: each biased token's logit moves by its
bias, then every token among the last ``repeat_last_n`` of the sequence (prompt included, as
llama-server feeds it) has its logit divided by ``repeat_penalty`` (multiplied where it is
not positive) and lowered by ``frequency_penalty`` per occurrence and ``presence_penalty``
once. The rest of the chain (top-k ... temperature, a grammar) then runs on the changed row.

Speculation stays lossless: row ``j`` of a verify batch is judged with the sequence so far
plus the first ``j`` draft tokens as its history, which is the history that row would have
had without a draft whenever it is read (rows past a rejection are never read). Drafters
propose from their own unpenalized rows; the target's penalized choice decides.
"""

from __future__ import annotations

import numpy as np

from ..errors import BadInput
from .outputs import LogitRows
from .sampling_config import SamplingConfig


def penalize(row: np.ndarray, window: list[int], cfg: SamplingConfig) -> np.ndarray:
    """A copy of one row of logits with ``cfg``'s logit bias and penalties applied.

    Args:
        row: the target's logits at one position.
        window: the tokens the penalties look back on (the last ``repeat_last_n``).
        cfg: the run's sampling settings.
    Returns:
        A new float32 array.
    """
    out = np.array(row, dtype=np.float32)
    n = out.shape[0]
    for token, bias in cfg.logit_bias:
        if token < n:
            out[token] += bias
    if window and cfg.repeat_last_n != 0:
        ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
        inside = ids < n
        ids, counts = ids[inside], counts[inside]
        x = out[ids]
        x = np.where(x <= 0, x * cfg.repeat_penalty, x / cfg.repeat_penalty)
        out[ids] = x - counts * cfg.frequency_penalty - cfg.presence_penalty
    return out


def window(history: list[int], drafts: list[int], j: int, last_n: int) -> list[int]:
    """The last ``last_n`` tokens (-1: all) of ``history`` followed by ``drafts[:j]``."""
    if last_n < 0:
        return history + drafts[:j]
    head = drafts[max(j - last_n, 0):j]
    need = last_n - len(head)
    return (history[-need:] if need > 0 else []) + head


class _Rows:
    """Penalized rows, worked out when first read: ``x[j]`` and ``x[j, :limit]``."""

    __slots__ = ("raw", "history", "drafts", "cfg", "_done")

    def __init__(self, raw: np.ndarray, history: list[int], drafts: list[int], cfg: SamplingConfig):
        self.raw, self.history, self.drafts, self.cfg = raw, history, drafts, cfg
        self._done: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.raw.shape[0]

    def __getitem__(self, key):
        j, cut = (key if isinstance(key, tuple) else (key, slice(None)))
        row = self._done.get(j)
        if row is None:
            row = self._done[j] = penalize(self.raw[j], window(self.history, self.drafts, j, self.cfg.repeat_last_n),
                                           self.cfg)
        return row[cut]


class PenalizedRows(LogitRows):
    """Full rows of logits (``raw``, one per position of a batch whose first position follows
    ``history``, the next ones ``drafts``) as the logit bias and penalties leave them: the
    same questions as :class:`LogitRows` answer on them, a row computed once, when first read.
    ``history`` is not copied: read the rows before it changes."""

    __slots__ = ()

    def __init__(self, raw: np.ndarray, history: list[int], drafts: list[int], cfg: SamplingConfig):
        self.x = _Rows(raw if raw.ndim == 2 else raw.reshape(1, -1), history, drafts, cfg)

    def __len__(self) -> int:
        return len(self.x)


def penalized(rows, history: list[int], drafts: list[int], cfg: SamplingConfig):
    """``rows`` (full :class:`LogitRows` where ``cfg`` penalizes) penalized, or as they are
    when ``cfg`` has no logit bias or penalty."""
    return PenalizedRows(rows.x, history, drafts, cfg) if cfg.penalized else rows


def penalized_last(rows, history: list[int], drafts: list[int], cfg: SamplingConfig):
    """A drafter's view of ``rows``' last row (full rows) after ``history`` and its ``drafts``
    so far, penalized as the target will judge that position; ``rows`` as they are when
    ``cfg`` has no logit bias or penalty. Proposing from it keeps the draft's tokens the ones
    the target's penalties allow (rejection sampling takes any proposal distribution)."""
    if not cfg.penalized:
        return rows
    return PenalizedRows(rows.x[-1:], window(history, drafts, len(drafts), cfg.repeat_last_n), [], cfg)


def check_vocabulary(cfg: SamplingConfig, n_vocab: int) -> None:
    """Raises BadInput for a biased token the target's vocabulary (``n_vocab`` ids) lacks."""
    bad = [t for t, _ in cfg.logit_bias if t >= n_vocab]
    if bad:
        raise BadInput(f"logit_bias: token {bad[0]} is not in the model's vocabulary (ids 0 to {n_vocab - 1})")
