#!/usr/bin/env python3
"""Benchmark: target alone vs localspec speculative (fixed K and adaptive) vs llama.cpp's own
``llama-speculative-simple``, on the same pair, K and prompts. Writes JSON.

    python scripts/bench.py --demo --reference .cache/reference/build/bin/llama-speculative-simple \
        --k 4 --runs 3 -n 128 --out docs/bench-smollm2.json

Every figure in one run comes from the same machine state: runs are interleaved
(target-only, fixed K, adaptive, reference) and the medians are reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402
from localspec.engine.backend import backend_name, default_threads, extra_buffers_default  # noqa: E402
from localspec.engine.template import render_chat  # noqa: E402

PROMPTS = {
    "code": "Write a Python function that checks whether a string is a palindrome, with a docstring.",
    "summary": "Summarise in three sentences: The Industrial Revolution began in Britain in the late "
               "18th century. It brought mechanised textile production, steam power, and new iron-making "
               "processes. Cities grew quickly as people moved from farms to factories, and working "
               "conditions were often harsh, which led to new labour laws.",
    "qa": "What is the boiling point of water at sea level, and why does it change at altitude?",
    "chat": "I have a free afternoon in a rainy city. Suggest a plan.",
    "creative": "Write a short poem about the sea.",
}

GREEDY = SamplingConfig(temperature=0.0)


TARGET_ONLY = RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY)
ADAPTIVE = RunSpec(sampling=GREEDY)


def fixed(k: int) -> RunSpec:
    return ADAPTIVE.with_(adaptive=False, draft_max=k)


def run_localspec(engine: Engine, tokens, n, spec: RunSpec):
    engine.reset()
    done = None
    for ev in engine.run(tokens, spec.with_(max_tokens=n)):
        if isinstance(ev, Done):
            done = ev
    s = done.summary
    return {"tok_s": s.tokens_per_second, "tokens": s.n_generated, "acceptance": s.acceptance_rate,
            "tokens_per_step": s.tokens_per_step, "overhead": s.overhead_fraction,
            "drafting_off": s.tokens_drafting_off, "ids": list(done.token_ids)}


def run_reference(binary, target, draft, prompt_text, n, k, threads, n_ctx):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt_text)
        pfile = f.name
    cmd = [binary, "-m", target, "-md", draft, "--spec-type", "draft-simple", "-f", pfile, "-n", str(n),
           "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
           "--temp", "0", "-t", str(threads), "-td", str(threads), "-c", str(n_ctx), "-ngl", "0"]
    if not extra_buffers_default():
        cmd.append("--no-repack")  # the same CPU buffers localspec uses (see backend.py)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if not m:
        raise RuntimeError(f"reference run failed:\n{log[-2000:]}")
    return {"tok_s": float(m.group(3)), "tokens": int(m.group(1)),
            "acceptance": float(acc.group(1)) / 100 if acc else None}


def median(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def markdown_table(out: dict) -> str:
    """The results as a Markdown table (printed to stdout at the end of a run)."""
    ks = out["fixed_ks"]
    has_ref = any("reference" in r for r in out["results"])
    head = ["prompt", "target alone tok/s"] + [f"K={k}" for k in ks] + ["default (adaptive)", "acceptance",
                                                                         "overhead", "default / best"]
    if has_ref:
        head += [f"llama-speculative-simple K={out['reference_k']}", f"localspec K={out['reference_k']} / llama.cpp"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in out["results"]:
        cells = [r["prompt"], f"{r['target_only_tok_s']:.1f}"]
        for k in ks:
            c = r[f"fixed_k{k}"]
            cells.append(f"{c['tok_s']:.1f} ({c['speedup']:.2f}x)")
        a = r["adaptive"]
        cells += [f"{a['tok_s']:.1f} ({a['speedup']:.2f}x)", f"{r[f'fixed_k{ks[-1]}']['acceptance']:.0%}",
                  f"{a['overhead']:.1%}", f"**{r['default_vs_best']:.2f}**"]
        if has_ref:
            ref = r["reference"]
            cells += [f"{ref['tok_s']:.1f} ({ref['speedup']:.2f}x)", f"{r['localspec_vs_reference']:.2f}x"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target")
    ap.add_argument("--draft")
    ap.add_argument("--demo", action="store_true", help="the built-in SmolLM2 pair")
    ap.add_argument("--reference", help="path of llama-speculative-simple (scripts/build_reference.sh)")
    ap.add_argument("--k", type=int, default=4, help="draft length for the reference comparison")
    ap.add_argument("--fixed-ks", default=None,
                    help="comma-separated fixed draft lengths to sweep (default: just --k)")
    ap.add_argument("-n", type=int, default=128, help="tokens per generation")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--prompts", nargs="*", default=list(PROMPTS), choices=list(PROMPTS))
    ap.add_argument("--out", default="bench.json")
    args = ap.parse_args(argv)
    ks = [int(x) for x in args.fixed_ks.split(",")] if args.fixed_ks else [args.k]
    if args.reference and args.k not in ks:
        ks.append(args.k)

    if args.demo:
        from localspec.models.demo import demo_pair

        t, d = demo_pair(progress=lambda m: print(m, file=sys.stderr))
        args.target, args.draft = str(t), str(d)
    if not (args.target and args.draft):
        ap.error("give --target and --draft, or --demo")

    cfg = EngineConfig(target=args.target, draft=args.draft, n_ctx=args.ctx, threads=args.threads)
    engine = Engine(cfg)
    results = []
    t_start = time.time()
    for name in args.prompts:
        messages = [{"role": "user", "content": PROMPTS[name]}]
        tokens = engine.chat_prompt(messages)
        prompt_text = render_chat(engine.target_model.chat_template(), messages)
        run_localspec(engine, tokens, 16, TARGET_ONLY)  # warm-up, excluded
        rows: dict[str, list] = {"target_only": [], "adaptive": [], "reference": []}
        rows |= {f"fixed_k{k}": [] for k in ks}
        for _ in range(args.runs):
            rows["target_only"].append(run_localspec(engine, tokens, args.n, TARGET_ONLY))
            for k in ks:
                rows[f"fixed_k{k}"].append(run_localspec(engine, tokens, args.n, fixed(k)))
            rows["adaptive"].append(run_localspec(engine, tokens, args.n, ADAPTIVE))
            if args.reference:
                rows["reference"].append(run_reference(args.reference, args.target, args.draft, prompt_text,
                                                       args.n, args.k, args.threads, args.ctx))
        base = median(rows["target_only"], "tok_s")
        entry = {"prompt": name, "target_only_tok_s": base}
        for key, cell in rows.items():
            if key == "target_only" or not cell:
                continue
            tps = median(cell, "tok_s")
            entry[key] = {"tok_s": tps, "speedup": tps / base, "acceptance": median(cell, "acceptance")}
            if key != "reference":
                entry[key] |= {"overhead": median(cell, "overhead"),
                               "tokens_per_step": median(cell, "tokens_per_step"),
                               "drafting_off": median(cell, "drafting_off"),
                               "identical_to_target": all(r["ids"] == rows["target_only"][0]["ids"] for r in cell)}
        best = max([base] + [entry[f"fixed_k{k}"]["tok_s"] for k in ks])
        entry["default_vs_best"] = entry["adaptive"]["tok_s"] / best
        if rows["reference"]:
            entry["localspec_vs_reference"] = entry[f"fixed_k{args.k}"]["tok_s"] / entry["reference"]["tok_s"]
        results.append(entry)
        print(json.dumps(entry), file=sys.stderr)
    engine.close()

    out = {
        "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
        "target": args.target, "draft": args.draft, "fixed_ks": ks, "reference_k": args.k, "n": args.n,
        "runs": args.runs, "threads": args.threads, "backend": backend_name(-1),
        "machine": platform.processor() or platform.machine(), "seconds": round(time.time() - t_start, 1),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    print(markdown_table(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
