"""``localspec info``: what this installation of llama.cpp can run on."""

from __future__ import annotations

import json

import click

from .. import __version__
from .main import cli


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--rpc", "rpc_endpoints", metavar="HOST:PORT[,...]",
              help="List these RPC workers' devices and their free memory.")
def info(as_json: bool, rpc_endpoints: str | None) -> None:
    """Show the llama.cpp backend (CPU or GPU) and the CPU features it was built with.

    \b
    Example:
      localspec info
      localspec info --rpc 192.168.1.20:50052
    """
    import llama_cpp

    from ..engine import backend

    if rpc_endpoints:
        _workers(rpc_endpoints, as_json)
        return
    data = {
        "localspec": __version__,
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": backend.gpu_offload_supported(),
        "backend": backend.backend_name(-1),
        "default_threads": backend.default_threads(),
        "cpu_extra_buffers": backend.extra_buffers_default(),
        "rpc": bool(llama_cpp.llama_supports_rpc()),
        "system_info": backend.system_info().strip(),
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for k, v in data.items():
        click.echo(f"{k:18} {v}")


def _workers(text: str, as_json: bool) -> None:
    """Each worker's devices: name, description, free and total memory."""
    from ..engine import rpc

    endpoints = rpc.parse_endpoints(text)
    rpc.require()
    workers = {e: [d.to_dict() for d in rpc.worker_devices(e)] for e in endpoints}
    if as_json:
        click.echo(json.dumps({"workers": workers}, indent=2))
        return
    for e, devices in workers.items():
        click.echo(f"{e}")
        for d in devices:
            click.echo(f"  {d['name']:8} {d['free_bytes'] >> 20:>8} MiB free of {d['total_bytes'] >> 20} MiB")
