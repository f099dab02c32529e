"""Where localspec keeps its files: the platform's user dirs, or LOCALSPEC_HOME for tests."""

from __future__ import annotations

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
