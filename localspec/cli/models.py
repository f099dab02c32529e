"""``localspec list``, ``rm``, ``import`` and ``quantize``: the local store."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import click

from ..engine.gguf_meta import read_metadata
from ..errors import BadInput
from ..models.catalog import load_catalog
from ..models.puller import human
from ..models.quantize import FTYPES
from ..models.quantize import quantize as run_quantize
from ..models.store import ModelEntry, Store
from ..paths import models_dir
from .main import cli
from .progress import Bars

_FTYPE_NAMES = {v: k for k, v in FTYPES.items()}
# Approximate bits per weight, to estimate a quantized file's size for the progress bar.
_BPW = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.7, "Q5_K_S": 5.5,
        "Q5_0": 5.5, "Q5_1": 6.0, "Q4_K_M": 4.85, "Q4_K_S": 4.6, "Q4_0": 4.5, "Q4_1": 5.0,
        "Q3_K_L": 4.3, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "Q2_K": 2.6}


def _describe_file(path: Path) -> dict:
    meta = read_metadata(path)
    ftype = meta.file_type
    return {"family": meta.architecture, "size": (meta.get("general.size_label") or "").lower() or None,
            "quant": _FTYPE_NAMES.get(ftype) if ftype is not None else None}


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--catalog", is_flag=True, help="List the catalog (models.toml) instead of local models.")
def list_models(as_json: bool, catalog: bool) -> None:
    """List local models and pairs (or the catalog).

    \b
    Examples:
      localspec list
      localspec list --catalog
    """
    if catalog:
        from ..models import advice

        cat = load_catalog()
        rows = [{"alias": m.alias, "family": m.family, "size": m.size, "repo": m.repo,
                 "quants": list(m.quants), "drafts": list(m.drafts), "hybrid": m.hybrid,
                 "verified": m.unverified is None, "mtp": m.mtp,
                 "draft_advice": [a.to_dict() for a in advice.for_catalog(cat, m)]} for m in cat.models.values()]
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        for r in rows:
            drafts = f"  drafts: {', '.join(r['drafts'])}" if r["drafts"] else ""
            flag = "" if r["verified"] else "  (unverified)"
            click.echo(f"{r['alias']:20} {r['size']:>6}  {r['family']:14} {r['repo']}{drafts}{flag}")
            suited = [a for a in r["draft_advice"] if a["suits"]]
            if suited or r["mtp"]:
                why = "; ".join(f"{a['alias']} (1/{1 / a['ratio']:.0f})" for a in suited)
                mtp = "MTP head (--draft mtp)" + ("; " if why else "") if r["mtp"] else ""
                click.echo(f"{'':22}suits: {mtp}{why}" + ("  [same tokenizer, 1/10-1/20 of its parameters]"
                                                           if why else ""))
        return
    store = Store()
    models, pairs = store.models(), store.pairs()
    if as_json:
        click.echo(json.dumps({"models": [m.__dict__ | {"present": m.exists()} for m in models],
                               "pairs": [p.__dict__ for p in pairs]}, indent=2))
        return
    if not models:
        click.echo("no local models yet: `localspec pull ALIAS`, `localspec import FILE.gguf`, or try --demo")
        return
    click.echo(f"{'name':32} {'family':12} {'size':>6} {'quant':7} {'file size':>10}  path")
    for m in sorted(models, key=lambda m: m.name):
        missing = "" if m.exists() else "  (file missing)"
        click.echo(f"{m.name:32} {(m.family or '-'):12} {(m.size or '-'):>6} {(m.quant or '-'):7} "
                   f"{human(m.bytes):>10}  {m.path}{missing}")
    if pairs:
        click.echo("\npairs")
        for p in pairs:
            click.echo(f"  {p.target} + {p.draft}: {'compatible' if p.compatible else 'INCOMPATIBLE'}")


@cli.command("rm")
@click.argument("name")
@click.option("--keep-files", is_flag=True, help="Only forget the model; keep its files.")
def rm(name: str, keep_files: bool) -> None:
    """Remove a model from the store (and the files localspec downloaded or made for it).

    Imported files are never deleted.

    \b
    Example:
      localspec rm qwen2.5-0.5b:q8_0
    """
    entry = Store().remove(name)
    freed = 0
    if entry.source in ("pull", "quantize") and not keep_files:
        for f in entry.files or [entry.path]:
            p = Path(f)
            real = p.resolve()
            for q in {p, real}:
                if q.exists() or q.is_symlink():
                    freed += q.stat().st_size if q.exists() and not q.is_symlink() else 0
                    q.unlink()
    click.echo(f"removed {name}" + (f" ({human(freed)} freed)" if freed else ""))


@cli.command("import")
@click.argument("path")
@click.option("--name", help="Name in the store (default: the file name).")
def import_model(path: str, name: str | None) -> None:
    """Register a local GGUF file (one in the Hugging Face cache too) under a name.

    \b
    Examples:
      localspec import ~/models/mistral-7b-instruct-q4_k_m.gguf --name mistral-7b
      localspec import Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf
    """
    p = Path(path).expanduser()
    if not p.exists() and path.count("/") >= 2 and path.endswith(".gguf"):
        from huggingface_hub import try_to_load_from_cache

        from ..models.hub import cache_dir

        parts = path.split("/")
        found = try_to_load_from_cache("/".join(parts[:2]), "/".join(parts[2:]), cache_dir=cache_dir())
        if not isinstance(found, str):
            raise BadInput(f"{path}: not a local file and not in the Hugging Face cache")
        p = Path(found)
    if not p.is_file():
        raise BadInput(f"{path}: no such file")
    info = _describe_file(p)
    files = [str(p)]
    name = name or p.stem.lower()
    Store().add_model(ModelEntry(name=name, path=str(p), files=files, source="import", bytes=p.stat().st_size,
                                 family=info["family"], size=info["size"], quant=info["quant"]))
    click.echo(f"imported {name} -> {p}")


@cli.command("quantize")
@click.argument("source")
@click.option("--type", "qtype", required=True, type=click.Choice(sorted(FTYPES), case_sensitive=False),
              help="Target type, e.g. Q8_0, Q4_K_M, Q4_0, F16.")
@click.option("--name", help="Store name for the result (default: SOURCE-TYPE).")
@click.option("--out", type=click.Path(dir_okay=False), help="Output file (default: in localspec's models folder).")
def quantize_cmd(source: str, qtype: str, name: str | None, out: str | None) -> None:
    """Make a quantized copy of a model with llama.cpp's quantizer (e.g. a Q8_0 draft).

    \b
    Example:
      localspec quantize qwen2.5-1.5b:f16 --type Q8_0 --name qwen2.5-1.5b-q8
    """
    from .options import resolve_model

    src = Path(resolve_model(source, "source"))
    qtype = qtype.upper()
    name = name or f"{src.stem.lower()}-{qtype.lower()}"
    dst = Path(out) if out else models_dir() / f"{name.replace('/', '_').replace(':', '-')}.gguf"
    info = _describe_file(src)
    src_bpw = _BPW.get(info["quant"] or "", 16)
    estimate = int(src.stat().st_size * _BPW.get(qtype, 8) / src_bpw)
    partial = dst.with_name(dst.name + ".partial")
    bars = Bars()
    done = threading.Event()

    def watch():
        while not done.wait(0.25):
            size = partial.stat().st_size if partial.exists() else 0
            bars(f"quantize {qtype}", min(size, estimate), estimate)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    t0 = time.perf_counter()
    try:
        run_quantize(src, dst, qtype)
    finally:
        done.set()
        t.join()
    bars(f"quantize {qtype}", estimate, estimate)
    bars.close()
    Store().add_model(ModelEntry(name=name, path=str(dst), files=[str(dst)], source="quantize",
                                 bytes=dst.stat().st_size, family=info["family"], size=info["size"], quant=qtype))
    click.echo(f"quantized {src.name} to {qtype} in {time.perf_counter() - t0:.1f} s: {name} -> {dst} "
               f"({human(dst.stat().st_size)})")
