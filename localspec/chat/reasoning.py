"""A thinking model's answer split into its reasoning and its reply.

Reasoning models (Qwen3 and later, DeepSeek-R1 and its distillations, ...) write their
thinking between ``<think>`` and ``</think>`` before the reply; many chat templates open the
block in the prompt already, so the answer starts inside it. Front ends show the two apart,
as llama-server's ``reasoning_content``, Ollama's ``thinking`` and LM Studio's thinking block
do. The split works on text as it streams: a tag cut across two pieces is held back until it
is whole, and a block never closed (the answer was cut) is all reasoning.
"""

from __future__ import annotations

from ..engine.text import partial_tail

OPEN, CLOSE = "<think>", "</think>"


def prompt_opens_thinking(model, prompt: list[int]) -> bool:
    """Whether the prompt ends inside an open ``<think>`` block (the template opened it).

    Args:
        model: the loaded target (its ``piece``: a token's bytes).
        prompt: the prompt's tokens.
    """
    tail = b"".join(model.piece(t) for t in prompt[-8:]).decode("utf-8", errors="ignore")
    return tail.rstrip().endswith(OPEN)


class ReasoningSplit:
    """Streams an answer into (reasoning, reply) pieces.

    Args:
        thinking: the prompt opened a ``<think>`` block (:func:`prompt_opens_thinking`); else
            the answer is reasoning only when it starts with ``<think>`` (leading whitespace
            aside).
    """

    def __init__(self, thinking: bool = False):
        self._state = "opened" if thinking else "start"
        self._buf = ""
        self.reasoning = ""        # all reasoning so far
        self.seen = thinking       # a <think> block was opened

    def feed(self, text: str) -> tuple[str, str]:
        """The reasoning and reply this piece completes (either may be empty)."""
        self._buf += text
        reasoning, reply = [], []
        while self._buf:
            buf = self._buf
            if self._state == "start":
                lead = buf.lstrip()
                if lead.startswith(OPEN):
                    self._state, self.seen = "opened", True
                    self._buf = lead[len(OPEN):]
                elif OPEN.startswith(lead):          # (all whitespace, or a tag not yet whole)
                    break
                else:
                    self._state = "reply"
            elif self._state == "reasoning":
                at = buf.find(CLOSE)
                if at < 0:
                    keep = partial_tail(buf, CLOSE)
                    reasoning.append(buf[:len(buf) - keep])
                    self._buf = buf[len(buf) - keep:]
                    break
                reasoning.append(buf[:at])
                self._state, self._buf = "after", buf[at + len(CLOSE):]
            elif self._state in ("opened", "after"):  # reasoning, or the reply, after the blank lines
                lead = buf.lstrip()
                if not lead:
                    break
                self._state, self._buf = "reasoning" if self._state == "opened" else "reply", lead
            else:
                reply.append(buf)
                self._buf = ""
        out = "".join(reasoning)
        self.reasoning += out
        return out, "".join(reply)

    def finish(self) -> tuple[str, str]:
        """What was held back, at the end of the answer (an unclosed block is reasoning)."""
        buf, self._buf = self._buf, ""
        if self._state in ("opened", "reasoning"):
            buf = buf if self._state == "reasoning" else ""
            self.reasoning += buf
            return buf, ""
        return "", buf if self._state in ("start", "reply") else ""


def split_reasoning(text: str, thinking: bool = False) -> tuple[str | None, str]:
    """A whole answer as (reasoning, reply); reasoning is None when the answer has none."""
    split = ReasoningSplit(thinking)
    r1, c1 = split.feed(text)
    r2, c2 = split.finish()
    return (r1 + r2 if split.seen else None), c1 + c2
