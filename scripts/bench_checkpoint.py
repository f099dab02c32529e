#!/usr/bin/env python3
"""What rolling back a recurrent or hybrid state costs, measured on generated tiny models.

    python scripts/bench_checkpoint.py --out docs/bench-checkpoint.json

For each pair (recurrent / hybrid / transformer targets and drafts, two widths) it runs the
same greedy generation target-only and speculative (fixed K=4) and reports tok/s, the share
of generation time spent saving and restoring states, the size of one checkpoint, rollbacks,
and the accepted tokens the target had to decode again. The LFM2 target runs twice: with
llama.cpp's recurrent-state snapshots (``rs``) and forced onto sequence checkpoints.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tiny import TinySpec, TinyZoo, hybrid_spec, mamba_spec  # noqa: E402

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402

# Greedy, fixed K=4 (what the figures in docs/ were measured with).
SPEC = RunSpec(adaptive=False, draft_max=4, sampling=SamplingConfig(temperature=0.0))


def run(engine, tokens, n, speculative):
    engine.reset()
    done = None
    spec = SPEC.with_(max_tokens=n, drafter=DrafterKind.MODEL if speculative else DrafterKind.NONE)
    for ev in engine.run(tokens, spec):
        if isinstance(ev, Done):
            done = ev
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default="bench-checkpoint.json")
    args = ap.parse_args(argv)
    z = TinyZoo(Path(tempfile.mkdtemp()))
    rows = []
    for width in (64, 512):
        ff = width * 2
        big = dict(n_embd=width)
        def llama(width=width, ff=ff, **kw):
            return TinySpec(n_embd=width, n_ff=ff, n_head=8 if width > 64 else 4, **kw)
        m = {
            "mamba": z.get(mamba_spec(**big), f"mamba-{width}.gguf"),
            "mamba-d": z.get(mamba_spec(noise=0.1, **big), f"mamba-d-{width}.gguf"),
            "lfm2": z.get(hybrid_spec(n_ff=ff, **big), f"lfm2-{width}.gguf"),
            "lfm2-d": z.get(hybrid_spec(n_ff=ff, noise=0.1, **big), f"lfm2-d-{width}.gguf"),
            "llama": z.get(llama(), f"llama-{width}.gguf"),
            "llama-d": z.get(llama(noise=0.1), f"llama-d-{width}.gguf"),
            # Different architectures that agree on every token (they all predict sigma(last)).
            "mamba-agree": z.get(mamba_spec(bigram_seed=5, layer_gain=0.05, **big), f"mamba-a-{width}.gguf"),
            "lfm2-agree": z.get(hybrid_spec(n_ff=ff, bigram_seed=5, layer_gain=0.05, **big), f"lfm2-a-{width}.gguf"),
            "llama-agree": z.get(llama(bigram_seed=5, layer_gain=0.05), f"llama-a-{width}.gguf"),
        }
        pairs = [("llama", "llama-d", None), ("mamba", "mamba-d", None), ("lfm2", "lfm2-d", None),
                 ("lfm2", "lfm2-d", 0), ("mamba-agree", "llama-agree", None), ("llama-agree", "mamba-agree", None),
                 ("lfm2-agree", "llama-agree", None), ("llama-agree", "lfm2-agree", None)]
        for target, draft, depth in pairs:
            cfg = EngineConfig(target=str(m[target]), draft=str(m[draft]), n_ctx=1024,
                               rollback_depth=5 if depth is None else depth)
            with Engine(cfg) as e:
                toks = e.tokenize("Once upon a time there was a little robot")
                run(e, toks, 16, True)  # warm-up
                base_done, spec_done = [], []
                for _ in range(args.runs):
                    base_done.append(run(e, toks, args.n, False))
                    spec_done.append(run(e, toks, args.n, True))
                base = [d.summary for d in base_done]
                spec = [d.summary for d in spec_done]
                s = spec[len(spec) // 2]
                tps = statistics.median(x.tokens_per_second for x in spec)
                row = {
                    "width": width, "target": target, "draft": draft,
                    "target_memory": s.target_memory, "draft_memory": s.draft_memory,
                    "target_only_tok_s": statistics.median(x.tokens_per_second for x in base),
                    "speculative_tok_s": tps,
                    "acceptance": statistics.median(x.acceptance_rate for x in spec),
                    "checkpoint_share": statistics.median(x.checkpoint_seconds / x.generation_seconds for x in spec),
                    "checkpoint_kb": s.checkpoint_size / 1024,
                    "checkpoints_per_token": s.checkpoints / max(s.n_generated, 1),
                    "rollbacks": s.rollbacks, "redecoded_tokens": s.redecoded_tokens, "restarts": s.restarts,
                    "identical": all(x.token_ids == y.token_ids for x, y in zip(spec_done, base_done)),
                }
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"command": "scripts/bench_checkpoint.py " + " ".join(argv or sys.argv[1:]),
                                          "n": args.n, "runs": args.runs, "rows": rows}, indent=2))
    print("| width | target | draft | memory (target/draft) | target alone tok/s | K=4 tok/s | acceptance "
          "| time saving/restoring | checkpoint size | rollbacks | re-decoded |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['width']} | {r['target']} | {r['draft']} | {r['target_memory']}/{r['draft_memory']} | "
              f"{r['target_only_tok_s']:.0f} | {r['speculative_tok_s']:.0f} | {r['acceptance']:.0%} | "
              f"{r['checkpoint_share']:.1%} | {r['checkpoint_kb']:.1f} KB | {r['rollbacks']} | "
              f"{r['redecoded_tokens']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
