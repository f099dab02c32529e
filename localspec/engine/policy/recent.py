"""The small draft's hits on the recent text, kept apart by the draft in use where they fell.

They come from the small draft's own rounds and from its scores (its predictions on text the
large one drafted). Scores cover only part of the large draft's text, so each part stands for
all the tokens of its kind: read as one stream, a pair that alternates would show the small
draft mostly where it is right (it drafts all of its stretches, and is scored on a few tokens
of the others).
"""

from __future__ import annotations

from collections import deque

from ..events import Step
from .pair import LARGE, SMALL


class SmallHits:
    """The last ``window`` tokens: the draft in use on each, and the small draft's hits.

    Args:
        window: tokens kept [tokens].
    """

    def __init__(self, window: int):
        self.in_use: deque[str] = deque(maxlen=window)
        self.hits = {SMALL: deque(maxlen=window), LARGE: deque(maxlen=window)}

    def add(self, step: Step, use: str) -> None:
        """A round drafted one draft at a time while ``use`` was the draft in use."""
        self.in_use.extend([use] * step.emitted)
        if step.scored == SMALL:
            self.hits[use].extend(bool(h) for h in step.scored_hits)
        if step.source == SMALL and step.drafted and not step.probe:
            self.hits[use].extend([True] * step.accepted + [False] * (step.accepted < step.drafted))

    def blocks(self, block: int) -> tuple[float, float]:
        """(blocks, tokens) a layered round would have gone through on the text: the small
        draft proposing ``block`` tokens at a time, cut where its hits say, each block bringing
        its agreed tokens and the large draft's own next one; each part of the hits weighted by
        its draft's tokens. (0, 0) with no hits."""
        blocks = tokens = 0.0
        for use, hits in self.hits.items():
            share = self.in_use.count(use) / len(hits) if hits else 0.0
            i = n = b = 0
            while share and i < len(hits):
                agreed = 0
                while agreed < block and i + agreed < len(hits) and hits[i + agreed]:
                    agreed += 1
                n, b, i = n + agreed + 1, b + 1, i + agreed + 1
            blocks, tokens = blocks + b * share, tokens + n * share
        return blocks, tokens
