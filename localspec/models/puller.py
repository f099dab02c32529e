"""`localspec pull`: from a catalog alias or a Hub reference to a verified, registered pair.

1. Resolve the target and the draft from the catalog alone, before any network access
   (aliases, ``--draft SIZE`` within the target's tokenizer family, taking the nearest size
   the family has, or ``owner/repo[:quant]`` / ``owner/repo/file.gguf``).
2. List both repos, pick the quant's files (all parts of a split model) and refuse odd names.
3. Read only the GGUF headers of both remote files (HTTP ranges) and run the tokenizer check.
4. Check free disk space for what is still missing.
5. Download into the Hugging Face cache (resumable), verify every file's SHA-256, and only then
   register the models and the pair.
"""

from __future__ import annotations

import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.compat import CompatReport, check_metadata
from ..engine.mtp_meta import mtp_layers
from ..errors import BadInput, IncompatiblePair, LocalspecError
from . import hub
from .catalog import DEFAULT_DRAFT_QUANT, DEFAULT_TARGET_QUANT, Catalog, CatalogModel, load_catalog
from .mtp_head import check_head_metadata, mtp_catalog_note, parse_draft_arg, pick_head_file
from .store import ModelEntry, PairEntry, Store

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass
class PullItem:
    role: str                      # "target" or "draft"
    name: str                      # the store name it will get
    repo: str
    quant: str | None
    files: list[hub.RemoteFile]
    catalog: CatalogModel | None = None

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def label(self) -> str:
        return self.catalog.label if self.catalog else self.repo


@dataclass
class PullPlan:
    target: PullItem
    draft: PullItem | None
    compat: CompatReport | None = None
    header_bytes: int = 0
    missing_bytes: int = 0
    free_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    mtp: bool = False              # --draft mtp: the target's own MTP head drafts
    mtp_item: PullItem | None = None   # its separate mtp-*.gguf (None: embedded in the target)
    mtp_paths: list[str] = field(default_factory=list)   # where it was downloaded

    @property
    def items(self) -> list[PullItem]:
        return [self.target] + ([self.draft] if self.draft else []) + ([self.mtp_item] if self.mtp_item else [])

    @property
    def total_bytes(self) -> int:
        return sum(i.bytes for i in self.items)


def disk_free(path: Path) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing parent)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


# ---------------------------------------------------------------------------------------
# Resolving what to fetch


def _quant_files(repo: str, files: list[hub.RemoteFile], quant: str) -> list[hub.RemoteFile]:
    """The files of one quant in a listing: a single file or every part of a split model."""
    key = quant.lower().replace("-", "_")
    if key == "f16" and not any("f16" in f.name.lower().replace("fp16", "") for f in files):
        key = "fp16"
    ggufs = [f for f in files if f.path.lower().endswith(".gguf")
             and not f.name.lower().startswith(("mmproj", "mtp-", "imatrix"))]
    hits = [f for f in ggufs if key in f.name.lower().replace("-", "_")]
    # Prefer the exact quant over longer ones that contain it (Q4_K vs Q4_K_M, Q8_0 vs Q8_0_L).
    exact = [f for f in hits if re.search(rf"(^|[._\-]){re.escape(key)}([._\-]|$)", f.name.lower().replace("-", "_"))]
    hits = exact or hits
    if not hits:
        have = sorted({m.group(0).upper() for f in ggufs
                       for m in [re.search(r"(?i)(bf16|f16|f32|i?q\d[_a-z0-9]*)", f.name)] if m})
        raise BadInput(f"{repo} has no {quant.upper()} GGUF file" + (f" (it has {', '.join(have)})" if have else ""))
    groups: dict[str, list[hub.RemoteFile]] = {}
    for f in hits:
        base = _SPLIT.sub("", f.path)
        groups.setdefault(base, []).append(f)
    best = sorted(groups.values(), key=lambda g: (len(g[0].path), g[0].path))[0]
    return sorted(best, key=lambda f: f.path)


def _catalog_files(model: CatalogModel, quant: str, files: list[hub.RemoteFile]) -> list[hub.RemoteFile]:
    from .catalog import match_quant_files

    pattern = model.quant_file(quant)
    by_path = {f.path: f for f in files}
    chosen = match_quant_files(pattern, list(by_path))
    if not chosen:
        raise hub.HubError(f"{model.repo}: the catalog's {quant.upper()} file {pattern} is not in the "
                           "repository any more")
    return [by_path[p] for p in chosen]


def _parse_ref(ref: str) -> tuple[str, str | None, str | None]:
    """'owner/repo', 'owner/repo:quant' or 'owner/repo/path/file.gguf' -> (repo, quant, file)."""
    if ref.lower().endswith(".gguf"):
        parts = ref.split("/")
        if len(parts) < 3:
            raise BadInput(f"{ref!r}: give a Hub file as owner/repo/file.gguf")
        return hub.safe_repo_id("/".join(parts[:2])), None, hub.safe_repo_path("/".join(parts[2:]))
    repo, _, quant = ref.partition(":")
    return hub.safe_repo_id(repo), (quant or None), None


def _item(role: str, ref_or_model, quant: str | None, default_quant: str) -> PullItem:
    if isinstance(ref_or_model, CatalogModel):
        m = ref_or_model
        q = (quant or default_quant).upper()
        if q not in m.quants:
            if quant:
                m.quant_file(q)  # raises with the list
            q = next(iter(m.quants))
        files = _catalog_files(m, q, hub.list_files(m.repo))
        return PullItem(role, f"{m.alias}:{q.lower()}", m.repo, q, files, m)
    repo, ref_quant, file = _parse_ref(ref_or_model)
    listing = hub.list_files(repo)
    if file:
        by_path = {f.path: f for f in listing}
        if file not in by_path:
            raise hub.HubError(f"{repo}: no file {file}")
        if _SPLIT.search(file):
            parts = [f for f in listing if _SPLIT.sub("", f.path) == _SPLIT.sub("", file)]
        else:
            parts = [by_path[file]]
        return PullItem(role, f"{repo}/{file}", repo, None, sorted(parts, key=lambda f: f.path))
    q = (quant or ref_quant or default_quant).upper()
    return PullItem(role, f"{repo}:{q.lower()}", repo, q, _quant_files(repo, listing, q))


@dataclass
class Resolution:
    """What the catalog decides before any network access: catalog models or Hub references
    for the target and the draft, and notes on the choices it made."""

    target: CatalogModel | str
    draft: CatalogModel | str | None
    notes: list[str] = field(default_factory=list)
    mtp: bool = False              # --draft mtp: fetch the target's MTP head instead of a draft


def resolve(target: str, draft: str | None = None, *, no_draft: bool = False,
            catalog: Catalog | None = None) -> Resolution:
    """Resolve both models from the catalog alone (no network)."""
    catalog = catalog or load_catalog()
    notes: list[str] = []
    t_model = catalog.get(target) if "/" not in target else None
    is_mtp, head = parse_draft_arg(draft)
    if is_mtp:
        if head or no_draft:
            raise BadInput("pull --draft mtp takes no path and no --no-draft: it fetches the target's own MTP head")
        return Resolution(t_model or target, None, [mtp_catalog_note(t_model)] if t_model else [], mtp=True)
    d: CatalogModel | str | None = None
    if not no_draft:
        if draft is not None and "/" in draft:
            d = draft
        elif t_model is not None:
            d, note = catalog.choose_draft(t_model, draft)
            if note:
                notes.append(note)
        elif draft is not None:
            d = catalog.models.get(draft.lower())
            if d is None:
                raise BadInput(f"--draft {draft}: a size needs a catalog target; give a catalog alias "
                               "or owner/repo[:quant] for the draft")
        else:
            notes.append("no draft given and the target is not in the catalog: pulling the target only")
    return Resolution(t_model or target, d, notes)


def plan_pull(target: str | Resolution, draft: str | None = None, *, quant: str | None = None,
              draft_quant: str | None = None, no_draft: bool = False,
              catalog: Catalog | None = None) -> PullPlan:
    """List both models' files on the Hub (no headers read yet); ``target`` may be an
    earlier :func:`resolve`'s result."""
    res = target if isinstance(target, Resolution) else resolve(target, draft, no_draft=no_draft, catalog=catalog)
    t_item = _item("target", res.target, quant, DEFAULT_TARGET_QUANT)
    d_item = _item("draft", res.draft, draft_quant, DEFAULT_DRAFT_QUANT) if res.draft is not None else None
    m_item = _mtp_item(t_item, draft_quant) if res.mtp else None
    for item in [t_item] + [i for i in (d_item, m_item) if i]:
        for f in item.files:
            hub.safe_repo_path(f.path)
    return PullPlan(t_item, d_item, notes=list(res.notes), mtp=res.mtp, mtp_item=m_item)


def _mtp_item(target: PullItem, quant: str | None) -> PullItem | None:
    """The target repo's mtp-*.gguf to fetch (None: the catalog says the head is embedded,
    or the repo lists none and the target's header must show it embeds one)."""
    m = target.catalog
    if m is not None and m.mtp == "embedded":
        return None
    listing = hub.list_files(target.repo, target.files[0].revision)
    by_path = {f.path: f for f in listing}
    if m is not None and m.mtp == "separate":
        q = (quant or (target.quant if target.quant in m.mtp_files else DEFAULT_DRAFT_QUANT)).upper()
        if q not in m.mtp_files:
            q = next(iter(m.mtp_files)) if not quant else q
        if q not in m.mtp_files:
            raise BadInput(f"{m.alias} has no {q} MTP head in the catalog (it has {', '.join(m.mtp_files)})")
        path = m.mtp_files[q]
        if path not in by_path:
            raise hub.HubError(f"{m.repo}: the catalog's MTP head {path} is not in the repository any more")
        return PullItem("mtp", f"{m.alias}:mtp-{q.lower()}", m.repo, q, [by_path[path]], m)
    path = pick_head_file(list(by_path), quant, target.quant)
    if path is None:
        return None
    name = f"{m.alias}:mtp" if m is not None else f"{target.repo}/{path}"
    return PullItem("mtp", name, target.repo, None, [by_path[path]], m)


def check_headers(plan: PullPlan) -> CompatReport | None:
    """Read the remote GGUF headers of both models and compare their tokenizers."""
    t_meta, n1 = hub.remote_metadata(plan.target.files[0])
    plan.header_bytes += n1
    if plan.mtp:
        _check_mtp_headers(plan, t_meta)
    if plan.draft is None:
        return None
    d_meta, n2 = hub.remote_metadata(plan.draft.files[0])
    plan.header_bytes += n2
    plan.compat = check_metadata(t_meta, d_meta)
    return plan.compat


def _check_mtp_headers(plan: PullPlan, t_meta) -> None:
    """The head to fetch must fit the target; without one, the target must embed it."""
    if plan.mtp_item is not None:
        m_meta, n = hub.remote_metadata(plan.mtp_item.files[0])
        plan.header_bytes += n
        check_head_metadata(t_meta, m_meta, plan.mtp_item.files[0].path)
        plan.notes.append(f"MTP head: {plan.mtp_item.files[0].path} ({mtp_layers(m_meta)} nextn layer), "
                          "fetched next to the target")
    elif mtp_layers(t_meta) > 0:
        plan.notes.append(f"MTP head: embedded in {plan.target.files[0].path} "
                          f"({mtp_layers(t_meta)} nextn layer): nothing more to fetch")
    else:
        raise BadInput(f"{plan.target.repo} has no MTP head for {plan.target.files[0].path}: it carries no "
                       "MTP (nextn) layers and the repo lists no mtp-*.gguf")


def check_space(plan: PullPlan) -> None:
    missing = [f for item in plan.items for f in item.files if hub.cached_file(f) is None]
    plan.missing_bytes = sum(f.size for f in missing)
    plan.free_bytes = disk_free(hub.cache_dir())
    if plan.missing_bytes > plan.free_bytes:
        raise LocalspecError(f"not enough disk space: the pull needs {human(plan.missing_bytes)} more and "
                             f"{hub.cache_dir()} has {human(plan.free_bytes)} free")


def execute(plan: PullPlan, progress: hub.Progress | None = None, store: Store | None = None,
            cancel: threading.Event | None = None) -> list[ModelEntry]:
    """Download, verify and register; nothing is registered unless every file verified."""
    store = store or Store()
    entries = []
    for item in plan.items:
        paths, sums = [], {}
        for f in item.files:
            if cancel is not None and cancel.is_set():
                raise hub.Cancelled("pull cancelled")
            path, digest = hub.download(f, progress, cancel)
            if digest is None:
                digest = store.known_digest(path)
            if digest is None or (f.sha256 and digest != f.sha256):
                digest = hub.verify(f, path, progress, cancel)
            store.remember_digest(path, digest)
            paths.append(str(path))
            sums[f.path] = digest
        if item.role == "mtp":   # not a model of its own: it lies next to the target, where --draft mtp finds it
            plan.mtp_paths = paths
            continue
        cat = item.catalog
        entries.append(ModelEntry(
            name=item.name, path=paths[0], files=paths, source="pull", alias=cat.alias if cat else None,
            family=cat.family if cat else None, size=cat.size if cat else None, quant=item.quant,
            repo=item.repo, revision=item.files[0].revision, bytes=item.bytes, sha256=sums))
    for e in entries:
        store.add_model(e)
    if plan.draft is not None and plan.compat is not None:
        store.add_pair(PairEntry(entries[0].name, entries[1].name, plan.compat.compatible, plan.compat.summary()))
    return entries


def refuse_if_incompatible(plan: PullPlan, force: bool) -> None:
    if plan.compat is not None and not plan.compat.compatible and not force:
        raise IncompatiblePair(plan.compat.summary() + " (use --force to pull anyway)", plan.compat)
