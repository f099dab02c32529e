"""An error dialog: one line of what went wrong, optional details (a compatibility report)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ErrorDialog(ModalScreen[None]):
    BINDINGS = [Binding("escape,enter", "close", "Close", priority=True)]

    def __init__(self, title: str, message: str, details: str = ""):
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.message = message
        self.details = details

    def compose(self) -> ComposeResult:
        with Vertical(id="error-dialog", classes="dialog"):
            yield Static(self.title_text, id="error-title", markup=False)
            yield Static(self.message, id="error-message", markup=False)
            if self.details:
                with VerticalScroll(id="error-details"):
                    yield Static(self.details, markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("OK", id="error-ok", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(None)

    def action_close(self) -> None:
        self.dismiss(None)
