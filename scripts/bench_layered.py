#!/usr/bin/env python3
"""Whether a layered draft pays on this machine. Writes JSON.

The large draft's greedy draft of K tokens, drafted alone (one decode per token) and
checked from the small draft's blocks (``ModelDrafter.draft_checked``: one large-draft
decode per block), at every third position of the large draft's own greedy answer to a
prompt. Runs alternate (a slow spell of the shared machine hits both alike); the medians'
ratio, checked / alone, is the layered draft's price per token against the large draft's
own (below 1: layered rounds can pay). Both give the same tokens (``identical``). The
default pair is the demo's: SmolLM2-135M F16 as the large draft, its shipped Q4_1 as the
small one.

    python scripts/bench_layered.py --runs 3 --threads 1 --out docs/bench/layered-draft-cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402
from localspec.engine.backend import Context, Model, backend_name  # noqa: E402
from localspec.engine.drafters import GREEDY, ModelDrafter  # noqa: E402

PROMPT = "def quicksort(a):"


def one(large: Model, small: Model, text: list[int], start: int, k: int, block: int, checked: bool,
        threads: int | None) -> tuple[float, list[list[int]], float]:
    """(ms per drafted token, the drafts, the share of the small draft's tokens kept)."""
    big, little = (ModelDrafter(Context(m, n_ctx=len(text) + 64, threads=threads)) for m in (large, small))
    try:
        seconds, n, drafts, proposed, kept = 0.0, 0, [], 0, 0
        for end in range(start, len(text) - k, 3):
            t0 = time.perf_counter()
            d = big.draft_checked(little, text[:end], k, block) if checked else big.draft(text[:end], k, GREEDY, None)
            seconds += time.perf_counter() - t0
            n += len(d.tokens)
            drafts.append(d.tokens)
            proposed += sum(p for p, _ in d.helper_blocks)
            kept += sum(a for _, a in d.helper_blocks)
        return 1000.0 * seconds / max(n, 1), drafts, kept / proposed if proposed else 0.0
    finally:
        big.close()
        little.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--large", help="the large draft's GGUF (default: the demo's F16)")
    ap.add_argument("--small", help="the small draft's GGUF (default: the demo's Q4_1)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-k", default="4,8", help="draft lengths, comma-separated")
    ap.add_argument("--blocks", default="1,2,3", help="the small draft's block sizes, comma-separated")
    ap.add_argument("-n", "--tokens", type=int, default=160, help="the answer drafted over")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    if a.large is None or a.small is None:
        from localspec.models.demo import demo_pair
        a.large, a.small = (str(p) for p in demo_pair())
    with Engine(EngineConfig(target=a.large, n_ctx=a.tokens + 128, remember=False, threads=a.threads)) as e:
        prompt = e.tokenize(PROMPT)
        done = list(e.run(prompt, RunSpec(drafter=DrafterKind.NONE, sampling=SamplingConfig(temperature=0.0),
                                          max_tokens=a.tokens)))[-1]
    text = prompt + list(done.token_ids)
    large, small = Model(a.large), Model(a.small)
    cells = []
    for k in (int(x) for x in a.k.split(",")):
        for block in (int(x) for x in a.blocks.split(",")):
            times: dict[bool, list[float]] = {False: [], True: []}
            same, share = True, 0.0
            for _ in range(a.runs):
                alone_ms, alone, _ = one(large, small, text, len(prompt) + 1, k, block, False, a.threads)
                checked_ms, checked, share = one(large, small, text, len(prompt) + 1, k, block, True, a.threads)
                times[False].append(alone_ms)
                times[True].append(checked_ms)
                same = same and alone == checked
            cell = {"k": k, "block": block, "alone_ms_per_token": round(statistics.median(times[False]), 4),
                    "checked_ms_per_token": round(statistics.median(times[True]), 4),
                    "small_tokens_kept": round(share, 3), "identical": same}
            cell["checked_over_alone"] = round(cell["checked_ms_per_token"] / cell["alone_ms_per_token"], 3)
            print(json.dumps(cell), file=sys.stderr, flush=True)
            cells.append(cell)
    out = {"large": Path(a.large).name, "small": Path(a.small).name, "runs": a.runs, "threads": a.threads,
           "backend": backend_name(-1), "cells": cells}
    text_out = json.dumps(out, indent=1)
    print(text_out)
    if a.out:
        Path(a.out).write_text(text_out + "\n")
    return 0 if all(c["identical"] for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
