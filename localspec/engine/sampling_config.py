"""The sampling settings of a run, apart from the numpy code that applies them
(:mod:`~localspec.engine.sampling`), so that what only reads or validates settings (the
command line, RunSpec) does not load numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

DRY_BREAKERS = ("\n", ":", "\"", "*")     # llama.cpp's default DRY sequence breakers


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings shared by target and draft (llama.cpp's defaults); validated as part
    of :class:`~localspec.engine.spec.RunSpec`."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    draft_temperature: float | None = None  # None: same as temperature
    infill: bool = False    # llama.cpp's infill sampler last (code completion; the target's draws only)
    # llama.cpp's logit bias and penalties samplers, first in its chain (the target's choices
    # only; see engine/penalties.py): (token id, bias) pairs, -inf forbids a token; the last
    # repeat_last_n tokens of prompt and answer (-1: all, 0: off) have their logits divided
    # (negative: multiplied) by repeat_penalty, then lowered by frequency_penalty per
    # occurrence and presence_penalty once.
    logit_bias: tuple[tuple[int, float], ...] = ()
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    # llama.cpp's DRY sampler, after the penalties (engine/dry.py): a token that would extend a
    # repeat of at least dry_allowed_length tokens among the last dry_penalty_last_n (-1: all,
    # 0: off) loses dry_multiplier * dry_base ** (length - dry_allowed_length); repeats end at
    # the sequence breakers. dry_multiplier 0: off.
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = DRY_BREAKERS
    # The breakers as the target's tokens (engine/dry.py's restart sequences): set by the
    # engine when a run starts, never by a caller.
    dry_restarts: tuple = field(default=(), compare=False, repr=False)

    def __post_init__(self):
        # Pairs from a dict or lists too (JSON); a bias of false is -inf, as llama-server has it.
        bias = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias or ()
        pairs = (tuple(p) if isinstance(p, (list, tuple)) else p for p in bias)
        object.__setattr__(self, "logit_bias", tuple(
            (p[0], -math.inf) if isinstance(p, tuple) and len(p) == 2 and p[1] is False else p for p in pairs))
        if isinstance(self.dry_sequence_breakers, list):
            object.__setattr__(self, "dry_sequence_breakers", tuple(self.dry_sequence_breakers))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def dry(self) -> bool:
        """Whether DRY is on (llama.cpp's rule: a multiplier, a base of 1 or more, a window)."""
        return self.dry_multiplier != 0.0 and self.dry_base >= 1.0 and self.dry_penalty_last_n != 0

    @property
    def repeats(self) -> bool:
        """Whether the repetition penalties are on (a window and a penalty that changes something)."""
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0)

    @property
    def penalized(self) -> bool:
        """Whether a logit bias, a penalty or DRY changes the target's rows (they are then read whole)."""
        return bool(self.logit_bias) or self.dry or self.repeats

    def for_draft(self) -> SamplingConfig:
        """The settings the draft samples with (its own temperature, if one is set)."""
        if self.draft_temperature is None:
            return self
        return replace(self, temperature=self.draft_temperature, draft_temperature=None)

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "min_p": self.min_p, "seed": self.seed,
                "draft_temperature": self.draft_temperature, "infill": self.infill,
                "logit_bias": [[t, False if b == -math.inf else b] for t, b in self.logit_bias],
                "repeat_penalty": self.repeat_penalty, "repeat_last_n": self.repeat_last_n,
                "frequency_penalty": self.frequency_penalty, "presence_penalty": self.presence_penalty,
                "dry_multiplier": self.dry_multiplier, "dry_base": self.dry_base,
                "dry_allowed_length": self.dry_allowed_length, "dry_penalty_last_n": self.dry_penalty_last_n,
                "dry_sequence_breakers": list(self.dry_sequence_breakers)}
