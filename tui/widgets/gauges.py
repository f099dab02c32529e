"""Live gauges: speed (large digits and a sparkline), drafting, memory and CPU.

Each gauge renders from an immutable snapshot (:class:`~localspec.tui.live.LiveStats`,
:class:`~localspec.tui.system_stats.SystemStats`). The text gauges build Textual ``Content``
directly (no Rich conversion) and lay the screen out again only when their height changes:
updating one is a cheap repaint. Colours come from the component classes in gauges.tcss.
"""

from __future__ import annotations

import textwrap

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.content import Content
from textual.renderables.digits import DIGITS, DIGITS3X3_BOLD
from textual.widget import Widget

from ..format import bar, human_bytes, num, pct
from ..live import LiveStats
from ..system_stats import SystemStats

_PHASES = {"idle": "idle", "prompt": "reading the prompt", "generating": "generating",
           "finished": "done", "stopped": "stopped", "failed": "failed"}

LABEL = 12   # label column of the drafting gauge


class TextGauge(Widget):
    """A gauge drawn as styled text lines (labels, values, bars)."""

    COMPONENT_CLASSES = {"gauge--label", "gauge--value", "gauge--bar", "gauge--bar-alt", "gauge--track",
                         "gauge--good", "gauge--warn", "gauge--muted", "gauge--digits", "gauge--spark"}

    _height = -1
    _content: Content | None = None

    def __init__(self, **kw):
        super().__init__(**kw)
        self._parts: list = []
        self._visual_styles: dict = {}   # component name -> style, looked up once

    # -- building ---------------------------------------------------------------------
    def add(self, text: str, style: str | None = None) -> None:
        """Append text in one of the gauge's component styles (label, value, bar, ...)."""
        if style:
            visual = self._visual_styles.get(style)
            if visual is None:
                visual = self._visual_styles[style] = self.get_visual_style(f"gauge--{style}", partial=True)
            self._parts.append((text, visual))
        else:
            self._parts.append(text)

    def meter(self, fraction: float | None, width: int, style: str = "bar") -> None:
        """A bar of ``width`` cells: the filled part in ``style``, the rest as a faint track."""
        width = max(width, 3)
        filled = bar(fraction, width).rstrip()
        self.add(filled, style)
        self.add("░" * (width - len(filled)), "track")

    _layout_width = 0

    @property
    def width(self) -> int:
        """The content width Textual last laid this gauge out with (asking the widget for its
        size here could start a layout pass that renders this very widget again)."""
        return self._layout_width or 40

    def get_content_height(self, container, viewport, width: int) -> int:
        if width and width != self._layout_width:
            self._layout_width = width
            self._content = None        # bars follow the width
        return super().get_content_height(container, viewport, width)

    def build(self) -> None:  # pragma: no cover - every gauge has its own
        raise NotImplementedError

    def _make(self) -> Content:
        parts = self._parts = []
        self.build()
        self._parts = []
        return Content.assemble(*parts)

    # -- drawing ----------------------------------------------------------------------
    def render(self) -> Content:
        if self._content is None:
            self._content = self._make()
        return self._content

    def notify_style_update(self) -> None:
        self._content = None           # the theme or the CSS changed
        self._visual_styles = {}
        super().notify_style_update()

    def repaint(self) -> None:
        """Repaint what changed: nothing when the figures shown are the same (figures rounded
        for display often are), only the changed lines when the height is the same (a frame
        then redraws a few lines, not the gauge), a layout pass only when the height changes."""
        content = self._make()
        old = self._content
        if old is not None and content.is_same(old):
            return
        self._content = content
        # The gauges lay out their own lines (text-wrap: nowrap in gauges.tcss): no wrapping.
        lines = content.split("\n", allow_blank=True)
        height = len(lines)
        if height != self._height:
            self._height = height
            self.refresh(layout=True)
        elif old is None:
            self.refresh()
        else:
            before = old.split("\n", allow_blank=True)
            width = self._layout_width or self.size.width
            changed = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(before, lines)) if not a.is_same(b)]
            if changed:
                self.refresh(*changed)


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


class SpeedGauge(TextGauge):
    """Tokens per second as large digits, what they cover, and their recent history.

    One widget, one repaint: the digits, the caption and the two-row sparkline are lines of
    the same text (each part a widget of its own would cost a repaint each, four times a
    second).
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        self.stats = LiveStats()

    @property
    def value(self) -> str:
        """The figure the digits show."""
        return f"{self.stats.rate:.1f}"

    def show(self, stats: LiveStats) -> None:
        self.stats = stats
        self.set_class(stats.active, "-active")
        self.repaint()

    def build(self) -> None:
        st, add = self.stats, self.add
        add("\n".join(big_digits(self.value)) + "\n", "digits")
        parts = ["tok/s", _PHASES.get(st.phase, st.phase)]
        if st.tokens:
            parts.append(f"{st.tokens} tokens in {st.elapsed:.1f} s")
        add(" · ".join(parts) + "\n", "muted")
        add("\n".join(spark_rows(st.history, self.width)), "spark")


class DraftGauge(TextGauge):
    """Acceptance, accepted tokens per step, K and the draft/verify time split."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.stats = LiveStats()

    def show(self, stats: LiveStats) -> None:
        self.stats = stats
        self.repaint()

    def build(self) -> None:
        st, add = self.stats, self.add
        if st.drafter == "none":
            add("drafting".ljust(LABEL), "label")
            add("off: the target alone", "muted")
            return
        w = self.width
        add("acceptance".ljust(LABEL), "label")
        add(f"{pct(st.acceptance):>4} ", "value")
        self.meter(st.acceptance, w - LABEL - 5)
        # One decimal and no running counts: the figures settle, and a gauge whose text did
        # not change is not repainted.
        add("\n" + "accepted".ljust(LABEL), "label")
        add(f"{num(st.accepted_per_step, '.1f'):>4}", "value")
        add(" per drafting step", "muted")
        add("\n" + "emitted".ljust(LABEL), "label")
        add(f"{num(st.tokens_per_step, '.1f'):>4}", "value")
        add(" tokens per step", "muted")
        add("\n" + "K".ljust(LABEL), "label")
        add(f"{st.k:>4}", "value")
        add(" draft length now" if st.drafting else " (drafting paused)", "muted")
        share = st.draft_share
        add("\n" + "draft".ljust(6), "label")
        add(f"{pct(share):>4} ", "value")
        self.meter(share, w - 23, "bar-alt")
        add(f" {pct(None if share is None else 1 - share):>4}", "value")
        add(" verify", "label")


class PolicyState(TextGauge):
    """Whether drafting is on, and when the adaptive policy paused it, why (its own words).

    A widget of its own: it changes only when the policy changes its mind, so the numbers
    above it repaint without re-wrapping this text.
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        self.state: tuple[str, bool, str] = ("", True, "")

    def show(self, stats: LiveStats) -> None:
        state = (stats.drafter, stats.drafting, stats.policy_reason)
        if state != self.state:
            self.state = state
            self.repaint()

    def build(self) -> None:
        drafter, drafting, reason = self.state
        if drafter == "none":
            return
        width = max(self.width, 10)
        if drafting:
            head = "● drafting on"
            self.add(head, "good")
            if reason:
                lines = textwrap.wrap(f"{head}: {reason}", width)
                self.add(lines[0][len(head):] + "".join("\n" + line for line in lines[1:]), "muted")
        else:
            self.add("‖ drafting paused: it does not pay here", "warn")
            if reason:
                reason = reason.replace("; drafting paused (", " (")  # the headline says it
                self.add("\n" + "\n".join(textwrap.wrap(reason, width)), "muted")


class SystemGauge(TextGauge):
    """VRAM per GPU (NVML), RAM and CPU (psutil)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.stats = SystemStats()

    def show(self, stats: SystemStats) -> None:
        if stats != self.stats:
            self.stats = stats
            self.repaint()

    def build(self) -> None:
        st, add = self.stats, self.add
        w, value_w = self.width, 20
        if st.gpus:
            for g in st.gpus:
                add(f"VRAM{g.index}".ljust(6), "label")
                add(f"{human_bytes(g.used)} / {human_bytes(g.total)}".ljust(value_w), "value")
                self.meter(g.used / g.total if g.total else None, w - 6 - value_w)
                add("\n" + " " * 6 + g.name + "\n", "muted")
        else:
            add("VRAM".ljust(6), "label")
            note = textwrap.wrap(st.gpu_note or "no GPU", max(w - 6, 10))
            add(("\n" + " " * 6).join(note) + "\n", "warn")
        add("RAM".ljust(6), "label")
        add(f"{human_bytes(st.ram_used)} / {human_bytes(st.ram_total)}".ljust(value_w), "value")
        self.meter(st.ram_used / st.ram_total if st.ram_total else None, w - 6 - value_w)
        add("\n" + "proc".ljust(6), "label")
        add(f"{human_bytes(st.process_rss)} resident", "value")
        if not st.gpus:
            add(" (models here)", "muted")
        add("\n" + "CPU".ljust(6), "label")
        cores = f" of {st.cpu_count} cpus" if st.cpu_count else ""
        add(f"{st.cpu_percent:.0f}%{cores}".ljust(value_w), "value")
        self.meter(st.cpu_percent / 100.0, w - 6 - value_w)


class GaugePanel(Vertical):
    """The gauges of the chat screen, together."""

    def compose(self) -> ComposeResult:
        speed = SpeedGauge(id="speed", classes="gauge")
        speed.border_title = "speed"
        yield speed
        with Vertical(id="drafting-box", classes="gauge") as box:
            box.border_title = "drafting"
            yield DraftGauge(id="drafting")
            yield PolicyState(id="policy")
        system = SystemGauge(id="system", classes="gauge")
        system.border_title = "memory · cpu"
        yield system

    def show_stats(self, stats: LiveStats) -> None:
        self.query_one(SpeedGauge).show(stats)
        self.query_one(DraftGauge).show(stats)
        self.query_one(PolicyState).show(stats)

    def show_system(self, stats: SystemStats) -> None:
        self.query_one(SystemGauge).show(stats)
