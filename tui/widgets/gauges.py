"""What the gauges say: speed (large digits and a sparkline), drafting, memory and CPU.

Each gauge is a :class:`Card`: a title and lines of styled text (component names, colours in
gauges.tcss) built from an immutable
snapshot (:class:`~localspec.chat.live.LiveStats`, :class:`~localspec.chat.system_stats.SystemStats`).
Cards are not widgets: :class:`~localspec.tui.widgets.gauge_column.GaugeColumn` draws them
all, framed, as the lines of one widget, so a frame that updates the gauges redraws only the
lines whose text changed (see its docstring for why).
"""

from __future__ import annotations

import textwrap

from textual.renderables.digits import DIGITS, DIGITS3X3_BOLD

from ...chat.live import LiveStats
from ...chat.system_stats import SystemStats
from ..format import bar, human_bytes, num, pct

_PHASES = {"idle": "idle", "prompt": "reading the prompt", "generating": "generating",
           "finished": "done", "stopped": "stopped", "failed": "failed"}

LABEL = 12   # label column of the drafting gauge

Part = tuple[str, "str | None"]     # (text, component name or None for the plain style)
Line = tuple[Part, ...]


class Lines:
    """Styled text written piece by piece, handed out line by line.

    A line is a tuple of (text, component name) parts: cheap to build, to compare with the
    line shown before, and to draw (the column turns names into styles once).
    """

    def __init__(self, width: int):
        self.width = width
        self._lines: list[list[Part]] = [[]]

    def add(self, text: str, style: str | None = None) -> None:
        """Append text (``\\n`` starts a new line) in one of the component styles."""
        first, *rest = text.split("\n")
        if first:
            self._lines[-1].append((first, style))
        for line in rest:
            self._lines.append([(line, style)] if line else [])

    def meter(self, fraction: float | None, width: int, style: str = "bar") -> None:
        """A bar of ``width`` cells: the filled part in ``style``, the rest as a faint track."""
        width = max(width, 3)
        filled = bar(fraction, width).rstrip()
        self.add(filled, style)
        self.add("░" * (width - len(filled)), "track")

    def lines(self) -> list[Line]:
        if self._lines == [[]]:
            return []
        return [tuple(parts) for parts in self._lines]


def plain(line: Line) -> str:
    return "".join(text for text, _ in line)


class Card:
    """One titled box of the gauge column."""

    title = ""

    def __init__(self) -> None:
        self.version = 0         # bumped whenever what the card shows changes

    @property
    def active(self) -> bool:
        """Whether the card's frame is highlighted."""
        return False

    def changed(self) -> None:
        self.version += 1

    def write(self, out: Lines) -> None:  # pragma: no cover - every card has its own
        raise NotImplementedError

    def lines(self, width: int) -> list[Line]:
        out = Lines(width)
        self.write(out)
        return out.lines()

    def text(self, width: int = 41) -> str:
        """The card's text, unstyled (what tests look at)."""
        return "\n".join(plain(line) for line in self.lines(width))


def big_digits(text: str) -> list[str]:
    """Three rows of large digits (Textual's own 3x3 glyphs)."""
    rows: list[list[str]] = [[], [], []]
    for ch in text.replace(".", "•"):
        try:
            pos = DIGITS.index(ch) * 3
        except ValueError:
            rows[0].append(" ")
            rows[1].append(" ")
            rows[2].append(ch)
            continue
        for r in range(3):
            rows[r].append(DIGITS3X3_BOLD[pos + r].ljust(3))
    return ["".join(r) for r in rows]


def spark_rows(data, width: int, rows: int = 2) -> list[str]:
    """Block-character sparkline of the last ``width`` values, ``rows`` lines high."""
    blocks = " ▁▂▃▄▅▆▇█"
    data = list(data)[-width:]
    top = max(data, default=0.0)
    levels = 8 * rows
    heights = [round(v / top * levels) if top > 0 else 0 for v in data]
    return ["".join(blocks[min(max(h - row * 8, 0), 8)] for h in heights).rjust(width)
            for row in range(rows - 1, -1, -1)]


class SpeedCard(Card):
    """Tokens per second as large digits, what they cover, and their recent history."""

    title = "speed"

    def __init__(self) -> None:
        super().__init__()
        self.stats = LiveStats()

    @property
    def active(self) -> bool:
        return self.stats.active

    @property
    def value(self) -> str:
        """The figure the digits show."""
        return f"{self.stats.rate:.1f}"

    def show(self, stats: LiveStats) -> None:
        self.stats = stats
        self.changed()

    def write(self, out: Lines) -> None:
        st, add = self.stats, out.add
        add("\n".join(big_digits(self.value)) + "\n", "digits")
        parts = ["tok/s", _PHASES.get(st.phase, st.phase)]
        if st.tokens:
            parts.append(f"{st.tokens} tokens in {st.elapsed:.1f} s")
        add(" · ".join(parts) + "\n", "muted")
        add("\n".join(spark_rows(st.history, out.width)), "spark")


class DraftingCard(Card):
    """Acceptance, accepted tokens per step, K, the draft/verify time split, and whether
    drafting is on (when the adaptive policy paused it, why, in its own words)."""

    title = "drafting"

    def __init__(self) -> None:
        super().__init__()
        self.stats = LiveStats()

    def show(self, stats: LiveStats) -> None:
        self.stats = stats
        self.changed()

    def write(self, out: Lines) -> None:
        st, add = self.stats, out.add
        if st.drafter == "none":
            add("drafting".ljust(LABEL), "label")
            add("off: the target alone", "muted")
            return
        w = out.width
        add("acceptance".ljust(LABEL), "label")
        add(f"{pct(st.acceptance):>4} ", "value")
        out.meter(st.acceptance, w - LABEL - 5)
        # One decimal and no running counts: the figures settle, and a line whose text did
        # not change is not redrawn.
        add("\n" + "accepted".ljust(LABEL), "label")
        add(f"{num(st.accepted_per_step, '.1f'):>4}", "value")
        add(" per drafting step", "muted")
        if st.drafter == "models" and st.by_drafter:
            add("\n" + "drafts".ljust(LABEL), "label")
            add(" · ".join(f"{name} {a}/{d}" for name, d, a in st.by_drafter), "value")
            add(" accepted", "muted")
        add("\n" + "emitted".ljust(LABEL), "label")
        add(f"{num(st.tokens_per_step, '.1f'):>4}", "value")
        add(" tokens per step", "muted")
        add("\n" + "K".ljust(LABEL), "label")
        add(f"{st.k:>4}", "value")
        add(" draft length now" if st.drafting else " (drafting paused)", "muted")
        share = st.draft_share
        add("\n" + "draft".ljust(6), "label")
        add(f"{pct(share):>4} ", "value")
        out.meter(share, w - 23, "bar-alt")
        add(f" {pct(None if share is None else 1 - share):>4}", "value")
        add(" verify\n", "label")
        self._write_policy(out)

    def _write_policy(self, out: Lines) -> None:
        st, width = self.stats, max(out.width, 10)
        reason = st.policy_reason
        if st.drafting:
            head = "● drafting on"
            out.add(head, "good")
            if reason:
                lines = textwrap.wrap(f"{head}: {reason}", width)
                out.add(lines[0][len(head):] + "".join("\n" + line for line in lines[1:]), "muted")
        else:
            out.add("‖ drafting paused: it does not pay here", "warn")
            if reason:
                reason = reason.replace("; drafting paused (", " (")  # the headline says it
                out.add("\n" + "\n".join(textwrap.wrap(reason, width)), "muted")


class SystemCard(Card):
    """VRAM per GPU (NVML), RAM and CPU (psutil)."""

    title = "memory · cpu"

    def __init__(self) -> None:
        super().__init__()
        self.stats = SystemStats()

    def show(self, stats: SystemStats) -> None:
        if stats != self.stats:
            self.stats = stats
            self.changed()

    def write(self, out: Lines) -> None:
        st, add = self.stats, out.add
        w, value_w = out.width, 20
        if st.gpus:
            for g in st.gpus:
                add(f"VRAM{g.index}".ljust(6), "label")
                add(f"{human_bytes(g.used)} / {human_bytes(g.total)}".ljust(value_w), "value")
                out.meter(g.used / g.total if g.total else None, w - 6 - value_w)
                add("\n" + " " * 6 + g.name + "\n", "muted")
        else:
            add("VRAM".ljust(6), "label")
            note = textwrap.wrap(st.gpu_note or "no GPU", max(w - 6, 10))
            add(("\n" + " " * 6).join(note) + "\n", "warn")
        add("RAM".ljust(6), "label")
        add(f"{human_bytes(st.ram_used)} / {human_bytes(st.ram_total)}".ljust(value_w), "value")
        out.meter(st.ram_used / st.ram_total if st.ram_total else None, w - 6 - value_w)
        add("\n" + "proc".ljust(6), "label")
        add(f"{human_bytes(st.process_rss)} resident", "value")
        if not st.gpus:
            add(" (models here)", "muted")
        add("\n" + "CPU".ljust(6), "label")
        cores = f" of {st.cpu_count} cpus" if st.cpu_count else ""
        add(f"{st.cpu_percent:.0f}%{cores}".ljust(value_w), "value")
        out.meter(st.cpu_percent / 100.0, w - 6 - value_w)
