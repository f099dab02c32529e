"""``localspec check``: can these two models speculate together? Reads metadata only."""

from __future__ import annotations

import json

import click

from ..errors import GGUFError
from ..models.compat import check_files
from .main import cli


@cli.command()
@click.argument("models", nargs=-1, metavar="[TARGET DRAFT]")
@click.option("-m", "--model", "target_opt", metavar="TARGET", help="Target model (instead of TARGET).")
@click.option("-d", "--draft", "draft_opt", metavar="DRAFT", help="Draft model (instead of DRAFT).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(models: tuple[str, ...], target_opt: str | None, draft_opt: str | None, as_json: bool) -> int:
    """Check that DRAFT's tokenizer is compatible with TARGET's (exit 0 yes, 1 no, 2 unreadable).

    \b
    Examples:
      localspec check qwen2.5-32b-q4_k_m.gguf qwen2.5-1.5b-q8_0.gguf
      localspec check -m qwen2.5-32b -d qwen2.5-1.5b
    """
    from .options import resolve_model

    given = list(models)
    if len(given) > 2:
        raise click.UsageError(f"give TARGET and DRAFT (got {len(given)} models)")
    target = target_opt or (given.pop(0) if given else None)
    draft = draft_opt or (given.pop(0) if given else None)
    if given or not (target and draft):
        raise click.UsageError("give TARGET and DRAFT, as arguments or with -m and -d")

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
