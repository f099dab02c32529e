"""``localspec check``: can these two models speculate together? Reads metadata only.

With one model (or DRAFT ``mtp`` / ``mtp:PATH``) it says whether the target can draft with
its own MTP head: embedded MTP (nextn) layers, or an ``mtp-*.gguf`` next to it.
"""

from __future__ import annotations

import json

import click

from ..engine.compat import check_files
from ..engine.gguf_meta import read_metadata
from ..engine.mtp_meta import describe_mtp
from ..errors import BadInput, GGUFError
from ..models.mtp_head import locate_mtp, parse_draft_arg
from .main import cli


def _check_mtp(target: str, head: str | None, as_json: bool) -> int:
    from .options import resolve_model

    meta = read_metadata(target)
    try:
        src = locate_mtp(target, resolve_model(head, "MTP head") if head else None)
    except BadInput as exc:
        src, why = None, str(exc)
    report = {"target": target, "architecture": meta.architecture, "mtp": src is not None,
              "embedded": bool(src and src.embedded), "mtp_file": src.file if src else None,
              "layers": src.layers if src else 0, "target_layers": describe_mtp(meta)}
    if src is None:
        report["error"] = why
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(f"target: {target} ({meta.architecture}): {describe_mtp(meta)}")
        if src is None:
            click.echo(f"MTP drafting: not available: {why}")
        else:
            click.echo(f"MTP drafting: available ({src.layers} nextn layer{'s' if src.layers != 1 else ''}, "
                       f"{src.describe()}): localspec run -m {target} --draft mtp"
                       + (f":{src.file}" if head else ""))
    return 0 if src is not None else 1


@cli.command()
@click.argument("models", nargs=-1, metavar="[TARGET [DRAFT...]]")
@click.option("-m", "--model", "target_opt", metavar="TARGET", help="Target model (instead of TARGET).")
@click.option("-d", "--draft", "draft_opt", metavar="DRAFT", multiple=True,
              help="Draft model (instead of DRAFT); repeatable: every draft is checked.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def check(models: tuple[str, ...], target_opt: str | None, draft_opt: tuple[str, ...], as_json: bool) -> int:
    """Check that DRAFT's tokenizer is compatible with TARGET's (exit 0 yes, 1 no, 2 unreadable).
    With several drafts (-d SMALL -d LARGE), every one is checked (exit 0 when all are).

    Without DRAFT, or with DRAFT 'mtp' or 'mtp:PATH', check that TARGET can draft with its own
    MTP head (exit 0 yes, 1 no).

    \b
    Examples:
      localspec check qwen2.5-32b-q4_k_m.gguf qwen2.5-1.5b-q8_0.gguf
      localspec check -m qwen2.5-32b -d qwen2.5-1.5b
      localspec check Qwen3.6-27B-Q4_K_M.gguf
    """
    from .options import resolve_model

    given = list(models)
    target = target_opt or (given.pop(0) if given else None)
    drafts = list(draft_opt) + given
    if not target:
        raise click.UsageError("give TARGET (and DRAFT), as arguments or with -m and -d")
    draft = drafts[0] if drafts else None
    is_mtp, head = parse_draft_arg(draft)
    try:
        if draft is None or (is_mtp and len(drafts) == 1):
            return _check_mtp(resolve_model(target, "target"), head, as_json)
        if any(parse_draft_arg(d)[0] for d in drafts):
            raise BadInput("check an MTP head on its own: localspec check TARGET mtp")
        t = resolve_model(target, "target")
        reports = [check_files(t, resolve_model(d, "draft")) for d in drafts]
    except GGUFError as exc:
        if as_json:
            click.echo(json.dumps({"compatible": None, "error": str(exc)}))
        raise
    ok = all(r.compatible for r in reports)
    if as_json:
        out = reports[0].to_dict() if len(reports) == 1 else {
            "compatible": ok, "drafts": [{"path": d} | r.to_dict() for d, r in zip(drafts, reports)]}
        click.echo(json.dumps(out, indent=2))
    else:
        for i, (d, r) in enumerate(zip(drafts, reports)):
            if len(reports) > 1:
                click.echo(("\n" if i else "") + f"draft {i + 1} of {len(reports)}: {d}")
            click.echo(r.render())
    return 0 if ok else 1
