"""``localspec worker``: serve this machine's devices to other localspec processes (--rpc).

llama.cpp's RPC server runs on a thread of its own; the main thread waits for Ctrl+C or
SIGTERM and then ends the process at once (the server's accept loop cannot be interrupted,
and nothing of it needs saving: a client that loses its worker says so itself).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
import threading

import click

from ..errors import BadInput
from .main import cli


def _check_bind(host: str, port: int) -> None:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise BadInput(f"--host {host}: give an IPv4 address (127.0.0.1 for this machine only, "
                       "0.0.0.0 for every interface); llama.cpp's RPC server takes no names") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def pick_devices(names: tuple[str, ...]) -> list:
    """The devices to serve: those named, else every GPU, else the CPU.

    Raises:
        BadInput: a name that is not one of this machine's devices.
    """
    from ..engine import rpc

    local = rpc.local_devices()
    wanted = [n.strip() for arg in names for n in arg.split(",") if n.strip()]
    if wanted:
        by_name = {d.name.lower(): d for d in local}
        missing = [n for n in wanted if n.lower() not in by_name]
        if missing:
            raise BadInput(f"--device {', '.join(missing)}: not a device here (this machine has "
                           f"{', '.join(d.name for d in local)})")
        return [by_name[n.lower()] for n in wanted]
    gpus = [d for d in local if d.kind in ("GPU", "iGPU")]
    return gpus or [d for d in local if d.kind == "CPU"][:1]


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (IPv4). Anything but loopback exposes the devices to the "
                   "network: the protocol has no authentication.")
@click.option("--port", type=click.IntRange(1, 65535), default=50052, show_default=True, help="TCP port.")
@click.option("--device", "devices", multiple=True, metavar="DEV",
              help="Device to serve (repeatable or comma-separated, e.g. CUDA0; default: every GPU, "
                   "else the CPU). `localspec info` lists them.")
@click.option("-t", "--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads for a served CPU (default: physical cores).")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Keep large tensors a client sent in DIR, so that the next load of the same "
                   "model sends only their hashes.")
def worker(host: str, port: int, devices: tuple[str, ...], threads: int | None, cache_dir: str | None) -> None:
    """Serve this machine's CPU or GPUs to localspec on other machines (--rpc HOST:PORT).

    \b
    Example (on the machine with the memory):
      localspec worker --host 0.0.0.0 --port 50052
    and on the machine you work at:
      localspec run -m big.gguf -d small.gguf --rpc 192.168.1.20:50052 -p "Hello"
    """
    from ..engine import rpc
    from ..engine.backend import default_threads

    rpc.require()
    chosen = pick_devices(devices)     # (a wrong name first: the port's state is the machine's, not the command's)
    _check_bind(host, port)
    if cache_dir:
        try:
            os.makedirs(cache_dir, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"--cache {cache_dir}: {exc.strerror or exc}") from None
    if not ipaddress.IPv4Address(host).is_loopback:
        rpc.warn(f"listening on {host}:{port}: llama.cpp's RPC protocol has no authentication; anyone "
                 "who can reach this port can use these devices and read what runs on them. Use it "
                 "on a trusted network only (or keep 127.0.0.1 and an SSH tunnel).")
    endpoint = f"{host}:{port}"
    stop = threading.Event()
    failed: list[str] = []

    def serve() -> None:
        try:
            rpc.serve(endpoint, chosen, threads or default_threads(), cache_dir)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            failed.append(str(exc))
        failed.append("llama.cpp's RPC server stopped (see above)")
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=serve, name="localspec-worker", daemon=True)
    thread.start()
    names = ", ".join(f"{d.name} ({d.description}, {d.free >> 20} MiB free)" for d in chosen)
    click.echo(f"localspec worker: serving {names} on {endpoint}; clients: --rpc {endpoint}", err=True)
    while not stop.wait(0.5):
        pass
    sys.stdout.flush()
    if failed:
        click.echo(f"localspec: error: {failed[0]}", err=True)
        sys.stderr.flush()
        os._exit(1)
    click.echo("localspec worker: stopped", err=True)
    sys.stderr.flush()
    os._exit(0)

