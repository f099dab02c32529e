"""The settings form: drafting, sampling, length and thinking; applied from the next message.

Invalid values are refused in the form: the field is marked and a one-line message says why.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from ...chat.settings import FIELDS, SettingError, form_values, parse_settings
from ...engine import DrafterKind, RunSpec

_HINTS = {
    "p_min": "blank: automatic",
    "seed": "blank: random",
    "draft_temperature": "blank: as temperature",
    "top_k": "0: off",
    "temperature": "0: greedy",
    "repeat_penalty": "1: off",
    "dry_multiplier": "0: off",
}


class SettingsScreen(ModalScreen[tuple[RunSpec, bool] | None]):
    """Dismissed with (the settings, whether a thinking model may think), or None (cancelled)."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", priority=True),
        Binding("ctrl+s", "apply", "Apply", priority=True),
    ]

    def __init__(self, settings: RunSpec, *, has_draft: bool = True, has_mtp: bool = True, thinking: bool = True):
        super().__init__(classes="dialog-screen")
        self.settings = settings
        self.thinking = thinking
        self.has_draft = has_draft
        self.has_mtp = has_mtp

    def compose(self) -> ComposeResult:
        values = form_values(self.settings)
        with Vertical(id="settings-dialog", classes="dialog"):
            yield Static("Settings · applied from the next message", id="settings-title")
            with Grid(id="settings-top"):
                yield Label("drafter")
                yield Select([(d.label, d.value) for d in DrafterKind], value=self.settings.drafter.value,
                             allow_blank=False, id="set-drafter", compact=True)
                yield Label("draft length")
                yield Select([("adaptive: the measured best K, pauses when drafting loses", True),
                              ("fixed: always draft max tokens", False)],
                             value=self.settings.adaptive, allow_blank=False, id="set-adaptive", compact=True)
                yield Label("thinking")
                yield Select([("as the model does (a thinking model thinks first)", True),
                              ("off (the chat template's enable_thinking)", False)],
                             value=self.thinking, allow_blank=False, id="set-thinking", compact=True)
            with Grid(id="settings-grid"):
                for name, (label, _, _) in FIELDS.items():
                    yield Label(label)
                    yield Input(values[name], placeholder=_HINTS.get(name, ""), id=f"set-{name}", compact=True,
                                select_on_focus=True)
            yield Static("", id="settings-error", markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply", id="settings-apply", variant="primary")
                yield Button("Cancel", id="settings-cancel")

    def read(self) -> RunSpec:
        """The form's settings, or SettingError naming the offending field."""
        values = {name: self.query_one(f"#set-{name}", Input).value for name in FIELDS}
        drafter = self.query_one("#set-drafter", Select).value
        adaptive = self.query_one("#set-adaptive", Select).value
        settings = parse_settings(values, drafter=str(drafter), adaptive=bool(adaptive), base=self.settings)
        if settings.drafter.uses_model and not self.has_draft:
            raise SettingError("drafter", f"drafter '{settings.drafter.label}': these models have no draft; "
                                          "pick a pair in the models screen (F3)")
        if settings.drafter is DrafterKind.MTP and not self.has_mtp:
            raise SettingError("drafter", "drafter 'MTP head': this target has no MTP layers and no "
                                          "mtp-*.gguf next to it")
        return settings

    def show_error(self, err: SettingError) -> None:
        for widget in self.query(".-invalid"):
            widget.remove_class("-invalid")
        self.query_one("#settings-error", Static).update(f"✗ {err}")
        try:
            field = self.query_one(f"#set-{err.field}")
        except Exception:
            return
        field.add_class("-invalid")
        field.focus()

    def action_apply(self) -> None:
        try:
            settings = self.read()
        except SettingError as err:
            self.show_error(err)
            return
        self.dismiss((settings, bool(self.query_one("#set-thinking", Select).value)))

    def action_cancel(self) -> None:
        self.dismiss(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "settings-apply":
            self.action_apply()
        else:
            self.action_cancel()
