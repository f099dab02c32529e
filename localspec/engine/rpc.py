"""llama.cpp's RPC backend: the devices of workers on other machines for a model's layers.

A worker (``localspec worker``, or llama.cpp's own ``rpc-server``) serves its machine's
devices over TCP; :func:`worker_devices` registers a worker's devices with llama.cpp, and
:class:`~localspec.engine.backend.Model` places layers on them. The bindings are ctypes over
the ggml libraries llama-cpp-python ships (``ggml_backend_rpc_add_server``,
``ggml_backend_rpc_start_server``), so both ends run the same llama.cpp by construction.

ggml-rpc aborts the process when a worker stops answering. Here that abort is caught
(:func:`install_abort_hook`): the thread that met it is parked, the calls waiting on that
worker end with :class:`WorkerLost` (:class:`Guard`), and the process goes on, so a server
answers that request with an error and keeps serving.
"""

from __future__ import annotations

import ctypes
import os
import queue
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..errors import BadInput, LocalspecError

REINSTALL = 'CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir llama-cpp-python'
DEFAULT_PORT = 50052
CONNECT_TIMEOUT = 5.0            # seconds: an unreachable worker is reported within this
RPC_PROTO_MAJOR = 7              # ggml-rpc.h's RPC_PROTO_MAJOR_VERSION in llama-cpp-python 0.3.36
_HELLO = 14                      # RPC_CMD_HELLO (fixed across protocol versions)
_CAPS = 24                       # RPC_CONN_CAPS_SIZE

T = TypeVar("T")


class RpcUnavailable(BadInput):
    """This llama-cpp-python was built without the RPC backend."""

    def __init__(self):
        super().__init__(f"this llama-cpp-python was built without RPC; reinstall it with: {REINSTALL}")


class WorkerUnreachable(BadInput):
    """A worker that does not answer (refused, timed out, or not a llama.cpp RPC server)."""


class WorkerLost(LocalspecError):
    """A worker stopped answering in the middle of a generation; the models on it are gone
    for this process (start the worker again, then the command)."""

    exit_code = 1


# ---------------------------------------------------------------------------------------
# Endpoints


def parse_endpoints(text: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """``HOST:PORT[,HOST:PORT...]`` into a tuple of endpoints, each checked.

    Raises:
        BadInput: an endpoint without a port, a port out of range, or a repeated endpoint.
    """
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in str(t).split(",")]
    out: list[str] = []
    for raw in items:
        item = raw.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or ":" in host or not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInput(f"--rpc {item!r}: give HOST:PORT (e.g. 192.168.1.20:{DEFAULT_PORT}; "
                           "IPv6 addresses are not supported by llama.cpp's RPC)")
        endpoint = f"{host}:{int(port)}"
        if endpoint in out:
            raise BadInput(f"--rpc {endpoint} is given twice")
        out.append(endpoint)
    return tuple(out)


def probe(endpoint: str, timeout: float = CONNECT_TIMEOUT) -> tuple[int, int, int]:
    """Connect to a worker and say hello, as llama.cpp's client would; the worker's RPC
    protocol version. Done before llama.cpp connects, because llama.cpp aborts the process
    on a worker it cannot reach.

    Raises:
        WorkerUnreachable: no connection, no answer within ``timeout`` seconds, not an RPC
            server, or a protocol version this llama.cpp cannot talk to.
    """
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(bytes([_HELLO]) + struct.pack("<Q", _CAPS) + bytes(_CAPS))
            head = _recv(sock, 8)
            size = struct.unpack("<Q", head)[0]
            if size != 4 + _CAPS:
                raise WorkerUnreachable(f"RPC worker {endpoint}: not a llama.cpp RPC server of a "
                                        "compatible version (unexpected answer to hello)")
            major, minor, patch = _recv(sock, size)[:3]
    except WorkerUnreachable:
        raise
    except TimeoutError:
        raise WorkerUnreachable(f"RPC worker {endpoint}: no answer within {timeout:g} s (is it serving "
                                "another client? a worker serves one at a time)") from None
    except (ConnectionError, EOFError) as exc:
        why = "connection refused" if isinstance(exc, ConnectionRefusedError) else "connection closed"
        raise WorkerUnreachable(f"RPC worker {endpoint}: {why} (start one there with `localspec worker "
                                f"--host ADDRESS --port {port}`)") from None
    except OSError as exc:
        raise WorkerUnreachable(f"RPC worker {endpoint}: cannot connect ({exc.strerror or exc})") from None
    if major != RPC_PROTO_MAJOR:
        raise WorkerUnreachable(f"RPC worker {endpoint} speaks RPC protocol {major}.{minor}.{patch}, this "
                                f"llama.cpp {RPC_PROTO_MAJOR}.x: install the same llama-cpp-python on both")
    return major, minor, patch


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


# ---------------------------------------------------------------------------------------
# The ggml libraries


def supported() -> bool:
    """Whether this llama-cpp-python was built with the RPC backend."""
    import llama_cpp

    from .backend import init_backend

    init_backend()
    return bool(llama_cpp.llama_supports_rpc())


def require() -> None:
    """Raises:
        RpcUnavailable: this build has no RPC backend (the message says how to reinstall)."""
    if not supported():
        raise RpcUnavailable()


class _Lib:
    """ctypes handles on the ggml functions used here (devices, the abort hook, RPC), looked up
    in whichever of the wheel's ggml libraries defines them."""

    def __init__(self):
        import llama_cpp

        libdir = Path(llama_cpp.__file__).parent / "lib"
        libs = [ctypes.CDLL(str(_find(libdir, stem))) for stem in ("ggml-base", "ggml", "ggml-rpc")]
        vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        for name, res, args in (("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
                                ("ggml_backend_dev_by_name", vp, [cp]), ("ggml_backend_dev_name", cp, [vp]),
                                ("ggml_backend_dev_description", cp, [vp]),
                                ("ggml_backend_dev_type", ctypes.c_int, [vp]),
                                ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
                                ("ggml_backend_dev_backend_reg", vp, [vp]), ("ggml_backend_reg_name", cp, [vp]),
                                ("ggml_backend_reg_dev_count", sz, [vp]), ("ggml_backend_reg_dev_get", vp, [vp, sz]),
                                ("ggml_set_abort_callback", vp, [vp]),
                                ("ggml_backend_rpc_add_server", vp, [cp]),
                                ("ggml_backend_rpc_start_server", None, [cp, cp, sz, sz, ctypes.POINTER(vp)])):
            fn = next((getattr(lib, name) for lib in libs if hasattr(lib, name)), None)
            if fn is None:
                raise RpcUnavailable()
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)


def _find(libdir: Path, stem: str) -> Path:
    """The library file llama.cpp's own libraries already use: a wheel holds copies, not
    links (libggml-base.so and libggml-base.so.0), and a second copy would have its own abort
    hook and device registry."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        maps = ""
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        name = Path(path).name
        if name == f"lib{stem}.so" or name.startswith(f"lib{stem}.so."):
            return Path(path)
    for name in (f"lib{stem}.so.0", f"lib{stem}.so", f"lib{stem}.0.dylib", f"lib{stem}.dylib", f"{stem}.dll"):
        if (libdir / name).exists():
            return libdir / name
    raise RpcUnavailable()


_lib: _Lib | None = None
_lib_lock = threading.Lock()


def lib() -> _Lib:
    """The bindings, loaded once (after checking that the build has RPC).

    Raises:
        RpcUnavailable: no RPC backend in this build.
    """
    global _lib
    with _lib_lock:
        if _lib is None:
            require()
            _lib = _Lib()
        return _lib


DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "accelerator", 4: "meta"}


@dataclass(frozen=True)
class Device:
    """One ggml device: a local CPU or GPU, or a worker's (``endpoint`` set)."""

    handle: int
    name: str
    description: str
    kind: str
    free: int
    total: int
    endpoint: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "type": self.kind,
                "free_bytes": self.free, "total_bytes": self.total, "endpoint": self.endpoint}


def _device(handle: int, endpoint: str | None = None) -> Device:
    b = lib()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    b.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    return Device(handle, (b.ggml_backend_dev_name(handle) or b"").decode(),
                  (b.ggml_backend_dev_description(handle) or b"").decode(),
                  DEVICE_TYPES.get(b.ggml_backend_dev_type(handle), "?") if endpoint is None else "remote",
                  free.value, total.value, endpoint)


def local_devices() -> list[Device]:
    """This machine's devices as llama.cpp registered them (CPU last or first, GPUs)."""
    b = lib()
    return [_device(b.ggml_backend_dev_get(i)) for i in range(b.ggml_backend_dev_count())]


_workers: dict[str, list[Device]] = {}


def worker_devices(endpoint: str) -> list[Device]:
    """A worker's devices, registered with llama.cpp once per process (it keeps one
    connection per worker from then on).

    Raises:
        RpcUnavailable: no RPC backend in this build.
        WorkerUnreachable: the worker does not answer (within :data:`CONNECT_TIMEOUT`).
        WorkerLost: it was lost earlier in this process.
    """
    with _lib_lock:
        known = _workers.get(endpoint)
    if known is not None:   # their free memory now (asked of the worker)
        return guard_call((endpoint,), lambda: [_device(d.handle, endpoint) for d in known])
    lib()
    install_abort_hook()
    probe(endpoint)

    def register() -> list[Device]:
        reg = lib().ggml_backend_rpc_add_server(endpoint.encode())
        if not reg:
            return []
        b = lib()
        return [_device(b.ggml_backend_reg_dev_get(reg, i), endpoint) for i in range(b.ggml_backend_reg_dev_count(reg))]

    devices = guard_call((endpoint,), register)
    if not devices:
        raise WorkerUnreachable(f"RPC worker {endpoint} offers no device")
    with _lib_lock:
        _workers[endpoint] = devices
    return devices


def serve(endpoint: str, devices: list[Device], threads: int, cache_dir: str | None) -> None:
    """Serve ``devices`` on ``endpoint`` with llama.cpp's RPC server; returns only when it
    could not start (it prints why on stderr)."""
    arr = (ctypes.c_void_p * len(devices))(*[d.handle for d in devices])
    lib().ggml_backend_rpc_start_server(endpoint.encode(), cache_dir.encode() if cache_dir else None,
                                            threads, len(devices), arr)


# ---------------------------------------------------------------------------------------
# A worker lost mid-call


_lost: dict[str, str] = {}            # endpoint -> why
_waiters: set[threading.Event] = set()
_state_lock = threading.Lock()
_hook = None


def _on_abort(message: bytes) -> None:  # pragma: no cover - runs on a llama.cpp thread
    text = (message or b"").decode("utf-8", errors="replace").strip()
    if "ggml-rpc" not in text:      # not a worker's failure: llama.cpp's own abort, as before
        os.write(2, (text + "\n").encode())
        return
    why = text.split(": ", 1)[-1]
    endpoints = list(_workers) + list(_pending_endpoints)
    for e in [e for e in endpoints if not _connectable(e)] or endpoints:
        _lost.setdefault(e, why)
    for ev in list(_waiters):
        ev.set()
    threading.Event().wait()          # park this thread for good: returning would abort the process


_pending_endpoints: set[str] = set()   # endpoints being registered (not in _workers yet)


def _connectable(endpoint: str) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=1.0).close()
        return True
    except OSError:
        return False


def install_abort_hook() -> None:
    """Route ggml's aborts through :func:`_on_abort` (once per process)."""
    global _hook
    with _state_lock:
        if _hook is None:
            _hook = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_on_abort)
            lib().ggml_set_abort_callback(ctypes.cast(_hook, ctypes.c_void_p))


def lost(endpoints: tuple[str, ...]) -> str | None:
    """Why one of ``endpoints`` was lost, or None while all answer."""
    for e in endpoints:
        if e in _lost:
            return f"RPC worker {e} stopped answering ({_lost[e]})"
    return None


def check_alive(endpoints: tuple[str, ...]) -> None:
    """Raises:
        WorkerLost: one of ``endpoints`` was lost earlier in this process."""
    why = lost(endpoints)
    if why:
        raise WorkerLost(f"{why}; restart it, then this command")


class Guard:
    """Runs the calls that reach workers on a thread of its own, so that a worker lost
    during one ends it with :class:`WorkerLost` instead of hanging its caller (llama.cpp's
    thread waits for an answer that never comes). One per context; after a loss it refuses
    every call."""

    def __init__(self, endpoints: tuple[str, ...], name: str = "localspec-rpc"):
        self.endpoints = endpoints
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()
        self.broken = False

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                box.append((False, exc))
            done.set()

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the guard's thread.

        Raises:
            WorkerLost: a worker of this guard was lost before or during the call.
        """
        if self.broken:
            check_alive(self.endpoints)
            raise WorkerLost(f"an RPC worker ({', '.join(self.endpoints)}) was lost; restart it, then this command")
        check_alive(self.endpoints)
        box: list = []
        done = threading.Event()
        with _state_lock:
            _waiters.add(done)
        try:
            self._jobs.put((fn, box, done))
            while True:
                done.wait()
                if box:
                    ok, value = box[0]
                    if ok:
                        return value
                    raise value
                why = lost(self.endpoints)
                if why:
                    self.broken = True
                    raise WorkerLost(f"{why}; restart it, then this command")
                done.clear()      # another worker was lost: this call goes on
                if box:
                    done.set()
        finally:
            with _state_lock:
                _waiters.discard(done)

    def close(self) -> None:
        if not self.broken:
            self._jobs.put(None)


def guard_call(endpoints: tuple[str, ...], fn: Callable[[], T]) -> T:
    """``fn()`` through a one-off :class:`Guard` (a model load, a worker's registration)."""
    with _state_lock:
        _pending_endpoints.update(endpoints)
    g = Guard(endpoints, name="localspec-rpc-load")
    try:
        return g.call(fn)
    finally:
        g.close()
        with _state_lock:
            _pending_endpoints.difference_update(endpoints)


def warn(message: str) -> None:
    print(f"localspec: warning: {message}", file=sys.stderr, flush=True)
