#!/usr/bin/env python3
"""MTP drafting vs a draft model vs the target alone, on generated tiny qwen35 models (CPU).

    python scripts/bench_mtp.py --runs 5 -n 128 --out docs/bench/mtp-tiny-cpu.json

One qwen35 target (Gated DeltaNet + attention, the qwen-27b architecture) with an MTP block,
and a smaller qwen35 draft model of the same tokenizer; both follow the same bigram chain
(tests/tiny/), so the draft model and the MTP head both agree with the target often
but not always. One engine holds the target, its MTP head and the draft model; the three
drafters run greedy, fixed K, in alternation (none, mtp, model, none, ...) so slow phases of
this shared machine hit them alike; the report gives medians and min-max per drafter and the
speed-ups of the medians. What it measures is the loop's overhead and the relative draft
costs on CPU at toy size, not what a 27B model gains on a GPU.
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

from tiny import qwen35_spec, write_model  # noqa: E402

from localspec.engine import Done, Engine, EngineConfig, RunSpec, SamplingConfig, Step  # noqa: E402

TARGET = qwen35_spec(n_embd=512, n_layer=8, n_head=8, n_head_kv=2, head_dim=64, n_rot=16, n_ff=1536,
                     d_state=64, n_k_heads=4, n_v_heads=8, mtp=True, bigram_seed=5, layer_gain=0.05,
                     mtp_noise=1.0, name="bench-q35-target")
DRAFT = qwen35_spec(n_embd=128, n_layer=2, full_attention_interval=2, n_head=2, n_head_kv=1, head_dim=64,
                    n_rot=16, n_ff=384, d_state=32, n_k_heads=2, n_v_heads=4, bigram_seed=5, layer_gain=0.05,
                    noise=0.3, seed=3, name="bench-q35-draft")
PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time there was"]
DRAFTERS = ("none", "mtp", "model")


def one(engine: Engine, tokens: list[int], drafter: str, k: int, n: int) -> dict:
    engine.reset()
    spec = RunSpec.of(drafter=drafter, adaptive=False, draft_max=k, max_tokens=n,
                      sampling=SamplingConfig(temperature=0.0))
    steps, done = [], None
    for ev in engine.run(tokens, spec):
        if isinstance(ev, Step):
            steps.append(ev)
        elif isinstance(ev, Done):
            done = ev
    s = done.summary
    return {"tok_s": s.tokens_per_second, "tokens": len(done.token_ids), "drafted": s.drafted,
            "accepted": s.accepted, "rounds": len(steps),
            "draft_seconds": sum(st.draft_seconds for st in steps),
            "verify_seconds": sum(st.verify_seconds for st in steps), "ids": list(done.token_ids)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="docs/bench/mtp-tiny-cpu.json")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        target = write_model(Path(tmp) / "target.gguf", TARGET)
        draft = write_model(Path(tmp) / "draft.gguf", DRAFT)
        config = EngineConfig(target=str(target), draft=str(draft), mtp=True, n_ctx=1024, threads=args.threads,
                              rollback_depth=args.k + 1)
        with Engine(config) as engine:
            runs: dict[str, list[dict]] = {d: [] for d in DRAFTERS}
            for p in PROMPTS:   # warm-up
                for d in DRAFTERS:
                    one(engine, engine.tokenize(p), d, args.k, 16)
            t0 = time.time()
            for r in range(args.runs):
                for p in PROMPTS:
                    toks = engine.tokenize(p)
                    order = DRAFTERS if r % 2 == 0 else tuple(reversed(DRAFTERS))
                    for d in order:
                        res = one(engine, toks, d, args.k, args.n)
                        res["prompt"] = p
                        runs[d].append(res)
            wall = time.time() - t0
            info = engine.describe()

    for d in DRAFTERS:   # lossless: every drafter emits the target's greedy tokens
        for a, b in zip(runs[d], runs["none"]):
            assert a["ids"] == b["ids"], f"{d} differs from the target alone on {a['prompt']!r}"
    summary = {}
    base = statistics.median(r["tok_s"] for r in runs["none"])
    for d in DRAFTERS:
        rs = runs[d]
        tok_s = [r["tok_s"] for r in rs]
        drafted = sum(r["drafted"] for r in rs)
        accepted = sum(r["accepted"] for r in rs)
        rounds = sum(r["rounds"] for r in rs)
        summary[d] = {
            "tok_s_median": statistics.median(tok_s), "tok_s_min": min(tok_s), "tok_s_max": max(tok_s),
            "speedup_vs_target": statistics.median(tok_s) / base,
            "acceptance": accepted / drafted if drafted else None,
            "tokens_per_round": sum(r["tokens"] for r in rs) / rounds if rounds else None,
            "draft_share_of_time": (sum(r["draft_seconds"] for r in rs)
                                    / max(1e-9, sum(r["draft_seconds"] + r["verify_seconds"] for r in rs))),
        }
    for r in (x for d in DRAFTERS for x in runs[d]):
        del r["ids"]
    out = {"what": "MTP head vs draft model vs target alone, tiny qwen35 models, CPU, greedy, fixed K",
           "command": "python scripts/bench_mtp.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "k": args.k, "n": args.n, "runs": args.runs, "threads": args.threads, "prompts": PROMPTS,
           "target": {"spec": repr(TARGET), **info["target"]}, "draft": {"spec": repr(DRAFT), **info["draft"]},
           "mtp": info["mtp"], "machine": {"platform": platform.platform(), "python": platform.python_version()},
           "wall_seconds": wall, "summary": summary, "runs_detail": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    for d in DRAFTERS:
        s = summary[d]
        acc = f"{s['acceptance']:.2f}" if s["acceptance"] is not None else "-"
        print(f"{d:6} {s['tok_s_median']:8.1f} tok/s ({s['tok_s_min']:.1f}-{s['tok_s_max']:.1f})  "
              f"x{s['speedup_vs_target']:.2f}  acceptance {acc}  tokens/round {s['tokens_per_round']:.2f}  "
              f"draft share {s['draft_share_of_time']:.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
