"""Drafters propose the next few tokens; the target then verifies them in one batch.

* :class:`ModelDrafter` runs a small model on its own KV cache and keeps that cache exact:
  before each draft it drops whatever the target rejected and decodes, in one batch, the
  tokens it has not seen yet (the target's correction, or its own last draft token when
  everything was accepted).
* :class:`NgramDrafter` (prompt lookup) copies what followed the latest earlier occurrence
  of the last few tokens; it needs no model.
* :class:`NoDrafter` proposes nothing: the target-only baseline through the same loop.
"""

from __future__ import annotations

import atexit
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .backend import DEVICE_ROWS_MAX, Context
from .outputs import Rows, chain_for, draft_settings
from .penalties import penalized_last
from .sampling import Dist, SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)   # the settings of a layered draft's proposals


@dataclass
class Draft:
    tokens: list[int]
    dists: list[Dist] | None   # the draft distribution q of each token; None: deterministic
    seconds: float
    steps: int                 # decodes it took, the catch-up decode included
    sync_tokens: int = 0       # tokens decoded by the first (catch-up) decode
    sync_seconds: float = 0.0
    confidence: list[float] | None = None  # the draft's top probability at each drafted position
    source: str = ""           # which drafter of a chain drafted it ("" : the drafter itself)
    waited: float = 0.0        # of sync_seconds, the wait for a read alongside (no decode of its own)
    scored: str = ""           # a drafter of two scored this round on the tokens it missed
    scored_hits: tuple[bool, ...] = ()   # ... whether its greedy choice was each of them
    score_seconds: float = 0.0
    helper_blocks: tuple[tuple[int, int], ...] = ()   # a layered draft's: (proposed, kept) per batch


_SHORT_BATCH = 8   # tokens: a catch-up this short costs about one decode, not a batch rate
_ROUND_SYNC = 4    # tokens a round's first decode may hold (the target's last, a rejection)
_CHUNK_SECONDS = 0.1    # a read alongside decodes in chunks this long: it can stop between them
_CHUNK_MIN = 64         # ... of at least this many tokens (a CPU's batch rate from about here)

Gate = Callable[[int, float], bool]   # (position, top probability) -> keep drafting?

_READERS: weakref.WeakSet = weakref.WeakSet()   # model drafters that started a read alongside


@atexit.register
def _stop_reads() -> None:
    """Stop every read alongside before the interpreter exits: a read still decoding when
    llama.cpp's backend is torn down crashes the process (a script that never closed its
    Engine). Each stops after its current chunk."""
    for drafter in list(_READERS):
        reader = drafter._reader
        if reader is not None and reader.is_alive():
            drafter._cancel.set()
            reader.join()


class Drafter(Protocol):
    """What the generator asks of every drafter (one interface, as in llama.cpp's
    common/speculative)."""

    name: str
    deterministic: bool        # True: drafts carry no distributions (one-hot q)
    ctx: Context | None        # the drafter's own llama.cpp context, if it has one

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        """A new prompt: get ready to draft after ``tokens``. ``now=False``: drafting starts
        paused, so a drafter whose reading of the prompt costs real time may leave it to the
        first draft (which then catches up as after any pause)."""

    def read_alongside(self, tokens: list[int]) -> bool:
        """Start reading a prompt (as :meth:`prefill` would) on a thread of its own, beside the
        target's reading of it; False when this drafter does not (then ``prefill`` follows)."""

    @property
    def ready(self) -> bool:
        """False while a read alongside (a prompt's, a catch-up) is still running."""

    def settle(self, wait: bool = True) -> None:
        """Wait for a read started alongside (and raise what it raised). ``wait=False`` (a
        generation that ends): raise what a finished read raised, and stop a running one
        without waiting for it (whatever uses the draft next waits for its last chunk)."""

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng: np.random.Generator,
              gate: Gate | None = None, budget: float | None = None) -> Draft:
        """Up to ``k`` tokens that may follow ``context``. ``budget`` (given when the draft
        may work beside the target): the seconds of the plain target step this round would
        replace; a drafter whose catch-up would cost more starts it alongside and proposes
        nothing (``steps`` 0): the round is then the target's alone."""

    def close(self) -> None: ...


class ReadsInline:
    """For drafters whose prompt read is cheap or needs the target: it never runs alongside."""

    ready = True

    def read_alongside(self, tokens: list[int]) -> bool:
        return False

    def settle(self, wait: bool = True) -> None:
        pass


def pick(rows: Rows, cfg: SamplingConfig, rng, gate: Gate | None,
         position: int, limit: int | None = None, grammar=None) -> tuple[int, Dist | None, float] | None:
    """One draft token from the last output row: (token, its distribution q, the top
    probability), or None when ``gate(position, top probability)`` ends the draft here.
    ``limit``: propose only ids below it (the target's vocabulary). A greedy pick has no
    distribution (None): it is one-hot, built only if the target samples. ``grammar`` (a
    :class:`~localspec.engine.grammar.Grammar` state; full rows): the pick is among the tokens
    it allows, from the grammar-constrained distribution (the confidence stays the row's)."""
    j = len(rows) - 1
    if cfg.greedy:
        tok = rows.argmax(j, limit) if grammar is None else grammar.argmax(rows.x[j, :limit])
        top = rows.top_probability(j, limit) if gate is not None else 1.0
        dist = None
    else:
        dist = rows.dist(j, cfg, limit) if grammar is None else grammar.dist(rows.x[j, :limit], cfg)
        top = dist.top()[1]
    if gate is not None and not gate(position, top):
        return None
    if not cfg.greedy:
        tok = dist.sample(rng)
    return tok, dist, top


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two sequences share (list comparisons run in C: a 32K-token
    prompt takes a fraction of a millisecond, not a Python loop's milliseconds)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i, step = 0, 256
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def judged_prefix(tokens: list[int], context: list[int], start: int) -> int | None:
    """How many leading ``tokens`` (proposed at ``start``) the context matches, once it
    decides: a token that differs, or all of them there; None while all so far match and
    the rest are still to come."""
    seen = context[start:start + len(tokens)]
    right = common_prefix(tokens, seen)
    return None if right == len(seen) < len(tokens) else right


class NoDrafter(ReadsInline):
    name = "none"
    deterministic = True
    ctx = None

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        pass

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate=None, budget=None) -> Draft:
        return Draft([], None, 0.0, 0)

    def close(self) -> None:
        pass


class ModelDrafter:
    """Drafts with a small model that shares the target's tokenizer.

    After a long pause in drafting the draft has to decode every token it missed before it
    can draft again. It does so when that is cheap: up to ``max_catchup`` tokens, or more
    when its measured batch cost says catching up costs no more than ``catchup_steps``
    one-token decodes. Otherwise it restarts from the last ``window`` tokens only (at
    positions 0..window-1), which bounds the cost of coming back; a new prompt (``prefill``)
    always gives it the whole context again.

    Per-round work does not grow with the context: within a generation the context only
    grows, so the drafter remembers how much of it its cache holds (``_known``) and compares
    only the few tokens after that. Vocabularies may differ in size (by up to 128 tokens in a
    compatible pair): the draft never proposes an id the target lacks (``n_vocab_target``),
    and a target token the draft lacks is fed to the draft as a stand-in.
    """

    name = "model"
    deterministic = False
    # The generation's grammar state after the context (set by the generator; None: none):
    # drafts then propose only what it allows, which the target would accept more often.
    grammar = None

    def __init__(self, ctx: Context, max_catchup: int = 64, window: int = 32,
                 n_vocab_target: int | None = None, catchup_steps: float = 16.0):
        self.ctx = ctx
        self.max_catchup = max_catchup
        self.window = window
        self.catchup_steps = catchup_steps
        self.offset = 0                 # the cache holds context[offset:]
        self._known = 0                 # context[offset:offset + _known] is in the cache
        self._eog = ctx.model.eog_mask
        self._per_token: float | None = None   # measured seconds per token of a catch-up batch
        self._per_step: float | None = None    # measured seconds of a one-token decode
        n_draft = ctx.model.n_vocab
        self._n_out = min(n_draft, n_vocab_target or n_draft)   # ids the draft may propose
        self._n_in = n_draft                                     # ids the draft can read
        self._limit = self._n_out if self._n_out < n_draft else None   # a pick's bound (None: every id)
        self._may_lack = (n_vocab_target or n_draft) > n_draft   # the target has ids it lacks
        self._stand_in = max(0, ctx.model.eos) if ctx.model.eos < n_draft else 0
        self._reader: threading.Thread | None = None    # a read running alongside the target
        self._cancel = threading.Event()                 # set: stop it after its current chunk
        self._done_at = 0.0                              # when it should be done (busy_for)
        self._read_error: BaseException | None = None
        self._settings: tuple[SamplingConfig | None, SamplingConfig | None] = (None, None)  # run's -> draft's
        self.alongside_seconds = 0.0   # decode time of reads that ran beside the target

    # -- re-sync rule (issue 14): catch up fully when the measured cost says it is cheap ---
    def _cheap_catchup(self, missing: int) -> bool:
        """Whether decoding ``missing`` tokens to re-read the whole context costs no more than
        ``catchup_steps`` one-token draft decodes (from measured costs; a batch decodes many
        tokens for little more than one). Otherwise the draft restarts from ``window`` tokens."""
        if missing <= self.max_catchup:
            return True
        if self._per_token is None or self._per_step is None:
            return False
        return missing * self._per_token <= self.catchup_steps * self._per_step

    def _measured(self, synced: int, t_sync: float, steps: int, seconds: float) -> None:
        if synced > _SHORT_BATCH:
            per = t_sync / synced
            self._per_token = per if self._per_token is None else self._per_token + 0.3 * (per - self._per_token)
        if steps > 1:
            per = (seconds - t_sync) / (steps - 1)
            self._per_step = per if self._per_step is None else self._per_step + 0.3 * (per - self._per_step)

    def _map(self, tokens: list[int]) -> list[int]:
        """The tokens as the draft can decode them (ids it lacks become its stand-in)."""
        n = self._n_in
        if not self._may_lack or not tokens or max(tokens) < n:
            return tokens
        return [t if t < n else self._stand_in for t in tokens]

    def _sync(self, context: list[int]) -> tuple[Rows, int]:
        """Bring the cache to ``context`` (an extension of the last one); return the output
        row after its last token and how many tokens that took."""
        todo, _ = self._missing(context, 0)
        return self.ctx.decode_rows(todo, 1), len(todo)

    def _missing(self, context: list[int], leave: int) -> tuple[list[int], int]:
        """The tokens of ``context`` but its last ``leave`` that the cache lacks, and where
        the first of them is in the context; the cache is cut back to what it holds first (or
        restarts from a window when catching up would cost too much), and is taken to hold
        them from here on."""
        if self.offset and self._cheap_catchup(len(context)):   # cheap now: re-read it all
            self._whole_context()
            self._known = 0
        view_len = len(context) - self.offset
        n = self._held(context, view_len - 1)
        if len(context) > self.window and not self._cheap_catchup(view_len - n):
            self.offset = len(context) - self.window
            view_len = self.window
            n = 0
        n = self.ctx.truncate(n)  # a recurrent state may only go back to a checkpoint
        self._known = view_len - leave
        return self._map(context[self.offset + n:len(context) - leave]), self.offset + n

    def _held(self, context: list[int], end: int) -> int:
        """How many of the first ``end`` tokens of the context's view (after ``offset``) the
        cache holds: only what follows the known part is compared."""
        ctx = self.ctx
        known = min(self._known, end, len(ctx.tokens))
        o = self.offset
        return known + common_prefix(ctx.tokens[known:end], self._map(context[o + known:o + end]))

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        """Decode a prompt (all but its last token, which each draft starts from); the one
        full comparison with what the cache holds happens here, once per prompt. ``now=False``
        (drafting starts paused: a draft dearer than the target must not cost a prompt's
        decode for nothing): only forget what is known, so the first draft compares its cache
        with the context and catches up, or restarts from a window, like after a pause."""
        self._start_read(tokens, now=now, alongside=False)

    def read_alongside(self, tokens: list[int]) -> bool:
        """:meth:`prefill` with the decode on a thread of its own: the two models' contexts
        are independent, and llama.cpp releases the GIL while it decodes, so on spare cores
        the draft reads the prompt while the target reads it (and takes its first steps)."""
        self._start_read(tokens, now=True, alongside=True)
        return True

    def _start_read(self, tokens: list[int], *, now: bool, alongside: bool) -> None:
        if not now:
            self.settle()
            self._whole_context()
            self._known = 0
            return
        head = self._map(tokens[:-1])
        if alongside:
            # A read the last generation stopped may still finish its chunk: the new read
            # waits for it on its own thread, not the target's.
            previous, self._reader = self._reader, None
            self._known = len(head)
            self._start_thread(lambda: self._unread(head), prompt=True, previous=previous)
            return
        self.settle()
        self._known = len(head)
        self._read(lambda: self._unread(head), False, True)

    def _whole_context(self) -> None:
        """Leave a window restart: the cache holds the context from its first token again."""
        if self.offset:
            self.offset = 0
            self.ctx.clear()

    def _unread(self, head: list[int]) -> list[int]:
        """Bring the cache to the longest prefix of ``head`` it holds; return the rest."""
        self._whole_context()
        return head[self.ctx.truncate(common_prefix(self.ctx.tokens, head)):]

    def catch_up_alongside(self, context: list[int]) -> None:
        """Start decoding, on a thread of its own, the tokens of ``context`` (all but its
        last, which the next draft decodes for its logits) that the cache lacks. A draft
        chain calls it on a lookup's round: the model catches up on what the lookups emitted
        while the target verifies, instead of all at once when a lookup next misses. Nothing
        starts while another read runs or after a restart from a window (the next draft
        decides how to re-sync)."""
        if self.offset or not self.ready:
            return
        self.settle()
        end = len(context) - 1
        n = self._held(context, end)
        if n >= end:
            return
        n = self.ctx.truncate(n)
        self._known = end
        todo = self._map(context[n:end])
        self._start_thread(lambda: todo, prompt=False, tokens=len(todo))

    def _defer(self, context: list[int], budget: float) -> bool:
        """Whether to leave this round to the target alone while the cache catches up
        alongside: a read still runs and should take longer than the ``budget`` (a plain
        target step; a shorter one is waited for), or the catch-up this draft needs would
        cost more than it at the measured batch rate (e.g. the tokens a chain's lookups
        emitted, or everything since a pause). Drafting then starts one or two plain steps
        later with little left to decode. A round's usual first decode (a few tokens) is
        never deferred; with no batch measured yet, more than a short batch's worth of
        tokens is taken as dear. A read of unknown length (a prompt's) is never waited for,
        even with no plain step measured yet (an infinite budget): the round is the target's;
        a read nearly done is waited for no longer than the budget."""
        if not self.ready:
            if self.busy_beyond(budget):
                return True
            # Nearly done: waiting costs less than leaving the round, but only up to the
            # budget (a catch-up beside a busy target runs slower than its measured rate).
            reader = self._reader
            if reader is not None:   # (an infinite budget: join's timeout overflows, so none)
                reader.join(budget if budget < math.inf else None)
                if reader.is_alive():
                    return True
            self.settle()
        if self.offset:
            return False
        # What the cache lacks, compared: after a draft the target accepted whole it holds
        # all but the last drafted token, and only the new part is compared.
        end = len(context) - 1
        behind = end - self._held(context, end)
        per = self._per_token
        if behind <= _ROUND_SYNC or (behind <= _SHORT_BATCH if per is None else behind * per <= budget):
            return False
        self.catch_up_alongside(context)
        return self._reader is not None

    def _start_thread(self, work: Callable[[], list[int]], *, prompt: bool,
                      previous: threading.Thread | None = None, tokens: int | None = None) -> None:
        cancel = self._cancel = threading.Event()   # its own: stopping it stops no later read
        per = self._per_token
        # When it should be done (a catch-up of known length at the measured batch rate).
        self._done_at = (time.perf_counter() + tokens * per if tokens is not None and per is not None
                         else math.inf)

        def run():
            if previous is not None:
                previous.join()
            self._read(work, True, prompt, cancel)

        self._reader = threading.Thread(target=run, name="localspec-draft-read", daemon=True)
        self._reader.start()
        _READERS.add(self)

    def _chunk(self) -> int:
        """Tokens per decode of a read alongside: about ``_CHUNK_SECONDS`` at the measured
        batch rate (stopping it takes no longer), but never fewer than ``_CHUNK_MIN``: on a
        CPU, smaller batches cost up to half as much again per token."""
        per = self._per_token
        if per is None or per <= 0:
            return _CHUNK_MIN
        return int(min(max(_CHUNK_SECONDS / per, _CHUNK_MIN), self.ctx.n_batch))

    def _read(self, work: Callable[[], list[int]], alongside: bool, prompt: bool,
              cancel: threading.Event | None = None) -> None:
        """Decode the tokens ``work`` returns (it may first cut the cache back), in chunks
        between which ``cancel`` may stop it; alongside, what it raises is kept for settle."""
        ctx = self.ctx
        ctx.count_decode_time = not alongside   # beside the loop: not the loop's decode time
        try:
            todo = work()
            done = 0
            t0 = time.perf_counter()
            chunk = self._chunk() if alongside else len(todo)
            while done < len(todo) and not (cancel is not None and cancel.is_set()):
                part = todo[done:done + chunk]
                ctx.decode(part, logits="none")
                done += len(part)
            seconds = time.perf_counter() - t0
            if done:
                self._measured(done, seconds, 0, 0.0)
                if alongside:
                    self.alongside_seconds += seconds
            if prompt and done == len(todo):
                ctx.mark(pin=True)  # a recurrent draft comes back here for a re-rendered prompt
        except BaseException as exc:
            if not alongside:
                raise
            if self._read_error is None:   # a stopped read's failure comes first
                self._read_error = exc
        finally:
            ctx.count_decode_time = True

    @property
    def ready(self) -> bool:
        """False while a read (a prompt, a catch-up) runs alongside: the round is the target's."""
        reader = self._reader
        return reader is None or not reader.is_alive()

    def busy_for(self) -> float:
        """Seconds until the read running alongside should be done (0: none runs; infinite
        when unknown, as for a prompt's read)."""
        if self.ready:
            return 0.0
        return max(self._done_at - time.perf_counter(), 0.0)

    def busy_beyond(self, budget: float) -> bool:
        """Whether a read alongside runs for longer than ``budget`` seconds, or for how long
        nobody knows (a prompt's): such a read is never waited for, whatever the budget."""
        busy = self.busy_for()
        return busy > budget or busy == math.inf

    def settle(self, wait: bool = True) -> None:
        """Wait for a read alongside; ``wait=False``: cancel a running one instead (it stops
        after its current chunk; the cache keeps what it decoded and the next use, which
        waits for that chunk, compares the rest)."""
        reader = self._reader
        if reader is None:
            return
        if not wait and reader.is_alive():
            self._cancel.set()
            return
        reader.join()
        self._reader = None
        error, self._read_error = self._read_error, None
        if error is not None:
            self._known = 0      # the cache holds what it holds: the next draft compares it
            raise error

    def score(self, context: list[int], start: int = 0) -> tuple[tuple[bool, ...], float]:
        """Catch up on the tokens of ``context`` the cache lacks (all but its last, which the
        next draft decodes), predicting each: whether the draft's greedy choice after each
        caught-up token was the token that followed it. For a greedy draft these are exactly
        the rounds it would have drafted on that text, so a drafter that sat idle is measured
        without a verify. Far behind, it restarts from a window as :meth:`draft` would.

        Args:
            context: the prompt and the answer so far; start: the first token worth
                predicting (the answer's: a prompt is no draft's text to predict).

        Returns:
            (hits, seconds): one per token from ``start`` on that follows a caught-up one
            (none when the cache was at most one token behind), and the time it took.
        """
        t0 = time.perf_counter()
        self.settle()
        ctx = self.ctx
        todo, at = self._missing(context, 1)
        if not todo:
            return (), time.perf_counter() - t0
        rows_n = min(len(todo), ctx.n_batch, DEVICE_ROWS_MAX)
        rows = ctx.decode_rows(todo, rows_n)
        first = at + len(todo) - rows_n + 1   # the token the first row predicts
        limit = self._limit
        hits = tuple(rows.argmax(j, limit) == context[first + j] for j in range(max(start - first, 0), rows_n))
        seconds = time.perf_counter() - t0
        self._measured(len(todo), seconds, 0, 0.0)
        return hits, seconds

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate=None, budget=None) -> Draft:
        """Up to ``k`` tokens after ``context``. ``gate(position, top_probability)`` is asked
        before each token is added; drafting stops when it says no. Waiting for a catch-up
        that runs alongside counts in the round's first (sync) step, and is reported apart
        (``waited``: it is no decode's cost); with a ``budget`` the draft waits only for a
        read nearly done (see :meth:`_defer`)."""
        t0 = time.perf_counter()
        reading = not self.ready
        if budget is not None and self._defer(context, budget):
            return Draft([], None, time.perf_counter() - t0, 0)
        self.settle()
        waited = time.perf_counter() - t0 if reading else 0.0
        room = self.ctx.n_ctx - (len(context) - self.offset)
        k = min(k, room)
        if k <= 0:
            return Draft([], [], 0.0, 0)
        if cfg is not self._settings[0]:   # once per generation, not per round
            self._settings = (cfg, draft_settings(cfg, self.ctx.device_sampling))
        cfg = self._settings[1]
        g = self.grammar.clone() if self.grammar is not None else None
        full = g is not None or cfg.penalized
        self.ctx.sample_on_device(None if full else chain_for(cfg, confidence=gate is not None))
        rows, synced = self._sync(context)
        t_sync = time.perf_counter() - t0
        steps = 1
        tokens: list[int] = []
        dists: list[Dist | None] = []
        confidence: list[float] = []
        limit = self._limit   # never an id the target lacks
        for i in range(k):
            picked = pick(penalized_last(rows, context, tokens, cfg), cfg, rng, gate, i + 1, limit, g)
            if picked is None:
                break
            tok, dist, top = picked
            tokens.append(tok)
            dists.append(dist)
            confidence.append(top)
            if i == k - 1 or self._eog[tok]:
                break
            if g is not None:
                g.accept(tok)
            if i == 0:
                # One checkpoint per round, where drafting starts: a recurrent draft comes
                # back to it and decodes what the target kept in one batch, instead of
                # saving its state before every draft token (a no-op for a KV cache).
                self.ctx.mark()
            rows = self.ctx.decode_rows([tok], 1)
            steps += 1
        if g is not None:
            g.close()
        seconds = time.perf_counter() - t0
        self._measured(synced, t_sync, steps, seconds)
        return Draft(tokens, None if cfg.greedy else dists, seconds, steps, synced, t_sync, confidence,
                     waited=waited)

    def draft_checked(self, helper: ModelDrafter, context: list[int], k: int, block: int) -> Draft:
        """Up to ``k`` of this draft's greedy tokens after ``context``, sooner: ``helper`` (a
        smaller draft) proposes up to ``block`` tokens, this draft checks them in one batch and
        keeps those it would have chosen itself, then adds its own choice (speculative decoding
        between two drafts). The tokens are the ones greedy :meth:`draft` gives, for one batch
        per block instead of one decode per token. A layered draft is one-hot (no
        distributions): under sampling the target judges it as it judges a lookup's.

        Returns:
            The Draft, with ``helper_blocks``: (proposed, kept) per batch.
        """
        t0 = time.perf_counter()
        self.settle()
        k = min(k, self.ctx.n_ctx - (len(context) - self.offset) - block)
        if k <= 0:
            return Draft([], None, 0.0, 0)
        ctx = self.ctx
        ctx.sample_on_device(chain_for(GREEDY, confidence=False))
        limit = self._limit
        rows, synced = self._sync(context)
        t_sync = time.perf_counter() - t0
        tokens, blocks, steps = [rows.argmax(0, limit)], [], 1
        ctx.mark()                      # (a recurrent draft's checkpoint, as in draft)
        since, end = len(ctx.tokens), len(context)
        try:
            while len(tokens) < k and not self._eog[tokens[-1]]:
                # The helper proposes after the draft so far, appended for the call (a copy of
                # the context would cost a round its length).
                context[end:] = tokens
                props = helper.draft(context, min(block, k - len(tokens)), GREEDY, None).tokens
                rows = ctx.decode_rows(self._map(tokens[-1:] + props), len(props) + 1)
                steps += 1
                kept = 0
                while kept < len(props) and rows.argmax(kept, limit) == props[kept] and not self._eog[props[kept]]:
                    kept += 1
                blocks.append((len(props), kept))
                tokens += props[:kept]
                if kept < len(props):
                    self._drop(len(props) - kept, since, context)
                if len(tokens) < k:
                    tokens.append(rows.argmax(kept, limit))
        finally:
            del context[end:]
            helper._known = min(helper._known, end - helper.offset)   # what came after was a proposal
        seconds = time.perf_counter() - t0
        return Draft(tokens, None, seconds, steps, synced, t_sync, helper_blocks=tuple(blocks))

    def _drop(self, n: int, since: int, context: list[int]) -> None:
        """Take the last ``n`` tokens out of the cache, which held ``context`` (from
        ``offset``) up to ``since`` and drafts after it; a recurrent state goes back to a
        checkpoint and decodes again what it keeps after that."""
        ctx = self.ctx
        want = len(ctx.tokens) - n
        tail = ctx.tokens[since:want]
        kept = ctx.truncate(want)
        if kept < want:
            o = self.offset
            head = self._map(context[o + kept:o + since]) if kept < since else []
            ctx.decode(head + tail[max(kept - since, 0):], logits="none")

    def close(self) -> None:
        try:
            self.settle()
        except Exception:  # noqa: BLE001 - closing: what the read raised no longer matters
            pass
        self.ctx.close()


_MATCH_DECAY = 0.95     # per judged match: a match length's record follows the text (~20 matches)
_MATCHES_HELD = 8       # matches waiting for the tokens that judge them
_MATCH_CLASSES = (2, 3, 4, 8, 16)   # a match's record is its length's class (the largest at most it)
_MATCH_CARRY = 3.0      # matches' worth of each class's record a new prompt starts from


class NgramDrafter(ReadsInline):
    """Prompt-lookup drafting: reuse what followed the last n-gram's latest earlier occurrence.

    How many of a match's tokens turn out right depends on the match's length and on the
    text: in code a 2-token match's first token is right about 40% of the time, a 3-token
    one's 60-90%, and a match of 8 tokens or more, a passage being copied, is nearly always
    right (SmolLM2's answers). A match found at ``n_max`` tokens is measured back to its
    full length (up to 16). Each match is judged against what the target emitted there, and
    its length class's record (per position, decayed so that it follows the text) gives
    the tokens a new match is expected to get accepted, which a ``gate`` weighs, asked
    ``gate(tokens proposed, tokens expected accepted)``: where a verify batch costs about as
    much as the tokens in it (a CPU), a match that is mostly wrong costs more than it brings
    and is not proposed. It is still judged, so the record stays current.
    """

    name = "ngram"
    deterministic = True
    ctx = None

    def __init__(self, n_max: int = 4, n_min: int = 2):
        self.n_max = n_max
        self.n_min = n_min
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self._check = False    # the next draft compares the whole context (a prompt not indexed)
        # Per length class, per position i (from 1): matches judged there (their tokens before
        # i all right), and those whose token i was right; decayed.
        self._judged = {c: [0.0] for c in _MATCH_CLASSES}
        self._right = {c: [0.0] for c in _MATCH_CLASSES}
        self._pending: deque[tuple[int, list[int], int]] = deque()   # (where, tokens, length class)

    @staticmethod
    def _class(length: int) -> int:
        return max(c for c in _MATCH_CLASSES if c <= length)

    def expected(self, length: int, tokens: int) -> float:
        """How many leading tokens of a ``tokens``-long proposal from a match of ``length``
        tokens are expected right: its length class's record at each position, after a
        prior of one match in two."""
        cls = self._class(length)
        judged, right = self._judged[cls], self._right[cls]
        p, total = 1.0, 0.0
        for i in range(1, tokens + 1):
            p *= ((right[i] + 0.5) / (judged[i] + 1.0)) if i < len(judged) else 0.5
            total += p
        return total

    def _carry(self) -> None:
        """A new prompt: keep ``_MATCH_CARRY`` matches' worth of each record. Whether long
        matches are copies depends on the text (a summary quotes its source, code repeats
        lines that go on differently), and an answer has few matches to tell."""
        for cls, judged in self._judged.items():
            if len(judged) > 1 and judged[1] > _MATCH_CARRY:
                f = _MATCH_CARRY / judged[1]
                right = self._right[cls]
                for i in range(1, len(judged)):
                    judged[i] *= f
                    right[i] *= f

    def _judge(self, context: list[int]) -> None:
        """Judge each held match whose tokens the context now decides."""
        for item in list(self._pending):
            where, tokens, cls = item
            right = judged_prefix(tokens, context, where)
            if right is None:
                continue
            self._pending.remove(item)
            judged, rights = self._judged[cls], self._right[cls]
            reach = min(right + 1, len(tokens))
            while len(judged) <= reach:
                judged.append(0.0)
                rights.append(0.0)
            for i in range(1, len(judged)):
                judged[i] *= _MATCH_DECAY
                rights[i] *= _MATCH_DECAY
            for i in range(1, reach + 1):
                judged[i] += 1.0
                if i <= right:
                    rights[i] += 1.0

    def _rebuild(self, context: list[int], *, check: bool) -> bool:
        """Index the tokens of ``context`` not seen yet. ``check``: compare the whole
        context with what was indexed (a new prompt); otherwise it is an extension of the
        last one, and only its end is checked. False: it was not, and the index started over."""
        seen = self._seen
        if check:
            same = common_prefix(seen, context) == len(seen)
        else:
            same = len(context) >= len(seen) and (not seen or context[len(seen) - 1] == seen[-1])
        if not same:
            self._seen = []
            self._index = {}
        for tok in context[len(self._seen):]:
            self._seen.append(tok)
            end = len(self._seen) - 1  # the n-grams ending just before this token now have a follower
            for n in range(self.n_min, self.n_max + 1):
                s = end - n
                if s >= 0:
                    self._index[tuple(self._seen[s:end])] = s
        return same

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        """Index the prompt's n-grams; ``now=False`` (lookups start paused): at the first
        draft instead, if one comes (~100 us for a few hundred tokens, next to a fast target
        step a few of its steps)."""
        self._pending.clear()
        self._carry()
        if now:
            self._rebuild(tokens, check=True)
            self._check = False
        else:
            self._check = True

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate=None, budget=None) -> Draft:
        t0 = time.perf_counter()
        same = self._rebuild(context, check=self._check)
        self._check = False
        seen = self._seen
        if self._pending:
            if same:
                self._judge(context)
            else:
                self._pending.clear()      # another text: its matches say nothing here
        out: list[int] = []
        if k > 0:
            for n in range(self.n_max, self.n_min - 1, -1):
                if len(seen) < n:
                    continue
                s = self._index.get(tuple(seen[-n:]))
                if s is not None:
                    out = seen[s + n:s + n + k]
                    length = n
                    if n == self.n_max:      # how far back the match goes
                        tail = len(seen) - n
                        while length < _MATCH_CLASSES[-1] and s > length - n and \
                                seen[s - 1 - (length - n)] == seen[tail - 1 - (length - n)]:
                            length += 1
                    cls = self._class(length)
                    held = self._pending
                    if held and held[-1][0] == len(seen):
                        held.pop()             # asked again at the same place: judged once
                    elif len(held) == _MATCHES_HELD:
                        held.popleft()
                    held.append((len(seen), out, cls))
                    if gate is not None and not gate(len(out), self.expected(cls, len(out))):
                        out = []
                    break
        seconds = time.perf_counter() - t0
        # One lookup is its one step: the policy learns its cost and acceptance from it.
        return Draft(out, None, seconds, 1, 0, seconds)

    def close(self) -> None:
        pass
