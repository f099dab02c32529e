"""Thin wrappers over llama.cpp's C API (through ``llama_cpp.llama_cpp``).

Three small classes: :class:`Model` (weights and vocabulary), :class:`Context` (a KV cache
and one sequence, decoded in batches) and the process-wide backend set-up with a log sink
that keeps llama.cpp quiet and remembers its last lines for error messages.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TypeVar

import llama_cpp.llama_cpp as ll
import numpy as np

from ..errors import BadInput, LocalspecError
from .kv_cache import CACHE_TYPES
from .outputs import DeviceChain, LogitRows, Rows, SampledRows
from .sampling import Dist, infill

T = TypeVar("T")
DEVICE_ROWS_MAX = 64   # output rows a backend sampler covers in one decode (a verify batch)

# ---------------------------------------------------------------------------------------
# Process-wide set-up and logging

_init_lock = threading.Lock()
_initialised = False
_log_tail: collections.deque[str] = collections.deque(maxlen=40)
_verbose = bool(os.environ.get("LOCALSPEC_LLAMA_LOG"))
_capture: list[str] | None = None   # while a model loads: llama.cpp's lines placing its layers


@ll.llama_log_callback
def _log_sink(level: int, text: bytes, user_data) -> None:  # pragma: no cover - C callback
    try:
        line = text.decode("utf-8", errors="replace")
    except Exception:
        return
    if line.strip():
        _log_tail.append(line.rstrip())
        if _capture is not None and "assigned to device" in line:
            _capture.append(line)
    if _verbose:
        os.write(2, text)


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its log into a ring buffer."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        ll.llama_log_set(_log_sink, ctypes.c_void_p(0))
        ll.llama_backend_init()
        _initialised = True


def clear_log() -> None:
    """Forget llama.cpp's recent log lines, so that :func:`last_log_error` explains only
    what comes next."""
    _log_tail.clear()


def last_log_error() -> str:
    """The most telling recent llama.cpp log line (used to explain a failed load)."""
    for line in reversed(_log_tail):
        low = line.lower()
        if "error" in low or "failed" in low or "invalid" in low:
            return line.split(":", 1)[-1].strip() if ":" in line else line.strip()
    return ""


def _runs_on_backend(chain) -> bool:
    """Whether llama.cpp put every sampler of the chain into the graph: once set, a sampler's
    name reads "+name" when the device runs it and "-name" when it cannot (a chain only partly
    on the device would hand back rows that some of its samplers never touched)."""
    return all((ll.llama_sampler_name(ll.llama_sampler_chain_get(chain, i)) or b"").startswith(b"+")
               for i in range(ll.llama_sampler_chain_n(chain)))


def system_info() -> str:
    init_backend()
    return ll.llama_print_system_info().decode("utf-8", errors="replace")


_offload: bool | None = None


def gpu_offload_supported() -> bool:
    """Whether this machine has a GPU llama.cpp can offload to (an RPC build says yes to
    llama.cpp's own question even without one: workers are asked for with ``rpc``)."""
    global _offload
    if _offload is None:
        init_backend()
        _offload = bool(ll.llama_supports_gpu_offload())
        if _offload and ll.llama_supports_rpc():
            from . import rpc

            _offload = any(d.kind in ("GPU", "iGPU") for d in rpc.local_devices())
    return _offload


def backend_name(gpu_layers: int, rpc: bool = False) -> str:
    """Which backend runs a model loaded with ``gpu_layers`` (CUDA, Metal, Vulkan... or CPU;
    "RPC+..." with ``rpc``, layers on workers)."""
    if rpc and gpu_layers != 0:
        return "RPC+" + backend_name(gpu_layers)
    if gpu_layers == 0 or not gpu_offload_supported():
        return "CPU"
    info = system_info()
    for name in ("CUDA", "ROCm", "HIP", "Metal", "Vulkan", "SYCL", "OpenCL", "MUSA", "CANN"):
        if name.upper() in info.upper():
            return name
    return "GPU"


def extra_buffers_default() -> bool:
    """Whether to let llama.cpp repack weights into CPU extra buffers (AMX, REPACK).

    llama.cpp's AMX buffer crashes in ``ggml_backend_amx_mul_mat`` on some Sapphire Rapids
    machines (ggml-org/llama.cpp#20824, unfixed), so on CPUs with AMX it stays off unless
    LOCALSPEC_CPU_EXTRA_BUFFERS=1 asks for it.
    """
    env = os.environ.get("LOCALSPEC_CPU_EXTRA_BUFFERS")
    if env is not None:
        return env.strip().lower() in ("1", "true", "yes", "on")
    return "AMX_INT8 = 1" not in system_info()


def default_threads() -> int:
    """llama.cpp's own choice: the physical cores (at least one)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # pragma: no cover
        n = None
    return max(1, n or os.cpu_count() or 1)


STATE_PARTIAL = getattr(ll, "LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY", 1)  # only the recurrent part


@dataclass
class RollbackStats:
    """What rolling back a recurrent/hybrid state cost."""

    checkpoints: int = 0       # sequence states saved
    bytes: int = 0             # bytes copied by those saves
    last_bytes: int = 0        # size of one checkpoint
    rollbacks: int = 0         # tails removed by a snapshot or a restored checkpoint
    restarts: int = 0          # times the whole sequence had to be decoded again
    seconds: float = 0.0       # time spent saving and restoring


# ggml tensor types that make sense for the KV cache.
# ---------------------------------------------------------------------------------------
# Model


@dataclass(frozen=True)
class ModelInfo:
    path: str
    description: str
    n_params: int
    size_bytes: int
    n_layer: int
    n_ctx_train: int
    n_vocab: int
    gpu_layers: int
    backend: str
    recurrent: bool
    hybrid: bool
    # Which device holds which layers ({"RPC0": "0-11", "CPU": "12-23,output"}); the
    # devices' names with a worker's address ({"RPC0": "127.0.0.1:50052"}).
    layers: dict[str, str] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)

    @property
    def layout(self) -> str:
        """The device layout as a key: a target step on another layout is another cost."""
        if not self.endpoints:
            return self.backend
        return self.backend + "|" + ";".join(f"{self.endpoints.get(d, d)}={r}" for d, r in sorted(self.layers.items()))


def _ranges(layers: list[int], n_layer: int) -> str:
    """Layer indices as "0-11,output" (llama.cpp counts the output layer as layer n_layer)."""
    out, start, prev = [], None, None
    for i in sorted(x for x in layers if x < n_layer):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    if n_layer in layers:
        out.append("output")
    return ",".join(out)


def _placement(lines: list[str], n_layer: int) -> dict[str, str]:
    by_dev: dict[str, list[int]] = {}
    for line in lines:
        m = re.search(r"layer\s+(\d+) assigned to device (\S+?),", line)
        if m:
            by_dev.setdefault(m.group(2), []).append(int(m.group(1)))
    return {d: _ranges(v, n_layer) for d, v in by_dev.items()}


class NativeHandle:
    """A llama.cpp object that is freed exactly once: by :meth:`close`, or when collected
    if nobody closed it. Subclasses free what they hold in :meth:`_free`."""

    ptr = None

    def _free(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.ptr:
            self._free()
            self.ptr = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


class Model(NativeHandle):
    """A loaded GGUF model: weights, vocabulary and token helpers.

    ``rpc``: workers (HOST:PORT) whose devices take the layers with this machine's GPUs,
    split by free memory or by ``tensor_split`` (one share per device, the workers' first).
    """

    def __init__(self, path: str | os.PathLike, *, gpu_layers: int | None = None, load_mtp: bool = False,
                 rpc: tuple[str, ...] = (), tensor_split: tuple[float, ...] | None = None):
        global _capture
        init_backend()
        p = Path(path)
        if not p.is_file():
            raise BadInput(f"{p}: no such model file")
        self.rpc = tuple(rpc)
        self.guard = None
        offload = gpu_offload_supported() or bool(self.rpc)
        if gpu_layers is None:
            gpu_layers = -1 if offload else 0
        params = ll.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        params.use_extra_bufts = extra_buffers_default()
        params.load_mtp = load_mtp   # the MTP (nextn) layers: only an MTP drafter runs them
        endpoints: dict[str, str] = {}
        keep = []
        if self.rpc:
            from . import rpc as rpc_mod

            devices = [d for e in self.rpc for d in rpc_mod.worker_devices(e)]
            devices += [d for d in rpc_mod.local_devices() if d.kind in ("GPU", "iGPU")]
            endpoints = {d.name: d.endpoint for d in devices if d.endpoint}
            arr = (ctypes.c_void_p * (len(devices) + 1))(*[d.handle for d in devices], None)
            params.devices = ctypes.cast(arr, ctypes.c_void_p).value
            keep.append(arr)
            if tensor_split:
                if len(tensor_split) > len(devices):
                    raise BadInput(f"--tensor-split has {len(tensor_split)} shares for {len(devices)} devices "
                                   f"({', '.join(d.name for d in devices)})")
                shares = (ctypes.c_float * max(ll.llama_max_devices(), len(devices)))(*tensor_split)
                params.tensor_split = shares
                keep.append(shares)
            self.guard = rpc_mod.Guard(self.rpc, name="localspec-rpc-model")
        _log_tail.clear()
        _capture = []
        try:
            if self.guard is not None:
                ptr = self.guard.call(lambda: ll.llama_model_load_from_file(str(p).encode(), params))
            else:
                ptr = ll.llama_model_load_from_file(str(p).encode(), params)
        finally:
            placed, _capture = _capture, None
        if not ptr:
            why = last_log_error() or "llama.cpp could not load it"
            raise BadInput(f"{p}: cannot load model ({why})")
        self.path = str(p)
        self.ptr = ptr
        self.vocab = ll.llama_model_get_vocab(ptr)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        self.bos = int(ll.llama_vocab_bos(self.vocab))
        self.eos = int(ll.llama_vocab_eos(self.vocab))
        self.eot = int(ll.llama_vocab_eot(self.vocab))
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self.vocab))
        # Fill-in-the-middle tokens (prefix, suffix, middle; repository and file separators),
        # None where the vocabulary has none.
        self.fim = {name: (t if (t := int(getattr(ll, f"llama_vocab_fim_{name}")(self.vocab))) >= 0 else None)
                    for name in ("pre", "suf", "mid", "rep", "sep")}
        self.n_embd = int(ll.llama_model_n_embd(ptr))
        self.n_layer_nextn = int(ll.llama_model_n_layer_nextn(ptr))  # MTP layers in the file
        self.mtp_loaded = load_mtp and self.n_layer_nextn > 0
        n_layer = int(ll.llama_model_n_layer(ptr))
        self.gpu_layers = n_layer if gpu_layers < 0 else min(gpu_layers, n_layer)
        if not offload:
            self.gpu_layers = 0
        # llama.cpp offloads the output layer with the last of n_layer + 1 "layers", to the
        # last device: a local GPU when there is one, else a worker. On a worker, choosing
        # tokens in the graph costs round trips whenever the sampler changes (measured: a
        # verify ~5x dearer at 2 ms each way), more than sending the rows saves.
        on_device = gpu_offload_supported() if self.rpc else offload
        self.output_on_device = on_device and (gpu_layers < 0 or gpu_layers > n_layer)
        self._pieces: dict[int, bytes] = {}
        self._texts: list[bytes] | None = None
        self._template: list[str | None] = []     # the chat template, once read
        self._eog = np.zeros(self.n_vocab, dtype=bool)
        for t in range(self.n_vocab):
            if ll.llama_vocab_is_eog(self.vocab, t):
                self._eog[t] = True
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_model_desc(ptr, buf, 256)
        self.info = ModelInfo(
            path=self.path,
            description=buf.value.decode("utf-8", errors="replace") if n > 0 else p.name,
            n_params=int(ll.llama_model_n_params(ptr)),
            size_bytes=int(ll.llama_model_size(ptr)),
            n_layer=n_layer,
            n_ctx_train=int(ll.llama_model_n_ctx_train(ptr)),
            n_vocab=self.n_vocab,
            gpu_layers=self.gpu_layers,
            backend=backend_name(self.gpu_layers, bool(self.rpc)),
            recurrent=bool(ll.llama_model_is_recurrent(ptr)),
            hybrid=bool(ll.llama_model_is_hybrid(ptr)),
            layers=_placement(placed, n_layer) if self.rpc else {},
            endpoints=endpoints,
        )

    def remote(self, fn: Callable[[], T]) -> T:
        """``fn()`` (a llama.cpp call that may reach a worker) through this model's guard
        when it has layers on workers.

        Raises:
            WorkerLost: a worker stopped answering.
        """
        return fn() if self.guard is None else self.guard.call(fn)

    # -- tokens -----------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        arr = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            raise LocalspecError("tokenization failed")
        return list(arr[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token renders to (control tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is None:
            cached = self._pieces[token] = self._rendered(token, special=False)
        return cached

    def _rendered(self, token: int, special: bool) -> bytes:
        """llama.cpp's bytes for a token (``special``: control tokens shown as their text)."""
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        return buf.raw[:max(n, 0)]

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def texts(self) -> list[bytes]:
        """Every token's bytes as llama.cpp detokenizes it with special tokens shown (what its
        DRY sampler matches sequence breakers against); read once (the whole vocabulary)."""
        if self._texts is None:
            self._texts = [self._rendered(token, special=True) for token in range(self.n_vocab)]
        return self._texts

    def token_text(self, token: int) -> str:
        """The vocabulary's own text for a token (special tokens included)."""
        raw = ll.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token])

    def infilled(self, p: Dist) -> Dist:
        """``p`` through llama.cpp's infill sampler with this vocabulary (:func:`.sampling.infill`)."""
        return infill(p, self.is_eog, self.piece, self.eot if self.eot >= 0 else self.eos)

    @property
    def eog_mask(self) -> np.ndarray:
        return self._eog

    def chat_template(self) -> str | None:
        """The model's own chat template (read once: a server asks for it with every request)."""
        if not self._template:
            raw = ll.llama_model_chat_template(self.ptr, None)
            self._template.append(raw.decode("utf-8", errors="replace") if raw else None)
        return self._template[0]

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1024)
        n = ll.llama_model_meta_val_str(self.ptr, key.encode(), buf, 1024)
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    def _free(self) -> None:
        ptr = self.ptr
        _free_remote(self.guard, lambda: ll.llama_model_free(ptr))
        if self.guard is not None:
            self.guard.close()


def _free_remote(guard, fn: Callable[[], None]) -> None:
    """Free llama.cpp memory; on a lost worker it stays allocated (freeing would wait for the
    worker for ever)."""
    if guard is None:
        fn()
        return
    if guard.broken:
        return
    from .rpc import WorkerLost

    try:
        guard.call(fn)
    except WorkerLost:
        pass


# ---------------------------------------------------------------------------------------
# Context


class Rollback(str, Enum):
    """How a context removes a tail of its sequence (rejected draft tokens)."""

    KV = "kv"                  # cut the KV cache (transformers)
    RS = "rs"                  # recurrent-state snapshots, for a few tokens of the last decode
    CHECKPOINT = "checkpoint"  # restore a saved sequence state, then decode again what is kept


class Context(NativeHandle):
    """One sequence's KV cache on a model, fed through a reusable batch.

    ``decode`` returns the logits of the requested positions as a numpy view that stays
    valid until the next decode; ``tokens`` mirrors exactly what the cache holds.
    """

    def __init__(self, model: Model, *, n_ctx: int, threads: int | None = None,
                 threads_batch: int | None = None, n_batch: int = 512, cache_type: str = "f16",
                 rollback_depth: int = 0, device_sampling: bool | None = None, n_seq: int = 1):
        if n_ctx <= 0:
            raise BadInput("context size must be positive")
        if cache_type not in CACHE_TYPES:
            raise BadInput(f"unknown KV cache type {cache_type!r} (one of {', '.join(CACHE_TYPES)})")
        self.model = model
        threads = threads or default_threads()
        params = ll.llama_context_default_params()
        # Several sequences (a batch runner's slots) each get a KV stream of their own and
        # the full n_ctx: one unified cache changed logits enough to break greedy identity.
        self.n_seq = max(1, n_seq)
        params.n_ctx = n_ctx * self.n_seq
        params.n_batch = min(n_batch, n_ctx)
        params.n_ubatch = min(n_batch, n_ctx)
        params.n_seq_max = self.n_seq
        if self.n_seq > 1:
            params.kv_unified = False
        # Backend sampling may then cover a whole verify batch (llama.cpp's default is one
        # sampled output per sequence and decode).
        params.n_outputs_max_per_seq = min(DEVICE_ROWS_MAX, params.n_batch)
        params.n_threads = threads
        params.n_threads_batch = threads_batch or threads
        params.type_k = CACHE_TYPES[cache_type]
        params.type_v = CACHE_TYPES[cache_type]
        params.no_perf = True
        stateful = model.info.recurrent or model.info.hybrid
        if stateful and rollback_depth > 0:
            # Recurrent-state snapshots: a short tail can then be cut like a KV cache
            # (llama.cpp clamps this to 0 for architectures that do not support it).
            params.n_rs_seq = rollback_depth
        # Calls that may reach a worker go through a guard thread of this context's own.
        self.guard = None
        if model.rpc:
            from .rpc import Guard

            self.guard = Guard(model.rpc, name="localspec-rpc-context")
        _log_tail.clear()
        ptr = self.remote(lambda: ll.llama_init_from_model(model.ptr, params))
        if not ptr:
            why = last_log_error() or "out of memory?"
            raise LocalspecError(f"cannot create a {n_ctx}-token context for {Path(model.path).name} ({why})")
        self.ptr = ptr
        self.n_ctx = int(ll.llama_n_ctx_seq(ptr))   # per sequence
        self.n_batch = int(params.n_batch)
        self.threads = threads
        self.mem = ll.llama_get_memory(ptr)
        self.tokens: list[int] = []
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        # Held while a chunk is put in the batch and decoded, and while the context is freed:
        # a read alongside still running when its context closes then fails cleanly instead
        # of decoding into freed memory.
        self._in_use = threading.Lock()
        self._n_vocab = model.n_vocab
        self.decode_seconds = 0.0  # time spent inside llama_decode, for overhead accounting
        self.count_decode_time = True   # False: decodes that run beside the loop (not its time)
        self.rs_depth = int(ll.llama_n_rs_seq(ptr)) if stateful else 0
        self.rollback = (Rollback.KV if not stateful
                         else Rollback.RS if self.rs_depth > 0 else Rollback.CHECKPOINT)
        self.checkpoints: dict[int, ctypes.Array] = {}
        self.max_checkpoints = 64
        self.pinned: int | None = None  # a checkpoint kept while newer ones come and go
        self._last_call = 0          # tokens in the last llama_decode call
        self._rs_used = False        # a snapshot rollback is allowed once per decode
        self.stats = RollbackStats()
        self._views: dict[tuple, np.ndarray] = {}
        # Backend sampling where it pays: with the output layer on a GPU it saves copying a
        # full row of logits per position to the host. On the CPU it costs more than it saves
        # (llama.cpp pads the logits for the sampler graph, ~1.5 ms a decode at 152K tokens),
        # so there the rows stay full and numpy reads them. None: decide so; True/False: force.
        self.device_sampling = model.output_on_device if device_sampling is None else device_sampling
        self.device_chain: DeviceChain | None = None   # the backend sampler now set, if any
        self._chain_ptr = None
        self._rows_max = int(params.n_outputs_max_per_seq)
        # Called after every successful llama_decode with (first position, its tokens): an
        # MTP drafter reads the hidden states of those positions there.
        self.on_decode: Callable[[int, list[int]], None] | None = None
        b = self._batch
        for i in range(self.n_batch):
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
        # The batch's arrays, fetched once (each attribute read builds a new ctypes pointer).
        self._b_token, self._b_pos, self._b_logits = b.token, b.pos, b.logits

    def remote(self, fn: Callable[[], T]) -> T:
        """``fn()`` directly, or on the guard's thread when the model has layers on workers.

        Raises:
            WorkerLost: a worker stopped answering (this context cannot be used again).
        """
        return fn() if self.guard is None else self.guard.call(fn)

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def truncate(self, n: int) -> int:
        """Keep at most the first ``n`` tokens; return how many are kept.

        A KV cache keeps exactly ``n``. A recurrent or hybrid state can only go back to
        where it has a snapshot or a checkpoint (see :meth:`mark`), so it may keep fewer:
        the caller decodes again ``tokens[kept:]`` of what it wants.
        """
        if n >= len(self.tokens):
            return len(self.tokens)
        back = len(self.tokens) - n
        if self.rollback is Rollback.KV:
            if not ll.llama_memory_seq_rm(self.mem, 0, n, -1):  # pragma: no cover - defensive
                return self._restart()
            del self.tokens[n:]
            return n
        if (self.rollback is Rollback.RS and not self._rs_used and back <= self.rs_depth
                and back <= self._last_call - 1 and ll.llama_memory_seq_rm(self.mem, 0, n, -1)):
            self._rs_used = True
            self.stats.rollbacks += 1
            del self.tokens[n:]
            self._forget_after(n)
            return n
        return self._restore(n)

    def _restore(self, n: int) -> int:
        """Go back to the latest checkpoint at or before ``n`` (or start over)."""
        keys = [k for k in self.checkpoints if k <= n]
        if not keys:
            return self._restart()
        k = max(keys)
        buf = self.checkpoints[k]
        t0 = time.perf_counter()
        def restore():
            done = ll.llama_state_seq_set_data_ext(self.ptr, buf, len(buf), 0, STATE_PARTIAL)
            ok = done == len(buf) and ll.llama_memory_seq_rm(self.mem, 0, k, -1)
            ll.llama_synchronize(self.ptr)
            return ok

        ok = self.remote(restore)
        self.stats.seconds += time.perf_counter() - t0
        if not ok:
            return self._restart()
        self.stats.rollbacks += 1
        del self.tokens[k:]
        self._forget_after(k)
        return k

    def mark(self, *, pin: bool = False) -> None:
        """Save the sequence state at the current position, so :meth:`truncate` can come
        back to it (only recurrent and hybrid models need this; it is a no-op otherwise).
        ``pin`` keeps this one (the end of a prompt) while later checkpoints are evicted."""
        if self.rollback is Rollback.KV:
            return
        if pin:
            self.pinned = self.n_past
        if self.n_past in self.checkpoints:
            return
        t0 = time.perf_counter()
        size = self.remote(lambda: ll.llama_state_seq_get_size_ext(self.ptr, 0, STATE_PARTIAL))
        buf = (ctypes.c_uint8 * size)()

        def save():
            got = ll.llama_state_seq_get_data_ext(self.ptr, buf, size, 0, STATE_PARTIAL)
            ll.llama_synchronize(self.ptr)
            return got

        got = self.remote(save)
        self.stats.seconds += time.perf_counter() - t0
        if got != size:  # pragma: no cover - defensive
            return
        self.stats.checkpoints += 1
        self.stats.bytes += size
        self.stats.last_bytes = size
        self.checkpoints[self.n_past] = buf
        while len(self.checkpoints) > self.max_checkpoints:
            del self.checkpoints[min(k for k in self.checkpoints if k != self.pinned)]

    def _forget_after(self, n: int) -> None:
        for k in [k for k in self.checkpoints if k > n]:
            del self.checkpoints[k]
        if self.pinned is not None and self.pinned > n:
            self.pinned = None

    def _restart(self) -> int:
        """No way back to the wanted position: start the sequence over."""
        self.stats.restarts += 1
        self.clear()
        return 0

    def clear(self) -> None:
        """Forget sequence 0 (the only one a single run uses; other sequences are a batch
        runner's). ``tokens`` stays the same list, which the runner shares as seq 0's mirror."""
        if self.n_seq > 1:
            self.remote(lambda: ll.llama_memory_seq_rm(self.mem, 0, -1, -1))
        else:
            self.remote(lambda: ll.llama_memory_clear(self.mem, True))
        self.tokens.clear()
        self.checkpoints.clear()
        self.pinned = None

    def sample_on_device(self, chain: DeviceChain | None) -> None:
        """Let llama.cpp's backend sampler handle the output rows from now on (None: full
        logits again). Setting a chain makes llama.cpp re-plan its graph, so it happens only
        when the chain changes (a run's settings, not every decode)."""
        if not self.device_sampling:
            chain = None
        if chain == self.device_chain:
            return
        if self._chain_ptr is not None:
            self.remote(lambda: ll.llama_set_sampler(self.ptr, 0, None))
            ll.llama_sampler_free(self._chain_ptr)
            self._chain_ptr = None
        self.device_chain = None
        if chain is not None:
            ptr = chain.build()
            if self.remote(lambda: ll.llama_set_sampler(self.ptr, 0, ptr)) and _runs_on_backend(ptr):
                self._chain_ptr, self.device_chain = ptr, chain
            else:  # this backend cannot run the chain: full rows it is
                self.remote(lambda: ll.llama_set_sampler(self.ptr, 0, None))
                ll.llama_sampler_free(ptr)

    def decode_rows(self, tokens: list[int], n_out: int) -> Rows:
        """Decode ``tokens`` and return the last ``n_out`` output rows, as the backend
        sampler left them when one is set (full logits otherwise)."""
        if self.device_chain is not None and n_out <= self._rows_max:
            self._decode(tokens, n_out)
            return SampledRows(self.ptr, n_out, self.device_chain)
        return LogitRows(self.decode(tokens, logits=n_out))

    def decode(self, tokens: list[int], *, logits: str = "last") -> np.ndarray | None:
        """Append ``tokens`` to the sequence and decode them.

        ``logits``: "last" returns shape (n_vocab,) for the final token, "all" returns
        (len(tokens), n_vocab), an int k returns (k, n_vocab) for the last k tokens, "none"
        returns None. Full rows: a backend sampler, if one is set, is taken off first.
        """
        if logits != "none":
            self.sample_on_device(None)
        return self._decode(tokens, logits)

    def _decode(self, tokens: list[int], logits) -> np.ndarray | None:
        n = len(tokens)
        if n == 0:
            raise ValueError("decode needs at least one token")
        if self.n_past + n > self.n_ctx:
            raise LocalspecError(f"context full ({self.n_ctx} tokens)")
        want = n if logits == "all" else (logits if isinstance(logits, int) else 0)
        if want > self.n_batch:
            raise ValueError("cannot return logits for more tokens than one batch")
        if want and n > self.n_batch:
            # Keep the positions that need logits in one llama_decode call.
            self._decode(tokens[:n - want], "none")
            return self._decode(tokens[n - want:], want)
        first_out = n - want
        b = self._batch
        b_token, b_pos, b_logits = self._b_token, self._b_pos, self._b_logits
        start = 0
        while start < n:
            chunk = tokens[start:start + self.n_batch]
            m = len(chunk)
            last_chunk = start + m == n
            base = self.n_past  # the mirror holds the chunks decoded so far
            with self._in_use:
                if not self.ptr:
                    raise LocalspecError("the context is closed")
                for i, t in enumerate(chunk):
                    b_token[i] = t
                    b_pos[i] = base + i
                    b_logits[i] = want > 0 and start + i >= first_out
                if logits == "last" and last_chunk:
                    b_logits[m - 1] = True
                b.n_tokens = m
                t0 = time.perf_counter()
                if self.guard is None:
                    rc = ll.llama_decode(self.ptr, b)
                    # llama_decode may return before an asynchronous (GPU) backend has finished:
                    # wait, so that the time is the decode's and the next timed region starts clean.
                    ll.llama_synchronize(self.ptr)
                else:
                    rc = self.guard.call(self._decode_sync)
            if self.count_decode_time:
                self.decode_seconds += time.perf_counter() - t0
            self._last_call = m
            self._rs_used = False
            if rc != 0:
                self._after_failure()
                why = last_log_error()
                raise LocalspecError(f"llama_decode failed (code {rc}){': ' + why if why else ''}")
            self.tokens.extend(chunk)  # the mirror follows the cache chunk by chunk
            if self.on_decode is not None:
                self.on_decode(base, chunk)
            start += m
        if logits == "none" or self.device_chain is not None:
            return None
        if logits == "last":
            return self._view(ll.llama_get_logits_ith(self.ptr, -1), (self._n_vocab,))
        return self._view(ll.llama_get_logits(self.ptr), (want, self._n_vocab))

    def _decode_sync(self) -> int:
        rc = ll.llama_decode(self.ptr, self._batch)
        ll.llama_synchronize(self.ptr)
        return rc

    def _view(self, ptr, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of llama.cpp's logits buffer, kept per address and shape (building
        one costs more than a greedy step's argmax)."""
        key = (ctypes.addressof(ptr.contents), shape)
        view = self._views.get(key)
        if view is None:
            if len(self._views) > 64:
                self._views.clear()
            view = self._views[key] = np.ctypeslib.as_array(ptr, shape=shape)
        return view

    def _after_failure(self) -> None:
        """A failed llama_decode may leave part of its batch in the memory (ubatches it
        processed before the error): remove what the mirror does not hold, so the cache and
        ``tokens`` agree and the next decode works."""
        n = len(self.tokens)
        if int(ll.llama_memory_seq_pos_max(self.mem, 0)) + 1 <= n:
            return
        if self.rollback is Rollback.KV and ll.llama_memory_seq_rm(self.mem, 0, n, -1):
            return
        # A recurrent state cannot drop a tail: go back to a checkpoint (or start over).
        self._restore(n)

    def close(self) -> None:
        """Free the context (after a decode in flight on another thread, which then is its
        last: a later one raises LocalspecError)."""
        with getattr(self, "_in_use", None) or contextlib.nullcontext():   # None: __init__ failed first
            super().close()

    def _free(self) -> None:
        if self.guard is None or not self.guard.broken:
            self.sample_on_device(None)
        ll.llama_batch_free(self._batch)
        ptr = self.ptr
        _free_remote(self.guard, lambda: ll.llama_free(ptr))
        if self.guard is not None:
            self.guard.close()
