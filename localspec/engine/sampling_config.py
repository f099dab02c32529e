"""The sampling settings of a run, apart from the numpy code that applies them
(:mod:`~localspec.engine.sampling`), so that what only reads or validates settings (the
command line, RunSpec) does not load numpy."""

from __future__ import annotations

from dataclasses import dataclass, replace


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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def for_draft(self) -> SamplingConfig:
        """The settings the draft samples with (its own temperature, if one is set)."""
        if self.draft_temperature is None:
            return self
        return replace(self, temperature=self.draft_temperature, draft_temperature=None)

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "min_p": self.min_p, "seed": self.seed,
                "draft_temperature": self.draft_temperature, "infill": self.infill}
