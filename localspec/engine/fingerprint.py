"""Model files identified by content, cheaply: what `localspec tune`'s settings and the
policy's learned state are keyed by (a renamed or moved file keeps its key)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def fingerprint(path: str | Path) -> str:
    """Its size and a hash of its first 4 MB."""
    p = Path(path)
    h = hashlib.sha1()
    with open(p, "rb") as f:
        h.update(f.read(4 << 20))
    return f"{p.stat().st_size}-{h.hexdigest()[:16]}"


def pair_key(target: str | Path, draft: str | Path | None, backend: str) -> str:
    """A target, its draft (or none) and the backend they run on."""
    return f"{fingerprint(target)}|{fingerprint(draft) if draft else 'none'}|{backend}"
