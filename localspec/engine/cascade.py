"""A request-level cascade (opt-in, and not lossless): the draft model answers alone first.

For short questions, classification and extraction the small model is often right. The
draft model writes the whole answer, and its confidence is the mean probability it gave
each token of it. At or above the threshold its answer is returned, marked as the draft's
(``Summary.answered_by == "draft"``): the output is then NOT the target's. Below it the
target answers as usual, and the draft's answer serves as a free first draft: prompt
lookup over it (:class:`AnswerLookup`), so a rejected cascade costs the draft's answer and
little else. The target's output is then its own (greedy: token for token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from .backend import Context
from .drafters import Draft, NoDrafter, ReadsInline
from .events import Done, Event, Origin, PolicyNote, PromptProcessed, Step, TextChunk, Token
from .generator import Generator
from .policy import Policy, policy_for
from .spec import CASCADE_THRESHOLD as DEFAULT_THRESHOLD
from .spec import DrafterKind, RunSpec

__all__ = ["DEFAULT_THRESHOLD", "AnswerLookup", "mean_probability", "run"]


class AnswerLookup(ReadsInline):
    """Proposes the draft model's answer where the target's output follows it: the rest of
    the answer when the output so far is a prefix of it, else what follows the output's last
    few tokens where they occur in the answer (prompt lookup over the answer).

    Args:
        answer: the draft's answer (token ids); n_prompt: the prompt's length.
    """

    name = "answer"
    deterministic = True
    ctx = None
    ready = True

    def __init__(self, answer: list[int], n_prompt: int, n_max: int = 3):
        self.answer = list(answer)
        self.n_prompt = n_prompt
        self.n_max = n_max

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        pass

    def draft(self, context: list[int], k: int, cfg, rng, gate=None, budget=None) -> Draft:
        t0 = time.perf_counter()
        out = self.continuation(context[self.n_prompt:], k) if k > 0 else []
        seconds = time.perf_counter() - t0
        return Draft(out, None, seconds, 1, 0, seconds)

    def continuation(self, output: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens of the answer that would follow ``output``."""
        a, n = self.answer, len(output)
        if a[:n] == output:
            return a[n:n + k]
        for size in range(min(self.n_max, n), 0, -1):
            tail = output[-size:]
            for i in range(len(a) - size, -1, -1):
                if a[i:i + size] == tail:
                    return a[i + size:i + size + k]
        return []

    def close(self) -> None:
        pass


def mean_probability(ctx: Context, prompt: list[int], answer: list[int]) -> float:
    """The mean probability the model of ``ctx`` gives each token of ``answer`` after
    ``prompt`` (its raw distribution, temperature 1). Leaves ``prompt + answer`` in the cache."""
    if not answer:
        return 0.0
    seq = prompt + answer
    n = ctx.truncate(min(len(prompt) - 1, len(ctx.tokens)))
    feed = seq[n:-1]
    rows = []
    step = max(1, ctx.n_batch)
    for i in range(0, len(feed), step):
        rows.append(ctx.decode(feed[i:i + step], logits="all"))
    logits = np.concatenate(rows)[-len(answer):].astype(np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    picked = probs[np.arange(len(answer)), answer] / probs.sum(axis=1)
    return float(picked.mean())


def run(target: Context, draft: Context, prompt: list[int], spec: RunSpec,
        cancel: threading.Event | None = None) -> Iterator[Event]:
    """The events of one cascaded generation (``spec.cascade`` is the threshold); the Done's
    summary says who answered (``answered_by``), with what confidence and what the draft's
    answer cost (``cascade_seconds``, counted in the generation's time either way)."""
    t0 = time.perf_counter()
    alone = spec.with_(drafter=DrafterKind.NONE, cascade=None)
    events = list(Generator(draft, NoDrafter()).generate(prompt, alone, policy_for(alone), cancel))
    done = events[-1]
    answer = list(done.token_ids)
    confidence = mean_probability(draft, prompt, answer) if answer else 0.0
    seconds = time.perf_counter() - t0
    threshold = spec.cascade
    if confidence >= threshold and done.stop_reason.value != "cancelled":
        yield from _draft_answer(events, done, confidence, seconds)
        return
    yield PolicyNote(True, spec.draft_max,
                     f"cascade: the draft's answer has confidence {confidence:.2f}, under {threshold:.2f}: "
                     "the target answers, drafting from it")
    lookup = spec.with_(drafter=DrafterKind.NGRAM, cascade=None)
    policy: Policy = policy_for(lookup)
    gen = Generator(target, AnswerLookup(answer, len(prompt)))
    for ev in gen.generate(prompt, lookup, policy, cancel):
        if isinstance(ev, Done):
            s = ev.summary
            s.answered_by, s.cascade_confidence, s.cascade_seconds = "target", confidence, seconds
            s.drafter = "cascade: target, drafting from the draft's answer"
            s.generation_seconds += seconds
            s.time_to_first_token += seconds
            s.tokens_per_second = s.n_generated / s.generation_seconds if s.generation_seconds > 0 else 0.0
        yield ev


def _draft_answer(events: list, done: Done, confidence: float, seconds: float) -> Iterator[Event]:
    """The draft's own answer, released now: its tokens marked as drafted, its summary as
    the draft's (answered_by "draft")."""
    for ev in events:
        if isinstance(ev, PromptProcessed | TextChunk):
            yield ev
        elif isinstance(ev, Token):
            yield replace(ev, origin=Origin.DRAFT)
        elif isinstance(ev, Step | PolicyNote | Done):
            continue
    s = done.summary
    s.answered_by, s.cascade_confidence, s.cascade_seconds = "draft", confidence, seconds
    s.drafter = "cascade: the draft model's answer"
    s.generation_seconds = max(s.generation_seconds, seconds - s.prompt_seconds)
    s.time_to_first_token = seconds
    s.tokens_per_second = s.n_generated / s.generation_seconds if s.generation_seconds > 0 else 0.0
    yield replace(done, policy={"cascade": True, "answered_by": "draft", "confidence": confidence})
