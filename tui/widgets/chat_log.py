"""The conversation: user messages and answers whose tokens can be coloured by origin."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.geometry import Region, Size
from textual.reactive import Reactive, reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from ...chat.live import Segment
from ..format import printable

ORIGINS = ("draft", "target", "bonus")


class MessageView(Widget):
    """An answer as it streams in, kept as (text, origin) segments.

    With ``colour`` on, each token shows where it came from: a draft token the target
    accepted, the target's own correction, or the bonus token after a fully accepted draft
    (styles in chat.tcss). A thinking model's reasoning (origin "thinking") is always shown
    muted, a blank line (origin "gap") before the reply.

    It is drawn line by line (Textual's line API), like a log: finished paragraphs are
    wrapped once and kept as strips; an update re-wraps only the open paragraph and repaints
    only the lines that changed. While streaming, the height grows in steps of
    ``HEIGHT_STEP`` lines, so the screen is laid out again only every few lines. This keeps
    the app's cost per update small and independent of the answer's length.
    """

    COMPONENT_CLASSES = {"message--draft", "message--target", "message--bonus", "message--thinking"}
    HEIGHT_STEP = 8

    colour: reactive[bool] = reactive(True)
    streaming: reactive[bool] = reactive(False)
    # Not scrollable: its virtual size follows its size and needs no layout pass of its own
    # (Textual's default would lay the whole screen out a second time each time it grows).
    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    def __init__(self, *, colour: bool = True, streaming: bool = False, id: str | None = None,
                 classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.segments: list[Segment] = []
        self._width = 0
        self._para_strips: list[Strip] = []     # strips of finished paragraphs
        self._tail = Text()                # the open paragraph
        self._tail_strips: list[Strip] = []
        self._height = 0                   # the height last laid out
        self._styles: dict = {}            # origin -> its component style
        self.set_reactive(MessageView.colour, colour)
        self.set_reactive(MessageView.streaming, streaming)

    @property
    def plain(self) -> str:
        """The reply's text (a thinking model's reasoning left out)."""
        return "".join(t for t, origin in self.segments if origin not in ("thinking", "gap"))

    @property
    def line_count(self) -> int:
        return len(self._para_strips) + len(self._tail_strips)

    # -- building lines ---------------------------------------------------------------
    def _style(self, origin: str):
        if origin != "thinking" and (not self.colour or origin not in ORIGINS):
            return ""
        style = self._styles.get(origin)
        if style is None:     # looked up once per origin (the lookup walks the CSS)
            style = self._styles[origin] = self.get_component_rich_style(f"message--{origin}", partial=True)
        return style

    def notify_style_update(self) -> None:
        self._styles = {}              # the theme or the CSS changed
        super().notify_style_update()

    def _strip(self, line: Text) -> Strip:
        return Strip(list(line.render(self.app.console)))

    def _wrap(self, text: Text) -> list[Text]:
        return list(text.wrap(self.app.console, self._width)) if self._width > 0 else []

    def _add(self, segments: list[Segment]) -> None:
        for text, origin in segments:
            style = self._style(origin)
            first, *rest = printable(text).split("\n")
            self._tail.append(first, style)
            for part in rest:
                self._para_strips.extend(self._strip(line) for line in self._wrap(self._tail))
                self._tail = Text()
                self._tail.append(part, style)
        # Greedy wrapping never revisits a finished line: keep only the open paragraph's last
        # line as text, so each update wraps a few words, however long the paragraph.
        lines = self._wrap(self._tail)
        if len(lines) > 1:
            self._para_strips.extend(self._strip(line) for line in lines[:-1])
            self._tail = lines[-1]
        self._tail_strips = [self._strip(self._tail)] if lines else []

    def _rebuild(self) -> None:
        self._para_strips, self._tail, self._tail_strips = [], Text(), []
        self._add(self.segments)

    # -- updates ----------------------------------------------------------------------
    def append(self, segments: list[Segment]) -> bool:
        """Add text; return whether the widget grew (the log may need scrolling)."""
        if not segments:
            return False
        self.segments.extend(segments)
        if not self._width:          # not laid out yet: everything is built on the first resize
            self.refresh(layout=True)
            return True
        first_dirty = len(self._para_strips)
        self._add(segments)
        if self._wanted_height() != self._height:
            self.refresh(layout=True)
            return True
        # Repaint only the lines that changed (content coordinates).
        self.refresh(Region(0, first_dirty, self._content_width(), max(self.line_count - first_dirty, 1)))
        return False

    def clear(self) -> None:
        self.segments.clear()
        self._rebuild()
        self.refresh(layout=True)

    def watch_colour(self, _: bool) -> None:
        if self._width:
            self._rebuild()
        self.refresh()

    def watch_streaming(self, _: bool) -> None:
        self.refresh(layout=True)

    def _wanted_height(self) -> int:
        n = max(self.line_count, 1)
        if self.streaming:
            step = self.HEIGHT_STEP
            n = -(-n // step) * step
        return n

    def get_content_height(self, container, viewport, width: int) -> int:
        if width != self._width:
            self._width = width
            self._rebuild()
        self._height = self._wanted_height()
        return self._height

    def on_resize(self) -> None:
        width = self.content_size.width
        if width and width != self._width:
            self._width = width
            self._rebuild()
            self.refresh(layout=True)

    def _content_width(self) -> int:
        # The width of the last layout (asking for the size could start a layout pass).
        return self._width

    def render_line(self, y: int) -> Strip:
        width = self._content_width()
        n_closed = len(self._para_strips)
        if y < n_closed:
            strip = self._para_strips[y]
        elif y - n_closed < len(self._tail_strips):
            strip = self._tail_strips[y - n_closed]
        else:
            return Strip.blank(width, self.rich_style)
        return strip.crop_extend(0, width, None).apply_style(self.rich_style)


class OriginLegend(Widget):
    """What the token colours mean (hidden while colours are off)."""

    COMPONENT_CLASSES = MessageView.COMPONENT_CLASSES | {"legend--label"}

    def render(self) -> Text:
        label = self.get_component_rich_style("legend--label", partial=True)
        t = Text()
        names = {"draft": "draft, accepted", "target": "target's own", "bonus": "bonus"}
        for origin in ORIGINS:
            t.append("■ ", self.get_component_rich_style(f"message--{origin}", partial=True))
            t.append(f"{names[origin]}   ", label)
        t.append("(ctrl+t: colours off)", label)
        return t


def follow(scroll: Widget) -> None:
    """Keep the end of ``scroll`` in view after the next refresh, unless the user scrolled up
    to read (more than three lines from the end)."""
    if scroll.max_scroll_y - scroll.scroll_y <= 3:
        scroll.call_after_refresh(scroll.scroll_end, animate=False)


class ChatLog(VerticalScroll):
    """Turns of the conversation, anchored to the bottom while answers stream."""

    def follow(self) -> None:
        """Keep the newest text in view unless the user scrolled up to read."""
        follow(self)

    def add_turn(self, text: str, colour: bool) -> MessageView:
        """The user's message and an empty answer that streams in (mounted together: one
        layout pass)."""
        user = Static(printable(text), classes="user-message", markup=False)
        user.border_title = "you"
        view = MessageView(colour=colour, streaming=True, classes="answer")
        view.border_title = "assistant"
        self.mount(user, view)
        return view

    def add_note(self, text: str, kind: str = "info") -> Static:
        widget = Static(text, classes=f"note note-{kind}", markup=False)
        self.mount(widget)
        return widget

    def clear_log(self) -> None:
        self.remove_children()

    def set_colour(self, colour: bool) -> None:
        for view in self.query(MessageView):
            view.colour = colour
