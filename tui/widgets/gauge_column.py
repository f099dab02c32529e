"""The chat screen's gauge column: every card, framed, drawn as the lines of one widget.

Why one widget: while an answer streams, each frame refreshes a few lines of text on the
left and a few gauge lines on the right, and Textual draws a frame from every widget in the
rectangle around everything refreshed. With each gauge a bordered widget in nested
containers, that was a dozen more widgets and their lines in every frame. Drawn here as one
scrollable widget with its own frames and titles, the column renders again only the lines
whose text changed, and a card growing or shrinking never lays the screen out again (see
also :mod:`..compositor`, which keeps a frame to the rows it updates).
"""

from __future__ import annotations

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.events import Resize
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...chat.live import LiveStats
from ...chat.session import ModelSummary
from ...chat.system_stats import SystemStats
from .gauges import Card, DraftingCard, Line, SpeedCard, SystemCard, plain
from .model_panel import ModelsCard

STYLES = ("label", "value", "bar", "bar-alt", "track", "good", "warn", "bad", "muted", "name", "digits",
          "spark", "frame", "frame-active", "title", "title-active")


def clip(line: Line, width: int) -> Line:
    """The first ``width`` cells of a line, each part keeping its style."""
    out = []
    for text, style in line:
        cells = cell_len(text)
        if cells >= width:
            out.append((set_cell_size(text, width), style))
            break
        out.append((text, style))
        width -= cells
    return tuple(out)


class GaugeColumn(ScrollView):
    """Speed, drafting, memory and CPU, and the models, in titled boxes (colours in gauges.tcss)."""

    COMPONENT_CLASSES = {f"gauge--{name}" for name in STYLES}

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.speed = SpeedCard()
        self.drafting = DraftingCard()
        self.system = SystemCard()
        self.models = ModelsCard()
        self.cards: tuple[Card, ...] = (self.speed, self.drafting, self.system, self.models)
        self._framed: dict[Card, tuple[tuple[int, bool], list[Line]]] = {}  # card -> (state, lines)
        self._lines: list[Line] = []
        self._strips: list[Strip | None] = []
        self._width = 0
        self._styles: dict[str | None, Style] = {}

    # -- what is shown ----------------------------------------------------------------
    def show_stats(self, stats: LiveStats, system: SystemStats | None = None) -> None:
        """The generation's figures (and memory and CPU, when given): one redraw."""
        self.speed.show(stats)
        self.drafting.show(stats)
        if system is not None:
            self.system.show(system)
        self.update_lines()

    def show_system(self, stats: SystemStats) -> None:
        self.system.show(stats)
        self.update_lines()

    def show_models(self, summary: ModelSummary | None, status: str = "") -> None:
        self.models.show(summary, status)
        self.update_lines()

    @property
    def text(self) -> str:
        """Everything the column shows, unstyled."""
        return "\n".join(plain(line) for line in self._lines)

    # -- lines ------------------------------------------------------------------------
    def style_of(self, name: str | None) -> Style:
        """The Rich style a part is drawn in: the column's own, plus the component's colours."""
        style = self._styles.get(name)
        if style is None:     # looked up once per component (the lookup walks the CSS)
            base = self.visual_style
            if name is not None:     # combined as Textual styles: a translucent colour blends
                base = base + self.get_visual_style(f"gauge--{name}", partial=True)
            style = self._styles[name] = base.rich_style
        return style

    def _frame(self, card: Card, width: int) -> list[Line]:
        """A card's lines in a rounded box with its title in the top edge."""
        inner = max(width - 4, 1)
        state = "-active" if card.active else ""
        border, title = f"frame{state}", f"title{state}"
        name = f" {card.title} "
        lines: list[Line] = [(("╭─", border), (name, title), ("─" * max(width - 3 - len(name), 0) + "╮", border))]
        left, right = ("│ ", border), (" │", border)
        for line in card.lines(inner):
            room = inner - cell_len(plain(line))
            if room < 0:                   # wider than the box (the gauges size to fit): cut
                line, room = clip(line, inner), 0
            lines.append((left, *line, (" " * room, None), right))
        lines.append((("╰" + "─" * max(width - 2, 0) + "╯", border),))
        return lines

    def update_lines(self) -> None:
        """Frame the cards that changed; redraw only the lines whose text changed."""
        width = self._width
        if not width:
            return                     # not laid out yet: on_resize draws everything
        lines: list[Line] = []
        for card in self.cards:
            state = (card.version, card.active)
            framed = self._framed.get(card)
            if framed is None or framed[0] != state:
                framed = self._framed[card] = (state, self._frame(card, width))
            lines.extend(framed[1])
        old, self._lines = self._lines, lines
        if len(lines) != len(old):
            self._strips = [None] * len(lines)
            self.virtual_size = Size(width, len(lines))
            self.refresh()
            return
        strips, top, height = self._strips, self.scroll_offset.y, self.size.height
        for y, (a, b) in enumerate(zip(old, lines)):
            if a is not b and a != b:
                strips[y] = None
                if top <= y < top + height:
                    self.refresh_line(y)

    def _redraw(self) -> None:
        self._framed.clear()
        self._lines, self._strips = [], []
        self.update_lines()

    def on_resize(self, event: Resize) -> None:
        width = self.scrollable_content_region.width
        if width != self._width:
            self._width = width
            self._redraw()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}              # the theme or the CSS changed
        if self._width:
            self._redraw()

    def render_line(self, y: int) -> Strip:
        index = y + self.scroll_offset.y
        width = self._width
        if index >= len(self._lines):
            return Strip.blank(width, self.style_of(None))
        strip = self._strips[index]
        if strip is None:
            style_of = self.style_of
            strip = Strip([Segment(text, style_of(name)) for text, name in self._lines[index]])
            strip = self._strips[index] = strip.crop_extend(0, width, style_of(None))
        return strip
