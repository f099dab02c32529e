"""The speculative decoding engine: loading, drafters, the loop, sampling, stats.

It emits typed events (:mod:`localspec.engine.events`) and knows nothing of terminals;
it must never import textual.
"""

from .events import Done, Origin, PolicyNote, PromptProcessed, Step, StopReason, Summary, TextChunk, Token
from .sampling import SamplingConfig
from .session import DraftSettings, Engine, EngineConfig

__all__ = [
    "Done", "DraftSettings", "Engine", "EngineConfig", "Origin", "PolicyNote", "PromptProcessed",
    "SamplingConfig", "Step", "StopReason", "Summary", "TextChunk", "Token",
]
