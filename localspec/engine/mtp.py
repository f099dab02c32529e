"""Multi-token-prediction (MTP) drafting: the target drafts with its own nextn head.

Qwen 3.5/3.6 (llama.cpp ``qwen35``) and a few other architectures train an extra decoder
block, the MTP or "nextn" head, that predicts the token after next from the token just
chosen and the target's last hidden state. llama.cpp runs it in a context of type
``LLAMA_CONTEXT_TYPE_MTP`` on the target's own weights (embedded head) or on a separate
``mtp-*.gguf`` that holds only that block, its embeddings and LM head.

This is llama.cpp's ``--spec-type draft-mtp`` (common/speculative.cpp,
``common_speculative_impl_draft_mtp``, the single-head mode qwen35 uses), in the shape of a
:class:`~localspec.engine.drafters.Drafter`:

* the target context runs with unmasked nextn embeddings, so each decode leaves one hidden
  row per token (``h_p``, the normed hidden state the LM head reads); a hook on the target
  :class:`~localspec.engine.backend.Context` copies them by position;
* the MTP context's cache entry at position ``p`` is made from (token ``x_p``, ``h_{p-1}``);
  while the head drafts, every batch the target decodes (prompt, verify) goes into the head
  too, each token with the hidden row before it, in the same batches as llama.cpp's
  ``process()`` (same batches give the same numbers: near-ties in the head's choice then fall
  the same way). Positions the head missed (another drafter ran meanwhile) are made from the
  stored rows before it drafts;
* a draft starts with the last token and the hidden row before it, alone, then each further
  draft token is one decode of (draft token, the head's own output row). Those entries, and
  those of rejected tokens, are dropped before the next draft, as llama.cpp's ``seq_rm`` does.

Drafts are greedy (argmax, as llama.cpp's top-1) when sampling is greedy; otherwise drafted
from the head's own distribution with that distribution as q, which keeps rejection sampling
lossless like any draft model.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import llama_cpp.llama_cpp as ll
import llama_cpp.llama_cpp_ext as lx
import numpy as np

from ..errors import BadInput, LocalspecError
from .backend import Context, Model, NativeHandle, Rollback, RollbackStats, last_log_error
from .drafters import Draft, ReadsInline, common_prefix, pick
from .outputs import LogitRows
from .penalties import penalized_last
from .rpc import WorkerLost
from .sampling import Dist, SamplingConfig

_FLOAT_P = ctypes.POINTER(ctypes.c_float)


class MtpContext(NativeHandle):
    """The MTP head's llama.cpp context: a KV cache for the nextn layer only.

    ``tokens`` lists the positions whose entries were made from the target's own hidden
    states (the only ones worth keeping); the cache may hold more (this round's drafts),
    which :meth:`truncate` drops.
    """

    rollback = Rollback.KV

    def __init__(self, model: Model, *, n_ctx: int, threads: int, n_batch: int = 512,
                 cache_type: int = 1):
        if model.n_layer_nextn <= 0 or not model.mtp_loaded:
            raise BadInput(f"{Path(model.path).name}: no MTP layers loaded")
        self.model = model
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = min(n_batch, n_ctx)
        params.n_ubatch = min(n_batch, n_ctx)
        params.n_seq_max = 1
        params.n_rs_seq = 0
        params.n_threads = threads
        params.n_threads_batch = threads
        params.type_k = cache_type
        params.type_v = cache_type
        params.no_perf = True
        params.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        ptr = model.remote(lambda: ll.llama_init_from_model(model.ptr, params))   # (a worker's, with --rpc)
        if not ptr:
            why = last_log_error() or "out of memory?"
            raise LocalspecError(f"cannot create the MTP context for {Path(model.path).name} ({why})")
        self.ptr = ptr
        # Masked: one nextn row per output, i.e. per drafted token.
        lx.llama_set_embeddings_nextn(ptr, True, True)
        self.n_ctx = int(ll.llama_n_ctx(ptr))
        self.n_batch = int(ll.llama_n_batch(ptr))
        self.n_embd = model.n_embd
        self.mem = ll.llama_get_memory(ptr)
        self.threads = threads
        self._batch = ll.llama_batch_ext_init(ptr)
        self._pos = (ll.llama_pos * 4)()
        self._embd = ll.llama_embd()
        self._embd.n_rows = 1
        self._embd.n_embd = self.n_embd
        self.tokens: list[int] = []
        self.decode_seconds = 0.0
        self.stats = RollbackStats()    # a plain KV cache: nothing to roll back

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def truncate(self, n: int) -> int:
        """Keep the entries of positions < n (drops any draft entries too)."""
        ll.llama_memory_seq_rm(self.mem, 0, n, -1)
        del self.tokens[n:]
        return len(self.tokens)

    def clear(self) -> None:
        self.model.remote(lambda: ll.llama_memory_clear(self.mem, True))
        self.tokens = []

    def decode(self, tokens: list[int], pos0: int, hidden: np.ndarray,
               output: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
        """Decode ``tokens`` at positions pos0.. paired row by row with ``hidden`` (float32,
        C-contiguous, one row per token); return the logits and the nextn row of the last one
        (views valid until the next decode), or None when ``output`` is off."""
        n = len(tokens)
        b, pos, embd = self._batch, self._pos, self._embd
        row_bytes = self.n_embd * 4
        base = hidden.ctypes.data
        start = 0
        while start < n:
            m = min(self.n_batch, n - start)
            ll.llama_batch_ext_clear(b)
            for i in range(start, start + m):
                idx = ll.llama_batch_ext_add_token(b, 0, tokens[i])
                pos[0] = pos0 + i
                ll.llama_batch_ext_set_pos(b, idx, pos)
                embd.data = ctypes.cast(base + i * row_bytes, _FLOAT_P)
                if not ll.llama_batch_ext_set_embd_token(b, idx, embd):  # pragma: no cover - defensive
                    raise LocalspecError("MTP: could not attach a hidden state to the batch")
            if output and start + m == n:
                ll.llama_batch_ext_set_output_logits(b, m - 1, True)
            t0 = time.perf_counter()
            rc = self.model.remote(lambda: ll.llama_process(self.ptr, ll.LLAMA_PROCESS_TYPE_DECODE, b))
            self.decode_seconds += time.perf_counter() - t0
            if rc != 0:
                ll.llama_memory_seq_rm(self.mem, 0, pos0 + start, -1)
                why = last_log_error()
                raise LocalspecError(f"MTP decode failed (code {rc}){': ' + why if why else ''}")
            start += m
        if not output:
            return None
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ptr, -1), shape=(self.model.n_vocab,))
        row = np.ctypeslib.as_array(lx.llama_get_embeddings_nextn_ith(self.ptr, -1), shape=(self.n_embd,))
        return logits, row

    def _free(self) -> None:
        ll.llama_batch_ext_free(self._batch)
        ptr = self.ptr
        try:
            self.model.remote(lambda: ll.llama_free(ptr))
        except WorkerLost:   # its memory on the lost worker stays allocated (freeing would wait for ever)
            pass


class MtpDrafter(ReadsInline):
    """Drafts with the target's MTP head (see the module docstring); it reads what the
    target decodes, so never alongside it."""

    name = "mtp"
    deterministic = False

    def __init__(self, target: Context, head: MtpContext):
        if head.n_embd != target.model.n_embd:
            raise BadInput(f"MTP head {Path(head.model.path).name} has n_embd {head.n_embd}, "
                           f"the target {target.model.n_embd}: not this target's head")
        if head.model.n_vocab != target.model.n_vocab:
            raise BadInput(f"MTP head {Path(head.model.path).name} has a vocabulary of "
                           f"{head.model.n_vocab} tokens, the target {target.model.n_vocab}")
        if head.model.n_layer_nextn != 1:
            raise BadInput(f"{Path(head.model.path).name} has {head.model.n_layer_nextn} MTP layers; "
                           "only single-head MTP (Qwen 3.5/3.6) is supported")
        self.target = target
        self.ctx = head
        e = head.n_embd
        # h[p]: the target's hidden row at position p, and the token it was computed for.
        self._h = np.zeros((target.n_ctx + 1, e), dtype=np.float32)
        self._h_tok = np.full(target.n_ctx + 1, -1, dtype=np.int64)
        self._eog = target.model.eog_mask
        lx.llama_set_embeddings_nextn(target.ptr, True, False)   # a row for every token
        self._active = False
        self._synced = False
        self._following = True   # the head reads each target decode as it happens (not while paused)
        target.on_decode = self._capture

    def attach(self, active: bool) -> None:
        """Whether the head follows the target's decodes as they happen (while it drafts) or
        only keeps their hidden rows (while another drafter runs on the same target)."""
        self._active = active
        self._synced = False

    def _capture(self, base: int, chunk: list[int]) -> None:
        m = len(chunk)
        rows = np.ctypeslib.as_array(lx.llama_get_embeddings_nextn(self.target.ptr), shape=(m, self.ctx.n_embd))
        self._h[base:base + m] = rows
        self._h_tok[base:base + m] = chunk
        if not self._active:
            return
        if not self._following:
            self._synced = False     # the next draft makes the missed entries, in one batch
            return
        # As llama.cpp's draft-mtp process(): the same batch into the head, each token with
        # the hidden row of the position before it (same batches, same numbers).
        head = self.ctx
        if self._synced and head.n_past >= base:
            head.truncate(base)
        else:
            self._catch_up(self.target.tokens[:base], base)
            self._synced = True
        hidden = np.empty((m, head.n_embd), dtype=np.float32)
        hidden[0] = self._h[base - 1] if base > 0 else 0.0
        hidden[1:] = rows[:m - 1]
        head.decode(chunk, base, hidden, output=False)
        head.tokens.extend(chunk)

    def _catch_up(self, tokens: list[int], upto: int) -> int:
        """Make the head's entries for positions < ``upto`` (of ``tokens``) from the target's
        stored hidden rows; return how many it decoded."""
        head = self.ctx
        n = head.truncate(min(common_prefix(head.tokens, tokens), upto))
        if n >= upto:
            return 0
        if not np.array_equal(self._h_tok[max(n - 1, 0):upto - 1], tokens[max(n - 1, 0):upto - 1]):
            raise LocalspecError("MTP: the target has not decoded the context the head is asked to follow")
        hidden = np.empty((upto - n, head.n_embd), dtype=np.float32)
        if n == 0:
            hidden[0] = 0.0                      # nothing before the first token
            hidden[1:] = self._h[:upto - 1]
        else:
            hidden[:] = self._h[n - 1:upto - 1]
        head.decode(tokens[n:upto], n, hidden, output=False)
        head.tokens = list(tokens[:upto])
        return upto - n

    def _sync(self, context: list[int]) -> tuple[np.ndarray, np.ndarray, int]:
        """Entries for every position before the last token of ``context`` (normally made
        already, as the target decoded them), then that token with the hidden row before
        it, alone, as llama.cpp drafts; return its output and how many entries it took."""
        head = self.ctx
        last = len(context) - 1
        caught = self._catch_up(context, last)
        head.truncate(last)
        hidden = np.empty((1, head.n_embd), dtype=np.float32)
        hidden[0] = self._h[last - 1] if last > 0 else 0.0
        if last > 0 and self._h_tok[last - 1] != context[last - 1]:  # pragma: no cover - defensive
            raise LocalspecError("MTP: the target has not decoded the context the head is asked to follow")
        logits, row = head.decode(context[last:], last, hidden)
        head.tokens.append(context[last])
        return logits, row, caught + 1

    def prefill(self, tokens: list[int], *, now: bool = True) -> None:
        """A new prompt (the target has decoded all but its last token): make sure the head
        has its entries (normally made as the target decoded them); ``now=False`` (drafting
        starts paused): at the first draft."""
        self.track_target(now)
        if now and len(tokens) > 1:
            self._catch_up(tokens, len(tokens) - 1)

    def track_target(self, on: bool) -> None:
        """Whether the head reads each target decode as it happens (while the policy drafts)
        or leaves them to the next draft, which makes them in one batch. Paused, following
        cost a head decode a token: on an H200, 0.83x the target alone."""
        self._following = on

    def draft(self, context: list[int], k: int, cfg: SamplingConfig, rng, gate=None, budget=None) -> Draft:
        t0 = time.perf_counter()
        k = min(k, self.ctx.n_ctx - len(context))
        if k <= 0:
            return Draft([], [], 0.0, 0)
        logits, row, synced = self._sync(context)
        t_sync = time.perf_counter() - t0
        pos = len(context)               # where the next draft entry goes
        steps = 1
        tokens: list[int] = []
        dists: list[Dist | None] = []
        confidence: list[float] = []
        hidden = np.empty((1, self.ctx.n_embd), dtype=np.float32)
        for i in range(k):
            picked = pick(penalized_last(LogitRows(logits), context, tokens, cfg), cfg, rng, gate, i + 1)
            if picked is None:
                break
            tok, dist, top = picked
            tokens.append(tok)
            dists.append(dist)
            confidence.append(top)
            if i == k - 1 or self._eog[tok]:
                break
            hidden[0] = row
            logits, row = self.ctx.decode([tok], pos, hidden)
            pos += 1
            steps += 1
        return Draft(tokens, None if cfg.greedy else dists, time.perf_counter() - t0, steps, synced, t_sync, confidence)

    def close(self) -> None:
        if self.target.on_decode == self._capture:
            self.target.on_decode = None
        self.ctx.close()


def open_mtp_head(target: Model, mtp_file: str | None, *, n_ctx: int, threads: int, n_batch: int,
                  cache_type: int, gpu_layers: int | None,
                  rpc: tuple[str, ...] = ()) -> tuple[Model | None, MtpContext]:
    """The MTP context for ``target``: on its own weights (loaded with ``load_mtp``) or on a
    separate MTP GGUF, which is loaded here (on the workers ``rpc``, if any) and returned
    with it."""
    if mtp_file:
        model = Model(mtp_file, gpu_layers=gpu_layers, load_mtp=True, rpc=rpc)
        if model.n_layer_nextn <= 0:
            model.close()
            raise BadInput(f"{mtp_file}: carries no MTP (nextn) layers")
    else:
        model = None
        if target.n_layer_nextn <= 0:
            raise BadInput(f"{Path(target.path).name} carries no MTP (nextn) layers: give its "
                           "mtp-*.gguf with --draft mtp:FILE, or another drafter")
        if not target.mtp_loaded:
            raise BadInput(f"{Path(target.path).name} was loaded without its MTP layers")
    try:
        head = MtpContext(model or target, n_ctx=n_ctx, threads=threads, n_batch=n_batch, cache_type=cache_type)
    except Exception:
        if model is not None:
            model.close()
        raise
    return model, head
