"""``localspec pull``: fetch a compatible target + draft pair from the Hugging Face Hub."""

from __future__ import annotations

import json

import click

from ..models import puller
from ..models.puller import human
from .main import cli
from .progress import Bars


def _describe(plan: puller.PullPlan) -> list[str]:
    lines = []
    for item in plan.items:
        head = f"{item.role:6}  {item.name}  ({item.label}, {human(item.bytes)})  from {item.repo}"
        lines.append(head)
        for f in item.files:
            lines.append(f"          {f.path}  {human(f.size)}")
    return lines


def _advice(target: str) -> list[str] | None:
    """Which drafts suit a catalog target, and why (None for a target not in the catalog)."""
    from ..models import advice
    from ..models.catalog import load_catalog

    cat = load_catalog()
    model = cat.models.get(target.strip().lower())
    return advice.lines(cat, model) if model is not None else None


@cli.command()
@click.argument("target")
@click.option("--draft", "draft", metavar="SIZE|ALIAS|REPO|mtp", help="Draft: a size in the target's family "
              "(e.g. 1.5b), a catalog alias, or owner/repo[:quant]; 'mtp': the target's own MTP head "
              "(its mtp-*.gguf, or nothing more when the target embeds it). Default: the catalog's "
              "recommendation.")
@click.option("--no-draft", is_flag=True, help="Pull the target only.")
@click.option("--quant", metavar="Q", help="Target quantization (default Q4_K_M).")
@click.option("--draft-quant", metavar="Q", help="Draft (or MTP head) quantization (default Q8_0).")
@click.option("--dry-run", is_flag=True, help="Show what would be fetched; read only the GGUF headers.")
@click.option("--force", is_flag=True, help="Pull even if the tokenizers are incompatible.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan and result as JSON.")
def pull(target, draft, no_draft, quant, draft_quant, dry_run, force, as_json) -> None:
    """Download a target and a compatible draft (GGUF) into the Hugging Face cache.

    TARGET is a catalog alias (see `localspec list --catalog`), owner/repo[:quant] or
    owner/repo/file.gguf. The tokenizers are checked from the remote headers before the big
    downloads; every file is verified against the Hub's SHA-256; an interrupted pull resumes.

    \b
    Examples:
      localspec pull qwen2.5-32b --draft 1.5b
      localspec pull qwen-27b --draft 0.8b --dry-run
      localspec pull qwen-27b --draft mtp
      localspec pull bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M --draft llama-3.2-1b
    """
    say = (lambda m: None) if as_json else (lambda m: click.echo(m, err=True))
    res = puller.resolve(target, draft, no_draft=no_draft)   # the catalog decides first, offline
    for note in res.notes:
        say(f"note: {note}")
    advice = _advice(target) if draft is None else None
    for line in advice or ():
        say(f"advice: {line}")
    plan = puller.plan_pull(res, quant=quant, draft_quant=draft_quant)
    for line in _describe(plan):
        say(line)
    notes_before = len(plan.notes)
    report = puller.check_headers(plan)
    for note in plan.notes[notes_before:]:
        say(f"note: {note}")
    if report is not None:
        say(f"tokenizers: {report.summary()} (read {human(plan.header_bytes)} of GGUF headers)")
        if not report.compatible:
            say(report.render())
    puller.refuse_if_incompatible(plan, force)
    puller.check_space(plan)
    say(f"total {human(plan.total_bytes)}, {human(plan.missing_bytes)} to download, "
        f"{human(plan.free_bytes)} free")
    result = {"target": plan.target.name, "draft": plan.draft.name if plan.draft else None, "notes": plan.notes,
              "mtp": ({"embedded": plan.mtp_item is None,
                       "file": plan.mtp_item.files[0].path if plan.mtp_item else None} if plan.mtp else None),
              "files": [{"repo": f.repo, "path": f.path, "size": f.size} for i in plan.items for f in i.files],
              "compatible": report.compatible if report else None, "header_bytes": plan.header_bytes,
              "total_bytes": plan.total_bytes, "missing_bytes": plan.missing_bytes, "dry_run": dry_run,
              "draft_advice": advice}
    if dry_run:
        say("dry run: nothing downloaded")
        if as_json:
            click.echo(json.dumps(result, indent=2))
        return
    bars = Bars(enabled=not as_json)
    try:
        entries = puller.execute(plan, bars)
    finally:
        bars.close()
    result["registered"] = [e.name for e in entries]
    result["paths"] = [e.path for e in entries]
    if plan.mtp_paths:
        result["mtp"]["path"] = plan.mtp_paths[0]
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for e in entries:
        say(f"ready: {e.name} -> {e.path}")
    if plan.draft is not None:
        say(f"run it: localspec run -m {plan.target.name} -d {plan.draft.name} --chat -p \"Hello\"")
    elif plan.mtp:
        say(f"run it: localspec run -m {plan.target.name} --draft mtp --chat -p \"Hello\"")
