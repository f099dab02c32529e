"""The command group and its error handling: every failure is one line and an exit code."""

from __future__ import annotations

import sys

import click

from .. import __version__
from ..errors import LocalspecError


def _fail(message: str, code: int) -> None:
    click.echo(f"localspec: error: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             invoke_without_command=True)
@click.version_option(__version__, prog_name="localspec")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Speculative decoding for local GGUF models on llama.cpp.

    A small draft model proposes tokens, the large target checks them in one batch: the
    output is the target's own, only sooner.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def _register() -> None:
    from . import bench, chat, check, compare, info, models, pull, run, serve, worker  # noqa: F401  (commands register themselves)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every error into one line on stderr."""
    _register()
    try:
        rc = cli.main(args=argv, prog_name="localspec", standalone_mode=False)
    except click.UsageError as exc:
        msg = exc.format_message().replace("\n", " ")
        _fail(msg, 2)
    except click.exceptions.Abort:
        _fail("interrupted", 130)
    except click.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "), exc.exit_code or 1)
    except LocalspecError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except BrokenPipeError:  # pragma: no cover - e.g. `localspec run ... | head`
        sys.exit(0)
    except MemoryError:
        _fail("out of memory (try a smaller --ctx or fewer GPU layers)", 1)
    except OSError as exc:
        _fail(f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}", 1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(rc if isinstance(rc, int) else 0)
