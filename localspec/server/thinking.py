"""A thinking model's reasoning, apart from its reply, in the words of each API: OpenAI chat's
``reasoning_content`` (llama-server's, in the message and in stream deltas) and Ollama's
``thinking``. Wraps the shape that words the reply (tool calls included), which then sees
only the reply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..chat.reasoning import ReasoningSplit, split_reasoning


class ThinkingShape:
    """Answers what app.py asks of a shape (``head``, ``piece``, ``tail``, ``whole``, ``end``,
    ``error``, ``media_type``) for ``inner``, with the reasoning taken out of the text.

    Args:
        inner: the shape of the reply.
        thinking: the prompt opened a ``<think>`` block.
        say: a piece of reasoning (and the tokens it came with) as the stream's bytes.
        put: sets the reasoning into a whole answer (the dict ``inner.whole`` made).
    """

    def __init__(self, inner, thinking: bool, say: Callable[[str, list], bytes], put: Callable[[dict, str], None]):
        self.inner, self.thinking, self.say, self.put = inner, thinking, say, put
        self._split = ReasoningSplit(thinking)

    def __getattr__(self, name):                 # end, media_type, error, head: the reply's own
        return getattr(self.inner, name)

    def piece(self, text: str, tokens=()) -> bytes:
        reasoning, reply = self._split.feed(text)
        return self._out(reasoning, reply, tokens)

    def _out(self, reasoning: str, reply: str, tokens) -> bytes:
        out = b""
        if reasoning:
            out, tokens = self.say(reasoning, tokens), ()
        if reply:
            out += self.inner.piece(reply, tokens)
        return out

    def tail(self, done) -> list[bytes]:
        last = self._out(*self._split.finish(), ())
        return [b for b in [last, *self.inner.tail(done)] if b]

    def whole(self, done, tokens=()) -> dict:
        reasoning, reply = split_reasoning(done.text, self.thinking)
        answer = self.inner.whole(replace(done, text=reply), tokens)
        if reasoning is not None:
            self.put(answer, reasoning)
        return answer
