"""Side by side: the same prompt, target alone then speculative, one after the other.

Never both at once: they would compete for the same cores or GPU and both figures would be
wrong. Each pane streams its own output with its own live tok/s; then a summary gives the
speed-up, acceptance, time to first token and whether the outputs are identical (greedy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Footer, Header, Input, Static

from ...chat.comparison import ComparisonResult, measure_difference, runs
from ...errors import LocalspecError
from ..compositor import install as install_compositor
from ..messages import GenerationFailed, GenerationFinished, GenerationProgress
from ..widgets.stream_pane import StreamPane
from ..worker import GenerationJob

if TYPE_CHECKING:
    from ..app import LocalspecApp

BASE, SPEC = "compare-base", "compare-spec"
DEFAULT_PROMPT = "Write a short poem about the sea."


class CompareScreen(Screen):
    BINDINGS = [
        Binding("ctrl+r", "run", "Run", priority=True),
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+s", "save", "Save results", priority=True),
    ]

    app: LocalspecApp

    def __init__(self) -> None:
        super().__init__(id="compare-screen")
        install_compositor(self)     # frames draw only the rows they update
        self.job: GenerationJob | None = None
        self.result: ComparisonResult | None = None
        self._base_done = None
        self._run: dict = {}

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="compare-form"):
            yield Input(DEFAULT_PROMPT, placeholder="prompt", id="compare-prompt")
            yield Input("128", placeholder="tokens", id="compare-tokens", type="integer")
            yield Checkbox("greedy", True, id="compare-greedy")
            yield Button("Run", id="compare-run", variant="primary")
        with Horizontal(id="compare-panes"):
            yield StreamPane("target only", id="pane-base", colour=False)
            yield StreamPane("speculative", id="pane-spec")
        yield Static("Run compares the target alone with speculative decoding on the same prompt.",
                     id="compare-summary")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "target only vs speculative"

    # -- running ----------------------------------------------------------------------
    def action_run(self) -> None:
        app = self.app
        if self.job is not None:
            self.notify("a comparison is running: Esc stops it", severity="warning")
            return
        if app.engine_state != "ready" or not app.session.loaded:
            self.notify("no model is loaded: pick a pair with F3 (models)", severity="error")
            return
        if app.busy:
            self.notify("the engine is busy (a chat answer is being generated)", severity="warning")
            return
        settings = app.session.settings
        if not settings.speculative:
            self.notify("a comparison needs a drafter: choose a draft model or n-gram in the settings (F2)",
                        severity="error")
            return
        prompt = self.query_one("#compare-prompt", Input).value.strip()
        if not prompt:
            self.notify("type a prompt to compare", severity="warning")
            return
        try:
            n = int(self.query_one("#compare-tokens", Input).value)
            if n < 1:
                raise ValueError
        except ValueError:
            self.notify("tokens: give a whole number of at least 1", severity="error")
            return
        greedy = self.query_one("#compare-greedy", Checkbox).value
        run_settings = settings.with_(max_tokens=n, **({"temperature": 0.0} if greedy else {}))
        try:
            tokens = app.session.prompt_tokens(prompt)
        except LocalspecError as exc:
            self.notify(str(exc), title="cannot compare", severity="error")
            return
        self.result = None
        self._base_done = None
        self._run = {"prompt": prompt, "n": n, "greedy": greedy, "settings": run_settings, "tokens": tokens}
        for pane in self.query(StreamPane):
            pane.reset()
        self.query_one("#compare-summary", Static).update("running the target alone...")
        self._start(BASE)

    def _start(self, name: str) -> None:
        app, run = self.app, self._run
        session, settings, tokens = app.session, run["settings"], run["tokens"]
        spec = runs(settings)[name == SPEC]

        def events(cancel):
            session.engine.reset()     # both runs start from an empty cache: a fair race
            yield from session.stream(tokens, spec, cancel)

        drafter = spec.drafter.value
        self.job = GenerationJob(self, name, events, drafter=drafter, interval=app.stream_interval(),
                                 clock=app.clock)
        app.start_job(self.job)
        self.query_one("#compare-run", Button).disabled = True

    def _pane(self, job: str) -> StreamPane:
        return self.query_one("#pane-base" if job == BASE else "#pane-spec", StreamPane)

    def _stream(self, msg, last: bool = False) -> bool:
        """Show a run's message in its pane; False when the message is not a comparison's."""
        if msg.job not in (BASE, SPEC):
            return False
        pane = self._pane(msg.job)
        pane.append(msg.segments, last=last)
        pane.show(msg.stats)
        if last:
            self._job_ended()
        return True

    def on_generation_progress(self, msg: GenerationProgress) -> None:
        self._stream(msg)

    def on_generation_finished(self, msg: GenerationFinished) -> None:
        if not self._stream(msg, last=True):
            return
        if msg.done.stop_reason.value == "cancelled":
            self.query_one("#compare-summary", Static).update("stopped: no comparison")
            return
        if msg.job == BASE:
            self._base_done = msg.done
            self.query_one("#compare-summary", Static).update("running speculative...")
            self._start(SPEC)
            return
        run = self._run
        engine = self.app.session.engine
        settings = run["settings"]
        self.result = ComparisonResult(
            prompt=run["prompt"], max_tokens=settings.max_tokens, greedy=settings.sampling.greedy,
            base=self._base_done, spec=msg.done, models=engine.describe() if engine else {},
            sampling=settings.sampling.to_dict())
        self.query_one("#compare-summary", Static).update(self.summary_text(self.result))
        if self.result.identical is False and engine is not None:
            self.explain_difference(engine, run["tokens"], self.result)

    @work(thread=True, exclusive=True, group="compare-difference", exit_on_error=False)
    def explain_difference(self, engine, tokens: list[int], result: ComparisonResult) -> None:
        """Where greedy answers part, the target's logits there (one target decode, off the
        UI thread): a near-tie reads as one in the summary. It only explains: if it fails,
        the summary stays as it is."""
        try:
            measure_difference(engine, tokens, result)
        except LocalspecError:
            return
        self.app.call_from_thread(self._show_result, result)

    def _show_result(self, result: ComparisonResult) -> None:
        if result is self.result:
            self.query_one("#compare-summary", Static).update(self.summary_text(result))

    def on_generation_failed(self, msg: GenerationFailed) -> None:
        if not self._stream(msg, last=True):
            return
        self.query_one("#compare-summary", Static).update(f"failed: {msg.error}")
        self.notify(msg.error, title="comparison failed", severity="error", timeout=10)

    def _job_ended(self) -> None:
        job, self.job = self.job, None
        self.app.job_finished(job)
        self.query_one("#compare-run", Button).disabled = False

    def action_stop(self) -> None:
        if self.job is not None:
            self.job.stop()
            self.query_one("#compare-summary", Static).update("stopping...")

    def action_save(self) -> None:
        if self.result is None:
            self.notify("nothing to save yet: run a comparison first", severity="warning")
            return
        try:
            j, m = self.result.save(self.app.save_dir)
        except OSError as exc:
            self.notify(f"cannot save: {exc.strerror or exc}", severity="error")
            return
        self.notify(f"saved {j.name} and {m.name} in {j.parent}", title="results saved", timeout=6)

    # -- the summary ------------------------------------------------------------------
    @staticmethod
    def summary_text(r: ComparisonResult) -> Text:
        b, s = r.base.summary, r.spec.summary
        t = Text()
        t.append(f"speed-up {r.speedup:.2f}x", "bold")
        t.append(f"    target only {b.tokens_per_second:.1f} tok/s → speculative {s.tokens_per_second:.1f} tok/s\n")
        t.append(f"acceptance {s.acceptance_rate:.1%} ({s.accepted}/{s.drafted}) · "
                 f"{s.tokens_per_step:.2f} tokens per step · drafter {s.drafter}\n")
        t.append(f"first token: target only {b.time_to_first_token:.3f} s · speculative "
                 f"{s.time_to_first_token:.3f} s\n")
        t.append(f"outputs: {r.outputs_line()}   (ctrl+s saves JSON and Markdown)")
        return t

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_run()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "compare-run":
            event.stop()
            self.action_run()
