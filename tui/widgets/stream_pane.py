"""One pane of the comparison: a run's own streaming output and its own live tok/s."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Digits, Static

from ...chat.live import LiveStats, Segment
from .chat_log import MessageView, follow

_STATE = {"waiting": "waiting", "prompt": "reading the prompt", "generating": "generating",
          "finished": "done", "stopped": "stopped", "failed": "failed", "idle": "waiting"}


class StreamPane(Vertical):
    def __init__(self, title: str, *, colour: bool = True, id: str | None = None):
        super().__init__(id=id, classes="stream-pane")
        self.border_title = title
        self._colour = colour
        self.stats = LiveStats()

    def compose(self) -> ComposeResult:
        with Horizontal(classes="pane-head"):
            yield Digits("0.0", classes="pane-digits")
            yield Static("tok/s · waiting", classes="pane-caption", markup=False)
        with VerticalScroll(classes="pane-scroll"):
            yield MessageView(colour=self._colour, classes="pane-text")

    @property
    def view(self) -> MessageView:
        return self.query_one(MessageView)

    def reset(self) -> None:
        self.view.clear()
        self.view.streaming = True
        self.show(LiveStats(), state="waiting")

    def append(self, segments: list[Segment], last: bool = False) -> None:
        grew = self.view.append(segments)
        if last:
            self.view.streaming = False
        if grew or last:
            follow(self.query_one(".pane-scroll", VerticalScroll))

    def show(self, stats: LiveStats, state: str | None = None) -> None:
        self.stats = stats
        self.query_one(".pane-digits", Digits).update(f"{stats.rate:.1f}")
        parts = ["tok/s", _STATE.get(state or stats.phase, stats.phase)]
        if stats.tokens:
            parts.append(f"{stats.tokens} tokens")
        if stats.ttft is not None:
            parts.append(f"TTFT {stats.ttft:.2f} s")
        self.query_one(".pane-caption", Static).update(" · ".join(parts), layout=False)
