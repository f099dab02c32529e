"""The settings a chat message is generated with, and their parsing from the settings form.

Pure Python (no textual): the settings screen hands the form's strings to
:func:`parse_settings`, which either returns a validated :class:`ChatSettings` or raises
:class:`SettingError` naming the field and saying what is wrong in one line.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from ..engine import DraftSettings, SamplingConfig
from ..errors import BadInput

DRAFTERS = ("model", "ngram", "none")
DRAFTER_LABELS = {"model": "draft model", "ngram": "n-gram (prompt lookup)", "none": "none (target only)"}


class SettingError(BadInput):
    """A value the settings form refuses; ``field`` names the form field."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ChatSettings:
    """Sampling, drafting and length settings, applied from the next message."""

    drafter: str = "model"
    adaptive: bool = True
    draft_max: int = 8
    draft_min: int = 1
    p_min: float | None = None            # None: the policy's own cost-based stop rule
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    draft_temperature: float | None = None  # None: as temperature
    max_tokens: int = 512

    def validate(self) -> None:
        if self.drafter not in DRAFTERS:
            raise SettingError("drafter", f"unknown drafter {self.drafter!r} (one of {', '.join(DRAFTERS)})")
        if self.max_tokens < 1:
            raise SettingError("max_tokens", f"max tokens must be at least 1 (got {self.max_tokens})")
        if self.draft_max < 1:
            raise SettingError("draft_max", f"draft max must be at least 1 (got {self.draft_max})")
        if self.draft_min < 1:
            raise SettingError("draft_min", f"draft min must be at least 1 (got {self.draft_min})")
        if self.draft_min > self.draft_max:
            raise SettingError("draft_min", f"draft min ({self.draft_min}) is larger than draft max "
                                            f"({self.draft_max})")
        if self.p_min is not None and not 0.0 <= self.p_min < 1.0:
            raise SettingError("p_min", f"p_min must be in [0, 1) (got {self.p_min})")
        checks = (("temperature", self.temperature), ("draft_temperature", self.draft_temperature))
        for name, value in checks:
            if value is not None and (not math.isfinite(value) or value < 0):
                raise SettingError(name, f"{name.replace('_', ' ')} must be >= 0 (got {value})")
        if self.top_k < 0:
            raise SettingError("top_k", f"top-k must be >= 0 (got {self.top_k}; 0 turns it off)")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingError("top_p", f"top-p must be in (0, 1] (got {self.top_p})")
        if not 0.0 <= self.min_p < 1.0:
            raise SettingError("min_p", f"min-p must be in [0, 1) (got {self.min_p})")
        if self.seed is not None and self.seed < 0:
            raise SettingError("seed", f"seed must be >= 0 (got {self.seed})")
        # The engine's own checks, as a backstop.
        self.sampling()
        self.drafting().validate()

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                              min_p=self.min_p, seed=self.seed, draft_temperature=self.draft_temperature)

    def drafting(self) -> DraftSettings:
        return DraftSettings(draft_max=self.draft_max, draft_min=self.draft_min, p_min=self.p_min,
                             fixed_k=not self.adaptive)

    def policy(self):
        """A fresh drafting policy for one generation."""
        return self.drafting().policy()

    def describe(self) -> str:
        """One line for the status bar."""
        if self.drafter == "none":
            drafting = "target only"
        else:
            k = f"adaptive K {self.draft_min}-{self.draft_max}" if self.adaptive else f"fixed K {self.draft_max}"
            drafting = f"{DRAFTER_LABELS[self.drafter]}, {k}"
        temp = "greedy" if self.temperature == 0 else f"temp {self.temperature:g}"
        return f"{drafting} · {temp} · max {self.max_tokens} tokens"

    def with_(self, **kw) -> ChatSettings:
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)


# -- the settings form --------------------------------------------------------------------

def _blank(text: str) -> bool:
    return not text.strip() or text.strip().lower() in ("auto", "none", "random", "off", "-")


def _int(field: str, label: str, text: str, *, optional: bool = False) -> int | None:
    if optional and _blank(text):
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise SettingError(field, f"{label}: {text.strip()!r} is not a whole number") from None


def _float(field: str, label: str, text: str, *, optional: bool = False) -> float | None:
    if optional and _blank(text):
        return None
    try:
        value = float(text.strip())
    except ValueError:
        raise SettingError(field, f"{label}: {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise SettingError(field, f"{label}: {text.strip()!r} is not a finite number")
    return value


FIELDS = {
    # field: (label, parser, optional); the form shows them two by two in this order
    "draft_max": ("draft max", _int, False),
    "draft_min": ("draft min", _int, False),
    "p_min": ("p_min", _float, True),
    "draft_temperature": ("draft temperature", _float, True),
    "temperature": ("temperature", _float, False),
    "seed": ("seed", _int, True),
    "top_k": ("top-k", _int, False),
    "top_p": ("top-p", _float, False),
    "min_p": ("min-p", _float, False),
    "max_tokens": ("max tokens", _int, False),
}


def parse_settings(values: dict[str, str], *, drafter: str, adaptive: bool) -> ChatSettings:
    """Settings from the form's text fields (blank optional fields mean automatic)."""
    parsed: dict = {"drafter": drafter, "adaptive": adaptive}
    for name, (label, parser, optional) in FIELDS.items():
        text = values.get(name, "")
        if not optional and not text.strip():
            raise SettingError(name, f"{label}: a value is needed")
        parsed[name] = parser(name, label, text, optional=optional)
    settings = ChatSettings(**parsed)
    settings.validate()
    return settings


def form_values(settings: ChatSettings) -> dict[str, str]:
    """The settings as the form shows them (blank for automatic)."""
    out = {}
    for name in FIELDS:
        value = getattr(settings, name)
        out[name] = "" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
    return out
