"""The app's settings form: its fields, parsed into a :class:`RunSpec` and shown back.

Pure Python (no textual): the settings screen hands the form's strings to
:func:`parse_settings`, which returns a validated RunSpec or raises :class:`SettingError`
naming the form field. The ranges themselves are RunSpec's (:meth:`RunSpec.validate`).
"""

from __future__ import annotations

import math

from ..engine.spec import DrafterKind, RunSpec, SpecError
from ..errors import BadInput

# What a chat message is generated with until the user changes it: RunSpec's defaults, with
# room for longer answers.
CHAT_DEFAULTS = RunSpec(max_tokens=512)


class SettingError(BadInput):
    """A value the settings form refuses; ``field`` names the form field."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


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
    "repeat_penalty": ("repeat penalty", _float, False),
    "dry_multiplier": ("DRY multiplier", _float, False),
}


def validate(spec: RunSpec) -> RunSpec:
    """RunSpec's validation, its message worded with the form's labels."""
    try:
        return spec.validate()
    except SpecError as exc:
        label = FIELDS.get(exc.field, (exc.field.replace("_", " "),))[0]
        raise SettingError(exc.field, exc.named(label)) from None


def parse_settings(values: dict[str, str], *, drafter: str | DrafterKind, adaptive: bool,
                   base: RunSpec | None = None) -> RunSpec:
    """Settings from the form's text fields (blank optional fields mean automatic), on top of
    ``base`` (the settings in force: what the form does not show, such as stop strings or
    penalties given on the command line, stays as it was)."""
    parsed: dict = {"drafter": DrafterKind.parse(drafter), "adaptive": adaptive}
    for name, (label, parser, optional) in FIELDS.items():
        text = values.get(name, "")
        if not optional and not text.strip():
            raise SettingError(name, f"{label}: a value is needed")
        parsed[name] = parser(name, label, text, optional=optional)
    return validate((base or RunSpec()).with_(**parsed))


def field_value(spec: RunSpec, name: str):
    return getattr(spec.sampling, name) if hasattr(spec.sampling, name) else getattr(spec, name)


def form_values(spec: RunSpec) -> dict[str, str]:
    """The settings as the form shows them (blank for automatic)."""
    out = {}
    for name in FIELDS:
        value = field_value(spec, name)
        out[name] = "" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
    return out
