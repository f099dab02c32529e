"""``localspec info``: what this installation of llama.cpp can run on."""

from __future__ import annotations

import json

import click

from .. import __version__
from .main import cli


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(as_json: bool) -> None:
    """Show the llama.cpp backend (CPU or GPU) and the CPU features it was built with.

    \b
    Example:
      localspec info
    """
    import llama_cpp

    from ..engine import backend

    data = {
        "localspec": __version__,
        "llama_cpp_python": llama_cpp.__version__,
        "gpu_offload": backend.gpu_offload_supported(),
        "backend": backend.backend_name(-1),
        "default_threads": backend.default_threads(),
        "cpu_extra_buffers": backend.extra_buffers_default(),
        "system_info": backend.system_info().strip(),
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    for k, v in data.items():
        click.echo(f"{k:18} {v}")
