"""The localspec terminal app: chat, models and comparison modes, a settings dialog.

The app owns the :class:`~.session.ChatSession` (the core) and every background job. Jobs
are started through :meth:`LocalspecApp.start_job`; quitting stops them all (generation stops
within one engine step), waits for their threads, then frees the models.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

from ..chat.session import ChatSession, ModelChoice
from ..chat.system_stats import SystemMonitor, SystemStats
from ..engine import RunSpec
from .messages import EngineFailed, EngineLoading, EngineReady
from .screens.chat import ChatScreen
from .screens.compare import CompareScreen
from .screens.dialogs import ErrorDialog
from .screens.models import ModelsScreen
from .screens.settings import SettingsScreen
from .worker import DEFAULT_INTERVAL, GenerationJob, Job, LoadJob

GAUGE_INTERVAL = 0.2      # gauges: up to five refreshes a second
CPU_BOUND_INTERVAL = 0.25  # messages (and frames) while the engine needs every core: four a second
# Python's cyclic GC runs a young-generation pass every 700 net allocations: Textual allocates
# enough per frame for ~15 passes a second, each holding the GIL. Fewer, larger passes cut the
# UI thread's time while tokens stream by about a fifth (2.6% -> 2.1% of a core, measured with
# scripts/bench_tui.py on the demo pair); cycles are still collected, a little later.
GC_THRESHOLDS = (20000, 20, 50)


class LocalspecApp(App):
    TITLE = "localspec"
    CSS_PATH = ["app.tcss", "chat.tcss", "gauges.tcss", "models.tcss", "compare.tcss", "dialogs.tcss"]
    MODES = {"chat": ChatScreen, "models": ModelsScreen, "compare": CompareScreen}
    DEFAULT_MODE = "chat"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f1", "switch_mode('chat')", "Chat"),
        Binding("f2", "settings", "Settings"),
        Binding("f3", "switch_mode('models')", "Models"),
        Binding("f4", "switch_mode('compare')", "Compare"),
    ]

    engine_state: reactive[str] = reactive("idle")    # idle | loading | ready | failed
    status_text: reactive[str] = reactive("")

    def __init__(self, session: ChatSession, *, monitor=None, flush_interval: float | None = DEFAULT_INTERVAL,
                 gauge_interval: float = GAUGE_INTERVAL, clock: Callable[[], float] = time.perf_counter,
                 save_dir: str | Path | None = None, load_on_start: bool = True):
        super().__init__()
        self.session = session
        self.monitor = monitor if monitor is not None else SystemMonitor()
        self.flush_interval = flush_interval
        self.gauge_interval = gauge_interval
        self.clock = clock
        self.save_dir = Path(save_dir) if save_dir is not None else Path.cwd()
        self.load_on_start = load_on_start
        self._gc_thresholds = gc.get_threshold()     # put back when the app ends
        self.jobs: set[Job] = set()
        self._reload_pending = False
        self.errors: list[str] = []        # every error shown, for tests and post-mortems
        self.status_log: list[str] = []    # every status line shown

    def watch_status_text(self, text: str) -> None:
        if text:
            self.status_log.append(text)

    # -- life cycle -------------------------------------------------------------------
    def on_mount(self) -> None:
        gc.set_threshold(*GC_THRESHOLDS)
        self.sub_title = self.session.choice.label()
        if self.load_on_start:
            self.load_models()
        else:
            self.status_text = "no model loaded: pick a pair with F3 (models)"

    async def action_quit(self) -> None:
        await self.shutdown_jobs()
        self.exit()

    async def shutdown_jobs(self) -> None:
        """Stop every job (within one engine step) and wait for their threads."""
        for job in list(self.jobs):
            job.stop()
        if self.jobs:
            await asyncio.to_thread(self._join_all)
        self.session.close()

    def _join_all(self) -> None:
        for job in list(self.jobs):
            job.join()
        self.jobs.clear()

    def on_unmount(self) -> None:
        # A last guard (the app can also end without action_quit): nothing may keep running.
        for job in list(self.jobs):
            job.stop()
        self._join_all()
        self.session.close()
        self.monitor.close()
        gc.set_threshold(*self._gc_thresholds)

    # -- jobs -------------------------------------------------------------------------
    def start_job(self, job: Job) -> Job:
        self.jobs = {j for j in self.jobs if j.alive}
        self.jobs.add(job)
        job.start()
        return job

    def job_finished(self, job: Job | None) -> None:
        if job is not None:
            job.join(timeout=5)
            self.jobs.discard(job)
        if self._reload_pending and not self.busy:
            self._reload_pending = False
            self.load_models()

    @property
    def busy(self) -> bool:
        """Whether the engine is in use (a generation or a load is running)."""
        return any(j.alive and isinstance(j, (GenerationJob, LoadJob)) for j in self.jobs)

    @property
    def generating(self) -> bool:
        return any(j.alive and isinstance(j, GenerationJob) for j in self.jobs)

    def stream_interval(self) -> float | None:
        """How often a generation posts progress: ten times a second, or four when llama.cpp
        runs on the CPU with a thread per core (then every millisecond the UI draws is taken
        from the engine: fewer, larger updates keep the app's cost within a few percent)."""
        if self.flush_interval is None:
            return None
        summary = self.session.summary
        if summary is not None and summary.target.backend == "CPU" and summary.threads >= (os.cpu_count() or 1):
            return max(self.flush_interval, CPU_BOUND_INTERVAL)
        return self.flush_interval

    # -- models -----------------------------------------------------------------------
    def load_models(self) -> None:
        """(Re)load the session's models in a thread; refused while generating."""
        if self.generating or any(isinstance(j, LoadJob) and j.alive for j in self.jobs):
            self._reload_pending = True
            return
        self.engine_state = "loading"
        self.status_text = f"loading {self.session.choice.label()}..."
        self.start_job(LoadJob(self, self.session))

    def use_models(self, choice: ModelChoice) -> None:
        """Chat with another pair: a new conversation once it has loaded."""
        if self.generating:
            self.notify("stop the running generation first (Esc)", severity="warning")
            return
        self.session.set_choice(choice)
        self.sub_title = choice.label()
        chat = self._chat_screen()
        if chat is not None:
            chat.reset_conversation()
        self.load_models()
        self.switch_mode("chat")

    def _chat_screen(self) -> ChatScreen | None:
        for screen in self._screen_stacks.get("chat", []):
            if isinstance(screen, ChatScreen):
                return screen
        return None

    def on_engine_loading(self, msg: EngineLoading) -> None:
        self.status_text = msg.text

    def on_engine_ready(self, msg: EngineReady) -> None:
        self._clean_jobs()
        self.status_text = "ready"
        self.engine_state = "ready"
        self.notify(f"ready: {self.session.choice.label()}", timeout=3)
        self.job_finished(None)

    def on_engine_failed(self, msg: EngineFailed) -> None:
        self._clean_jobs()
        self.engine_state = "failed"
        self.status_text = f"not loaded: {msg.error}"
        self.show_error("Cannot load the models", msg.error, msg.details)
        self.job_finished(None)

    def _clean_jobs(self) -> None:
        for job in [j for j in self.jobs if isinstance(j, LoadJob)]:
            job.join(timeout=5)
            if not job.alive:
                self.jobs.discard(job)

    def show_error(self, title: str, message: str, details: str = "") -> None:
        """A dialog for errors that need reading (reports); the app keeps running."""
        self.errors.append(message)
        self.push_screen(ErrorDialog(title, message, details))

    # -- settings ---------------------------------------------------------------------
    def action_settings(self) -> None:
        if isinstance(self.screen, SettingsScreen):
            return
        choice = self.session.choice
        has_draft = bool(choice.draft or choice.demo)
        has_mtp = self.session.settings.drafter.value == "mtp" or self.session.has_mtp()
        self.push_screen(SettingsScreen(self.session.settings, has_draft=has_draft, has_mtp=has_mtp,
                                        thinking=self.session.thinking_allowed), self.apply_settings)

    def apply_settings(self, result: tuple[RunSpec, bool] | None) -> None:
        if result is None:
            return
        settings, thinking = result
        session = self.session
        session.allow_thinking(thinking)
        reload = session.needs_reload(settings) and self.engine_state in ("ready", "failed")
        session.use(settings)
        self.notify("settings applied from the next message", timeout=3)
        if reload:
            self.load_models()
        chat = self._chat_screen()
        if chat is not None and chat.is_mounted:
            chat.engine_changed()

    # -- system gauges ----------------------------------------------------------------
    def system_stats(self) -> SystemStats:
        return self.monitor.sample()
