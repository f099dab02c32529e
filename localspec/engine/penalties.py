"""llama.cpp's logit bias, repetition penalties and DRY on the target's rows, per position.

llama.cpp runs these samplers first in its chain: each biased token's logit moves by its
bias, then every token among the last ``repeat_last_n`` of the sequence (prompt included, as
llama-server feeds it) has its logit divided by ``repeat_penalty`` (multiplied where it is
not positive) and lowered by ``frequency_penalty`` per occurrence and ``presence_penalty``
once, then DRY lowers the tokens that would extend a repeat (:mod:`.dry`). The rest of the
chain (top-k ... temperature, a grammar) then runs on the changed row.

Speculation stays lossless: row ``j`` of a verify batch is judged with the sequence so far
plus the first ``j`` draft tokens as its history, which is the history that row would have
had without a draft whenever it is read (rows past a rejection are never read). Drafters
propose from their own unpenalized rows; the target's penalized choice decides.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import BadInput
from .dry import dry_penalties, restart_sequences
from .outputs import LogitRows
from .sampling_config import SamplingConfig


def penalize(row: np.ndarray, window: list[int], cfg: SamplingConfig,
             dry_window: np.ndarray | list[int] | None = None) -> np.ndarray:
    """A copy of one row of logits with ``cfg``'s logit bias, penalties and DRY applied.

    Args:
        row: the target's logits at one position.
        window: the tokens the penalties look back on (the last ``repeat_last_n``).
        cfg: the run's sampling settings (DRY's breakers resolved: :func:`prepared`).
        dry_window: the tokens DRY looks back on (the last ``dry_penalty_last_n``).
    Returns:
        A new float32 array.
    """
    out = np.array(row, dtype=np.float32)
    n = out.shape[0]
    for token, bias in cfg.logit_bias:
        if token < n:
            out[token] += bias
    if window and cfg.repeats:
        ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
        inside = ids < n
        ids, counts = ids[inside], counts[inside]
        x = out[ids]
        x = np.where(x <= 0, x * cfg.repeat_penalty, x / cfg.repeat_penalty)
        out[ids] = x - counts * cfg.frequency_penalty - cfg.presence_penalty
    if cfg.dry and dry_window is not None and len(dry_window):
        ids, amounts = dry_penalties(dry_window, cfg.dry_multiplier, cfg.dry_base, cfg.dry_allowed_length,
                                     cfg.dry_restarts)
        inside = ids < n
        out[ids[inside]] -= amounts[inside]
    return out


def window(history: list[int], drafts: list[int], j: int, last_n: int) -> list[int]:
    """The last ``last_n`` tokens (-1: all) of ``history`` followed by ``drafts[:j]``."""
    if last_n < 0:
        return history + drafts[:j]
    head = drafts[max(j - last_n, 0):j]
    need = last_n - len(head)
    return (history[-need:] if need > 0 else []) + head


class _Rows:
    """Penalized rows, worked out when first read: ``x[j]`` and ``x[j, :limit]`` (row ``j``
    follows ``history`` and ``drafts[:j + offset]``)."""

    __slots__ = ("raw", "history", "drafts", "cfg", "offset", "_done", "_dry_history")

    def __init__(self, raw: np.ndarray, history: list[int], drafts: list[int], cfg: SamplingConfig, offset: int = 0):
        self.raw, self.history, self.drafts, self.cfg, self.offset = raw, history, drafts, cfg, offset
        self._done: dict[int, np.ndarray] = {}
        self._dry_history: np.ndarray | None = None

    def __len__(self) -> int:
        return self.raw.shape[0]

    def __getitem__(self, key):
        j, cut = (key if isinstance(key, tuple) else (key, slice(None)))
        row = self._done.get(j)
        if row is None:
            cfg, at = self.cfg, j + self.offset
            repeats = window(self.history, self.drafts, at, cfg.repeat_last_n) if cfg.repeats else []
            row = self._done[j] = penalize(self.raw[j], repeats, cfg, self._dry_window(at) if cfg.dry else None)
        return row[cut]

    def _dry_window(self, at: int) -> np.ndarray:
        """DRY's window for the row after ``drafts[:at]``: the history is made an array once
        for all the rows of a batch."""
        last = self.cfg.dry_penalty_last_n
        if self._dry_history is None:
            self._dry_history = np.asarray(self.history if last < 0 else self.history[-last:], dtype=np.int64)
        w = self._dry_history
        if at:
            w = np.concatenate((w, np.asarray(self.drafts[:at], dtype=np.int64)))
            if 0 <= last < len(w):
                w = w[-last:]
        return w


class PenalizedRows(LogitRows):
    """Full rows of logits (``raw``, one per position of a batch whose first position follows
    ``history``, the next ones ``drafts``) as the logit bias and penalties leave them: the
    same questions as :class:`LogitRows` answer on them, a row computed once, when first read.
    ``history`` is not copied: read the rows before it changes."""

    __slots__ = ()

    def __init__(self, raw: np.ndarray, history: list[int], drafts: list[int], cfg: SamplingConfig, offset: int = 0):
        self.x = _Rows(raw if raw.ndim == 2 else raw.reshape(1, -1), history, drafts, cfg, offset)

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
    return PenalizedRows(rows.x[-1:], history, drafts, cfg, offset=len(drafts))


def prepared(cfg: SamplingConfig, model) -> SamplingConfig:
    """``cfg`` checked against the target and ready to judge its rows: DRY's breakers as its
    tokens (worked out once per model).

    Raises:
        BadInput: a biased token the target's vocabulary lacks.
    """
    n_vocab = model.n_vocab
    bad = [t for t, _ in cfg.logit_bias if t >= n_vocab]
    if bad:
        raise BadInput(f"logit_bias: token {bad[0]} is not in the model's vocabulary (ids 0 to {n_vocab - 1})")
    if cfg.dry and cfg.dry_sequence_breakers:
        return replace(cfg, dry_restarts=restart_sequences(model, cfg.dry_sequence_breakers))
    return cfg
