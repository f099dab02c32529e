#!/usr/bin/env python3
"""Two drafts against the better single draft on a generated trio. Writes JSON.

The trio (tests/tiny, real llama.cpp, one bigram over a 4,096-token vocabulary, so a 512-token
answer never repeats itself): a target; a large draft (a step ~1/4 of the target's) right
nearly everywhere; and a small draft (~1/6 of the large one's step) whose predictions are
swapped after the tokens of every other stretch of ``--stretch`` tokens of the target's own
answer, so it fails there. Variants: ``mixed`` (easy and hard stretches in turn), ``easy``
(the small draft right everywhere) and ``hard`` (wrong everywhere). Settings: the target
alone, each draft alone and both (``-d SMALL -d LARGE``), every one adaptive and greedy. Runs
alternate settings (a slow spell of the shared machine hits all alike); each setting's first
run warms it and is not counted; medians are reported, and the ratio of both over the better
single draft.

    python scripts/bench_two_drafts.py --runs 9 --threads 1 -n 512 --out docs/bench/two-drafts-trio.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LOCALSPEC_HOME", str(ROOT / ".cache" / "bench_two_drafts" / "home"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))   # tiny: the generated trio

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402

PROMPT = "The quick brown fox"
GREEDY = SamplingConfig(temperature=0.0, seed=0)


VOCAB = 4096


def trio(root: Path, stretch: int, n: int) -> dict[str, Path]:
    """The target, the large draft and the small drafts of every variant, made for the target's
    answer of ``n`` tokens to PROMPT."""
    from tiny import TinySpec, TinyZoo, answer_stretch_swaps

    root.mkdir(parents=True, exist_ok=True)
    zoo = TinyZoo(root)
    bigram = {"bigram_seed": 5, "layer_gain": 0.05, "n_vocab": VOCAB}
    target = zoo.get(TinySpec(n_embd=768, n_ff=1536, n_layer=4, n_head=8, n_head_kv=4, f16=True, **bigram),
                     "trio-target.gguf")
    large = zoo.get(TinySpec(n_embd=512, n_ff=1024, n_layer=2, n_head=8, n_head_kv=4, f16=True, **bigram),
                    "trio-large.gguf")
    with Engine(EngineConfig(target=str(target), n_ctx=n + 64, remember=False)) as e:
        tokens = e.tokenize(PROMPT)
        done = list(e.run(tokens, RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY, max_tokens=n)))[-1]
    answer = tokens[-1:] + list(done.token_ids)
    every = list(dict.fromkeys(t for t in answer[:-1] if t))
    small = {"easy": (), "mixed": answer_stretch_swaps(answer, stretch), "hard": tuple(every[: len(every) // 2 * 2])}
    out = {"target": target, "large": large}
    for name, swaps in small.items():
        out[f"small-{name}"] = zoo.get(TinySpec(n_embd=64, n_layer=1, bigram_swaps=swaps, **bigram),
                                       f"trio-small-{name}.gguf")
    return out


def run_variant(files: dict, variant: str, args) -> dict:
    small = str(files[f"small-{variant}"])
    both = Engine(EngineConfig(target=str(files["target"]), draft=small, draft2=str(files["large"]),
                               n_ctx=args.n + 64, threads=args.threads, remember=False))
    large = Engine(EngineConfig(target=str(files["target"]), draft=str(files["large"]), n_ctx=args.n + 64,
                                threads=args.threads, remember=False))
    settings = {"target": (both, DrafterKind.NONE), "small": (both, DrafterKind.MODEL),
                "large": (large, DrafterKind.MODEL), "both": (both, DrafterKind.MODELS)}
    tps: dict[str, list[float]] = {k: [] for k in settings}
    by: dict = {}
    ids = {}
    try:
        names = list(settings)
        for r in range(args.runs + 1):
            order = names[r % len(names):] + names[:r % len(names)]   # rotate: each follows every other
            for name in order:
                engine, kind = settings[name]
                engine.reset()
                tokens = engine.tokenize(PROMPT)
                done = [ev for ev in engine.run(tokens, RunSpec(drafter=kind, sampling=GREEDY,
                                                                max_tokens=args.n))][-1]
                assert isinstance(done, Done)
                ids.setdefault(name, done.token_ids)
                if r == 0:
                    continue      # warm-up: the policy learns the pair, as after a first answer
                tps[name].append(done.summary.tokens_per_second)
                if name == "both":
                    for d, v in done.summary.by_drafter.items():
                        acc = by.setdefault(d, {"drafted": 0, "accepted": 0})
                        acc["drafted"] += v["drafted"]
                        acc["accepted"] += v["accepted"]
    finally:
        both.close()
        large.close()
    med = {k: statistics.median(v) for k, v in tps.items()}
    better = max(("small", "large"), key=med.get)
    return {"variant": variant, "median_tps": med, "better_single": better,
            "both_over_better_single": round(med["both"] / med[better], 4),
            "both_over_target": round(med["both"] / med["target"], 4), "by_drafter": by,
            "identical_to_target": all(v == ids["target"] for v in ids.values()), "tps": tps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-n", type=int, default=512, help="tokens per answer")
    ap.add_argument("--stretch", type=int, default=128, help="tokens per easy or hard stretch (mixed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default="mixed,easy,hard")
    ap.add_argument("--models", type=Path, default=ROOT / ".cache" / "bench_two_drafts" / "models",
                    help="where the trio is written")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    files = trio(args.models, args.stretch, args.n)
    results = []
    out = {"runs": args.runs, "tokens": args.n, "stretch": args.stretch, "threads": args.threads,
           "prompt": PROMPT, "results": results}
    for v in args.variants.split(","):
        res = run_variant(files, v, args)
        results.append(res)
        print(f"{v}: both / better single ({res['better_single']}) = {res['both_over_better_single']:.3f}; "
              f"medians {', '.join(f'{k} {x:.0f}' for k, x in res['median_tps'].items())} tok/s", file=sys.stderr)
        if args.out:        # after each variant: an interruption keeps what was measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(out, indent=1))
    if not args.out:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
