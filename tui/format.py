"""Small text helpers shared by the widgets (no textual here)."""

from __future__ import annotations

BLOCKS = " ▏▎▍▌▋▊▉█"

# Model output may hold control characters (a random or byte-level model emits any byte):
# shown raw they would drive the terminal. C0 controls become their Unicode control
# pictures (␛ for ESC...), DEL and C1 controls the replacement character; \n and \t stay.
_CONTROLS = {c: 0x2400 + c for c in range(32) if c not in (9, 10)}
_CONTROLS[127] = 0x2421
_CONTROLS.update({c: 0xFFFD for c in range(0x80, 0xA0)})


def printable(text: str) -> str:
    """Text safe to show in a terminal (what is copied stays the model's own text)."""
    return text.translate(_CONTROLS)


def human_bytes(n: float) -> str:
    """Three significant figures: 812 MB, 6.40 GB -> 6.4 GB, 25.3 GB (a gauge should not flicker)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            if unit == "B" or abs(n) >= 100:
                return f"{n:.0f} {unit}"
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def human_count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells filled to ``fraction`` (eighths of a cell)."""
    if width <= 0:
        return ""
    f = 0.0 if fraction is None else min(max(fraction, 0.0), 1.0)
    eighths = round(f * width * 8)
    full, part = divmod(eighths, 8)
    out = "█" * full + (BLOCKS[part] if part and full < width else "")
    return out.ljust(width)


def pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x:.{digits}%}"


def num(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)
