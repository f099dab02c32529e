"""Helpers for the TUI tests (no tests here): waiting in a Pilot, app factories, and a scripted
engine whose events and clock are fixed, for screenshots that never change.

The behaviour tests use the real engine on the tiny models; only the snapshot tests use the
scripted engine, because live figures (tok/s, timings) differ from run to run.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from dataclasses import dataclass, field

from textual.widgets import Input

from localspec.chat.session import ChatSession, ModelChoice
from localspec.chat.settings import CHAT_DEFAULTS
from localspec.chat.system_stats import GpuMemory, StaticMonitor, SystemStats
from localspec.engine import DrafterKind, RunSpec
from localspec.engine.backend import ModelInfo
from localspec.engine.compat import CompatReport, Rule
from localspec.engine.events import (
    Done,
    Origin,
    PolicyNote,
    PromptProcessed,
    Step,
    StopReason,
    Summary,
    Token,
)
from localspec.tui.app import LocalspecApp
from localspec.tui.screens.chat import ChatScreen

SIZE = (130, 42)   # the terminal the Pilot tests run in

SYSTEM = SystemStats(gpus=(), gpu_note="no NVIDIA GPU (NVML Shared Library Not Found): models run in RAM",
                     ram_used=6_400_000_000, ram_total=16_000_000_000, process_rss=812_000_000,
                     cpu_percent=87.5, cpu_count=2)
SYSTEM_GPU = SystemStats(gpus=(GpuMemory(0, "NVIDIA H200", 21_300_000_000, 150_000_000_000),),
                         ram_used=6_400_000_000, ram_total=16_000_000_000, process_rss=1_200_000_000,
                         cpu_percent=12.0, cpu_count=16)


def run_async(fn):
    """Run an ``async def`` test in its own event loop (no pytest plugin needed)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))
    return wrapper


async def wait_for(pilot, predicate, timeout: float = 20.0, what: str = "condition") -> None:
    """Let the app run until ``predicate()`` holds (fails after ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.02)


async def wait_ready(pilot, timeout: float = 30.0) -> None:
    app = pilot.app
    await wait_for(pilot, lambda: app.engine_state in ("ready", "failed"), timeout, "the models to load")
    assert app.engine_state == "ready", app.status_text


def tiny_app(target, draft=None, *, drafter: str = "model", n_ctx: int = 1024, monitor=None,
             **settings) -> LocalspecApp:
    """The app on the tiny models: one thread (two cores are shared with other work), greedy."""
    settings.setdefault("temperature", 0.0)
    session = ChatSession(ModelChoice(target=str(target), draft=str(draft) if draft else None, n_ctx=n_ctx,
                                      threads=1),
                          CHAT_DEFAULTS.with_(drafter=drafter, **settings))
    return LocalspecApp(session, monitor=monitor or StaticMonitor(SYSTEM))


def chat(app) -> ChatScreen:
    screen = app.screen
    assert isinstance(screen, ChatScreen), type(screen)
    return screen


async def send(pilot, text: str) -> ChatScreen:
    screen = chat(pilot.app)
    prompt = screen.query_one("#prompt", Input)
    prompt.focus()
    prompt.value = text
    await pilot.press("enter")
    return screen


async def wait_answer(pilot, timeout: float = 30.0) -> ChatScreen:
    screen = chat(pilot.app)
    await wait_for(pilot, lambda: screen.job is None and screen.last_done is not None, timeout, "the answer")
    await pilot.pause()
    return screen


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]


# -- a scripted engine ----------------------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TickCounter(threading.Event):
    """A job's "finished" event that counts its ticker's waits which ran their whole interval:
    each one lets the ticker post one progress message, so the messages a job posts are bounded
    by these counts, not by any clock the test reads."""

    def __init__(self) -> None:
        super().__init__()
        self.intervals: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        finished = super().wait(timeout)
        if not finished:
            self.intervals.append(timeout)
        return finished

    @classmethod
    def install(cls, job) -> TickCounter:
        """Count ``job``'s ticks (call before the job starts)."""
        job._finished = counter = cls()
        return counter


@dataclass
class FakeModel:
    info: ModelInfo

    def piece(self, token: int) -> bytes:
        return b"x"


def _info(path: str, desc: str, size: int, params: int) -> ModelInfo:
    return ModelInfo(path=path, description=desc, n_params=params, size_bytes=size, n_layer=30,
                     n_ctx_train=8192, n_vocab=49152, gpu_layers=0, backend="CPU", recurrent=False,
                     hybrid=False)


# The answer, as (text, origin) tokens, and the rounds that produced it:
# (k, drafted, accepted, draft seconds, verify seconds).
ANSWER = [
    ("The", "target"), (" sea", "draft"), (" is", "draft"), (" a", "draft"), (" restless", "bonus"),
    (" blue", "target"), (" mirror", "draft"), (",", "draft"), ("\n", "target"),
    ("it", "draft"), (" sings", "draft"), (" to", "draft"), (" the", "draft"), (" shore", "bonus"),
    (".", "target"),
]
ROUNDS = [(0, 0, 0, 0.0, 0.020), (4, 4, 3, 0.008, 0.024), (4, 4, 1, 0.008, 0.024), (4, 4, 2, 0.008, 0.024),
          (4, 4, 4, 0.008, 0.024), (4, 1, 0, 0.002, 0.021)]


class FakeEngine:
    """Replays ANSWER with fixed timings on a fake clock; speculative=False replays it slower."""

    def __init__(self, config, clock: FakeClock, pause_drafting: bool = False):
        self.config = config
        self.clock = clock
        self.pause_drafting = pause_drafting
        self.target_model = FakeModel(_info("/models/smollm2-1.7b-instruct-q4_k_m.gguf",
                                            "llama 1.7B Q4_K - Medium", 1_055_609_824, 1_711_376_384))
        self.draft_model = None
        self.compat = None
        if config.draft:
            self.draft_model = FakeModel(_info("/models/smollm2-135m-instruct-q8_0.gguf", "llama 135M Q8_0",
                                               144_811_296, 134_515_008))
            self.compat = CompatReport("target", "draft", [Rule("vocabulary type", True, "gpt2 / gpt2")], [], 0)
        self.closed = False

    def chat_prompt(self, messages, variables=None):
        return list(range(20 + 10 * len(messages)))

    def describe(self) -> dict:
        return {"target": {"model": "llama 1.7B Q4_K - Medium"},
                "drafters": [k.value for k in self.drafters], "n_ctx": self.config.n_ctx, "threads": 2}

    @property
    def drafters(self):
        return tuple(k for k in DrafterKind if k is not DrafterKind.MODEL or self.draft_model is not None)

    def reset(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def run(self, tokens, run: RunSpec, cancel: threading.Event | None = None):
        clock = self.clock
        start = clock.now
        clock.now += 0.05
        yield PromptProcessed(len(tokens), 0, 0.05)
        t_gen = clock.now
        ids, text = [], []
        drafted = accepted = steps = 0
        ttft = None
        spec = run.speculative
        if spec:
            rounds = ROUNDS
        else:
            rounds = [(0, 0, 0, 0.0, 0.030)] * len(ANSWER)
        pos = 0
        if spec and self.pause_drafting:   # after three rounds the policy pauses: plain target steps
            rounds = rounds[:3] + [(0, 0, 0, 0.0, 0.030)] * (len(ANSWER) - sum(a + 1 for _, _, a, _, _ in rounds[:3]))
        for i, (k, d, a, ds, vs) in enumerate(rounds):
            if cancel is not None and cancel.is_set():
                break
            paused = spec and self.pause_drafting and i >= 3
            if paused and i == 3:
                yield PolicyNote(False, 0, "draft step costs 0.80 of a target step, acceptance 0.45; K=4 "
                                           "measured 0.92x; drafting paused (next probe after 64 tokens)")
            clock.now += ds + vs
            n = a + 1 if spec else 1
            for text_piece, origin in ANSWER[pos:pos + n]:
                if ttft is None:
                    ttft = clock.now - start
                ids.append(pos)
                text.append(text_piece)
                pos += 1
                yield Token(pos, text_piece, Origin(origin if spec and not paused else "target"))
            drafted += d
            accepted += a
            steps += 1
            yield Step(i, k, d, a, n, ds, vs, spec and not paused)
        gen = clock.now - t_gen
        summary = Summary(n_prompt=len(tokens), n_generated=len(ids), prompt_seconds=0.05,
                          generation_seconds=gen, time_to_first_token=ttft or 0.0,
                          tokens_per_second=len(ids) / gen, steps=steps, drafted=drafted, accepted=accepted,
                          acceptance_rate=accepted / drafted if drafted else 0.0,
                          tokens_per_step=len(ids) / steps, drafter=run.drafter.value,
                          stop_reason="eog")
        yield Done(summary, "".join(text), tuple(ids), StopReason.EOG, policy={"adaptive": run.adaptive})


@dataclass
class ScriptedSetup:
    clock: FakeClock = field(default_factory=FakeClock)
    pause_drafting: bool = False

    def factory(self, config):
        return FakeEngine(config, self.clock, self.pause_drafting)


def scripted_app(*, pause_drafting: bool = False, drafter: str = "model", monitor=None,
                 save_dir=None) -> LocalspecApp:
    """The app on the scripted engine: deterministic text, figures and gauges."""
    setup = ScriptedSetup(pause_drafting=pause_drafting)
    session = ChatSession(ModelChoice(target="/models/smollm2-1.7b-instruct-q4_k_m.gguf",
                                      draft="/models/smollm2-135m-instruct-q8_0.gguf",
                                      target_name="smollm2-1.7b:q4_k_m", draft_name="smollm2-135m:q8_0"),
                          RunSpec.of(drafter=drafter, temperature=0.0, max_tokens=512), engine_factory=setup.factory)
    return LocalspecApp(session, monitor=monitor or StaticMonitor(SYSTEM), flush_interval=None,
                        clock=setup.clock, save_dir=save_dir)
