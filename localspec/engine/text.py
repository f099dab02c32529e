"""Streaming detokenisation: token bytes in, text out, with stop strings held back and the
answer ended before an under-indented line (code completion)."""

from __future__ import annotations

import codecs
import time

from .events import StopReason


class TextStream:
    """Releases text as tokens arrive.

    Incomplete UTF-8 sequences wait for their next bytes, and text that could be the start of
    a stop string waits until it either completes the stop string (then it is dropped and
    the stream reports the stop) or turns out not to. With ``n_indent``, a line after the
    first that starts with fewer spaces or tabs than that ends the text before its first other
    character, as llama-server's ``n_indent`` does (``indented``: that is why it stopped).
    """

    def __init__(self, stop: list[str] | tuple[str, ...] = (), n_indent: int = 0):
        self.stop = [s for s in stop if s]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self.released: list[str] = []
        self.stopped = False
        self.indented = False
        self.n_indent = n_indent
        self._col: int | None = None   # the line's indentation so far; None: not at a line's start

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
        if s and self.n_indent:
            s = self._indent_cut(s)
        if s:
            self.released.append(s)
        return s

    def _indent_cut(self, s: str) -> str:
        """``s``, or its part before the first character of a line indented too little."""
        col = self._col
        for i, c in enumerate(s):
            if col is None:
                if c == "\n":
                    col = 0
            elif c in " \t":
                col += 1
            elif col < self.n_indent:
                self.stopped = self.indented = True
                self._pending = ""
                return s[:i]
            else:
                col = 0 if c == "\n" else None
        self._col = col
        return s


def stop_after(text: TextStream, piece: str, generated: int, max_tokens: int, t_first: float,
               t_max_ms: float) -> StopReason | None:
    """Why an answer ends after a token that released ``piece`` (None: it goes on): the text
    stopped (a stop string, a line indented too little), a new line past ``t_max_ms`` since
    the first token (``t_first``, perf_counter seconds; 0: no limit), or ``max_tokens``. The
    one rule for a single run and for slots."""
    if text.stopped:
        return StopReason.INDENT if text.indented else StopReason.STOP_STRING
    if t_max_ms and "\n" in piece and (time.perf_counter() - t_first) * 1000.0 > t_max_ms:
        return StopReason.TIME_LIMIT
    if generated >= max_tokens:
        return StopReason.MAX_TOKENS
    return None


def partial_tail(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` may be the start of ``tag`` (held back by a
    reader that waits for the whole tag)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0

