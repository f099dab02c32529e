"""The local store: which models and pairs are ready to use, in one JSON registry.

Every read and every read-modify-write holds the registry's lock
(:func:`localspec.paths.locked`, on POSIX and Windows alike) and a write replaces the file
atomically, so two localspec processes never lose each other's entries nor corrupt it. Entries point at files where they
already live (the Hugging Face cache, or wherever an imported file is).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..paths import home, locked, write_text_atomic

REGISTRY = "registry.json"


@dataclass
class ModelEntry:
    name: str
    path: str                        # the file to load (first part of a split model)
    files: list[str] = field(default_factory=list)
    source: str = "import"           # pull | import | quantize
    alias: str | None = None         # catalog alias
    family: str | None = None
    size: str | None = None
    quant: str | None = None
    repo: str | None = None
    revision: str | None = None
    bytes: int = 0
    sha256: dict[str, str] = field(default_factory=dict)
    added: str = ""

    def exists(self) -> bool:
        return all(Path(f).is_file() for f in (self.files or [self.path]))


@dataclass
class PairEntry:
    target: str
    draft: str
    compatible: bool
    summary: str = ""
    checked: str = ""

    @property
    def key(self) -> str:
        return pair_key(self.target, self.draft)


def pair_key(target: str, draft: str) -> str:
    """How a pair is named: ``target + draft``."""
    return f"{target} + {draft}"


class Store:
    """The registry under localspec's home (``LOCALSPEC_HOME`` moves it)."""

    def __init__(self, root: Path | None = None):
        self.root = root or home()
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / REGISTRY

    def _locked(self):
        return locked(self.path)

    def _read(self) -> dict:
        try:
            with self._locked():
                return self._read_unlocked()
        except OSError:   # a read-only store: no lock file can be made
            return self._read_unlocked()

    def _read_unlocked(self) -> dict:
        if not self.path.exists():
            return {"models": {}, "pairs": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            raise BadInput(f"{self.path}: the registry is unreadable; move it away to start afresh") from None
        data.setdefault("models", {})
        data.setdefault("pairs", {})
        return data

    def _write(self, data: dict) -> None:
        write_text_atomic(self.path, json.dumps(data, indent=2, sort_keys=True))

    # -- reading ----------------------------------------------------------------------
    def models(self) -> list[ModelEntry]:
        return [ModelEntry(**m) for m in self._read()["models"].values()]

    def pairs(self) -> list[PairEntry]:
        return [PairEntry(**p) for p in self._read()["pairs"].values()]

    def get(self, name: str) -> ModelEntry | None:
        raw = self._read()["models"].get(name)
        return ModelEntry(**raw) if raw else None

    def by_alias(self, alias: str, prefer_quant: str | None = None) -> ModelEntry | None:
        found = [m for m in self.models() if m.alias == alias]
        if not found:
            return None
        if prefer_quant:
            for m in found:
                if (m.quant or "").upper() == prefer_quant.upper():
                    return m
        return sorted(found, key=lambda m: m.added)[-1]

    # -- writing ----------------------------------------------------------------------
    def add_model(self, entry: ModelEntry) -> None:
        entry.added = entry.added or time.strftime("%Y-%m-%dT%H:%M:%S")
        with self._locked():
            data = self._read()
            data["models"][entry.name] = asdict(entry)
            self._write(data)

    def add_pair(self, pair: PairEntry) -> None:
        pair.checked = pair.checked or time.strftime("%Y-%m-%dT%H:%M:%S")
        with self._locked():
            data = self._read()
            data["pairs"][pair.key] = asdict(pair)
            self._write(data)

    # -- verified checksums, so a 20 GB file is hashed once ------------------------------
    def known_digest(self, path: Path) -> str | None:
        real = Path(path).resolve()
        rec = self._read().get("verified", {}).get(str(real))
        try:
            st = real.stat()
        except OSError:
            return None
        if rec and rec["size"] == st.st_size and rec["mtime"] == st.st_mtime:
            return rec["sha256"]
        return None

    def remember_digest(self, path: Path, digest: str) -> None:
        real = Path(path).resolve()
        st = real.stat()
        with self._locked():
            data = self._read()
            data.setdefault("verified", {})[str(real)] = {"size": st.st_size, "mtime": st.st_mtime,
                                                          "sha256": digest}
            self._write(data)

    def remove(self, name: str) -> ModelEntry:
        with self._locked():
            data = self._read()
            raw = data["models"].pop(name, None)
            if raw is None:
                raise BadInput(f"no model named {name!r} in the store (see `localspec list`)")
            data["pairs"] = {k: p for k, p in data["pairs"].items()
                             if p["target"] != name and p["draft"] != name}
            self._write(data)
        return ModelEntry(**raw)
