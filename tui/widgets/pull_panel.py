"""A progress bar per file of a pull (download, then checksum verification)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, ProgressBar, Static

from ..format import human_bytes


class FileProgress(Vertical):
    def __init__(self, label: str, total: int):
        super().__init__(classes="file-progress")
        self.label = label
        self.total = total
        self.done = 0

    def compose(self) -> ComposeResult:
        yield Label(self._caption(), classes="file-label", markup=False)
        yield ProgressBar(total=self.total or None, show_eta=True, classes="file-bar")

    def _caption(self) -> str:
        name = self.label if len(self.label) <= 60 else "…" + self.label[-59:]
        return f"{name}  {human_bytes(self.done)} / {human_bytes(self.total)}"

    def update_bytes(self, done: int, total: int) -> None:
        self.done, self.total = done, total or self.total
        bar = self.query_one(ProgressBar)
        bar.update(total=self.total or None, progress=done)
        self.query_one(".file-label", Label).update(self._caption())

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0


class PullPanel(Vertical):
    """Bars appear as files are planned (or first reported); status text on top."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self._bars: dict[str, FileProgress] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="pull-status", markup=False)
        yield Vertical(id="pull-bars")

    def set_status(self, text: str) -> None:
        self.query_one("#pull-status", Static).update(text)

    def reset(self) -> None:
        self.query_one("#pull-bars", Vertical).remove_children()
        self._bars.clear()
        self.set_status("")

    def bar(self, label: str, total: int = 0) -> FileProgress:
        fp = self._bars.get(label)
        if fp is None:
            fp = self._bars[label] = FileProgress(label, total)
            self.query_one("#pull-bars", Vertical).mount(fp)
        return fp

    def plan(self, files: list[tuple[str, int]]) -> None:
        for label, size in files:
            self.bar(label, size)

    def progress(self, updates: dict[str, tuple[int, int]]) -> None:
        for label, (done, total) in updates.items():
            fp = self.bar(label, total)
            if fp.is_mounted:
                fp.update_bytes(done, total)
            else:
                fp.done, fp.total = done, total or fp.total
                fp.call_after_refresh(fp.update_bytes, done, total)

    def bars(self) -> dict[str, float]:
        return {label: fp.fraction for label, fp in self._bars.items()}
