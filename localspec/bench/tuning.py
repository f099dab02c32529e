"""Tuned settings per pair and machine (`localspec tune`), keyed by the two files and the backend."""

from __future__ import annotations

import time
from pathlib import Path

from ..engine.fingerprint import pair_key
from ..paths import read_json, update_json

FILE = "tuned.json"


def mtp_key(target: str | Path, head: str | Path | None, backend: str) -> str:
    """The key of a target drafting with its own MTP head (``head`` None: embedded)."""
    return pair_key(target, head or target, backend) + "|mtp"


def load() -> dict:
    return read_json(FILE)


def store(key: str, entry: dict) -> None:
    """Keep ``entry`` (stamped with the time) under ``key``, beside every other process's entries."""
    entry = dict(entry, tuned_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    update_json(FILE, lambda data: data.__setitem__(key, entry))


def lookup(target: str | Path, draft: str | Path | None, backend: str) -> dict | None:
    try:
        key = pair_key(target, draft, backend)
    except OSError:
        return None
    return load().get(key)


def lookup_mtp(target: str | Path, head: str | Path | None, backend: str) -> dict | None:
    try:
        key = mtp_key(target, head, backend)
    except OSError:
        return None
    return load().get(key)


def reset(key: str | None = None) -> int:
    """Forget every tuned setting (``key`` None) or one; how many were forgotten."""

    def forget(data: dict) -> int:
        if key is not None:
            return 1 if data.pop(key, None) is not None else 0
        n = len(data)
        data.clear()
        return n

    return update_json(FILE, forget)


def describe(settings: dict) -> str:
    if settings.get("fixed_k"):
        text = f"fixed K={settings['draft_max']}"
    else:
        text = f"adaptive K up to {settings.get('draft_max', 8)}"
    if settings.get("p_min") is not None:
        text += f", p-min {settings['p_min']:g}"
    if settings.get("draft_temp") is not None:
        text += f", draft-temp {settings['draft_temp']:g}"
    return text


def cascade_key(target: str | Path, draft: str | Path, backend: str) -> str:
    """The key of a pair's calibrated cascade threshold (`localspec tune --cascade`)."""
    return pair_key(target, draft, backend) + "|cascade"


def lookup_cascade(target: str | Path, draft: str | Path, backend: str) -> dict | None:
    try:
        key = cascade_key(target, draft, backend)
    except OSError:
        return None
    return load().get(key)
