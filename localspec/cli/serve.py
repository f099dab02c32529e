"""``localspec serve``: the OpenAI-compatible API over one engine, with /metrics."""

from __future__ import annotations

from pathlib import Path

import click

from ..engine import DrafterKind, Engine, RunSpec
from ..errors import BadInput
from .main import cli
from .options import drafter_options, engine_config, hardware_options, resolve_pair, tuned_settings, validated

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _model_id(opts: dict, target_path: str) -> str:
    """The name clients send as ``model``: a store name or alias as given, else the file's stem."""
    arg = opts.get("target")
    if opts.get("name"):
        return opts["name"]
    if not arg or Path(arg).expanduser().exists():
        return Path(target_path).stem
    return arg


@cli.command()
@click.option("-m", "--model", "target", metavar="TARGET",
              help="Target model: a .gguf file, a local model name or a pulled catalog alias.")
@drafter_options()
@click.option("--demo", is_flag=True,
              help="Serve the built-in demo pair (SmolLM2-135M: F16 target, Q4_1 draft); offline.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (other machines can reach 0.0.0.0: give --api-key then).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port (0: any free one).")
@click.option("--api-key", envvar="LOCALSPEC_API_KEY", default=None, metavar="KEY",
              help="Require `Authorization: Bearer KEY` on every route but /health (or $LOCALSPEC_API_KEY).")
@click.option("--queue", "queue", type=click.IntRange(min=1), default=16, show_default=True,
              help="Most requests waiting behind the one generating; more get 429 with Retry-After.")
@click.option("--max-body-mb", type=click.IntRange(min=1), default=8, show_default=True,
              help="Largest request body, in MiB.")
@click.option("--name", default=None, metavar="ID", help="Model id clients send (default: the target's name).")
@hardware_options()
@click.option("--tui", is_flag=True, help="Watch the server in the terminal app (queue, speed, acceptance).")
@click.option("--quiet", is_flag=True, help="No per-request log lines (errors still).")
def serve(**opts) -> None:
    """Serve the OpenAI API (chat and text completions, streaming) with speculative decoding.

    One engine answers requests in arrival order. Each response carries `usage` and
    llama-server-style `timings`; GET /metrics has Prometheus metrics.

    \b
    Examples:
      localspec serve --demo
      localspec serve -m qwen2.5-7b -d qwen2.5-0.5b --port 8080 --api-key secret
      curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}'
    """
    from ..server import Server, ServerOptions

    pair = resolve_pair(opts)
    tuned = None
    if pair.drafter is DrafterKind.MODEL:
        tuned = tuned_settings(opts | {"draft_min": RunSpec.draft_min}, pair)
    base = validated(RunSpec(drafter=pair.drafter).with_(**(tuned or {})))
    if opts["host"] not in _LOOPBACK and not opts["api_key"]:
        click.echo(f"localspec: warning: listening on {opts['host']} without --api-key: anyone who can "
                   "reach this machine can use the model", err=True)
    options = ServerOptions(host=opts["host"], port=opts["port"], api_key=opts["api_key"], queue=opts["queue"],
                            max_body=opts["max_body_mb"] << 20, model_id=_model_id(opts, pair.target),
                            log_level="warning" if opts["quiet"] or opts["tui"] else "info",
                            access_log=not (opts["quiet"] or opts["tui"]))
    with Engine(engine_config(opts, pair, base)) as engine:
        server = Server(engine, base, options)
        click.echo(f"localspec: serving {options.model_id} ({base.describe().split(' · ')[0]}) at "
                   f"{server.url}/v1", err=True)
        if opts["tui"]:
            _watch(server)
        else:
            server.run()
    click.echo("localspec: server stopped", err=True)


def _watch(server) -> None:
    """The server in a thread, the app in front; quitting the app stops the server."""
    try:
        from ..tui.screens.server import ServerApp
    except ImportError as exc:   # pragma: no cover - textual is a dependency
        raise BadInput(f"--tui needs the terminal app: {exc}") from None
    server.start()
    try:
        ServerApp(server.snapshot).run()
    finally:
        server.stop()
