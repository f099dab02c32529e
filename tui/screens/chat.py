"""The chat screen: the conversation, the live gauges and the model panel."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from ...chat.live import LiveStats
from ...chat.reasoning import ReasoningSplit
from ...chat.transcript import save_transcript
from ...engine.events import StopReason
from ...errors import LocalspecError
from ..compositor import install as install_compositor
from ..messages import GenerationFailed, GenerationFinished, GenerationProgress
from ..widgets.chat_log import ChatLog, MessageView, OriginLegend
from ..widgets.gauge_column import GaugeColumn
from ..worker import GenerationJob

if TYPE_CHECKING:
    from ..app import LocalspecApp

JOB = "chat"
IDLE_SYSTEM_INTERVAL = 1.0     # memory and CPU while nothing is generated


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop", "Stop", priority=True),
        Binding("ctrl+n", "new_chat", "New chat", priority=True),
        Binding("ctrl+y", "copy_answer", "Copy answer", priority=True),
        Binding("ctrl+r", "regenerate", "Retry", priority=True),
        Binding("ctrl+s", "save_chat", "Save chat", show=False, priority=True),
        Binding("up", "recall(-1)", "Earlier message", show=False),
        Binding("down", "recall(1)", "Later message", show=False),
        Binding("ctrl+t", "toggle_colour", "Colours", priority=True),
    ]

    app: LocalspecApp

    def __init__(self) -> None:
        super().__init__(id="chat-screen")
        install_compositor(self)     # frames draw only the rows they update
        self.job: GenerationJob | None = None
        self.answer: MessageView | None = None
        self._split, self._raw, self._replied = ReasoningSplit(), [], False   # the answer streaming in
        self.colour = True
        self.stats = LiveStats()
        self.last_done = None
        self.last_finish: GenerationFinished | None = None
        self._new_chat_pending = False
        self._system_at = 0.0
        self._gauges_at = 0.0
        self._progress_at = 0.0
        self._sent: list[str] = []       # the messages sent, for the up and down keys
        self._recall = 0                 # where the up and down keys are in them

    def compose(self) -> ComposeResult:
        yield Header()
        # The screen lays these two out side by side (no row container: a widget less to
        # draw in every frame).
        with Vertical(id="conversation"):
            yield ChatLog(id="chat-log")
            yield OriginLegend(id="legend")
            yield Input(placeholder="Ask something and press Enter", id="prompt")
            yield Static("", id="status", markup=False)
        yield GaugeColumn(id="gauges")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "engine_state", self.engine_changed)
        self.watch(self.app, "status_text", self.engine_changed)
        self._timer = self.set_interval(self.app.gauge_interval, self.tick)
        self.refresh_system()
        self.query_one(GaugeColumn).show_stats(LiveStats(drafter=self.app.session.settings.drafter.value, phase="idle"))
        self.query_one("#prompt", Input).focus()
        self.show_conversation()

    def show_conversation(self) -> None:
        """The conversation the session holds already (a resumed chat), as it was answered."""
        log = self.query_one(ChatLog)
        messages = self.app.session.messages
        for i, msg in enumerate(messages):
            if msg["role"] == "user":
                self._sent.append(msg["content"])
                view = log.add_turn(msg["content"], self.colour)
                view.streaming = False
                answer = messages[i + 1] if i + 1 < len(messages) and messages[i + 1]["role"] == "assistant" else None
                if answer is not None:
                    thought = answer.get("reasoning_content")
                    view.append(([(thought, "thinking"), ("\n\n", "gap")] if thought else [])
                                + [(answer["content"], "text")])
        self._recall = len(self._sent)
        if messages:
            log.add_note(f"Resumed a chat of {len(messages)} messages.", "info")
            log.call_after_refresh(log.scroll_end, animate=False)

    # -- state shown ------------------------------------------------------------------
    def tick(self) -> None:
        """The gauge timer. While generating, the gauges ride on the progress messages (the
        timer is paused when those come at a steady pace; otherwise it steps in when they are
        late), so it adds no frames."""
        if self.job is None:
            self.refresh_system(every=IDLE_SYSTEM_INTERVAL)
        elif time.monotonic() - self._progress_at > 2 * self.app.gauge_interval:
            self.refresh_gauges()

    def sample_system(self, every: float | None = None):
        """Memory and CPU, sampled at most every ``every`` seconds (default: the gauge
        interval); None when the last sample is recent enough."""
        now = time.monotonic()
        if now - self._system_at < (every if every is not None else self.app.gauge_interval) * 0.9:
            return None
        self._system_at = now
        return self.app.system_stats()

    def refresh_system(self, every: float | None = None) -> None:
        """Memory and CPU on their own (once a second while idle; while generating they ride
        on the gauges' frames)."""
        system = self.sample_system(every)
        if system is not None:
            self.query_one(GaugeColumn).show_system(system)

    def engine_changed(self, _=None) -> None:
        """The engine, its state or its drafter changed: show the model panel again."""
        app = self.app
        summary = app.session.summary if app.engine_state == "ready" else None
        self.query_one(GaugeColumn).show_models(summary, app.status_text)
        self.sub_title = app.session.choice.label()
        self.show_status()

    def show_status(self, text: str | None = None) -> None:
        app = self.app
        if text is None:
            if self.job is not None:
                text = "generating · Esc stops"
            elif app.engine_state == "ready":
                text = f"ready · {app.session.settings.describe()}"
            else:
                text = app.status_text
        self.query_one("#status", Static).update(text, layout=False)

    # -- sending ----------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "prompt":
            return
        event.stop()
        text = event.value.strip()
        if not text:
            return
        self.send(text)

    def _ready(self) -> bool:
        """Whether a message can be sent now (if not, a notification says why)."""
        app = self.app
        if self.job is not None:
            self.notify("still answering: press Esc to stop first", severity="warning")
        elif app.engine_state == "loading":
            self.notify("the models are still loading", severity="warning")
        elif app.engine_state != "ready" or not app.session.loaded:
            self.notify("no model is loaded: pick a pair with F3 (models)", severity="error")
        elif app.busy:
            self.notify("the engine is busy (a comparison is running)", severity="warning")
        else:
            return True
        return False

    def send(self, text: str) -> bool:
        app = self.app
        if not self._ready():
            return False
        session = app.session
        settings = session.settings
        prompt = self.query_one("#prompt", Input)
        log = self.query_one(ChatLog)
        left_out = session.left_out
        try:
            tokens = session.begin_turn(text)
        except LocalspecError as exc:
            self.notify(str(exc), title="cannot send", severity="error")
            return False
        prompt.value = ""
        if not self._sent or self._sent[-1] != text:
            self._sent.append(text)
        self._recall = len(self._sent)
        self._split, self._raw, self._replied = ReasoningSplit(session.thinking), [], False
        if session.left_out and not left_out:
            log.add_note(f"The chat no longer fits the context ({session.summary.n_ctx} tokens): from now on "
                         "the model reads it without its oldest turns (they stay here).", "info")
        self.answer = log.add_turn(text, self.colour)
        log.call_after_refresh(log.scroll_end, animate=False)
        self.job = GenerationJob(
            self, JOB, lambda cancel: session.stream(tokens, settings, cancel),
            drafter=settings.drafter.value, interval=app.stream_interval(), clock=app.clock)
        app.start_job(self.job)
        prompt.cursor_blink = False    # one thing less to redraw while tokens stream
        if self.job.interval is not None:
            self._timer.pause()        # the worker's ticker paces the gauges meanwhile
        self.show_status()
        return True

    # -- messages from the worker --------------------------------------------------------
    def on_generation_progress(self, msg: GenerationProgress) -> None:
        if msg.job != JOB or self.answer is None:
            return
        self._progress_at = time.monotonic()
        if self.answer.append(self._shown(msg.segments)):
            self.query_one(ChatLog).follow()
        self.stats = msg.stats
        self.refresh_gauges()

    def _shown(self, segments: list, last: bool = False) -> list:
        """The answer's segments as shown: a thinking model's reasoning muted and apart
        (origin "thinking"), its tags left out; ``last``: what the split held back too."""
        out = []
        for text, origin in segments:
            self._raw.append(text)
            out += self._parts(*self._split.feed(text), origin)
        if last:
            out += self._parts(*self._split.finish(), "text")
        return out

    def _parts(self, reasoning: str, reply: str, origin: str) -> list:
        out = [(reasoning, "thinking")] if reasoning else []
        if reply:
            if self._split.seen and not self._replied:
                out.append(("\n\n", "gap"))
            self._replied = True
            out.append((reply, origin))
        return out

    def refresh_gauges(self) -> None:
        """Gauges at most every ``gauge_interval`` (5 a second): text streams at the message
        rate, the gauges ride on some of those frames, which keeps the app's own cost low."""
        now = time.monotonic()
        if now - self._gauges_at < self.app.gauge_interval * 0.9:
            return
        self._gauges_at = now
        self.query_one(GaugeColumn).show_stats(self.stats, self.sample_system())

    def on_generation_finished(self, msg: GenerationFinished) -> None:
        if msg.job != JOB:
            return
        done = msg.done
        if self.answer is not None:
            self.answer.append(self._shown(msg.segments, last=True))
            self.answer.streaming = False
            self.query_one(ChatLog).follow()
        self.stats = msg.stats
        self.query_one(GaugeColumn).show_stats(msg.stats)
        self.app.session.end_turn(done.text)
        self.last_done, self.last_finish = done, msg
        s = done.summary
        stopped = done.stop_reason == StopReason.CANCELLED
        line = (f"{'stopped' if stopped else 'answered'}: {s.n_generated} tokens, "
                f"{s.tokens_per_second:.1f} tok/s, first token {s.time_to_first_token:.2f} s "
                f"({done.stop_reason.value})")
        if self.app.session.left_out:
            line += f" · {self.app.session.left_out} oldest messages left out of the context"
        self._end_job()
        self.show_status(line)
        if done.message:
            self.notify(done.message, title="answer cut short", severity="warning", timeout=8)

    def on_generation_failed(self, msg: GenerationFailed) -> None:
        if msg.job != JOB:
            return
        if self.answer is not None:
            self.answer.append(self._shown(msg.segments, last=True))
            self.answer.streaming = False
        self.stats = msg.stats
        self.query_one(GaugeColumn).show_stats(msg.stats)
        partial = "".join(self._raw) if self.answer is not None else ""
        session = self.app.session
        if partial:
            session.end_turn(partial)
        else:
            session.abandon_turn()
            if self.answer is not None:
                self.answer.remove()
        self.query_one(ChatLog).add_note(f"✗ {msg.error}", "error")
        self._end_job()
        self.show_status(f"failed: {msg.error}")
        self.notify(msg.error, title="generation failed", severity="error", timeout=10)

    def _end_job(self) -> None:
        job, self.job = self.job, None
        self.answer = None
        self._timer.resume()
        self.query_one("#prompt", Input).cursor_blink = True
        self.app.job_finished(job)
        if self._new_chat_pending:
            self._new_chat_pending = False
            self.action_new_chat()

    # -- actions ----------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.job is None:
            return
        self.job.stop()
        self.show_status("stopping...")

    def action_new_chat(self) -> None:
        if self.job is not None:
            self._new_chat_pending = True
            self.job.stop()
            return
        self.app.session.new_chat()
        self.query_one(ChatLog).clear_log()
        self.stats = LiveStats(drafter=self.app.session.settings.drafter.value, phase="idle")
        self.query_one(GaugeColumn).show_stats(self.stats)
        self.show_status()
        self.notify("new chat", timeout=2)

    def action_copy_answer(self) -> None:
        text = self.app.session.last_answer()
        if not text:
            self.notify("no answer to copy yet", severity="warning")
            return
        self.app.copy_to_clipboard(text)
        self.notify(f"copied the last answer ({len(text)} characters)", timeout=3)

    def action_regenerate(self) -> None:
        """Answer the last message again: its answer goes (from the log and the conversation)
        and the message is sent anew."""
        if not self._ready():
            return
        session = self.app.session
        text = session.retract_turn()
        if text is None:
            self.notify("no answer to regenerate yet", severity="warning")
            return
        log = self.query_one(ChatLog)
        for kind in (MessageView, ".user-message"):
            found = log.query(kind)
            if found:
                found.last().remove()
        self.send(text)

    def action_save_chat(self) -> None:
        """Save the conversation (JSON to resume it with ``localspec chat --resume``, and
        Markdown) into the save folder."""
        session = self.app.session
        if not session.messages:
            self.notify("nothing to save yet", severity="warning")
            return
        summary = session.summary
        models = session.choice.label() if summary is None else summary.target.name + (
            f" + {summary.draft.name}" if summary.draft else "")
        try:
            j, _ = save_transcript(self.app.save_dir, session.system, session.messages, models=models,
                                   settings=session.settings.to_dict())
        except OSError as exc:
            self.notify(f"could not save the chat: {exc}", severity="error")
            return
        self.notify(f"saved {j} (and .md); resume it with: localspec chat --resume {j}", timeout=8)

    def action_recall(self, step: int) -> None:
        """The up and down keys in the prompt: earlier and later messages sent, as a shell's
        history (past the newest: an empty prompt)."""
        prompt = self.query_one("#prompt", Input)
        if not prompt.has_focus or not self._sent:
            return
        self._recall = max(0, min(len(self._sent), self._recall + step))
        prompt.value = self._sent[self._recall] if self._recall < len(self._sent) else ""
        prompt.cursor_position = len(prompt.value)

    def action_toggle_colour(self) -> None:
        self.colour = not self.colour
        self.query_one(ChatLog).set_colour(self.colour)
        self.query_one(OriginLegend).set_class(not self.colour, "-off")
        self.notify(f"token colours {'on' if self.colour else 'off'}", timeout=2)

    def reset_conversation(self) -> None:
        """New models: forget the conversation shown."""
        self.query_one(ChatLog).clear_log()
        self.stats = LiveStats(drafter=self.app.session.settings.drafter.value, phase="idle")
        self.query_one(GaugeColumn).show_stats(self.stats)

