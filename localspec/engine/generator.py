"""The speculative loop: draft up to K tokens, verify them in one target decode, keep the
longest agreeing prefix plus one target token.

Invariant between rounds: the target's KV cache holds every token of the sequence except
the last one, which is decoded at the head of the next verify batch together with the
draft. Rejected positions are removed from the target's cache right after verification;
the drafter fixes its own cache at the start of its next draft.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

import numpy as np

from ..errors import BadInput, ContextOverflow
from .backend import Context, Rollback
from .drafters import Draft, Drafter, ModelDrafter, NoDrafter, common_prefix
from .events import Done, Event, Origin, PolicyNote, PromptProcessed, Step, StopReason, TextChunk, Token
from .grammar import Grammar
from .outputs import chain_for, target_dist, token_logprobs
from .penalties import penalized, prepared
from .policy import Policy
from .sampling import Dist, speculative_accept
from .spec import RunSpec
from .stats import StatsRecorder
from .text import TextStream, stop_after


class Generator:
    """Generates from a target context with a drafter and a drafting policy."""

    def __init__(self, target: Context, drafter: Drafter | None = None, *, first_from_prompt: bool = True,
                 read_alongside: bool = False):
        self.target = target
        self.drafter: Drafter = drafter or NoDrafter()
        # True: the drafter reads the prompt (and catches up) on a thread of its own while the
        # target decodes (the Engine allows it when the two models' threads fit on the
        # cores), and the target steps alone until the draft is ready. Which rounds draft
        # then depends on timing: a seeded sampled generation, which must repeat itself,
        # reads in line.
        self.read_alongside = read_alongside
        # True: the first token comes from the prompt's own logits, before the drafter reads
        # the prompt (the first token as soon as the target alone would give it). False:
        # llama.cpp's speculative-simple order, where the first round drafts the first token
        # too (tests/test_mtp_reference.py compares rounds with it that way).
        self.first_from_prompt = first_from_prompt

    def generate(self, prompt: list[int], spec: RunSpec, policy: Policy,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Yield events for one generation; the last one is :class:`Done`. ``spec`` is
        validated by the caller (:meth:`Engine.run`)."""
        try:
            yield from self._generate(prompt, spec, policy, cancel)
        finally:
            # A read alongside still running (a prompt read longer than the answer, a catch-up)
            # is stopped, not waited for: what it decoded stays in the draft's cache.
            self.drafter.settle(wait=False)

    def _generate(self, prompt: list[int], spec: RunSpec, policy: Policy,
                  cancel: threading.Event | None) -> Iterator[Event]:
        max_tokens = spec.max_tokens
        stop = spec.stop
        tgt = self.target
        model = tgt.model
        if not prompt:
            raise BadInput("the prompt is empty")
        sampling = prepared(spec.sampling, model)
        if len(prompt) >= tgt.n_ctx:
            raise ContextOverflow(
                f"the prompt is {len(prompt)} tokens but the context holds {tgt.n_ctx}; "
                "use a shorter prompt or a larger --ctx")
        seed = sampling.seed if sampling.seed is not None else int(np.random.SeedSequence().entropy % (2**31))
        rng = np.random.default_rng(seed)
        dcfg = sampling.for_draft()
        drafter = self.drafter
        stats = StatsRecorder(drafter=drafter.name, policy=policy.describe(), seed=seed)
        # A pause the policy starts in (what the last generation learned) is said before the
        # prompt, not by asking the policy about a first round it need not see.
        note = policy.opening_note()
        if note:
            stats.note(note)
            yield PolicyNote(policy.drafting, policy.k_now, note)

        # -- prompt -------------------------------------------------------------------
        # The whole prompt goes in (its last token at least, for its logits); a recurrent or
        # hybrid target saves its state at the end, so a next prompt that differs only after
        # this one (a re-rendered chat turn) does not decode the conversation again.
        t_start = time.perf_counter()
        # A grammar judges whole rows of logits: the target's rows stay full while one is set.
        grammar = Grammar(model, spec.grammar) if spec.grammar is not None else None
        # a draft model, alone, chained or one of two
        for part in (drafter, getattr(drafter, "model", None), *getattr(drafter, "drafts", {}).values()):
            if isinstance(part, ModelDrafter):
                part.grammar = grammar
        # Log-probabilities too: the target's full rows, never a device sampler's choice alone.
        n_lp = spec.logprobs
        full = grammar is not None or n_lp is not None or sampling.penalized   # (a bias, penalties: per row)
        tgt.sample_on_device(None if full else chain_for(sampling, confidence=False))
        rollback_before = _rollback_snapshot(tgt, drafter)
        alongside = self.read_alongside and (sampling.greedy or sampling.seed is None)
        read_started = alongside and policy.may_draft and policy.drafting and drafter.read_alongside(prompt)
        n_cached = tgt.truncate(min(common_prefix(tgt.tokens, prompt), len(prompt) - 1))
        head = prompt if self.first_from_prompt else prompt[:-1]
        first_rows = tgt.decode_rows(head[n_cached:], 1) if len(head) > n_cached else None
        tgt.mark(pin=True)
        t_gen = time.perf_counter()
        stats.prompt(len(prompt), n_cached, t_gen - t_start)
        yield PromptProcessed(len(prompt), n_cached, t_gen - t_start)
        decode_before = tgt.decode_seconds + _draft_decode_seconds(drafter)
        redecoded = 0
        n_vocab = model.n_vocab
        out = _Output(list(prompt), model, stop, max_tokens, stats, t_start, spec.n_indent, spec.t_max_predict_ms)
        tokens = out.tokens            # the whole sequence; its last token is not in the cache yet
        if max_tokens == 0:            # the prompt only (llama-server's n_predict 0: a cache warm-up)
            out.reason = StopReason.MAX_TOKENS

        # -- first token: from the prompt's logits, before the drafter reads the prompt --
        step_index = 0
        if self.first_from_prompt and out.reason is None:
            t0 = time.perf_counter()
            chosen_from = penalized(first_rows, prompt, [], sampling)
            if grammar is not None:
                first = grammar.verify(chosen_from, [], None, sampling, n_vocab, rng)[1]
            else:
                first = (chosen_from.argmax(0) if sampling.greedy
                         else target_dist(chosen_from, 0, sampling, model).sample(rng))
            t_first = time.perf_counter() - t0
            lps = None if n_lp is None else [token_logprobs(first_rows.x[0], first, n_lp)]
            emitted = yield from out.emit([first], [Origin.TARGET], lps)
            step = Step(0, 0, 0, 0, emitted, 0.0, t_first, policy.drafting, verify_batch=0)
            stats.step(step)
            yield step   # a round of its own, not one the policy chose: it does not observe it
            step_index = 1
        if out.reason is None and policy.may_draft and not read_started:
            drafter.prefill(tokens, now=policy.drafting)

        quiet = policy.quiet_rounds()   # plain rounds to come that the policy need not see
        passed = passed_tokens = 0   # quiet rounds gone by, and their tokens, not yet reported
        # The policy's drafting state, read again only after it observes a round (the one
        # place it changes): a chain's asks both of its policies.
        drafting = policy.drafting
        # A drafter that reads every target decode (an MTP head) stops while drafting pauses.
        track = getattr(drafter, "track_target", None)
        while out.reason is None:
            if cancel is not None and cancel.is_set():
                out.reason = StopReason.CANCELLED
                break
            remaining = max_tokens - len(out.generated)
            room = tgt.n_ctx - len(tokens)
            if room < 0:
                out.reason = StopReason.CONTEXT_FULL
                out.message = (f"context full: the context holds {tgt.n_ctx} tokens; "
                               "raise --ctx for longer answers")
                break
            silent = quiet > 0
            if silent:
                quiet -= 1
                want, probe = 0, False
            else:
                if passed:
                    policy.passed(passed, passed_tokens)
                    passed = passed_tokens = 0
                want = policy.next_k()
                probe = policy.probe
                if want and not drafter.ready:
                    want, probe = 0, False   # the draft still reads alongside: step alone
            k = max(0, min(want, room, remaining - 1))

            # -- draft --------------------------------------------------------------
            if k > 0:
                # Beside the target, a draft far behind catches up on its own thread and
                # leaves this round to the target, instead of making it wait.
                budget = (policy.plain_step_seconds() or math.inf) if alongside else None
                d: Draft = drafter.draft(tokens, k, dcfg, rng, policy.gate(), budget)
                if not d.steps:
                    probe = False    # nothing was tried: a probe still due comes next round
            else:
                d = Draft([], None, 0.0, 0)
            drafts = d.tokens
            if drafts and max(drafts) >= n_vocab:
                # A drafter with a larger vocabulary must not put ids the target lacks into
                # its batch (the model drafter already avoids them; this guards any drafter).
                cut = next(i for i, t in enumerate(drafts) if t >= n_vocab)
                drafts = drafts[:cut]
                if d.dists is not None:
                    d.dists = d.dists[:cut]
            n = len(drafts)

            # -- verify: one target decode of n + 1 positions -----------------------
            # The batch starts with every token the target has not decoded yet: just the last
            # one (more only if a state had to start over).
            t0 = time.perf_counter()
            pending = tokens[tgt.n_past:]
            redecoded += len(pending) - 1
            if n and (tgt.rollback is Rollback.CHECKPOINT or (tgt.rollback is Rollback.RS and n > tgt.rs_depth)):
                tgt.mark()
            rows = tgt.decode_rows(pending + drafts, n + 1)
            judged = penalized(rows, tokens, drafts, sampling)   # (rows itself without a bias or penalty)
            if grammar is not None:
                a, nxt = grammar.verify(judged, drafts, d.dists, sampling, n_vocab, rng)
            elif sampling.greedy:
                a = 0
                nxt = judged.argmax(0)        # each row's argmax once, and only up to the first miss
                while a < n and nxt == drafts[a]:
                    a += 1
                    nxt = judged.argmax(a)
            else:
                cache: dict[int, Dist] = {}

                def p_at(i: int, rows=judged, cache=cache) -> Dist:
                    if i not in cache:
                        cache[i] = target_dist(rows, i, sampling, model)
                    return cache[i]

                q = d.dists if d.dists is not None else [Dist.onehot(t) for t in drafts]
                a, nxt = speculative_accept(drafts, q, p_at, n_vocab, rng)
            new = drafts[:a] + [nxt]
            # (read before a re-decode below overwrites the rows)
            lps = None if n_lp is None else [token_logprobs(rows.x[i], t, n_lp) for i, t in enumerate(new)]
            keep = len(tokens) + a
            kept = tgt.truncate(keep)          # drop the rejected draft positions
            if kept < keep:
                # A recurrent/hybrid state went back to its checkpoint: decode the accepted
                # tokens again so the next round starts (and checkpoints) at the right place.
                base = len(tokens)
                redo = tokens[kept:] + drafts[:a] if kept < base else drafts[kept - base:a]
                tgt.decode(redo, logits="none")
                redecoded += keep - kept
            t_verify = time.perf_counter() - t0

            # -- emit ---------------------------------------------------------------
            origins = [Origin.DRAFT] * a + [Origin.BONUS if (n and a == n) else Origin.TARGET]
            emitted = yield from out.emit(new, origins, lps)

            step = Step(step_index, k, n, a, emitted, d.seconds, t_verify, d.steps > 0 or drafting,
                        draft_steps=d.steps, verify_batch=n + 1, probe=probe, sync_tokens=d.sync_tokens,
                        sync_seconds=d.sync_seconds, confidence=tuple(d.confidence or ()), source=d.source,
                        wait_seconds=d.waited, scored=d.scored, scored_hits=d.scored_hits,
                        score_seconds=d.score_seconds, helper_blocks=d.helper_blocks)
            stats.step(step)
            yield step
            step_index += 1
            if silent:
                passed += 1
                passed_tokens += emitted
                continue
            note = policy.observe(step)
            if track is not None and policy.drafting != drafting:
                track(policy.drafting)
            drafting = policy.drafting
            if note:
                stats.note(note)
                yield PolicyNote(drafting, policy.k_now, note)
            quiet = policy.quiet_rounds()
        if passed:
            policy.passed(passed, passed_tokens)

        reason = out.reason
        text = out.text
        tail = text.flush()
        if tail:
            # Text held back for a stop string that never completed: release it now.
            yield TextChunk(tail)
        drafter.settle(wait=False)   # what a finished read raised belongs to this generation
        t_end = time.perf_counter()
        decode = tgt.decode_seconds + _draft_decode_seconds(drafter) - decode_before
        stats.rollback(tgt.rollback.value, drafter.ctx.rollback.value if drafter.ctx is not None else None,
                       _rollback_delta(rollback_before, _rollback_snapshot(tgt, drafter)), redecoded)
        summary = stats.finish(t_end - t_gen, decode, reason.value, policy)
        yield Done(summary, text.text, tuple(out.generated), reason, out.message, policy.estimates())


class _Output:
    """The emitted side of a generation: the sequence, the answer's tokens and text, and
    why it stopped (None while it goes on)."""

    def __init__(self, tokens: list[int], model, stop, max_tokens: int, stats: StatsRecorder,
                 t_start: float, n_indent: int = 0, t_max_predict_ms: float = 0.0):
        self.tokens = tokens
        self.generated: list[int] = []
        self.text = TextStream(list(stop), n_indent)
        self._t_max = t_max_predict_ms
        self._t_first = 0.0
        self.reason: StopReason | None = None
        self.message = ""
        self._model = model
        self._max = max_tokens
        self._stats = stats
        self._t_start = t_start

    def emit(self, new: list[int], origins: list[Origin], lps: list | None = None) -> Iterator[Event]:
        """Yield a Token for each new token (with its ``lps`` entry, (logprob, top), if given)
        until one stops the generation; return how many were emitted."""
        emitted = 0
        for i, (tok, origin) in enumerate(zip(new, origins)):
            if self._model.is_eog(tok):
                self.reason = StopReason.EOG
                break
            self.tokens.append(tok)
            self.generated.append(tok)
            emitted += 1
            piece = self.text.push(self._model.piece(tok))
            if len(self.generated) == 1:
                self._t_first = time.perf_counter()
                self._stats.first_token(self._t_first - self._t_start)
            yield Token(tok, piece, origin) if lps is None else Token(tok, piece, origin, *lps[i])
            self.reason = stop_after(self.text, piece, len(self.generated), self._max, self._t_first, self._t_max)
            if self.reason is not None:
                break
        return emitted


def _rollback_snapshot(tgt: Context, drafter: Drafter) -> dict:
    out = dict(vars(tgt.stats))
    if drafter.ctx is not None:
        for k, v in vars(drafter.ctx.stats).items():
            out["draft_" + k] = v
    return out


def _rollback_delta(before: dict, after: dict) -> dict:
    return {k: (after[k] - before.get(k, 0)) if k not in ("last_bytes", "draft_last_bytes") else after[k]
            for k in after}


def _draft_decode_seconds(drafter: Drafter) -> float:
    contexts = getattr(drafter, "contexts", (drafter.ctx,))   # two draft models: both
    return sum(c.decode_seconds for c in contexts if c is not None)
