#!/usr/bin/env python3
"""What the app's own work costs, without the engine competing for the CPU.

One real generation of the demo pair is recorded (its events and when they came), then
replayed into ``localspec chat`` (Textual's headless driver) at the same pace, the engine
thread sleeping instead of computing. The UI thread's CPU time is read with
``time.thread_time`` inside the UI's own loop, over the steady part of each answer (first
progress message to the last) and over the whole turn. Much less noisy than
``bench_tui.py``'s tok/s, so it tells whether a change to the app makes it cheaper; it does
not say what the engine loses (``bench_tui.py`` does).

    python scripts/tui_cost.py --turns 8
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tui import PROMPT, Shared, emit

from localspec.chat.session import ChatSession, ModelChoice
from localspec.chat.settings import CHAT_DEFAULTS
from localspec.engine import Engine, EngineConfig, RunSpec
from localspec.models.demo import demo_pair
from localspec.tui.app import LocalspecApp
from localspec.tui.screens.chat import ChatScreen


def record(engine: Engine, settings: RunSpec, prompt: str) -> list[tuple[float, object]]:
    """The events of one generation and when each came (seconds from the start)."""
    tokens = engine.chat_prompt([{"role": "user", "content": prompt}])
    events: list[tuple[float, object]] = []

    def run() -> None:
        t0 = time.perf_counter()
        for ev in engine.run(tokens, settings):
            events.append((time.perf_counter() - t0, ev))

    worker = threading.Thread(target=run)   # as the app does: never decode on the main thread
    worker.start()
    worker.join()
    return events


class Replay(Shared):
    """The loaded engine, whose run() replays the recording at its pace."""

    def __init__(self, engine: Engine, events):
        super().__init__(engine)
        self._events = events

    def run(self, tokens, spec, cancel=None):
        t0 = time.perf_counter()
        for t, ev in self._events:
            wait = t0 + t - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            yield ev


class Marks:
    """UI-thread CPU time at the first progress message and at the end of the answer."""

    def __init__(self):
        self.first = self.finished = None
        progress, finished = ChatScreen.on_generation_progress, ChatScreen.on_generation_finished
        marks = self

        def on_progress(screen, msg):
            if marks.first is None:
                marks.first = (time.thread_time(), time.perf_counter())
            return progress(screen, msg)

        def on_finished(screen, msg):
            marks.finished = (time.thread_time(), time.perf_counter())
            return finished(screen, msg)

        ChatScreen.on_generation_progress = on_progress
        ChatScreen.on_generation_finished = on_finished


async def turns(engine: Engine, events, choice: ModelChoice, settings: RunSpec, n: int, size, prompt: str):
    marks = Marks()
    app = LocalspecApp(ChatSession(choice, settings, engine_factory=lambda config: Replay(engine, events)))
    out = []
    async with app.run_test(size=size) as pilot:
        while app.engine_state != "ready":
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        for _ in range(n):
            screen = app.screen
            marks.first = marks.finished = None
            c0, t0 = time.thread_time(), time.perf_counter()
            box = screen.query_one("#prompt")
            box.value = prompt
            box.focus()
            await box.action_submit()
            await asyncio.sleep(0.1)
            while screen.job is not None:
                await asyncio.sleep(0.25)     # rarely: each wake-up is work on the UI thread
            c1, t1 = time.thread_time(), time.perf_counter()
            (cf, tf), (ce, te) = marks.first, marks.finished
            out.append({"steady_share": (ce - cf) / (te - tf), "turn_share": (c1 - c0) / (t1 - t0),
                        "start_ms": (cf - c0) * 1000, "end_ms": (c1 - ce) * 1000})
            await pilot.press("ctrl+n")
            await pilot.pause(0.3)
        await pilot.press("ctrl+q")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=8, help="answers replayed (new chat between)")
    ap.add_argument("-n", "--max-tokens", type=int, default=256)
    ap.add_argument("--size", default="130x42", help="terminal size of the app, WxH")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    target, draft = (str(p) for p in demo_pair(progress=lambda m: print(m, file=sys.stderr)))
    settings = CHAT_DEFAULTS.with_(drafter="model", adaptive=False, draft_max=4, draft_min=1, temperature=0.0,
                            max_tokens=args.max_tokens)
    choice = ModelChoice(target=target, draft=draft, n_ctx=2048)
    engine = Engine(EngineConfig(target=target, draft=draft, n_ctx=2048))
    events = record(engine, settings, args.prompt)
    size = tuple(int(x) for x in args.size.lower().split("x"))
    runs = asyncio.run(turns(engine, events, choice, settings, args.turns, size, args.prompt))
    engine.close()
    result = {
        "what": "UI-thread CPU time of localspec chat replaying a recorded generation (no engine load)",
        "command": " ".join(["python", "scripts/tui_cost.py", *sys.argv[1:]]),
        "median_steady_share": statistics.median(r["steady_share"] for r in runs),
        "median_turn_share": statistics.median(r["turn_share"] for r in runs),
        "runs": runs,
    }
    print(f"UI thread while tokens stream: {result['median_steady_share']:.2%} of a core "
          f"(whole turn {result['median_turn_share']:.2%})", file=sys.stderr)
    emit(result, args.out)


if __name__ == "__main__":
    main()
