"""A running server: the socket, uvicorn, the scheduler, and a clean end on SIGINT/SIGTERM.

On a signal the scheduler is closed first (waiting requests get a 503, the one generating is
cancelled at its next round and answered), then uvicorn drains its connections; the process
exits 0 instead of re-raising the signal as uvicorn would.
"""

from __future__ import annotations

import contextlib
import logging
import logging.config
import signal
import socket
import threading
import time
from dataclasses import dataclass

import uvicorn

from ..engine import Engine, RunSpec
from ..errors import BadInput
from .app import ServerContext, build_app
from .live import LiveState, ServerSnapshot
from .metrics import Metrics
from .scheduler import Scheduler


@dataclass(frozen=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 8080                 # 0: any free port (see Server.port)
    api_key: str | None = None
    queue: int = 16                  # most requests waiting for a slot
    max_body: int = 8 << 20          # bytes
    model_id: str = "model"
    log_level: str = "info"
    access_log: bool = True
    strict_model: bool = False       # a request naming another model is a 404 (default: answered)
    cors: tuple[str, ...] = ()       # browser origins allowed besides loopback ones; "*": any
    template_variables: dict | None = None   # the chat template's variables a request does not set


class OneLine(logging.Filter):
    """Log records keep their exception as one line: never a traceback in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        record.stack_info = None
        return True


def log_config(level: str) -> dict:
    handler = {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["one_line"],
               "stream": "ext://sys.stderr"}
    quiet = {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
    return {"version": 1, "disable_existing_loggers": False,
            "filters": {"one_line": {"()": OneLine}},
            "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(message)s",
                                     "datefmt": "%H:%M:%S"}},
            "handlers": {"stderr": handler},
            "loggers": {"uvicorn": quiet, "uvicorn.error": {"level": level.upper()},
                        "uvicorn.access": quiet, "localspec.server": quiet}}


class _Uvicorn(uvicorn.Server):
    """uvicorn, with a hook that runs first on SIGINT/SIGTERM and no re-raised signal at the end."""

    def __init__(self, config: uvicorn.Config, on_exit):
        super().__init__(config)
        self._on_exit = on_exit

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig, frame) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)   # connections wait in the backlog from now on, not refused until uvicorn starts
    except OSError as exc:
        sock.close()
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class Server:
    """One engine behind the OpenAI-compatible API."""

    def __init__(self, engine: Engine, base: RunSpec, options: ServerOptions):
        self.options = options
        self.metrics = Metrics(options.queue, engine.parallel)
        self.live = LiveState(options.model_id, base.drafter.value, options.queue, engine.parallel)
        base.validate()
        self.sock = _bind(options.host, options.port)   # before the engine thread: a refused
        self.scheduler = Scheduler(engine, self.metrics, self.live, options.queue)  # port leaves none
        self.ctx = ServerContext(engine, self.scheduler, self.metrics, self.live, options.model_id,
                                 base, options.api_key, options.max_body, strict_model=options.strict_model,
                                 template_variables=options.template_variables,
                                 cors=tuple(options.cors))
        self.port = self.sock.getsockname()[1]
        host = f"[{options.host}]" if ":" in options.host else options.host
        self.url = f"http://{host}:{self.port}"
        self.live.address = self.url
        config = uvicorn.Config(build_app(self.ctx), lifespan="off", ws="none", access_log=options.access_log,
                                log_config=log_config(options.log_level), timeout_graceful_shutdown=10)
        self._uvicorn = _Uvicorn(config, on_exit=self.scheduler.close)
        self._thread: threading.Thread | None = None

    def snapshot(self) -> ServerSnapshot:
        return self.live.snapshot()

    def run(self) -> None:
        """Serve until SIGINT/SIGTERM (or :meth:`stop`); in-flight requests are answered."""
        try:
            self._uvicorn.run(sockets=[self.sock])
        finally:
            self.scheduler.stop()
            self.sock.close()

    # -- in a thread (tests, the app) -----------------------------------------------------
    def start(self, timeout: float = 30.0) -> Server:
        self._thread = threading.Thread(target=self.run, name="localspec-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """What a signal does: cancel and answer, drain, stop."""
        self.scheduler.close()
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
