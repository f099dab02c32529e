"""``localspec check``: can these two models speculate together? Reads metadata only."""

from __future__ import annotations

import json

import click

from ..errors import GGUFError
from ..models.compat import check_files
from .main import cli


@cli.command()
@click.argument("target")
@click.argument("draft")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(target: str, draft: str, as_json: bool) -> int:
    """Check that DRAFT's tokenizer is compatible with TARGET's (exit 0 yes, 1 no, 2 unreadable).

    \b
    Example:
      localspec check qwen2.5-32b-q4_k_m.gguf qwen2.5-1.5b-q8_0.gguf
    """
    from .options import resolve_model

    try:
        report = check_files(resolve_model(target, "target"), resolve_model(draft, "draft"))
    except GGUFError as exc:
        if as_json:
            click.echo(json.dumps({"compatible": None, "error": str(exc)}))
        raise
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.render())
    return 0 if report.compatible else 1
