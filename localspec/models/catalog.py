"""The model catalog (``models.toml``): tokenizer families, aliases, repos, quant files, drafts."""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import BadInput

QUANT_RE = re.compile(r"^(F32|F16|BF16|Q[2-8](_[0-9A-Z]+)*|IQ[1-4]_[A-Z0-9_]+|TQ[12]_0|MXFP4)$")
ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
SIZE_RE = re.compile(r"^(\d+(\.\d+)?)([mb])$")
DEFAULT_TARGET_QUANT = "Q4_K_M"
DEFAULT_DRAFT_QUANT = "Q8_0"


def size_in_billions(label: str) -> float:
    """'270m' -> 0.27, '1.5b' -> 1.5."""
    m = SIZE_RE.match(label.strip().lower())
    if not m:
        raise BadInput(f"not a model size: {label!r} (examples: 270m, 0.5b, 1.5b, 27b)")
    value = float(m.group(1))
    return value / 1000 if m.group(3) == "m" else value


@dataclass(frozen=True)
class Family:
    key: str
    name: str
    note: str = ""


@dataclass(frozen=True)
class CatalogModel:
    alias: str
    family: str
    label: str
    size: str
    params_b: float
    repo: str
    quants: dict[str, str] = field(hash=False)
    drafts: tuple[str, ...] = ()
    hybrid: bool = False
    verified: str | None = None
    unverified: str | None = None
    mtp: str | None = None           # "embedded", "separate" (see mtp_files) or None: not known
    mtp_files: dict[str, str] = field(default_factory=dict, hash=False)
    mtp_verified: str | None = None
    mtp_unverified: str | None = None

    @property
    def billions(self) -> float:
        return size_in_billions(self.size)

    def quant_file(self, quant: str) -> str:
        key = quant.upper()
        if key not in self.quants:
            raise BadInput(f"{self.alias} has no {key} file in the catalog (it has {', '.join(self.quants)})")
        return self.quants[key]


@dataclass
class Catalog:
    families: dict[str, Family]
    models: dict[str, CatalogModel]
    source: str = ""

    # -- lookups ----------------------------------------------------------------------
    def get(self, alias: str) -> CatalogModel:
        key = alias.strip().lower()
        if key in self.models:
            return self.models[key]
        close = difflib.get_close_matches(key, list(self.models), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see `localspec list --catalog`"
        raise BadInput(f"unknown model {alias!r}{hint}")

    def family_members(self, family: str) -> list[CatalogModel]:
        return sorted((m for m in self.models.values() if m.family == family), key=lambda m: m.billions)

    def drafts_by_distance(self, target: CatalogModel, size: float | None = None) -> list[CatalogModel]:
        """The family's models smaller than the target, nearest to ``size`` first
        (default: the target's recommended drafts first, then the smallest)."""
        smaller = [m for m in self.family_members(target.family)
                   if m.billions < target.billions and m.alias != target.alias]
        if size is None:
            rec = [self.models[a] for a in target.drafts if a in self.models]
            return rec + [m for m in smaller if m not in rec]
        return sorted(smaller, key=lambda m: abs(math.log(m.billions / size)))

    def resolve_draft(self, target: CatalogModel, spec: str | None) -> CatalogModel:
        """``--draft``: a size label within the target's family, or an alias; None picks the
        first recommended draft."""
        if spec is None:
            options = self.drafts_by_distance(target)
            if not options:
                raise BadInput(f"{target.alias} has no smaller model in its family to draft with")
            return options[0]
        key = spec.strip().lower()
        if key in self.models:
            draft = self.models[key]
            if draft.family != target.family:
                raise BadInput(f"{draft.alias} ({self.families[draft.family].name}) is not in "
                               f"{target.alias}'s tokenizer family ({self.families[target.family].name})")
            return draft
        if SIZE_RE.match(key):
            want = size_in_billions(key)
            for m in self.family_members(target.family):
                if m.alias != target.alias and math.isclose(m.billions, want, rel_tol=1e-6):
                    return m
            options = self.drafts_by_distance(target, want)
            listing = ", ".join(f"{m.size} ({m.alias})" for m in options) or "none"
            cmd = f"localspec pull {target.alias} --draft {options[0].size}" if options else ""
            raise BadInput(f"{self.families[target.family].name} has no {key} model; compatible drafts, "
                           f"nearest first: {listing}" + (f"; try: {cmd}" if cmd else ""))
        self.get(spec)  # raises "unknown model ... did you mean"
        raise AssertionError("unreachable")  # pragma: no cover

    def choose_draft(self, target: CatalogModel, spec: str | None) -> tuple[CatalogModel, str | None]:
        """Like :meth:`resolve_draft`, but a size the family lacks takes the nearest one the
        family has; the note says which and why, and lists the others."""
        key = (spec or "").strip().lower()
        if not SIZE_RE.match(key):
            return self.resolve_draft(target, spec), None
        want = size_in_billions(key)
        options = self.drafts_by_distance(target, want)
        exact = [m for m in options if math.isclose(m.billions, want, rel_tol=1e-6)]
        if exact or not options:
            return self.resolve_draft(target, spec), None
        pick, others = options[0], options[1:]
        family = self.families[target.family].name
        note = (f"{family} has no {key} model: taking the nearest compatible size, {pick.size} ({pick.alias})"
                + (f"; the others, nearest first: {', '.join(f'{m.size} ({m.alias})' for m in others)}"
                   if others else ""))
        return pick, note

    # -- validation -------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Everything wrong with the catalog (empty when it is sound)."""
        out = []
        for m in self.models.values():
            if not ALIAS_RE.match(m.alias):
                out.append(f"{m.alias}: alias must be lowercase letters, digits, '.', '-'")
            if m.family not in self.families:
                out.append(f"{m.alias}: unknown family {m.family!r}")
            if not re.match(r"^[\w.\-]+/[\w.\-]+$", m.repo):
                out.append(f"{m.alias}: repo {m.repo!r} is not owner/name")
            try:
                size_in_billions(m.size)
            except BadInput as exc:
                out.append(f"{m.alias}: {exc}")
            if not m.quants:
                out.append(f"{m.alias}: no quants")
            for q, f in m.quants.items():
                if not QUANT_RE.match(q):
                    out.append(f"{m.alias}: quant name {q!r} is not a llama.cpp type")
                if not f.endswith(".gguf") or ".." in f.split("/") or f.startswith("/"):
                    out.append(f"{m.alias}: {q} file {f!r} must be a relative .gguf path")
                if any(c in f for c in "*?[") and not re.search(r"-\*-of-\*\.gguf$|\d{5}-of-\d{5}\.gguf$", f):
                    out.append(f"{m.alias}: {q} pattern {f!r} must match split parts (-*-of-*.gguf)")
                names = {q.lower().replace("_", "")} | ({"fp16"} if q == "F16" else set())
                flat = f.lower().replace("_", "").replace("-", "")
                if not any(n in flat for n in names):
                    out.append(f"{m.alias}: {q} file {f!r} does not name its quant")
            for d in m.drafts:
                if d not in self.models:
                    out.append(f"{m.alias}: recommended draft {d!r} is not in the catalog")
                elif self.models[d].family != m.family:
                    out.append(f"{m.alias}: draft {d!r} is in another tokenizer family")
                elif self.models[d].billions >= m.billions:
                    out.append(f"{m.alias}: draft {d!r} is not smaller than the target")
            if not (m.verified or m.unverified):
                out.append(f"{m.alias}: says neither verified nor unverified")
            out += _mtp_problems(m)
        return out


MTP_KINDS = ("embedded", "separate")


def _mtp_problems(m: CatalogModel) -> list[str]:
    out = []
    if m.mtp is not None and m.mtp not in MTP_KINDS:
        out.append(f"{m.alias}: mtp must be one of {', '.join(MTP_KINDS)} (got {m.mtp!r})")
    if (m.mtp == "separate") != bool(m.mtp_files):
        out.append(f"{m.alias}: mtp_files go with mtp = \"separate\" (and only with it)")
    for q, f in m.mtp_files.items():
        name = f.rsplit("/", 1)[-1]
        if not QUANT_RE.match(q):
            out.append(f"{m.alias}: MTP quant name {q!r} is not a llama.cpp type")
        if not name.startswith("mtp-") or not f.endswith(".gguf") or ".." in f.split("/") or f.startswith("/"):
            out.append(f"{m.alias}: MTP file {f!r} must be a relative mtp-*.gguf path")
    if m.mtp and not (m.mtp_verified or m.mtp_unverified):
        out.append(f"{m.alias}: says where its MTP head was seen in neither mtp_verified nor mtp_unverified")
    return out


def catalog_path() -> Path:
    return Path(str(resources.files("localspec").joinpath("models.toml")))


def load_catalog(path: str | Path | None = None) -> Catalog:
    p = Path(path) if path else catalog_path()
    data = tomllib.loads(p.read_text(encoding="utf-8"))
    families = {k: Family(k, v.get("name", k), v.get("note", "")) for k, v in data.get("families", {}).items()}
    models: dict[str, CatalogModel] = {}
    dupes = []
    for raw in data.get("model", []):
        m = CatalogModel(
            alias=raw["alias"], family=raw["family"], label=raw.get("label", raw["alias"]), size=raw["size"],
            params_b=float(raw.get("params_b", 0.0)), repo=raw["repo"],
            quants={k.upper(): v for k, v in raw.get("quants", {}).items()},
            drafts=tuple(raw.get("drafts", ())), hybrid=bool(raw.get("hybrid", False)),
            verified=raw.get("verified"), unverified=raw.get("unverified"), mtp=raw.get("mtp"),
            mtp_files={k.upper(): v for k, v in raw.get("mtp_files", {}).items()},
            mtp_verified=raw.get("mtp_verified"), mtp_unverified=raw.get("mtp_unverified"))
        if m.alias in models:
            dupes.append(m.alias)
        models[m.alias] = m
    cat = Catalog(families, models, str(p))
    if dupes:
        raise BadInput(f"catalog {p}: duplicate aliases {', '.join(dupes)}")
    return cat


def match_quant_files(pattern: str, files: list[str]) -> list[str]:
    """The repo files a catalog entry names: the file itself, or every split part, in order."""
    if not any(c in pattern for c in "*?["):
        return [pattern] if pattern in files else []
    return sorted(f for f in files if fnmatch.fnmatchcase(f, pattern))
