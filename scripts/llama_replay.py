"""Record what llama.cpp hands back for each decode, then play a generation back without it.

Python's share of a generation on a GPU is what the loop costs when llama.cpp does not
compute on the same core (where it evicts the interpreter's working set and the logits
from the CPU caches). On a CPU-only machine that is measured by recording one real run
(every decode's batch, its output rows, the backend sampler's results) and running the
same generation again with ``llama_decode`` reduced to copying the recorded rows into a
fixed output buffer, as an asynchronous backend's device-to-host copy would. The engine,
the drafter and the loop run unchanged; only the llama.cpp calls below are replaced, and a
replayed batch that differs from the recorded one stops the replay (so a replay is the
recorded generation, token for token, or an error).

Single-process tool for scripts/bench_overhead.py; the engine never imports it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

import llama_cpp.llama_cpp as ll
import numpy as np

_PATCHED = ("llama_decode", "llama_get_logits", "llama_get_logits_ith", "llama_memory_seq_rm",
            "llama_get_sampled_token_ith", "llama_get_sampled_candidates_count_ith",
            "llama_get_sampled_logits_count_ith", "llama_get_sampled_candidates_ith",
            "llama_get_sampled_logits_ith")


class ReplayDiverged(RuntimeError):
    """The replayed generation asked llama.cpp for something the recorded one did not."""


@dataclass
class _Entry:
    """One recorded decode: its batch, return code, and what was read from it afterwards."""

    tokens: tuple[int, ...]
    rc: int
    n_out: int
    logits: np.ndarray | None = None                       # (n_out, n_vocab), when rows were read
    sampled: dict[tuple[str, int], object] = field(default_factory=dict)


def _key(ctx) -> int:
    return ctx if isinstance(ctx, int) else ctypes.cast(ctx, ctypes.c_void_p).value


class Replay:
    """Installs itself over ``llama_cpp.llama_cpp``'s functions; ``mode`` says what they do:
    "off" (llama.cpp's own), "record" or "replay"."""

    def __init__(self):
        self.real = {name: getattr(ll, name) for name in _PATCHED}
        self.mode = "off"
        self.tapes: dict[int, list[_Entry]] = {}
        self.pos: dict[int, int] = {}
        self._out: dict[int, np.ndarray] = {}          # per context: the fixed output buffer
        self._vocab: dict[int, int] = {}
        self._old: list[np.ndarray] = []                # outgrown buffers (views may point there)
        self.real_decodes = 0                           # decodes that reached llama.cpp

    # -- control --------------------------------------------------------------------------
    def install(self, wrap=None) -> Replay:
        """Replace llama.cpp's functions; ``wrap(decode)``, if given, is what callers get as
        ``llama_decode`` (a timing wrapper: a replayed decode's copy then counts as decode)."""
        ll.llama_decode = wrap(self.decode) if wrap else self.decode
        ll.llama_get_logits = self.get_logits
        ll.llama_get_logits_ith = self.get_logits_ith
        ll.llama_memory_seq_rm = self.memory_seq_rm
        for name in _PATCHED[4:]:
            setattr(ll, name, self._sampled_getter(name))
        return self

    def uninstall(self) -> None:
        for name, fn in self.real.items():
            setattr(ll, name, fn)

    def record(self) -> None:
        """Record from now on (what an earlier recording held is dropped)."""
        self.tapes.clear()
        self.pos.clear()
        self.mode = "record"

    def replay(self) -> None:
        """Play the recording back from its start."""
        self.pos = {k: 0 for k in self.tapes}
        self.mode = "replay"

    def off(self) -> None:
        self.mode = "off"
        self.tapes.clear()
        self.pos.clear()

    def recorded_decodes(self) -> int:
        return sum(len(t) for t in self.tapes.values())

    # -- the replaced functions -----------------------------------------------------------
    def _current(self, ctx) -> _Entry:
        k = _key(ctx)
        tape = self.tapes.get(k)
        i = self.pos.get(k, 0) - 1
        if tape is None or not 0 <= i < len(tape):
            raise ReplayDiverged("a read from a context with no decode recorded")
        return tape[i]

    def decode(self, ctx, batch):
        if self.mode == "off":
            self.real_decodes += 1
            return self.real["llama_decode"](ctx, batch)
        n = int(batch.n_tokens)
        tokens = tuple(batch.token[i] for i in range(n))
        n_out = sum(1 for i in range(n) if batch.logits[i])
        k = _key(ctx)
        if self.mode == "record":
            self.real_decodes += 1
            rc = self.real["llama_decode"](ctx, batch)
            self.tapes.setdefault(k, []).append(_Entry(tokens, int(rc), n_out))
            self.pos[k] = len(self.tapes[k])
            return rc
        tape = self.tapes.get(k, [])
        i = self.pos.get(k, 0)
        if i >= len(tape) or tape[i].tokens != tokens:
            got = tape[i].tokens if i < len(tape) else "nothing"
            raise ReplayDiverged(f"decode {i} of a context: batch {list(tokens)[:8]} where the recording "
                                 f"has {list(got)[:8] if i < len(tape) else got}")
        self.pos[k] = i + 1
        entry = tape[i]
        if entry.logits is not None:
            # The rows arrive in llama.cpp's output buffer, as a device-to-host copy leaves them.
            out = self._out.get(k)
            if out is None or out.shape[0] < entry.logits.shape[0] or out.shape[1] != entry.logits.shape[1]:
                if out is not None:
                    self._old.append(out)
                out = self._out[k] = np.empty((max(entry.logits.shape[0], 16), entry.logits.shape[1]),
                                              dtype=np.float32)
            np.copyto(out[:entry.logits.shape[0]], entry.logits)
        return entry.rc

    def _n_vocab(self, ctx) -> int:
        k = _key(ctx)
        if k not in self._vocab:
            self._vocab[k] = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(ll.llama_get_model(ctx))))
        return self._vocab[k]

    def get_logits(self, ctx):
        if self.mode == "off":
            return self.real["llama_get_logits"](ctx)
        entry = self._current(ctx)
        if self.mode == "record":
            ptr = self.real["llama_get_logits"](ctx)
            entry.logits = np.ctypeslib.as_array(ptr, shape=(entry.n_out, self._n_vocab(ctx))).copy()
            return ptr
        if entry.logits is None:
            raise ReplayDiverged("rows read that the recording did not read")
        return self._out[_key(ctx)].ctypes.data_as(ctypes.POINTER(ctypes.c_float))

    def get_logits_ith(self, ctx, i: int):
        if self.mode == "off":
            return self.real["llama_get_logits_ith"](ctx, i)
        entry = self._current(ctx)
        if i < 0:
            i += entry.n_out
        if self.mode == "record":
            if entry.logits is None:
                ptr = self.real["llama_get_logits"](ctx)
                entry.logits = np.ctypeslib.as_array(ptr, shape=(entry.n_out, self._n_vocab(ctx))).copy()
            return self.real["llama_get_logits_ith"](ctx, i - entry.n_out)
        if entry.logits is None:
            raise ReplayDiverged("a row read that the recording did not read")
        out = self._out[_key(ctx)]
        return ctypes.cast(out.ctypes.data + i * out.strides[0], ctypes.POINTER(ctypes.c_float))

    def memory_seq_rm(self, mem, seq, p0, p1):
        if self.mode == "replay":
            return True      # nothing was decoded into the cache; the engine's mirror moves on its own
        return self.real["llama_memory_seq_rm"](mem, seq, p0, p1)

    def _sampled_getter(self, name: str):
        real = self.real[name]
        count_of = {"llama_get_sampled_candidates_ith": "llama_get_sampled_candidates_count_ith",
                    "llama_get_sampled_logits_ith": "llama_get_sampled_logits_count_ith"}.get(name)
        dtype = np.int32 if name == "llama_get_sampled_candidates_ith" else np.float32

        def getter(ctx, i: int):
            if self.mode == "off":
                return real(ctx, i)
            entry = self._current(ctx)
            if self.mode == "record":
                got = real(ctx, i)
                if count_of is None:
                    entry.sampled[(name, i)] = int(got)
                else:
                    n = entry.sampled.get((count_of, i))
                    if n is None:
                        n = entry.sampled[(count_of, i)] = int(self.real[count_of](ctx, i))
                    entry.sampled[(name, i)] = np.frombuffer(ctypes.string_at(got, 4 * n), dtype=dtype).copy()
                return got
            if (name, i) not in entry.sampled:
                raise ReplayDiverged(f"{name}({i}) was not read in the recording")
            got = entry.sampled[(name, i)]
            if count_of is None:
                return got
            return got.ctypes.data_as(ctypes.POINTER(ctypes.c_int32 if dtype is np.int32 else ctypes.c_float))

        return getter
