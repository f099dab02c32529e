"""The models screen: local models and pairs, pulling a catalog pair, compatibility reports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Header, Input, Select, Static

from ...chat.session import ModelChoice
from ...errors import LocalspecError
from ..format import human_bytes
from ..messages import PullFailed, PullFinished, PullProgress, PullStatus
from ..widgets.pull_panel import PullPanel
from ..worker import PullJob
from .dialogs import ErrorDialog

if TYPE_CHECKING:
    from ..app import LocalspecApp

DEMO_KEY = "demo"


@dataclass(frozen=True)
class PairRow:
    key: str
    target_name: str
    draft_name: str | None
    target_path: str | None
    draft_path: str | None
    verdict: str
    demo: bool = False


def _demo_row() -> PairRow | None:
    try:
        from ...models.demo import demo_target, shipped_draft

        draft = shipped_draft()
    except LocalspecError:
        return None
    target = demo_target()
    return PairRow(DEMO_KEY, "demo: SmolLM2-135M F16", "SmolLM2-135M Q4_1", str(target), str(draft),
                   "compatible (same model)", demo=True)


def local_pairs() -> list[PairRow]:
    from ...models.store import Store

    rows = []
    demo = _demo_row()
    if demo is not None:
        rows.append(demo)
    store = Store()
    for p in store.pairs():
        t, d = store.get(p.target), store.get(p.draft)
        rows.append(PairRow(p.key, p.target, p.draft, t.path if t else None, d.path if d else None,
                            "compatible" if p.compatible else "INCOMPATIBLE"))
    return rows


class ModelsScreen(Screen):
    # Keys the draft Input does not use itself (ctrl+k, ctrl+u, ctrl+x edit text there).
    BINDINGS = [
        Binding("escape", "app.switch_mode('chat')", "Back to chat"),
        Binding("ctrl+o", "use", "Chat with pair"),
        Binding("ctrl+t", "check", "Check pair"),
        Binding("ctrl+g", "cancel_pull", "Cancel pull"),
    ]

    app: LocalspecApp

    def __init__(self) -> None:
        super().__init__(id="models-screen")
        self.pairs: dict[str, PairRow] = {}
        self.pull: PullJob | None = None
        self.pulled: PullFinished | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="models-body"):
            with Vertical(id="local-pane", classes="pane"):
                yield Static("Local models", classes="section-title")
                yield DataTable(id="models-table", cursor_type="row", zebra_stripes=True)
                yield Static("No local models yet: pull a pair (right), `localspec import FILE.gguf`, "
                             "or chat with the demo pair below.", id="models-hint", markup=False)
                yield Static("Pairs", classes="section-title")
                yield DataTable(id="pairs-table", cursor_type="row", zebra_stripes=True)
                with Horizontal(classes="buttons"):
                    yield Button("Chat with pair", id="use-pair", variant="primary")
                    yield Button("Check pair", id="check-pair")
                    yield Button("Refresh", id="refresh")
                with VerticalScroll(id="compat-scroll"):
                    yield Static("Select a pair and press Check pair for its tokenizer report.",
                                 id="compat-report", markup=False)
            with Vertical(id="pull-pane", classes="pane"):
                yield Static("Pull a pair from the catalog", classes="section-title")
                yield Select(self._catalog_options(), id="pull-target", prompt="catalog target")
                yield Static("Pick a target: its tokenizer family's recommended draft comes with it.",
                             id="pull-info", markup=False)
                yield Input(placeholder="draft: a size (135m) or alias; blank: the catalog's choice",
                            id="pull-draft")
                with Horizontal(classes="buttons"):
                    yield Button("Pull", id="pull", variant="primary")
                    yield Button("Cancel", id="cancel-pull", variant="error", disabled=True)
                yield PullPanel(id="pull-panel")
        yield Footer()

    @staticmethod
    def _catalog_options() -> list[tuple[str, str]]:
        try:
            from ...models.catalog import load_catalog

            cat = load_catalog()
        except LocalspecError:
            return []
        return [(f"{m.alias} · {m.label}", m.alias) for m in cat.models.values() if m.drafts]

    def on_mount(self) -> None:
        models = self.query_one("#models-table", DataTable)
        models.add_columns("name", "family", "size", "quant", "file size", "source")
        pairs = self.query_one("#pairs-table", DataTable)
        pairs.add_columns("target", "draft", "tokenizers")
        self.refresh_tables()

    def on_screen_resume(self) -> None:
        self.refresh_tables()

    # -- local store ------------------------------------------------------------------
    def refresh_tables(self, select: str | None = None) -> None:
        from ...models.store import Store

        try:
            models = sorted(Store().models(), key=lambda m: m.name)
            pairs = local_pairs()
        except LocalspecError as exc:
            self.notify(str(exc), title="cannot read the local store", severity="error")
            return
        table = self.query_one("#models-table", DataTable)
        table.clear()
        for m in models:
            missing = "" if m.exists() else " (file missing)"
            table.add_row(m.name + missing, m.family or "-", m.size or "-", m.quant or "-",
                          human_bytes(m.bytes) if m.bytes else "-", m.source, key=m.name)
        self.query_one("#models-hint", Static).display = not models
        ptable = self.query_one("#pairs-table", DataTable)
        ptable.clear()
        self.pairs = {p.key: p for p in pairs}
        for p in pairs:
            ptable.add_row(p.target_name, p.draft_name or "-", p.verdict, key=p.key)
        if select and select in self.pairs:
            ptable.move_cursor(row=list(self.pairs).index(select))

    def selected_pair(self) -> PairRow | None:
        table = self.query_one("#pairs-table", DataTable)
        if not self.pairs or table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            return None
        return self.pairs.get(key)

    def action_check(self) -> None:
        row = self.selected_pair()
        report = self.query_one("#compat-report", Static)
        if row is None:
            self.notify("no pair selected", severity="warning")
            return
        if row.demo and not Path(row.target_path).is_file():
            report.update("demo pair: the F16 target is made from the shipped Q4_1 file on first use; "
                          "both share one tokenizer, so the pair is compatible.")
            return
        if not (row.target_path and row.draft_path):
            report.update(f"{row.key}: a model of this pair is no longer in the store")
            return
        from ...engine.compat import check_files

        try:
            rep = check_files(row.target_path, row.draft_path)
        except LocalspecError as exc:
            report.update(f"cannot check {row.key}: {exc}")
            return
        report.update(rep.render())

    def action_use(self) -> None:
        row = self.selected_pair()
        if row is None:
            self.notify("no pair selected", severity="warning")
            return
        if row.demo:
            choice = ModelChoice(demo=True)
        else:
            if not (row.target_path and row.draft_path):
                self.notify(f"{row.key}: a model of this pair is missing", severity="error")
                return
            choice = ModelChoice(target=row.target_path, draft=row.draft_path,
                                 target_name=row.target_name, draft_name=row.draft_name)
        self.app.use_models(choice)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "pairs-table":
            self.action_check()

    # -- pulling ----------------------------------------------------------------------
    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id != "pull-target" or event.value is Select.BLANK:
            return
        from ...models.catalog import load_catalog

        try:
            cat = load_catalog()
            m = cat.models[str(event.value)]
        except (LocalspecError, KeyError):
            return
        drafts = ", ".join(m.drafts) or "none listed"
        quants = ", ".join(m.quants)
        self.query_one("#pull-info", Static).update(
            f"{m.label} · {m.repo}\nquants: {quants}\ndrafts: {drafts} (the first is the default)")

    def action_pull(self) -> None:
        if self.pull is not None:
            self.notify("a pull is already running", severity="warning")
            return
        alias = self.query_one("#pull-target", Select).value
        if alias is Select.BLANK or not alias:
            self.notify("choose a catalog target to pull", severity="warning")
            return
        draft = self.query_one("#pull-draft", Input).value.strip() or None
        panel = self.query_one(PullPanel)
        panel.reset()
        panel.set_status(f"{alias}: resolving the files...")
        self.pulled = None
        self.pull = PullJob(self, str(alias), draft, interval=self.app.flush_interval)
        self.app.start_job(self.pull)
        self._pull_buttons(running=True)

    def action_cancel_pull(self) -> None:
        if self.pull is None:
            return
        self.pull.stop()
        self.query_one(PullPanel).set_status("cancelling...")

    def _pull_buttons(self, running: bool) -> None:
        self.query_one("#pull", Button).disabled = running
        self.query_one("#cancel-pull", Button).disabled = not running

    def _pull_ended(self) -> None:
        job, self.pull = self.pull, None
        self._pull_buttons(running=False)
        self.app.job_finished(job)

    def on_pull_status(self, msg: PullStatus) -> None:
        panel = self.query_one(PullPanel)
        panel.plan(msg.files)
        panel.set_status(msg.text)

    def on_pull_progress(self, msg: PullProgress) -> None:
        self.query_one(PullPanel).progress(msg.progress)

    def on_pull_finished(self, msg: PullFinished) -> None:
        self._pull_ended()
        self.pulled = msg
        text = f"ready: {msg.target}" + (f" + {msg.draft}" if msg.draft else "")
        self.query_one(PullPanel).set_status(text + " · select the pair and press Chat with pair")
        self.notify(text, title="pull finished")
        from ...models.store import pair_key

        self.refresh_tables(select=pair_key(msg.target, msg.draft) if msg.draft else None)

    def on_pull_failed(self, msg: PullFailed) -> None:
        self._pull_ended()
        panel = self.query_one(PullPanel)
        if msg.cancelled:
            panel.set_status(f"cancelled: {msg.error}")
            self.notify(msg.error, title="pull cancelled", severity="warning")
            return
        panel.set_status(f"failed: {msg.error}")
        self.app.push_screen(ErrorDialog("Pull failed", msg.error, msg.details))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"use-pair": self.action_use, "check-pair": self.action_check, "refresh": self.refresh_tables,
                   "pull": self.action_pull, "cancel-pull": self.action_cancel_pull}
        action = actions.get(event.button.id or "")
        if action is not None:
            event.stop()
            action()
