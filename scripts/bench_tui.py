#!/usr/bin/env python3
"""Benchmark: the app's overhead. The same generation (same pair, prompt, tokens, greedy, same
loaded engine) runs headless (the engine's events consumed in a plain loop) and through the
Textual app (a chat message typed into ``localspec chat``, run headless with Textual's test
driver: every widget, gauge, timer and message is live; only the terminal writes are
skipped). Runs alternate; medians are compared. Writes JSON.

Each run is a process of its own (loading the models, one warm-up generation, the measured
one), as each ``localspec chat`` is: apps started one after another in one process leave
Textual's caches behind and each costs a little more than the last.

    python scripts/bench_tui.py --demo -n 256 --runs 9 --out docs/bench/tui-overhead-smollm2-cpu.json

``--same-process`` alternates the two kinds inside one process instead (one app, one loaded
engine, pairs seconds apart: the machine's drift between processes cancels out; during a
headless run the app's event loop is blocked, so the app costs nothing then):

    python scripts/bench_tui.py --demo -n 256 --runs 12 --same-process --out docs/bench/tui-overhead-paired.json

``--terminal`` measures the whole thing as a user runs it instead: ``localspec chat`` in a real
terminal (tmux, 130x42, which also draws every frame) against ``localspec run --json``, each a
fresh process, tok/s as each reports it (the app's status line has one decimal).

    python scripts/bench_tui.py --demo -n 256 --runs 7 --terminal --out docs/bench/tui-overhead-terminal.json

tok/s is the engine's own figure (generated tokens over generation time), so anything the UI
costs the engine thread (CPU, the GIL) shows up in it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.chat.session import ChatSession, ModelChoice
from localspec.chat.settings import CHAT_DEFAULTS
from localspec.engine import Done, Engine, EngineConfig, RunSpec
from localspec.engine.backend import backend_name, default_threads
from localspec.tui.app import LocalspecApp

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


class Shared:
    """The loaded engine, handed to each app without letting the app close it."""

    def __init__(self, engine: Engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def close(self) -> None:
        pass


def _thread_cpu(native_id: int) -> float:
    """CPU seconds used so far by one thread of this process (Linux: /proc)."""
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def headless(engine: Engine, tokens: list[int], settings: RunSpec) -> dict:
    """One generation in a fresh thread, exactly as the app runs each one (with llama.cpp's
    OpenMP build, decoding from a thread other than the one that decoded first can run at
    half speed on a small machine, so neither side may decode on the main thread)."""
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(_headless(engine, tokens, settings)))
    worker.start()
    worker.join()
    return out


def _headless(engine: Engine, tokens: list[int], settings: RunSpec) -> dict:
    engine.reset()
    t0 = time.perf_counter()
    done = None
    text = []
    for ev in engine.run(tokens, settings):
        if isinstance(ev, Done):
            done = ev
        elif hasattr(ev, "text"):
            text.append(ev.text)
    wall = time.perf_counter() - t0
    s = done.summary
    return {"tokens_per_second": s.tokens_per_second, "n_generated": s.n_generated, "wall_seconds": wall,
            "acceptance_rate": s.acceptance_rate, "token_ids": list(done.token_ids)}


async def in_app(engine: Engine, choice: ModelChoice, prompt: str, settings: RunSpec, size) -> dict:
    shared = Shared(engine)
    session = ChatSession(choice, settings, engine_factory=lambda config: shared)
    app = LocalspecApp(session)
    async with app.run_test(size=size) as pilot:
        end = time.monotonic() + 120
        while app.engine_state != "ready":
            if app.engine_state == "failed" or time.monotonic() > end:
                raise SystemExit(f"the app could not load the models: {app.status_text}")
            await pilot.pause(0.05)
        screen = app.screen
        await pilot.pause(0.3)         # let the first gauges render, as a user would see them
        engine.reset()
        ui = threading.get_native_id()
        cpu0 = _thread_cpu(ui)
        t0 = time.perf_counter()
        prompt_box = screen.query_one("#prompt")
        prompt_box.value = prompt
        prompt_box.focus()
        # Enter, as the Input handles it (pilot.press would also post to every widget).
        await prompt_box.action_submit()
        job = screen.job
        # Wait without the pilot's pauses (each one posts a message to every widget).
        while screen.job is not None or screen.last_done is None:
            job = job or screen.job
            await asyncio.sleep(0.25)   # rarely: each wake-up is work on the UI thread
        wall = time.perf_counter() - t0
        ui_cpu = _thread_cpu(ui) - cpu0
        s = screen.last_done.summary
        out = {"tokens_per_second": s.tokens_per_second, "n_generated": s.n_generated, "wall_seconds": wall,
               "acceptance_rate": s.acceptance_rate, "token_ids": list(screen.last_done.token_ids),
               "ui_thread_cpu_seconds": ui_cpu, "ui_thread_cpu_share": ui_cpu / wall,
               "ui_messages": job.posted if job is not None else None,
               "ui_messages_per_second": job.posted / s.generation_seconds if job and s.generation_seconds else None}
        await pilot.press("ctrl+q")
    return out


async def paired(engine: Engine, tokens: list[int], choice: ModelChoice, settings: RunSpec, args,
                 size) -> list[dict]:
    """``--same-process``: one app, one loaded engine; headless and app generations alternate,
    seconds apart, so each pair sees the machine at the same speed. While the headless run
    decodes, the app's event loop waits for it (blocked, as if there were no app)."""
    shared = Shared(engine)
    app = LocalspecApp(ChatSession(choice, settings, engine_factory=lambda config: shared))
    pairs = []
    async with app.run_test(size=size) as pilot:
        while app.engine_state != "ready":
            if app.engine_state == "failed":
                raise SystemExit(f"the app could not load the models: {app.status_text}")
            await pilot.pause(0.05)
        screen = app.screen
        await pilot.pause(0.3)
        for i in range(args.runs):
            pair = {}
            for kind in (("headless", "app") if i % 2 == 0 else ("app", "headless")):
                if kind == "headless":
                    out: dict = {}
                    worker = threading.Thread(target=lambda out=out: out.update(_headless(engine, tokens, settings)))
                    worker.start()
                    worker.join()      # the app's loop is blocked meanwhile: it costs nothing
                else:
                    engine.reset()
                    screen.last_done = None
                    box = screen.query_one("#prompt")
                    box.value = args.prompt
                    box.focus()
                    await box.action_submit()
                    while screen.job is not None or screen.last_done is None:
                        await asyncio.sleep(0.25)
                    d = screen.last_done
                    out = {"tokens_per_second": d.summary.tokens_per_second, "n_generated": d.summary.n_generated,
                           "token_ids": list(d.token_ids)}
                    await pilot.press("ctrl+n")       # the same prompt, the same tokens, next time
                    await pilot.pause(0.3)
                pair[kind] = out
                print(f"pair {i + 1}/{args.runs} {kind:8}: {out['tokens_per_second']:7.1f} tok/s", file=sys.stderr)
            pairs.append(pair)
        await pilot.press("ctrl+q")
    return pairs


def one_run(kind: str, target: str, draft: str, args) -> dict:
    """A single measured run in this process (the ``--child`` mode)."""
    settings = _settings(args)
    choice = ModelChoice(target=target, draft=draft, threads=args.threads, n_ctx=2048)
    engine = Engine(EngineConfig(target=target, draft=draft, n_ctx=2048, threads=args.threads))
    tokens = engine.chat_prompt([{"role": "user", "content": args.prompt}])
    headless(engine, tokens, settings)           # warm-up, the same for both kinds
    if kind == "paired":
        size = tuple(int(x) for x in args.size.lower().split("x"))
        out = {"pairs": asyncio.run(paired(engine, tokens, choice, settings, args, size))}
    elif kind == "headless":
        out = headless(engine, tokens, settings)
    else:
        size = tuple(int(x) for x in args.size.lower().split("x"))
        out = asyncio.run(in_app(engine, choice, args.prompt, settings, size))
    out["describe"] = engine.describe()
    engine.close()
    return out


def terminal_run(kind: str, target: str, draft: str, args) -> dict:
    """One run as a user makes it: ``localspec chat`` inside tmux, or ``localspec run --json``."""
    common = ["--temp", "0", "--fixed-k", "--draft-max", str(args.draft_max), "-n", str(args.max_tokens)]
    if args.threads:
        common += ["--threads", str(args.threads)]
    exe = [sys.executable, "-m", "localspec"]
    if kind == "headless":
        proc = subprocess.run([*exe, "run", "-m", target, "-d", draft, "--chat", "-p", args.prompt, "--json",
                               *common], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"localspec run failed: {proc.stderr.strip()[-500:]}")
        d = json.loads(proc.stdout)
        return {"tokens_per_second": d["stats"]["tokens_per_second"], "n_generated": d["stats"]["n_generated"],
                "token_ids": d["token_ids"]}
    sock = f"localspec-bench-{os.getpid()}"
    width, height = (int(x) for x in args.size.lower().split("x"))

    def tmux(*a: str) -> str:
        return subprocess.run(["tmux", "-L", sock, *a], capture_output=True, text=True, check=False).stdout

    def wait(needle: str, timeout: float, every: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            screen = tmux("capture-pane", "-p", "-t", "bench")
            if needle in screen:
                return screen
            time.sleep(every)
        raise SystemExit(f"timed out waiting for {needle!r}; the screen was:\n{screen}")

    cmd = " ".join(shlex.quote(x) for x in [*exe, "chat", target, "--draft", draft, *common])
    tmux("new-session", "-d", "-s", "bench", "-x", str(width), "-y", str(height), "-e", "TERM=xterm-256color",
         f"unset COLUMNS LINES; {cmd}")
    try:
        wait("ready ·", 120, 0.2)
        time.sleep(1.0)
        tmux("send-keys", "-t", "bench", "-l", args.prompt)
        tmux("send-keys", "-t", "bench", "Enter")
        # Look rarely: each look is a tmux client process taking CPU from the run.
        screen = wait("answered:", 300, 1.0)
        line = next(row for row in screen.splitlines() if "answered:" in row)
        m = re.search(r"answered: (\d+) tokens, ([\d.]+) tok/s", line)
        if not m:
            raise SystemExit(f"cannot read the status line: {line!r}")
        tmux("send-keys", "-t", "bench", "C-q")
        time.sleep(1.0)
        return {"tokens_per_second": float(m.group(2)), "n_generated": int(m.group(1)), "token_ids": None}
    finally:
        tmux("kill-server")


def _settings(args) -> RunSpec:
    return CHAT_DEFAULTS.with_(drafter="model", adaptive=args.adaptive, draft_max=args.draft_max, draft_min=1,
                        temperature=0.0, max_tokens=args.max_tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true", help="the built-in SmolLM2-135M pair (F16 target, Q4_1 draft)")
    ap.add_argument("-m", "--target")
    ap.add_argument("-d", "--draft")
    ap.add_argument("-n", "--max-tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5, help="measured runs of each kind")
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--adaptive", action="store_true", help="adaptive K (default: fixed K = --draft-max)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--size", default="130x42", help="terminal size of the app, WxH")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--terminal", action="store_true",
                    help="localspec chat in a real terminal (tmux) against localspec run --json")
    ap.add_argument("--same-process", action="store_true",
                    help="one process, one app: headless and app generations alternate, seconds apart")
    ap.add_argument("--child", choices=("headless", "app", "paired"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.demo:
        from localspec.models.demo import demo_pair

        target, draft = (str(p) for p in demo_pair(progress=lambda m: print(m, file=sys.stderr)))
    elif args.target and args.draft:
        target, draft = args.target, args.draft
    else:
        ap.error("give --demo, or -m TARGET and -d DRAFT")
    if args.child:
        print(json.dumps(one_run(args.child, target, draft, args)))
        return

    child_args = [a for a in sys.argv[1:]]
    if "--out" in child_args:
        j = child_args.index("--out")
        del child_args[j:j + 2]

    def run(kind: str) -> dict:
        if args.terminal:
            return terminal_run(kind, target, draft, args)
        proc = subprocess.run([sys.executable, __file__, *child_args, "--child", kind], check=False,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"a {kind} run failed:\n{proc.stderr[-2000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    runs: dict[str, list[dict]] = {"headless": [], "app": []}
    if args.same_process:
        proc = subprocess.run([sys.executable, __file__, *child_args, "--child", "paired"], check=False,
                              stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise SystemExit("the paired run failed")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        for pair in data["pairs"]:
            for kind in runs:
                runs[kind].append(pair[kind])
        runs["headless"][0]["describe"] = data["describe"]
    else:
        for i in range(args.runs):
            for kind in (("headless", "app") if i % 2 == 0 else ("app", "headless")):
                r = run(kind)
                runs[kind].append(r)
                ui = f", UI thread {r['ui_thread_cpu_share']:.1%} of a core" if "ui_thread_cpu_share" in r else ""
                print(f"run {i + 1}/{args.runs} {kind:8}: {r['tokens_per_second']:7.1f} tok/s "
                      f"({r['n_generated']} tokens{ui})", file=sys.stderr)
    ids = [r["token_ids"] for k in runs for r in runs[k] if r["token_ids"] is not None]
    same = all(x == ids[0] for x in ids)
    if args.terminal:   # the app shows the count, not the tokens: equal counts at least
        same = same and len({r["n_generated"] for k in runs for r in runs[k]}) == 1
    med = {k: statistics.median(r["tokens_per_second"] for r in v) for k, v in runs.items()}
    overhead = 1.0 - med["app"] / med["headless"]
    # Each app run against the headless run next to it: robust to the machine's drift.
    pair_overheads = [1.0 - a["tokens_per_second"] / h["tokens_per_second"]
                      for h, a in zip(runs["headless"], runs["app"])]
    pair_overhead = statistics.median(pair_overheads)
    info = runs["headless"][0].get("describe") or {"target": target, "draft": draft}
    result = {
        "what": ("tok/s of the same greedy generation, localspec run --json vs localspec chat in tmux"
                 if args.terminal else
                 "tok/s of the same greedy generation, headless vs through the Textual app (run_test), "
                 "alternating in one process with one app and one loaded engine" if args.same_process else
                 "tok/s of the same greedy generation, headless vs through the Textual app (run_test), "
                 "each run in a process of its own"),
        "command": " ".join(["python", "scripts/bench_tui.py", *sys.argv[1:]]),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "backend": backend_name(info["target"]["gpu_layers"]) if not args.terminal else None,
                    "threads": args.threads or default_threads(), "cpus": os.cpu_count()},
        "models": info, "prompt": args.prompt, "max_tokens": args.max_tokens,
        "policy": "adaptive" if args.adaptive else f"fixed K={args.draft_max}",
        "median_tokens_per_second": med, "overhead_fraction": overhead,
        "pair_overheads": pair_overheads, "median_pair_overhead": pair_overhead,
        "median_ui_thread_cpu_share": (None if args.terminal or args.same_process else
                                       statistics.median(r["ui_thread_cpu_share"] for r in runs["app"])),
        "outputs_identical": same,
        "runs": {k: [{x: y for x, y in r.items() if x not in ("token_ids", "describe")} for r in v]
                 for k, v in runs.items()},
    }
    print(f"headless {med['headless']:.1f} tok/s, app {med['app']:.1f} tok/s: overhead {overhead:+.2%} "
          f"(median of the {len(pair_overheads)} pairs {pair_overhead:+.2%})"
          f"{'' if same else ' (outputs differ!)'}", file=sys.stderr)
    emit(result, args.out)


def emit(result: dict, out: Path | None) -> None:
    """Print the result as JSON, and write it to ``out`` when given."""
    text = json.dumps(result, indent=2)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
