"""Where localspec keeps its files: the platform's user dirs, or LOCALSPEC_HOME for tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

import platformdirs


def home() -> Path:
    """Root of localspec's data (models it made, settings); LOCALSPEC_HOME overrides it."""
    env = os.environ.get("LOCALSPEC_HOME")
    p = Path(env).expanduser() if env else Path(platformdirs.user_data_dir("localspec", appauthor=False))
    p.mkdir(parents=True, exist_ok=True)
    return p


def models_dir() -> Path:
    p = home() / "models"
    p.mkdir(parents=True, exist_ok=True)
    return p


def read_json(name: str) -> dict:
    """A small JSON store in localspec's home; empty when missing or unreadable."""
    p = home() / name
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(name: str, data: dict) -> None:
    """Replace a small JSON store atomically (a reader never sees half a file)."""
    p = home() / name
    tmp = p.with_name(f"{name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(p)
