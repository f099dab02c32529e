"""Streaming detokenisation: token bytes in, text out, with stop strings held back."""

from __future__ import annotations

import codecs


class TextStream:
    """Releases text as tokens arrive.

    Incomplete UTF-8 sequences wait for their next bytes, and text that could be the start of
    a stop string waits until it either completes the stop string (then it is dropped and
    the stream reports the stop) or turns out not to.
    """

    def __init__(self, stop: list[str] | tuple[str, ...] = ()):
        self.stop = [s for s in stop if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self.released: list[str] = []
        self.stopped = False

    @property
    def text(self) -> str:
        return "".join(self.released)

    def push(self, piece: bytes) -> str:
        """Add a token's bytes; return the text that can be shown now."""
        if self.stopped:
            return ""
        self._pending += self._decoder.decode(piece)
        if not self.stop:
            out, self._pending = self._pending, ""
            return self._release(out)
        best = -1
        for s in self.stop:
            i = self._pending.find(s)
            if i >= 0 and (best < 0 or i < best):
                best = i
        if best >= 0:
            self.stopped = True
            out, self._pending = self._pending[:best], ""
            return self._release(out)
        cut = len(self._pending)
        for i in range(len(self._pending)):
            tail = self._pending[i:]
            if any(s.startswith(tail) for s in self.stop):
                cut = i
                break
        out, self._pending = self._pending[:cut], self._pending[cut:]
        return self._release(out)

    def flush(self) -> str:
        """End of generation: release whatever is still held."""
        if self.stopped:
            return ""
        out = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        return self._release(out)

    def _release(self, s: str) -> str:
        if s:
            self.released.append(s)
        return s
