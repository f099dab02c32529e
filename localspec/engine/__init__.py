"""The speculative decoding engine: loading, drafters, the loop, sampling, policy, stats.

Every generation is described by a :class:`RunSpec` and executed by :meth:`Engine.run`, which
emits typed events (:mod:`localspec.engine.events`). The engine is the bottom layer: it
imports nothing from models, chat, bench, server, cli or tui, and never textual
(tests/test_architecture.py); what it needs of a GGUF file it reads itself
(:mod:`~localspec.engine.gguf_meta`, :mod:`~localspec.engine.compat`,
:mod:`~localspec.engine.template`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Each public name and the submodule that defines it. They load on first use, so that what
# needs only the run settings or the events (the command line's help, `localspec list`) does
# not load llama.cpp, which :mod:`localspec.engine.engine` and its backend do.
_EXPORTS = {
    "Engine": "engine", "EngineConfig": "engine", "rollback_depth": "engine",
    "Done": "events", "Origin": "events", "PolicyNote": "events", "PromptProcessed": "events", "Step": "events",
    "StopReason": "events", "Summary": "events", "TextChunk": "events", "Token": "events",
    "SamplingConfig": "sampling_config",
    "DrafterKind": "spec", "RunSpec": "spec", "SpecError": "spec",
}

__all__ = [
    "Done", "DrafterKind", "Engine", "EngineConfig", "Origin", "PolicyNote", "PromptProcessed",
    "RunSpec", "SamplingConfig", "SpecError", "Step", "StopReason", "Summary", "TextChunk", "Token",
    "rollback_depth",
]

if TYPE_CHECKING:
    from .engine import Engine, EngineConfig, rollback_depth
    from .events import Done, Origin, PolicyNote, PromptProcessed, Step, StopReason, Summary, TextChunk, Token
    from .sampling_config import SamplingConfig
    from .spec import DrafterKind, RunSpec, SpecError


def __getattr__(name: str):
    """Import the submodule that defines ``name`` on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
