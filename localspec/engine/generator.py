"""The speculative loop: draft up to K tokens, verify them in one target decode, keep the
longest agreeing prefix plus one target token.

Invariant between rounds: the target's KV cache holds every token of the sequence except
the last one, which is decoded at the head of the next verify batch together with the
draft. Rejected positions are removed from the target's cache right after verification;
the drafter fixes its own cache at the start of its next draft.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np

from ..errors import BadInput, ContextOverflow
from .backend import Context, Rollback
from .drafters import Draft, Drafter, NoDrafter, _common_prefix
from .events import Done, Event, Origin, PolicyNote, PromptProcessed, Step, StopReason, TextChunk, Token
from .policy import Policy
from .sampling import Dist, distribution, speculative_accept
from .spec import RunSpec
from .stats import StatsRecorder
from .text import TextStream


class Generator:
    """Generates from a target context with a drafter and a drafting policy."""

    def __init__(self, target: Context, drafter: Drafter | None = None):
        self.target = target
        self.drafter: Drafter = drafter or NoDrafter()

    def generate(self, prompt: list[int], spec: RunSpec, policy: Policy,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Yield events for one generation; the last one is :class:`Done`. ``spec`` is
        validated by the caller (:meth:`Engine.run`)."""
        sampling = spec.sampling
        max_tokens = spec.max_tokens
        stop = spec.stop
        tgt = self.target
        model = tgt.model
        if not prompt:
            raise BadInput("the prompt is empty")
        if len(prompt) >= tgt.n_ctx:
            raise ContextOverflow(
                f"the prompt is {len(prompt)} tokens but the context holds {tgt.n_ctx}; "
                "use a shorter prompt or a larger --ctx")
        seed = sampling.seed if sampling.seed is not None else int(np.random.SeedSequence().entropy % (2**31))
        rng = np.random.default_rng(seed)
        dcfg = sampling.for_draft()
        drafter = self.drafter
        stats = StatsRecorder(drafter=drafter.name, policy=policy.describe(), seed=seed)

        # -- prompt -------------------------------------------------------------------
        t_start = time.perf_counter()
        n_cached = tgt.truncate(_common_prefix(tgt.tokens, prompt[:-1]))
        if len(prompt) - 1 > n_cached:
            tgt.decode(prompt[n_cached:-1], logits="none")
        if policy.may_draft:
            drafter.prefill(prompt)
        t_gen = time.perf_counter()
        stats.prompt(len(prompt), n_cached, t_gen - t_start)
        yield PromptProcessed(len(prompt), n_cached, t_gen - t_start)
        decode_before = tgt.decode_seconds + _draft_decode_seconds(drafter)
        rollback_before = _rollback_snapshot(tgt, drafter)
        redecoded = 0

        tokens = list(prompt)          # the whole sequence; its last token is not in the cache yet
        generated: list[int] = []
        text = TextStream(list(stop))
        reason: StopReason | None = None
        message = ""
        step_index = 0
        n_vocab = model.n_vocab

        while reason is None:
            if cancel is not None and cancel.is_set():
                reason = StopReason.CANCELLED
                break
            remaining = max_tokens - len(generated)
            room = tgt.n_ctx - len(tokens)
            if room < 0:
                reason = StopReason.CONTEXT_FULL
                message = (f"context full: the context holds {tgt.n_ctx} tokens; "
                           "raise --ctx for longer answers")
                break
            want = policy.next_k()
            probe = policy.probe
            k = max(0, min(want, room, remaining - 1))

            # -- draft --------------------------------------------------------------
            if k > 0:
                d: Draft = drafter.draft(tokens, k, dcfg, rng, policy.gate())
            else:
                d = Draft([], None, 0.0, 0)
            drafts = d.tokens
            n = len(drafts)

            # -- verify: one target decode of n + 1 positions -----------------------
            # The batch starts with every token the target has not decoded yet: just the last
            # one (more only if a state had to start over).
            t0 = time.perf_counter()
            pending = tokens[tgt.n_past:]
            redecoded += len(pending) - 1
            if n and (tgt.rollback is Rollback.CHECKPOINT or (tgt.rollback is Rollback.RS and n > tgt.rs_depth)):
                tgt.mark()
            logits = tgt.decode(pending + drafts, logits=n + 1)
            if sampling.greedy:
                preds = np.argmax(logits, axis=1)
                a = 0
                while a < n and preds[a] == drafts[a]:
                    a += 1
                nxt = int(preds[a])
            else:
                cache: dict[int, Dist] = {}

                def p_at(i: int, logits=logits, cache=cache) -> Dist:
                    if i not in cache:
                        cache[i] = distribution(logits[i], sampling)
                    return cache[i]

                q = d.dists if d.dists is not None else [Dist.onehot(t) for t in drafts]
                a, nxt = speculative_accept(drafts, q, p_at, n_vocab, rng)
            keep = len(tokens) + a
            kept = tgt.truncate(keep)          # drop the rejected draft positions
            if kept < keep:
                # A recurrent/hybrid state went back to its checkpoint: decode the accepted
                # tokens again so the next round starts (and checkpoints) at the right place.
                tgt.decode((tokens + drafts[:a])[kept:keep], logits="none")
                redecoded += keep - kept
            t_verify = time.perf_counter() - t0

            # -- emit ---------------------------------------------------------------
            new = drafts[:a] + [nxt]
            origins = [Origin.DRAFT] * a + [Origin.BONUS if (n and a == n) else Origin.TARGET]
            emitted = 0
            for tok, origin in zip(new, origins):
                if model.is_eog(tok):
                    reason = StopReason.EOG
                    break
                tokens.append(tok)
                generated.append(tok)
                emitted += 1
                piece = text.push(model.piece(tok))
                if len(generated) == 1:
                    stats.first_token(time.perf_counter() - t_start)
                yield Token(tok, piece, origin)
                if text.stopped:
                    reason = StopReason.STOP_STRING
                    break
                if len(generated) >= max_tokens:
                    reason = StopReason.MAX_TOKENS
                    break

            step = Step(step_index, k, n, a, emitted, d.seconds, t_verify, k > 0 or policy.drafting,
                        draft_steps=d.steps, verify_batch=n + 1, probe=probe, sync_tokens=d.sync_tokens,
                        sync_seconds=d.sync_seconds, confidence=tuple(d.confidence or ()))
            stats.step(step)
            yield step
            step_index += 1
            note = policy.observe(step)
            if note:
                stats.note(note)
                yield PolicyNote(policy.drafting, policy.k_now, note)

        tail = text.flush()
        if tail:
            # Text held back for a stop string that never completed: release it now.
            yield TextChunk(tail)
        t_end = time.perf_counter()
        decode = tgt.decode_seconds + _draft_decode_seconds(drafter) - decode_before
        stats.rollback(tgt.rollback.value, drafter.ctx.rollback.value if drafter.ctx is not None else None,
                       _rollback_delta(rollback_before, _rollback_snapshot(tgt, drafter)), redecoded)
        summary = stats.finish(t_end - t_gen, decode, reason.value, policy)
        yield Done(summary, text.text, tuple(generated), reason, message, policy.estimates())


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
    return drafter.ctx.decode_seconds if drafter.ctx is not None else 0.0
