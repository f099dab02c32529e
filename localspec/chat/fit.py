"""Fitting a conversation in the context: the oldest turns are left out of the prompt.

A chat that outgrows the context keeps going, as it does in Ollama and LM Studio: the
system messages and the newest turns are kept, the oldest turns are left out of the prompt
(the transcript keeps them), and room is left for the answer. Turns are cut at a user
message, so the kept part starts as a conversation does (chat templates that want user and
assistant to alternate, and tool results that follow their call, stay valid).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ContextOverflow

Render = Callable[[list[dict]], list[int]]


@dataclass(frozen=True)
class Fitted:
    """A conversation as it goes to the model."""

    tokens: list[int]        # the prompt
    left_out: int            # how many of the oldest messages it leaves out (system messages never)


def answer_room(n_ctx: int, max_tokens: int | None) -> int:
    """Tokens kept free for the answer: ``max_tokens`` (a quarter of the context when the answer
    has no limit), at most half the context, so a long conversation still leaves the model room
    to answer rather than stop at once with the context full."""
    want = n_ctx // 4 if max_tokens is None or max_tokens < 0 else max_tokens
    return min(want, n_ctx // 2)


def fit_conversation(render: Render, messages: list[dict], n_ctx: int, answer: int) -> Fitted:
    """The prompt for ``messages`` that leaves ``answer`` tokens of the context free, leaving
    out the fewest oldest turns it must.

    Args:
        render: messages -> prompt tokens (the model's chat template and tokenizer).
        messages: the conversation, oldest first; system messages (anywhere) are always kept.
        n_ctx: the context's size in tokens.
        answer: tokens to keep free for the answer (:func:`answer_room`).

    Returns:
        The prompt and how many messages it leaves out. A conversation that fits is rendered
        once, whole. When even the newest turn leaves less than ``answer`` free, it is the
        prompt (the answer then stops when the context is full).

    Raises:
        ContextOverflow: even the newest turn alone (with the system messages) fills the context.
        LocalspecError: as ``render``.
    """
    limit = n_ctx - answer
    whole = render(messages)
    if len(whole) <= limit:
        return Fitted(whole, 0)
    system = {i for i, m in enumerate(messages) if m.get("role") == "system"}
    first = min((i for i in range(len(messages)) if i not in system), default=len(messages))
    # Where the kept part may start: at a later user message (one left out at least).
    starts = [i for i, m in enumerate(messages) if i > first and m.get("role") == "user"]

    def kept(start: int) -> list[dict]:
        return [m for i, m in enumerate(messages) if i >= start or i in system]

    best: Fitted | None = None
    lo, hi = 0, len(starts) - 1
    while lo <= hi:                          # the prompt shrinks as the start moves on
        mid = (lo + hi) // 2
        start = starts[mid]
        tokens = render(kept(start))
        if len(tokens) <= limit:
            best = Fitted(tokens, sum(1 for i in range(start) if i not in system))
            hi = mid - 1
        else:
            lo = mid + 1
    if best is not None:
        return best
    # Not even the newest turn leaves the answer its room: it goes with what room there is.
    start = starts[-1] if starts else 0
    tokens = render(kept(start)) if starts else whole
    if len(tokens) >= n_ctx:
        what = "the newest turn alone" if starts else "the prompt"
        raise ContextOverflow(f"{what} is {len(tokens)} tokens but the context holds {n_ctx}; "
                              "send a shorter message or use a larger --ctx")
    return Fitted(tokens, sum(1 for i in range(start) if i not in system))
