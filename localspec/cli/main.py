"""The command group and its error handling: every failure is one line and an exit code."""

from __future__ import annotations

import importlib
import sys

import click

from .. import __version__
from ..errors import LocalspecError


def _fail(message: str, code: int) -> None:
    click.echo(f"localspec: error: {message}", err=True)
    sys.exit(code)


# Each command: the module that defines it and its help's first paragraph. A command's module
# loads only when that command runs, so `localspec --help` lists them all without importing
# every front end (tests/test_cli.py checks the texts against the commands' own).
COMMANDS = {
    "bench": ("bench", "Measure target-only and a sweep of speculative settings on a prompt set."),
    "chat": ("chat", "Chat with a model in the terminal, with live speculative-decoding gauges."),
    "check": ("check", "Check that DRAFT's tokenizer is compatible with TARGET's (exit 0 yes, 1 no, 2 unreadable)."),
    "compare": ("compare", "Run the target alone, then with speculation, and show the speed-up."),
    "import": ("models", "Register a local GGUF file (one in the Hugging Face cache too) under a name."),
    "info": ("info", "Show the llama.cpp backend (CPU or GPU) and the CPU features it was built with."),
    "list": ("models", "List local models and pairs (or the catalog)."),
    "pull": ("pull", "Download a target and a compatible draft (GGUF) into the Hugging Face cache."),
    "quantize": ("models", "Make a quantized copy of a model with llama.cpp's quantizer (e.g. a Q8_0 draft)."),
    "rm": ("models", "Remove a model from the store (and the files localspec downloaded or made for it)."),
    "run": ("run", "Generate from a prompt with a target and a drafter."),
    "serve": ("serve", "Serve the OpenAI API (chat and text completions, streaming) with speculative decoding."),
    "tune": ("bench", "Find and store the fastest settings for a pair on this machine."),
    "worker": ("worker", "Serve this machine's CPU or GPUs to localspec on other machines (--rpc HOST:PORT)."),
}


class LazyGroup(click.Group):
    """A group whose commands' modules load on first use (see :data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[name][0]}")
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, (self.commands.get(n) or click.Command(n, help=COMMANDS[n][1])).get_short_help_str(limit))
                for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
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
    """Load every command now (tests and tools that walk ``cli.commands``)."""
    for module in {m for m, _ in COMMANDS.values()}:
        importlib.import_module(f"{__package__}.{module}")


def _one_line(message: str) -> str:
    """Click's message on one line (its lists of choices come on lines and tabs of their own)."""
    return " ".join(message.split())


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every error into one line on stderr."""
    try:
        rc = cli.main(args=argv, prog_name="localspec", standalone_mode=False)
    except click.UsageError as exc:
        _fail(_one_line(exc.format_message()), 2)
    except click.exceptions.Abort:
        _fail("interrupted", 130)
    except click.ClickException as exc:
        _fail(_one_line(exc.format_message()), exc.exit_code or 1)
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
