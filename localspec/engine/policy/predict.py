"""Pure predictions: a round's expected tokens and seconds for every draft length."""

from __future__ import annotations


def curve(table: list[float], ks: list[int], cont: list[float], acc: list[float], fixed: float, step: float,
          plain: float) -> dict[int, tuple[float, float]]:
    """(expected tokens, expected seconds) of a round for each K in ``ks`` and 0 (a plain step).

    The verify batch is priced as the mean of its cost over how many tokens get drafted,
    not as the cost of the mean batch: a drafter that often stops early (a lookup, p_min)
    drafts short batches most rounds and long ones in a few.

    Args:
        table: target seconds by batch size (index 0 unused), up to max(ks) + 1.
        ks: the draft lengths, ascending.
        cont, acc: per position i >= 1, P(drafted | i-1 drafted), P(accepted | drafted, all before accepted).
        fixed: a drafting round's seconds beyond its verify and further draft decodes.
        step: each further draft decode's seconds.
        plain: a plain round's seconds beyond its decode.
    Returns:
        {k: (tokens, seconds)}; {} without a table.
    """
    if not table:
        return {}
    out = {0: (1.0, table[1] + plain)}
    wanted = set(ks)
    tokens, drafted, stopped = 1.0, 0.0, 0.0
    p_made = p_ok = 1.0
    first = cont[1]
    for i in range(1, ks[-1] + 1):
        stopped += p_made * (1.0 - cont[i]) * table[i]    # exactly i-1 drafted: a batch of i
        p_made *= cont[i]
        p_ok *= cont[i] * acc[i]
        drafted += p_made
        tokens += p_ok
        if i in wanted:
            out[i] = (tokens, fixed + step * (drafted - first) + stopped + p_made * table[i + 1])
    return out


def speedup(c: dict[int, tuple[float, float]], k: int) -> float | None:
    """K's predicted tokens per second over the plain step's (None when unknown)."""
    t, s = c.get(k, (0.0, 0.0)) if k and 0 in c else (0.0, 0.0)
    return t / s * c[0][1] if s > 0 else None


def speedups(c: dict[int, tuple[float, float]]) -> dict[int, float]:
    """Each K's predicted tokens per second over the plain step's."""
    return {k: v for k in c if (v := speedup(c, k)) is not None}


def best(c: dict[int, tuple[float, float]], default: int) -> tuple[int, float]:
    """The K with the highest predicted speed-up, and that speed-up ((default, 0) when unknown);
    of equal ones the shorter draft."""
    k_best, s_best = default, None
    for k in c:
        v = speedup(c, k)
        if v is not None and (s_best is None or v > s_best or (v == s_best and k < k_best)):
            k_best, s_best = k, v
    return (k_best, s_best) if s_best is not None else (default, 0.0)


def repays(c: dict[int, tuple[float, float]], k: int, k_new: int, tokens: int, extra: float, horizon: int) -> bool:
    """Whether moving from ``k`` to ``k_new`` repays a one-off ``extra`` seconds (a batch
    size's first decode) over the tokens still to come: as many as ``tokens`` so far (an
    answer this long is likely to go on as long again), ``horizon`` at most."""
    if extra <= 0:
        return True
    (t0, s0), (t1, s1) = c[k], c[k_new]
    return min(tokens, horizon) * (s0 / t0 - s1 / t1) > extra


def greedy_rounds(hits, k: int) -> list[tuple[int, int]]:
    """(accepted, failed) of the rounds of ``k`` a greedy draft with these predictions on
    the text (``hits``: whether it predicts each token) would have drafted; a round that runs
    past the text's end is left out."""
    out, i, n = [], 0, len(hits)
    while i + k <= n or (i < n and not all(hits[i:])):
        a = 0
        while a < k and i + a < n and hits[i + a]:
            a += 1
        out.append((a, int(a < k)))
        i += a + 1
    return out
