#!/usr/bin/env python3
"""The default policy's own Python per round: its ``next_k`` and ``observe``, timed while the
simulator drives it through every scenario of the files given. Writes JSON.

    python scripts/time_policy.py --seeds 5 --out docs/bench/policy-python.json

A round's decisions are the simulator's (deterministic); only the policy's calls are timed,
on this machine's clock, with nothing else running on the core, so the figures are the
policy's share of a round on a GPU, where llama.cpp's compute is elsewhere. Scenario files:
single-draft (the adaptive policy, setting "default") or two-draft (the pair, setting "both").
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

from localspec.bench import simulate, simulate_drafts  # noqa: E402

FILES = [ROOT / "scripts" / "policy_scenarios.json", ROOT / "scripts" / "two_draft_scenarios.json"]


class Timed:
    """A policy whose ``next_k`` and ``observe`` are timed; everything else passes through."""

    def __init__(self, policy):
        self._policy = policy
        self.seconds = 0.0
        self.rounds = 0

    def next_k(self) -> int:
        t = time.perf_counter()
        k = self._policy.next_k()
        self.seconds += time.perf_counter() - t
        return k

    def observe(self, step):
        t = time.perf_counter()
        note = self._policy.observe(step)
        self.seconds += time.perf_counter() - t
        self.rounds += 1
        return note

    def __getattr__(self, name):
        return getattr(self._policy, name)


def _timing(module, name: str, made: list) -> None:
    """``module.name`` (a policy class) replaced by one that keeps each policy made, timed."""
    cls = getattr(module, name)

    class Factory:
        def __call__(self, *a, **kw):
            made.append(Timed(cls(*a, **kw)))
            return made[-1]

        def build(self, *a, **kw):
            made.append(Timed(cls.build(*a, **kw)))
            return made[-1]

    setattr(module, name, Factory())


def time_scenario(run, seeds: int, made: list) -> dict:
    """µs per round of the policy's own calls, per seeded answer: their median and range; and
    the simulated tokens per second of all the answers (the simulator's figure: the timing
    changes no decision)."""
    per_round, rounds, tokens, seconds = [], 0, 0, 0.0
    for seed in range(seeds):
        made.clear()
        out = run(seed)
        tokens, seconds = tokens + out[0], seconds + out[1]
        pol = made[-1]
        per_round.append(pol.seconds / max(pol.rounds, 1) * 1e6)
        rounds += pol.rounds
    return {"us_per_round": round(statistics.median(per_round), 1),
            "range": [round(min(per_round), 1), round(max(per_round), 1)], "rounds": rounds,
            "simulated_tps": tokens / seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="*", type=Path, default=FILES, help="scenario files")
    ap.add_argument("--seeds", type=int, default=5, help="seeded answers per scenario")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    made: list = []
    _timing(simulate, "AdaptivePolicy", made)
    _timing(simulate_drafts, "LayeredPair", made)
    rows = []
    for path in args.scenarios:
        two = simulate_drafts.load(str(path))
        for s in two if two is not None else simulate.load(str(path)):
            if two is not None:
                res = time_scenario(lambda seed, s=s: simulate_drafts.simulate(s, "both", seed), args.seeds, made)
            else:
                res = time_scenario(lambda seed, s=s: simulate.simulate(s, "default", seed), args.seeds, made)
            rows.append({"name": s.name, "policy": "pair" if two is not None else "single", **res})
            print(f"{s.name}: {res['us_per_round']} us a round", file=sys.stderr)
    out = {"seeds": args.seeds, "scenarios": rows}
    for kind in ("single", "pair"):
        xs = [r["us_per_round"] for r in rows if r["policy"] == kind]
        if xs:
            out[f"median_{kind}_us"] = round(statistics.median(xs), 1)
            out[f"max_{kind}_us"] = max(xs)
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
