"""A thinking model's reasoning, apart from its reply, in the words of each API (llama-server's
``reasoning_content``, Ollama's ``thinking``, Anthropic's thinking blocks, a Responses
reasoning item): wraps the shape that words the reply (tool calls included), which then sees
only the reply, and gives it the reasoning through its ``thinking`` and ``put_thinking``."""

from __future__ import annotations

from dataclasses import replace

from ..chat.reasoning import ReasoningSplit, split_reasoning


class ThinkingShape:
    """Answers what app.py asks of a shape (``head``, ``piece``, ``tail``, ``whole``, ``end``,
    ``error``, ``media_type``) for ``inner``, with the reasoning taken out of the text.

    Args:
        inner: the shape of the reply; its ``thinking(text, tokens)`` words a piece of
            reasoning (and the tokens it came with) as the stream's bytes, its
            ``put_thinking(answer, text)`` sets the reasoning into a whole answer.
        opened: the prompt opened a ``<think>`` block.
    """

    def __init__(self, inner, opened: bool):
        self.inner, self.opened = inner, opened
        self._split = ReasoningSplit(opened)

    def __getattr__(self, name):                 # end, media_type, error, head: the reply's own
        return getattr(self.inner, name)

    def piece(self, text: str, tokens=()) -> bytes:
        reasoning, reply = self._split.feed(text)
        return self._out(reasoning, reply, tokens)

    def _out(self, reasoning: str, reply: str, tokens) -> bytes:
        out = b""
        if reasoning:
            out, tokens = self.inner.thinking(reasoning, tokens), ()
        if reply:
            out += self.inner.piece(reply, tokens)
        return out

    def tail(self, done) -> list[bytes]:
        last = self._out(*self._split.finish(), ())
        return [b for b in [last, *self.inner.tail(done)] if b]

    def whole(self, done, tokens=()) -> dict:
        reasoning, reply = split_reasoning(done.text, self.opened)
        answer = self.inner.whole(replace(done, text=reply), tokens)
        if reasoning is not None:
            self.inner.put_thinking(answer, reasoning)
        return answer
