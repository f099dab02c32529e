"""Several generations stepped together: one target decode per round carries every slot.

A :class:`BatchRunner` owns the sequences of a target context made with ``n_seq`` > 1 (and
of the draft model's, when one is loaded), one per slot, each with its own KV stream. One
thread calls :meth:`BatchRunner.step`; each round:

0. the prompts of the generations admitted since the last round (:meth:`BatchRunner.admit`)
   are read, in one target decode for all, and each emits its first token;
1. every busy slot's policy says how many tokens it may draft (a batch-level
   :class:`~localspec.engine.policy.batch.BatchGuard` may say none for all);
2. the draft model's steps for all drafting slots go in one draft decode per step (prompt
   lookups draft on their own, for nothing);
3. ONE target decode verifies all slots' tokens (a plain step is a batch of one);
4. each slot accepts by the same rules as a single run (greedy: the longest agreeing prefix;
   sampled: rejection sampling with its own seeded generator), cuts its own sequence's
   rejected positions, emits its events and feeds its policy the round's costs.

Greedy output is the target's own: each sequence has its own KV stream (a unified cache
changes logits enough to flip greedy choices); only batched-decode rounding near ties can
part it from a single run. Requests with a grammar, a chain or an MTP head run through
:meth:`Engine.run` instead (:meth:`BatchRunner.supports`).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from functools import cached_property

import llama_cpp.llama_cpp as ll
import numpy as np

from ..errors import BadInput, ContextOverflow, LocalspecError
from .backend import Context
from .drafters import NgramDrafter, common_prefix, pick
from .events import Done, Event, Origin, PolicyNote, PromptProcessed, Step, StopReason, TextChunk, Token
from .outputs import LogitRows, target_dist, token_logprobs
from .penalties import penalized, penalized_last, prepared
from .policy.batch import BatchGuard
from .sampling import Dist, speculative_accept
from .spec import DrafterKind, RunSpec
from .stats import StatsRecorder
from .text import TextStream, stop_after

BATCHED = (DrafterKind.NONE, DrafterKind.MODEL, DrafterKind.NGRAM)
_PLAIN = (Origin.TARGET,)
_NO_DRAFT: tuple[list[int], None, int] = ([], None, 0)   # (tokens, distributions, decodes): none (never changed)


class SlotsFull(LocalspecError):
    """Every slot is busy."""


class _Seqs:
    """One context's sequences: their token mirrors and one multi-sequence llama_batch.
    Sequence 0's mirror is the context's own ``tokens`` (what a single run uses)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.n_batch = ctx.n_batch
        self.tokens = [ctx.tokens] + [[] for _ in range(ctx.n_seq - 1)]
        self.batch = ll.llama_batch_init(self.n_batch, 0, 1)
        b = self.batch
        self._tok, self._pos, self._out, self._nseq = b.token, b.pos, b.logits, b.n_seq_id
        for i in range(self.n_batch):
            self._nseq[i] = 1
        self._seq = [b.seq_id[i] for i in range(self.n_batch)]   # each position's seq_id array
        self.n_vocab = ctx.model.n_vocab
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def mirror(self, s: int) -> list[int]:
        return self.ctx.tokens if s == 0 else self.tokens[s]

    def truncate(self, s: int, n: int) -> None:
        toks = self.mirror(s)
        if n < len(toks):
            ll.llama_memory_seq_rm(self.ctx.mem, s, n, -1)
            del toks[n:]

    def decode(self, items: list[tuple[int, list[int], int]]) -> list[np.ndarray | None]:
        """Append each item's tokens to its sequence (``(seq, tokens, rows wanted)``) in as few
        decodes as the batch size allows; return each item's last rows of logits (copies
        only where a later decode of this call would overwrite them)."""
        out: list[np.ndarray | None] = [None] * len(items)
        if sum(len(toks) for _, toks, _ in items) <= self.n_batch:    # a round's usual case: one decode
            self._run(items, range(len(items)), out, copy=False)
            return out
        group: list[int] = []
        used = 0
        for i, (_, toks, want) in enumerate(items):
            n = len(toks)
            if n > self.n_batch:          # a long read: its head alone, without rows
                s = items[i][0]
                if group:
                    self._run(items, group, out, copy=True)
                    group, used = [], 0
                head = n - min(self.n_batch, max(want, 1))
                for j in range(0, head, self.n_batch):
                    self._run([(s, toks[j:min(j + self.n_batch, head)], 0)], [0], [None], copy=False)
                items = list(items)
                items[i] = (s, toks[head:], want)
                n = len(items[i][1])
            if used + n > self.n_batch:
                self._run(items, group, out, copy=True)
                group, used = [], 0
            group.append(i)
            used += n
        if group:
            self._run(items, group, out, copy=False)
        return out

    def _run(self, items, group, out: list, *, copy: bool) -> None:
        tok, pos, seq, flag = self._tok, self._pos, self._seq, self._out
        k = rows = 0
        for i in group:
            s, toks, want = items[i]
            base = len(self.mirror(s))
            first = len(toks) - want
            rows += want
            for j, t in enumerate(toks):
                tok[k] = t
                pos[k] = base + j
                seq[k][0] = s
                flag[k] = j >= first
                k += 1
        self.batch.n_tokens = k
        rc = self.ctx.remote(self._decode_sync)   # on the context's guard thread with --rpc
        if rc != 0:
            for i in group:   # what a failed decode left behind goes
                s = items[i][0]
                ll.llama_memory_seq_rm(self.ctx.mem, s, len(self.mirror(s)), -1)
            raise LocalspecError(f"llama_decode failed (code {rc}) in a batch of {k} tokens")
        x = self._view(rows) if rows else None
        r = 0
        for i in group:
            s, toks, want = items[i]
            self.mirror(s).extend(toks)
            if want:
                out[i] = x[r:r + want].copy() if copy else x[r:r + want]
                r += want

    def _decode_sync(self) -> int:
        rc = ll.llama_decode(self.ctx.ptr, self.batch)
        ll.llama_synchronize(self.ctx.ptr)
        return rc

    def _view(self, rows: int) -> np.ndarray:
        """The decode's output rows as a numpy view of llama.cpp's buffer, kept per address
        and row count (building one costs more than a small model's step's argmax)."""
        ptr = ll.llama_get_logits(self.ctx.ptr)
        key = (ctypes.addressof(ptr.contents), rows)
        view = self._views.get(key)
        if view is None:
            if len(self._views) > 64:
                self._views.clear()
            view = self._views[key] = np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))
        return view

    def close(self) -> None:
        if self.batch is not None:
            ll.llama_batch_free(self.batch)
            self.batch = None


class Generation:
    """One request in a slot: its settings, its events as they come, and its end.

    ``on_event`` (given to :meth:`BatchRunner.start`) receives each event on the runner's
    thread; without one they are kept in ``events``. ``done`` is the final :class:`Done`
    (None while it runs); ``error`` what stopped it otherwise."""

    def __init__(self, runner: BatchRunner, slot: int, prompt: list[int], spec: RunSpec,
                 cancel: threading.Event | None, on_event: Callable[[Event], None] | None, policy):
        self.slot = slot
        self.prompt = prompt
        self.spec = spec
        self.cancel = cancel or threading.Event()
        self.events: list[Event] = []
        self._put = on_event or self.events.append
        self.policy = policy
        self.done: Done | None = None
        self.error: BaseException | None = None
        s = spec.sampling
        self.sampling = s
        self.greedy = s.greedy
        self.seed = s.seed if s.seed is not None else int(np.random.SeedSequence().entropy % (2**31))
        self.dcfg = s.for_draft()
        self.kind = spec.drafter if policy.may_draft else DrafterKind.NONE
        self.lookup = NgramDrafter() if self.kind is DrafterKind.NGRAM else None
        self.stats = StatsRecorder(drafter=self.kind.value, policy=policy.describe(), seed=self.seed)
        self.tokens = list(prompt)
        self.generated: list[int] = []
        self.text = TextStream(list(spec.stop), spec.n_indent)
        self.reason: StopReason | None = None
        self.message = ""
        self.index = 0
        self.quiet = 0
        self.passed = self.passed_tokens = 0
        self.t_start = time.perf_counter()
        self.t_gen = self.t_first = self.t_start
        self.draft_seconds = 0.0
        self.decode_seconds = 0.0
        self.cache_prompt = True
        self.shared = False      # some round decoded beside other slots' tokens (its costs are the batch's)
        self._model = runner.model
        self._runner = runner

    @cached_property
    def rng(self) -> np.random.Generator:   # made when first used: a greedy run may never draw
        return np.random.default_rng(self.seed)

    @property
    def finished(self) -> bool:
        return self.done is not None or self.error is not None

    def emit(self, new: list[int], origins: list[Origin], rows: np.ndarray | None = None) -> int:
        """Put a Token for each new token until one ends the generation; return how many.
        ``rows``: the target's logits for them, read for their log-probabilities when the spec
        asks for them."""
        emitted = 0
        model, put, n_lp = self._model, self._put, self.spec.logprobs
        for i, (tok, origin) in enumerate(zip(new, origins)):
            if model.is_eog(tok):
                self.reason = StopReason.EOG
                break
            self.tokens.append(tok)
            self.generated.append(tok)
            emitted += 1
            piece = self.text.push(model.piece(tok))
            if len(self.generated) == 1:
                self.t_first = time.perf_counter()
                self.stats.first_token(self.t_first - self.t_start)
            put(Token(tok, piece, origin) if n_lp is None or rows is None
                else Token(tok, piece, origin, *token_logprobs(rows[i], tok, n_lp)))
            self.reason = stop_after(self.text, piece, len(self.generated), self.spec.max_tokens, self.t_first,
                                     self.spec.t_max_predict_ms)
            if self.reason is not None:
                break
        return emitted

    def note(self, text: str | None) -> None:
        if text:
            self.stats.note(text)
            self._put(PolicyNote(self.policy.drafting, self.policy.k_now, text))

    def result(self) -> Done:
        """The final event (raises what stopped the generation otherwise)."""
        if self.error is not None:
            raise self.error
        if self.done is None:
            raise BadInput("the generation is still running")
        return self.done


class BatchRunner:
    """Steps the generations of up to ``engine.parallel`` slots together (see the module).

    Not thread-safe: one thread calls :meth:`start`, :meth:`step` and :meth:`cancel_all`.
    """

    def __init__(self, engine, clock: Callable[[], float] = time.perf_counter):
        self.engine = engine
        self.model = engine.target_model
        self.n_slots = engine.parallel
        self.target = _Seqs(engine.target_ctx)
        self.draft = _Seqs(engine.draft_ctx) if engine.draft_ctx is not None else None
        n_t = self.model.n_vocab
        if self.draft is not None:
            n_d = engine.draft_model.n_vocab
            self._limit = n_t if n_t < n_d else None         # never propose an id the target lacks
            self._n_in = n_d
            self._may_lack = n_t > n_d
            eos = engine.draft_model.eos
            self._stand_in = eos if 0 <= eos < n_d else 0
            self._eog_d = engine.draft_model.eog_mask
        self.slots: list[Generation | None] = [None] * self.n_slots
        self._used = [0] * self.n_slots          # when each slot last started (least recent first)
        self._starts = 0
        self._pending: list[Generation] = []     # admitted, their prompts not read yet
        self.guard = BatchGuard(clock=clock)
        self.rounds = 0
        self.ended = 0             # generations that have freed their slot so far
        self.last_batch = 0        # tokens in the last round's target decode
        self.last_draft_batch = 0  # most tokens in one of its draft decodes

    # -- admission --------------------------------------------------------------------
    @staticmethod
    def supports(spec: RunSpec) -> bool:
        """Whether a run of ``spec`` can take a slot (else it needs :meth:`Engine.run`)."""
        return spec.drafter in BATCHED and spec.grammar is None and spec.cascade is None

    @property
    def busy(self) -> int:
        return self.n_slots - self.slots.count(None)

    @property
    def free(self) -> int:
        return self.n_slots - self.busy

    def slot_tokens(self, s: int) -> list[int]:
        """What slot ``s``'s target sequence holds (its prompt cache)."""
        return self.target.mirror(s)

    def pick_slot(self, prompt: list[int]) -> int | None:
        """The free slot holding the longest prefix of ``prompt`` (a continued conversation
        goes back to its slot), else the least recently used; None when all are busy."""
        best, key = None, None
        for s, g in enumerate(self.slots):
            if g is not None:
                continue
            k = (common_prefix(self.target.mirror(s), prompt), -self._used[s])
            if key is None or k > key:
                best, key = s, k
        return best

    def start(self, prompt: list[int], spec: RunSpec, cancel: threading.Event | None = None,
              on_event: Callable[[Event], None] | None = None, *, cache_prompt: bool = True,
              slot: int | None = None) -> Generation:
        """Read ``prompt`` in a free slot (``slot``, if given) and emit its first token; the rest
        comes from :meth:`step`.

        Raises:
            SlotsFull: every slot (or ``slot``) is busy. BadInput: a spec no slot runs, an empty
                prompt, no such slot. ContextOverflow: a prompt the context cannot hold. What a
                failed read raised.
        """
        g = self.admit(prompt, spec, cancel, on_event, cache_prompt=cache_prompt, slot=slot)
        with self.engine.lock:
            self._pending.remove(g)
            self._read_prompts([g])
        if g.error is not None:
            raise g.error
        return g

    def admit(self, prompt: list[int], spec: RunSpec, cancel: threading.Event | None = None,
              on_event: Callable[[Event], None] | None = None, *, cache_prompt: bool = True,
              slot: int | None = None) -> Generation:
        """Take a free slot for ``prompt`` (``slot``, if given; else :meth:`pick_slot`'s) without
        reading it: the next :meth:`step` reads the prompts of every generation admitted since in
        one decode (requests that arrive together cost one prompt decode, not one each), emits
        their first tokens, then runs its round.

        Raises:
            SlotsFull: every slot (or ``slot``) is busy. BadInput: a spec no slot runs, an empty
                prompt, no such slot. ContextOverflow: a prompt the context cannot hold.
        """
        spec.validate()
        if not self.supports(spec):
            raise BadInput(f"drafter {spec.drafter.value} or a grammar does not run in a slot")
        if spec.drafter is DrafterKind.MODEL and self.draft is None:
            raise BadInput("no draft model is loaded: give one (-d DRAFT), or use n-gram or no drafting")
        if not prompt:
            raise BadInput("the prompt is empty")
        spec = spec.with_(sampling=prepared(spec.sampling, self.model))
        n_ctx = self.target.ctx.n_ctx
        if len(prompt) >= n_ctx:
            raise ContextOverflow(f"the prompt is {len(prompt)} tokens but the context holds {n_ctx}; "
                                  "use a shorter prompt or a larger --ctx")
        if slot is not None and not 0 <= slot < self.n_slots:
            raise BadInput(f"there is no slot {slot}: slots are 0 to {self.n_slots - 1}")
        if slot is not None and self.slots[slot] is not None:
            raise SlotsFull(f"slot {slot} is busy")
        s = self.pick_slot(prompt) if slot is None else slot
        if s is None:
            raise SlotsFull(f"all {self.n_slots} slots are busy")
        eng = self.engine
        with eng.lock:
            eng.settle_draft()
            policy = eng.policy(spec)
            g = Generation(self, s, prompt, spec, cancel, on_event, policy)
            g.cache_prompt = cache_prompt
            self._starts += 1
            self._used[s] = self._starts
            self.slots[s] = g
            self._pending.append(g)
        return g

    def _read_prompts(self, gens: list[Generation]) -> None:
        """Read the prompts of ``gens`` (one target decode for all, one draft decode for those
        drafting with the model) and emit each one's first token. A failed read ends each of
        them with its error (kept in ``error``)."""
        tgt = self.target
        try:
            tgt.ctx.sample_on_device(None)
            t0 = time.perf_counter()
            items, cached = [], []
            for g in gens:
                g.note(g.policy.opening_note())
                s, prompt = g.slot, g.prompt
                if not g.cache_prompt:
                    tgt.truncate(s, 0)
                n_cached = min(common_prefix(tgt.mirror(s), prompt), len(prompt) - 1)
                tgt.truncate(s, n_cached)
                items.append((s, prompt[n_cached:], 1))
                cached.append(n_cached)
            rows = tgt.decode(items)
            t_gen = time.perf_counter()
            reads = []
            for g, n_cached, x in zip(gens, cached, rows):
                g.t_gen = t_gen
                g.stats.prompt(len(g.prompt), n_cached, t_gen - t0)
                g._put(PromptProcessed(len(g.prompt), n_cached, t_gen - t0))
                t1 = time.perf_counter()
                if g.spec.max_tokens == 0:     # the prompt only (a cache warm-up)
                    g.reason, emitted = StopReason.MAX_TOKENS, 0
                else:
                    lr = penalized(LogitRows(x), g.tokens, [], g.sampling)
                    first = lr.argmax(0) if g.greedy else target_dist(lr, 0, g.sampling, self.model).sample(g.rng)
                    emitted = g.emit([first], [Origin.TARGET], x)
                step = Step(0, 0, 0, 0, emitted, 0.0, time.perf_counter() - t1, g.policy.drafting, verify_batch=0)
                g.stats.step(step)
                g._put(step)
                g.index = 1
                if g.kind is DrafterKind.MODEL and g.policy.drafting and g.reason is None:
                    reads.append((g.slot, g.tokens[:-1]))
                elif g.lookup is not None:
                    g.lookup.prefill(g.tokens, now=g.policy.drafting)
                g.quiet = g.policy.quiet_rounds()
            if reads:
                self._draft_read(reads)
        except Exception as exc:
            for g in gens:
                if not g.finished:
                    self._finish(g, error=exc)
            return
        except BaseException as exc:
            for g in gens:
                if not g.finished:
                    self._finish(g, error=exc)
            raise
        for g in gens:
            if g.reason is not None:
                self._finish(g)

    def _map(self, tokens: list[int]) -> list[int]:
        n = self._n_in
        if not self._may_lack or not tokens or max(tokens) < n:
            return tokens
        return [t if t < n else self._stand_in for t in tokens]

    def _draft_read(self, heads: list[tuple[int, list[int]]]) -> None:
        """Bring each draft sequence ``s`` to its ``head`` (what it holds of it stays), in one
        decode where the batch size allows."""
        d = self.draft
        items = []
        for s, head in heads:
            head = self._map(head)
            d.truncate(s, common_prefix(d.mirror(s), head))
            todo = head[len(d.mirror(s)):]
            if todo:
                items.append((s, todo, 0))
        if items:
            d.decode(items)

    # -- rounds -----------------------------------------------------------------------
    def step(self) -> int:
        """One round for every busy slot; returns how many are still busy."""
        active = [g for g in self.slots if g is not None]
        if not active:
            return 0
        with self.engine.lock:
            if self._pending:
                fresh, self._pending = self._pending, []
                self._read_prompts(fresh)
                active = [g for g in self.slots if g is not None]
                if not active:
                    return 0
            try:
                self._round(active)
            except Exception as exc:   # the whole batch failed: each of its generations ends with it
                for g in active:
                    if not g.finished:
                        self._finish(g, error=exc)
        return self.busy

    def _round(self, active: list[Generation]) -> None:
        tgt = self.target
        tgt.ctx.sample_on_device(None)
        n_ctx = tgt.ctx.n_ctx
        live: list[Generation] = []
        for g in active:
            if g.cancel.is_set():
                g.reason = StopReason.CANCELLED
                self._finish(g)
            else:
                live.append(g)
        if not live:
            return
        n_busy = len(live)
        if n_busy > 1:
            for g in live:
                g.shared = True
        allow = self.guard.allow(n_busy)
        # -- how many tokens each slot may draft ----------------------------------------
        plan: list[tuple[Generation, int, bool, bool]] = []   # (gen, k, asked, probe)
        drafting = False
        for g in live:
            pol = g.policy
            remaining = g.spec.max_tokens - len(g.generated)
            room = n_ctx - len(g.tokens)
            if room < 0:
                g.reason = StopReason.CONTEXT_FULL
                g.message = f"context full: the context holds {n_ctx} tokens; raise --ctx for longer answers"
                self._finish(g)
                continue
            if g.quiet > 0 or not allow:
                if g.quiet > 0:
                    g.quiet -= 1
                plan.append((g, 0, False, False))
                continue
            if g.passed:
                pol.passed(g.passed, g.passed_tokens)
                g.passed = g.passed_tokens = 0
            k = max(0, min(pol.next_k(), room, remaining - 1))
            drafting = drafting or k > 0
            plan.append((g, k, True, pol.probe))
        if not plan:
            return
        # -- draft --------------------------------------------------------------------
        if drafting:
            t0 = time.perf_counter()
            drafts = self._draft_all(plan)
            t_draft = time.perf_counter() - t0
        else:
            drafts, t_draft = [_NO_DRAFT] * len(plan), 0.0
            self.last_draft_batch = 0
        # -- verify: one target decode for every slot ----------------------------------
        items = []
        n_batch = 0
        for (g, _, _, _), (toks, _, _) in zip(plan, drafts):
            s = g.slot
            todo = g.tokens[len(tgt.mirror(s)):] + toks
            n_batch += len(todo)
            items.append((s, todo, len(toks) + 1))
        t1 = time.perf_counter()
        rows = tgt.decode(items)
        t_verify = time.perf_counter() - t1
        self.last_batch = n_batch
        self.rounds += 1
        # -- accept, cut, emit, learn --------------------------------------------------
        emitted_all = 0
        any_drafted = False
        for (g, k, asked, probe), (toks, dists, steps), x in zip(plan, drafts, rows):
            n = len(toks)
            lr = penalized(LogitRows(x), g.tokens, toks, g.sampling)
            if g.greedy:
                a = 0
                nxt = lr.argmax(0)
                while a < n and nxt == toks[a]:
                    a += 1
                    nxt = lr.argmax(a)
            else:
                cache: dict[int, Dist] = {}

                def p_at(i: int, lr=lr, cache=cache, cfg=g.sampling) -> Dist:
                    if i not in cache:
                        cache[i] = target_dist(lr, i, cfg, self.model)
                    return cache[i]

                q = dists if dists is not None else [Dist.onehot(t) for t in toks]
                a, nxt = speculative_accept(toks, q, p_at, self.model.n_vocab, g.rng)
            if n:
                tgt.truncate(g.slot, len(g.tokens) + a)
                emitted = g.emit(toks[:a] + [nxt], [Origin.DRAFT] * a + [Origin.BONUS if a == n else Origin.TARGET], x)
            else:      # a plain step: its sequence holds exactly the slot's tokens
                emitted = g.emit([nxt], _PLAIN, x)
            emitted_all += emitted
            any_drafted = any_drafted or n > 0
            ds = t_draft if steps else 0.0
            g.draft_seconds += ds
            g.decode_seconds += ds + t_verify
            step = Step(g.index, k, n, a, emitted, ds, t_verify, steps > 0 or (asked and g.policy.drafting),
                        steps, n + 1, probe)     # draft_steps, verify_batch, probe
            g.index += 1
            g.stats.step(step)
            g._put(step)
            if not asked:
                g.passed += 1
                g.passed_tokens += emitted
            else:
                g.note(g.policy.observe(step))
                g.quiet = g.policy.quiet_rounds()
            if g.reason is not None:
                self._finish(g)
        note = self.guard.observe(n_busy, any_drafted, emitted_all)
        if note:
            for g in live:
                if not g.finished:
                    g.stats.note(note)

    def _draft_all(self, plan) -> list[tuple[list[int], list[Dist] | None, int]]:
        """Each planned slot's draft: (tokens, their distributions or None, decodes)."""
        out: list[tuple[list[int], list[Dist] | None, int]] = [([], None, 0)] * len(plan)
        model_rows: list[int] = []       # indexes into plan drafting with the model
        for i, (g, k, _, _) in enumerate(plan):
            if k <= 0:
                continue
            if g.lookup is not None:
                d = g.lookup.draft(g.tokens, k, g.dcfg, g.rng, g.policy.gate())
                toks = [t for t in d.tokens if t < self.model.n_vocab]
                out[i] = (toks, None, d.steps)
            elif g.kind is DrafterKind.MODEL:
                model_rows.append(i)
        self.last_draft_batch = 0
        if not model_rows:
            return out
        d = self.draft
        d.ctx.sample_on_device(None)
        # the first decode: what each draft sequence lacks of its context (a round's usual 1-2 tokens)
        items = []
        for i in model_rows:
            g = plan[i][0]
            s = g.slot
            ctx_tokens = self._map(g.tokens)
            n = min(common_prefix(d.mirror(s), ctx_tokens), len(ctx_tokens) - 1)
            d.truncate(s, n)
            items.append((s, ctx_tokens[n:], 1))
        self.last_draft_batch = sum(len(t) for _, t, _ in items)
        rows = d.decode(items)
        state = {i: ([], [], plan[i][1], plan[i][0]) for i in model_rows}   # tokens, dists, k, gen
        steps = dict.fromkeys(model_rows, 1)
        current = dict(zip(model_rows, rows))
        while current:
            nxt_items, order = [], []
            for i, x in current.items():
                toks, dists, k, g = state[i]
                picked = pick(penalized_last(LogitRows(x[-1:]), g.tokens, toks, g.dcfg), g.dcfg, g.rng,
                              g.policy.gate(), len(toks) + 1, self._limit)
                if picked is None:
                    continue
                tok, dist, _ = picked
                toks.append(tok)
                dists.append(dist)
                if len(toks) >= k or self._eog_d[tok]:
                    continue
                nxt_items.append((g.slot, [tok], 1))
                order.append(i)
            if not nxt_items:
                break
            self.last_draft_batch = max(self.last_draft_batch, len(nxt_items))
            rows = d.decode(nxt_items)
            current = dict(zip(order, rows))
            for i in order:
                steps[i] += 1
        for i in model_rows:
            toks, dists, _, g = state[i]
            out[i] = (toks, None if g.greedy else dists, steps[i])
        return out

    def _finish(self, g: Generation, error: BaseException | None = None) -> None:
        """Free the slot and put the final event (or keep the error)."""
        if self.slots[g.slot] is g:
            self.slots[g.slot] = None
            self.ended += 1
        if g.finished:
            return
        pol = g.policy
        if g.passed:
            pol.passed(g.passed, g.passed_tokens)
            g.passed = g.passed_tokens = 0
        if not g.shared:
            # A shared round's costs are the batch's (every slot's tokens in one verify): kept,
            # they would seed later generations, lone ones too, with a draft dearer than it is.
            self.engine.remember(g.spec, pol)
        if error is not None:
            g.error = error
            return
        tail = g.text.flush()
        if tail:
            g._put(TextChunk(tail))
        t_end = time.perf_counter()
        g.stats.rollback("kv", "kv" if g.kind is DrafterKind.MODEL else None, {}, 0)
        summary = g.stats.finish(t_end - g.t_gen, g.decode_seconds, g.reason.value, pol)
        g.done = Done(summary, g.text.text, tuple(g.generated), g.reason, g.message, pol.estimates())
        g._put(g.done)

    def cancel_all(self) -> None:
        """Cancel every busy slot (each ends at the next round)."""
        for g in self.slots:
            if g is not None:
                g.cancel.set()

    def run_all(self) -> None:
        """Step until every slot is free."""
        while self.step():
            pass

    def describe(self) -> dict:
        """The slots: which are busy, what each holds, and the guard's state."""
        return {"slots": [{"id": s, "busy": g is not None, "n_cached": len(self.target.mirror(s))}
                          for s, g in enumerate(self.slots)],
                "rounds": self.rounds, "last_batch": self.last_batch, "guard": self.guard.rates(),
                "guard_stops": self.guard.stops}

    def close(self) -> None:
        self.target.close()
        if self.draft is not None:
            self.draft.close()

