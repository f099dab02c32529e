"""``localspec serve``: the OpenAI-compatible API over one engine, with /metrics.

Every option can also come from a ``LOCALSPEC_<OPTION>`` environment variable (click's
``auto_envvar_prefix``; the flag's long name, e.g. ``LOCALSPEC_PORT``, ``LOCALSPEC_CTX``,
``LOCALSPEC_MODEL``, ``LOCALSPEC_DRAFT_MAX``); a flag on the command line wins.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import click

from ..engine import DrafterKind, RunSpec
from ..errors import BadInput
from .main import cli
from .options import (
    cascade_option,
    cascade_threshold,
    drafter_options,
    engine_config,
    hardware_options,
    model_argument,
    resolve_pair,
    run_spec,
    sampling_options,
    template_options,
    template_variables,
    tuned_settings,
)

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_ORIGIN = re.compile(r"https?://[^/\s:]+(:\d+)?|https?://\[[0-9a-fA-F:]+\](:\d+)?")


def cors_origins(value: str | None) -> tuple[str, ...]:
    """--cors ORIGIN[,ORIGIN] (or '*') as a tuple of origins.

    Raises:
        BadInput: a part that is not scheme://host[:port] or '*'.
    """
    origins = tuple(o.strip() for o in (value or "").split(",") if o.strip())
    for o in origins:
        if o != "*" and not _ORIGIN.fullmatch(o):
            raise BadInput(f"--cors: {o!r} is not an origin (scheme://host[:port], e.g. https://app.example:3000, "
                           "or '*')")
    return origins


def _model_id(opts: dict, target_path: str) -> str:
    """The name clients send as ``model``: a store name or alias as given, else the file's stem."""
    arg = opts.get("target")
    if opts.get("name"):
        return opts["name"]
    if not arg or Path(arg).expanduser().exists():
        return Path(target_path).stem
    return arg


@cli.command(context_settings={"auto_envvar_prefix": "LOCALSPEC"})
@model_argument()
@click.option("-m", "--model", "target", metavar="TARGET",
              help="Target model (as MODEL): a .gguf file, a local model name or a pulled catalog alias.")
@drafter_options()
@click.option("--demo", is_flag=True,
              help="Serve the built-in demo pair (SmolLM2-135M: F16 target, Q4_1 draft); offline.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (other machines can reach 0.0.0.0: give --api-key then).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port (0: any free one).")
@click.option("--api-key", envvar="LOCALSPEC_API_KEY", default=None, metavar="KEY",
              help="Require `Authorization: Bearer KEY` (or `x-api-key: KEY`) on every route but /health "
                   "(or $LOCALSPEC_API_KEY).")
@click.option("--queue", "queue", type=click.IntRange(min=1), default=16, show_default=True,
              help="Most requests waiting for a slot; more get 429 with Retry-After.")
@click.option("-np", "--parallel", type=click.IntRange(min=1), default=4, show_default=True,
              help="Slots: requests generated together, every slot's tokens in one decode per round (each "
                   "slot has the whole --ctx: KV memory is N x ctx). 1: one request at a time.")
@click.option("--max-body-mb", type=click.IntRange(min=1), default=8, show_default=True,
              help="Largest request body, in MiB.")
@click.option("--name", default=None, metavar="ID",
              help="Model id the server answers with (default: the target's name).")
@click.option("--strict-model", is_flag=True,
              help="Refuse (404) a request that names another model (default: any name is answered by this pair).")
@click.option("--cors", default=None, metavar="ORIGIN[,ORIGIN]",
              help="Web pages (origins) besides this machine's own that may call the server from a browser; "
                   "'*' for any. Off by default: any site a user visits could otherwise use the model through "
                   "their browser.")
@sampling_options()
@template_options()
@hardware_options()
@cascade_option()
@click.option("--tui", is_flag=True, help="Watch the server in the terminal app (queue, speed, acceptance).")
@click.option("--quiet", is_flag=True, help="No per-request log lines (errors still).")
def serve(**opts) -> None:
    """Serve the OpenAI API (chat and text completions, streaming) with speculative decoding.

    Up to --parallel requests are generated together (slots), the rest wait in arrival order;
    whatever model name they send, the loaded pair answers. Each
    response carries `usage` and llama-server-style `timings`; llama-server's /props, /slots,
    /tokenize, /detokenize, /completion and /infill (editors) are served too, and so are OpenAI's
    Responses API (/v1/responses), Anthropic's Messages API (/v1/messages) and Ollama's API
    (/api/chat, /api/generate, /api/tags); GET /metrics has Prometheus metrics. The sampling and
    drafting flags set the defaults of requests that leave them out.
    Every option can also be set as LOCALSPEC_<OPTION> (LOCALSPEC_PORT=8081, LOCALSPEC_CTX=8192).

    Browsers: pages served from this machine (http://localhost:*, http://127.0.0.1:*) may call
    the server; --cors adds others. Allowing more lets those sites use the model through the
    browser of anyone who opens them.

    \b
    Examples:
      localspec serve --demo
      localspec serve qwen2.5-7b -md qwen2.5-0.5b -c 8192 --port 8080 --api-key secret
      localspec serve -m model.gguf --ngram --temp 0.2 --draft-max 6 --cors http://localhost:3000
      curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
        -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 64}'
    """
    from ..server import Server, ServerOptions

    cors = cors_origins(opts["cors"])
    pair = resolve_pair(opts)
    tuned = None
    if pair.drafter is DrafterKind.MODEL:
        tuned = tuned_settings(opts, pair)
    opts["cascade"] = cascade_threshold(opts, pair.target, pair.draft)
    base = run_spec(opts | {"max_tokens": RunSpec.max_tokens}, pair.drafter, tuned)
    if opts["host"] not in _LOOPBACK and not opts["api_key"]:
        click.echo(f"localspec: warning: listening on {opts['host']} without --api-key: anyone who can "
                   "reach this machine can use the model", err=True)
    if "*" in cors and not opts["api_key"]:
        click.echo("localspec: warning: --cors '*' without --api-key: any web page a user opens can use the "
                   "model through their browser", err=True)
    options = ServerOptions(host=opts["host"], port=opts["port"], api_key=opts["api_key"], queue=opts["queue"],
                            max_body=opts["max_body_mb"] << 20, model_id=_model_id(opts, pair.target),
                            log_level="warning" if opts["quiet"] or opts["tui"] else "info",
                            access_log=not (opts["quiet"] or opts["tui"]), strict_model=opts["strict_model"],
                            cors=cors, template_variables=template_variables(opts))
    from ..engine import Engine

    with Engine(replace(engine_config(opts, pair, base), parallel=opts["parallel"])) as engine:
        if engine.parallel_note:
            click.echo(f"localspec: {engine.parallel_note} (--parallel {opts['parallel']} asked)", err=True)
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


def _flag_envvars(command: click.Command) -> None:
    """Name each option's environment variable after its flag (LOCALSPEC_CTX for --ctx, whose
    value is called n_ctx), where click's automatic name, from the value's name, differs."""
    for param in command.params:
        longs = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        if isinstance(param, click.Option) and param.envvar is None and longs:
            name = "LOCALSPEC_" + longs[0][2:].upper().replace("-", "_")
            if name != f"LOCALSPEC_{param.name.upper()}":
                param.envvar = name


_flag_envvars(serve)
