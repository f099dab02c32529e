"""llama.cpp's DRY ("don't repeat yourself") sampler: a token that would extend a sequence
already seen in the recent history loses ``multiplier * base ** (length - allowed_length)``
of its logit, where ``length`` is the longest such repeat it would continue. Sequence
breakers (newlines, ``:``, quotes, ``*`` by default) end the repeats that may be counted, so
the structure of a list or a dialogue is not punished.

The arithmetic is llama.cpp's (ported from koboldcpp by pi6am): breakers become restart
sequences in the target's tokens (:func:`restart_sequences`, once per model), and
:func:`dry_penalties` finds the repeats with the same rules, written with numpy.
"""

from __future__ import annotations

import weakref

import numpy as np

FLOAT_MAX_LOG = 88.7228391      # about log(FLT_MAX): the exponent is clamped so the penalty stays finite
MAX_BREAKER_BYTES = 40          # llama.cpp's limits on a breaker and on the tokens of its tail
MAX_TAIL = 20

Restarts = tuple[tuple[int, tuple[int, ...]], ...]     # (head token, the tokens that follow it)

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def restart_sequences(model, breakers: tuple[str, ...]) -> Restarts:
    """The breakers as restart sequences in ``model``'s vocabulary: every token that holds a
    breaker (an empty tail), or whose text ends with the breaker's start (the tokens of the
    rest as its tail, at most 20). Worked out once per model and breakers (it reads every
    token's text).

    Args:
        model: a loaded :class:`~localspec.engine.backend.Model` (``texts`` and ``tokenize``).
        breakers: the sequence breakers' texts (each cut to 40 bytes, empty ones skipped).
    """
    per_model = _CACHE.setdefault(model, {})
    found = per_model.get(breakers)
    if found is not None:
        return found
    texts = model.texts()
    out: dict[tuple[int, tuple[int, ...]], None] = {}
    for breaker in breakers:
        s = breaker.encode("utf-8")[:MAX_BREAKER_BYTES]
        if not s:
            continue
        first = s[:1]
        for token, word in enumerate(texts):
            if s in word:
                out[(token, ())] = None
                continue
            pos = word.find(first)
            while pos >= 0:
                i = 1
                while i < len(s) and pos + i < len(word) and word[pos + i] == s[i]:
                    i += 1
                if i == len(s) or pos + i == len(word):       # the word ends inside the breaker
                    rest = s[i:].decode("utf-8", errors="replace")
                    tail = tuple(model.tokenize(rest, add_special=False, parse_special=False)[:MAX_TAIL])
                    out[(token, tail)] = None
                pos = word.find(first, pos + 1)
    per_model[breakers] = found = tuple(out)
    return found


def dry_penalties(window: np.ndarray | list[int], multiplier: float, base: float, allowed: int,
                  restarts: Restarts) -> tuple[np.ndarray, np.ndarray]:
    """The tokens DRY penalizes after ``window`` and by how much.

    Args:
        window: the last ``dry_penalty_last_n`` tokens (prompt and answer).
        multiplier, base, allowed: ``dry_multiplier``, ``dry_base``, ``dry_allowed_length``.
        restarts: :func:`restart_sequences` of the breakers.

    Returns:
        (token ids, float32 amounts to subtract from their logits); empty when nothing repeats.
    """
    none = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    n = len(window)
    if n <= allowed:
        return none
    w = np.asarray(window, dtype=np.int64)
    tables = _tables(restarts)
    limit = _repeat_limit(w, tables)
    if limit < allowed:
        return none
    lengths = _repeats(w, limit)
    last = n - 1
    hit = np.flatnonzero(lengths[:last] >= allowed)
    if not hit.size:
        return none
    tokens, reps = w[hit + 1], lengths[hit]          # the token after each repeat would extend it
    order = np.lexsort((reps, tokens))               # the longest repeat per token
    tokens, reps = tokens[order], reps[order]
    keep = np.append(tokens[1:] != tokens[:-1], True)
    tokens, reps = tokens[keep], reps[keep]
    keep = ~_member(tokens, tables.single)           # a single-token breaker is never penalized
    tokens, reps = tokens[keep], reps[keep]
    exponent = reps - allowed
    base32 = float(np.float32(base))
    if base32 > 1.000001:       # (in float, as llama.cpp works it out)
        exponent = np.minimum(exponent, int(np.float32(FLOAT_MAX_LOG) / np.log(np.float32(base))))
    amount = (float(np.float32(multiplier)) * np.power(base32, exponent.astype(np.float64))).astype(np.float32)
    return tokens, amount


def _repeats(w: np.ndarray, limit: int) -> np.ndarray:
    """For every position i before the last, the longest common suffix of ``w[:i + 1]`` and
    ``w`` (at most ``limit``): what llama.cpp's Z-algorithm works out. Candidates are narrowed
    a token at a time while there are many, then each is measured in one comparison."""
    n = len(w)
    last = n - 1
    lengths = np.zeros(n, dtype=np.int64)
    cand = np.flatnonzero(w[:last] == w[last])
    length = 1 if cand.size else 0
    lengths[cand] = length
    while cand.size > 16 and length < limit:
        back = cand - length
        ok = back >= 0
        cand = cand[ok]
        cand = cand[w[back[ok]] == w[last - length]]
        length += 1
        lengths[cand] = length
    rev = w[::-1]                                    # rev[k] = w[last - k]
    for i in cand.tolist():
        m = min(limit, i + 1)
        if m <= length:
            continue
        differ = np.flatnonzero(rev[length:m] != rev[last - i + length:last - i + m])
        lengths[i] = length + (int(differ[0]) if differ.size else m - length)
    return lengths


class _Tables:
    """A restart set as lookups: which tokens are heads (and their tails), which are single-token breakers."""

    __slots__ = ("head", "tails", "single")

    def __init__(self, restarts: Restarts):
        size = max((h for h, _ in restarts), default=-1) + 1
        self.head = np.zeros(size, dtype=bool)
        self.single = np.zeros(size, dtype=bool)
        self.tails: dict[int, list[tuple[int, ...]]] = {}
        for head, tail in restarts:
            self.head[head] = True
            self.single[head] |= not tail
            self.tails.setdefault(head, []).append(tail)


_TABLES: dict[int, tuple[Restarts, _Tables]] = {}


def _tables(restarts: Restarts) -> _Tables:
    """The lookups of a restart set, built once (the set is the one :func:`restart_sequences`
    keeps for its model)."""
    kept = _TABLES.get(id(restarts))
    if kept is None or kept[0] is not restarts:
        if len(_TABLES) > 64:
            _TABLES.clear()
        kept = _TABLES[id(restarts)] = (restarts, _Tables(restarts))
    return kept[1]


def _member(tokens: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[tokens]``, False for tokens beyond it."""
    out = np.zeros(tokens.shape, dtype=bool)
    inside = tokens < table.shape[0]
    out[inside] = table[tokens[inside]]
    return out


def _repeat_limit(w: np.ndarray, tables: _Tables) -> int:
    """How far back a repeat may reach: up to the nearest restart sequence from the end (the
    longest one whose head is there), or the whole window."""
    n = len(w)
    for pos in np.flatnonzero(_member(w, tables.head))[::-1]:     # (the nearest usually ends it)
        pos = int(pos)
        i = n - 1 - pos                               # tokens from the end
        best = -1
        for tail in tables.tails[int(w[pos])]:
            size = len(tail)
            if best < size <= i and all(tail[k] == w[pos + k + 1] for k in range(size)):
                best = size
        if best >= 0:
            return i - best
    return n
