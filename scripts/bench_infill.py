#!/usr/bin/env python3
"""Fill in the middle as an editor asks for it: the target alone against prompt lookup (and a
draft model, with ``-d``). Writes JSON.

Each case is a function of this repository's own sources with its body cut out: the code
before it and after it (up to ``--context`` characters each side) make the FIM prompt
(``localspec.server.infill.fim_prompt``, as ``/infill`` builds it), and the answer ends at
the end of the block (``n_indent``: the body's indentation) or at ``-n`` tokens. Greedy;
settings alternate within each round (a slow spell of the shared machine hits all alike);
each setting's first run on a case warms it and is not counted. Reported per case: each
setting's median tok/s and whether its answer is the target's (where not: where they part,
and whether at a near-tie of batch rounding, as `localspec compare` judges it); overall: the
median over cases of each setting's tok/s over the target's.

    python scripts/bench_infill.py -m .cache/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        --cases 6 --runs 5 --threads 2 --out docs/bench/infill-qwen-coder-0.5b.json
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.chat.comparison import near_tie, where_they_part  # noqa: E402
from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402
from localspec.server.infill import fim_prompt  # noqa: E402

SOURCES = ["localspec/engine/text.py", "localspec/engine/sampling.py", "localspec/server/infill.py",
           "localspec/engine/policy/predict.py", "localspec/models/store.py", "localspec/engine/drafters.py"]


def cases(n: int, context: int) -> list[dict]:
    """The first function of at least four lines in each source (then the next ones), its body
    (after a docstring) cut out: {name, prefix, suffix, indent}."""
    found: list[list[dict]] = []
    for rel in SOURCES:
        path = ROOT / rel
        if not path.is_file():
            continue
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        mine = []
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno - node.lineno < 4:
                continue
            body = node.body[1:] if isinstance(node.body[0], ast.Expr) and len(node.body) > 1 else node.body
            start, end = body[0].lineno - 1, node.end_lineno
            indent = len(lines[start]) - len(lines[start].lstrip())
            prefix = "".join(lines[:start]) + " " * indent
            suffix = "".join(lines[end:])
            mine.append({"name": f"{rel}:{node.name}", "prefix": prefix[-context:], "suffix": suffix[:context],
                         "indent": indent})
        found.append(mine)
    out = []
    for i in range(max((len(f) for f in found), default=0)):
        out += [f[i] for f in found if i < len(f)]
    return out[:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True, help="a code model with FIM tokens")
    ap.add_argument("-d", "--draft", help="a draft model too")
    ap.add_argument("--cases", type=int, default=6)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-n", type=int, default=128, help="most tokens per answer")
    ap.add_argument("--context", type=int, default=3000, help="characters of code each side of the gap")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    settings = {"target": DrafterKind.NONE, "ngram": DrafterKind.NGRAM}
    if a.draft:
        settings["model"] = DrafterKind.MODEL
    greedy = SamplingConfig(temperature=0.0, seed=0)
    results = []
    with Engine(EngineConfig(target=a.model, draft=a.draft, n_ctx=8192, threads=a.threads, remember=False)) as e:
        for case in cases(a.cases, a.context):
            prompt = fim_prompt(e.target_model, case["prefix"], case["suffix"], n_ctx=8192)
            tps: dict[str, list[float]] = {name: [] for name in settings}
            ids: dict[str, tuple[int, ...]] = {}
            for r in range(a.runs + 1):
                names = list(settings)
                for name in names[r % len(names):] + names[:r % len(names)]:
                    spec = RunSpec(drafter=settings[name], sampling=greedy, max_tokens=a.n, n_indent=case["indent"])
                    done = list(e.run(prompt, spec))[-1]
                    ids[name] = done.token_ids
                    if r:
                        tps[name].append(done.summary.tokens_per_second)
            med = {name: statistics.median(v) for name, v in tps.items()}
            parted = {}
            for k in settings:
                if ids[k] != ids["target"]:   # where, how close the two tokens were, the batch rounding there
                    i, gap, rounding = where_they_part(e, prompt, ids["target"], ids[k])
                    parted[k] = {"at": i, "gap": gap, "rounding": rounding, "near_tie": near_tie(gap, rounding)}
            results.append({"case": case["name"], "prompt_tokens": len(prompt), "tokens": len(ids["target"]),
                            "median_tps": med, "over_target": {k: round(v / med["target"], 3) for k, v in med.items()},
                            "identical_to_target": {k: ids[k] == ids["target"] for k in settings},
                            "parted": parted, "tps": tps})
            print(f"{case['name']}: " + ", ".join(f"{k} {v:.1f} tok/s" for k, v in med.items()), file=sys.stderr)
    overall = {k: round(statistics.median(r["over_target"][k] for r in results), 3) for k in settings}
    out = {"what": "fill in the middle, greedy, n_indent at the cut body's indentation; alternating runs",
           "model": a.model, "draft": a.draft, "runs": a.runs, "threads": a.threads, "max_tokens": a.n,
           "median_over_target": overall, "results": results}
    print(json.dumps(out, indent=1))
    if a.out:   # (the JSON the docs cite)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        with a.out.open("w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
