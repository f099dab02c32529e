"""The speculative decoding engine: loading, drafters, the loop, sampling, policy, stats.

Every generation is described by a :class:`RunSpec` and executed by :meth:`Engine.run`, which
emits typed events (:mod:`localspec.engine.events`). The engine knows nothing of terminals;
it must never import textual.
"""

from .engine import Engine, EngineConfig, rollback_depth
from .events import Done, Origin, PolicyNote, PromptProcessed, Step, StopReason, Summary, TextChunk, Token
from .sampling import SamplingConfig
from .spec import DrafterKind, RunSpec, SpecError

__all__ = [
    "Done", "DrafterKind", "Engine", "EngineConfig", "Origin", "PolicyNote", "PromptProcessed",
    "RunSpec", "SamplingConfig", "SpecError", "Step", "StopReason", "Summary", "TextChunk", "Token",
    "rollback_depth",
]
