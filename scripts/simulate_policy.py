#!/usr/bin/env python3
"""Run the adaptive drafting policy against every fixed setting in simulated scenarios.

    python scripts/simulate_policy.py --scenarios scripts/policy_scenarios.json --seeds 5 --json
    python scripts/simulate_policy.py --scenarios scripts/two_draft_scenarios.json --seeds 5   # two drafts
    python scripts/simulate_policy.py --random 300 --seeds 8 --save-scenarios drawn.json   # scenarios nobody wrote

Deterministic: the same scenarios, seeds and parameters give the same figures on any
machine. ``--params '{"shift_z": 1e9}'`` runs with parameters changed (to see what a
mechanism is worth); ``--table`` prints a Markdown table instead of JSON. Each scenario's
``informed`` is the fixed setting its own costs and acceptance predict fastest.
"""

from __future__ import annotations

import argparse
import json
import sys

from localspec.bench import simulate_drafts
from localspec.bench.simulate import Scenario, ablate, load, params_with, random_scenarios, report
from localspec.errors import BadInput


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", help="a JSON file of scenarios")
    ap.add_argument("--random", type=int, metavar="N",
                    help="instead: N scenarios drawn from the format's space (seeded by --random-seed)")
    ap.add_argument("--random-seed", type=int, default=0, help="the draw of --random (default 0)")
    ap.add_argument("--save-scenarios", metavar="FILE", help="with --random: write the drawn scenarios to FILE")
    ap.add_argument("--seeds", type=int, default=1, help="seeded answers per scenario and setting")
    ap.add_argument("--json", action="store_true", help="print JSON (the default)")
    ap.add_argument("--table", action="store_true", help="print a Markdown table")
    ap.add_argument("--cold", action="store_true",
                    help="the default starts from nothing (else from one earlier answer, as the product does)")
    ap.add_argument("--ablate", action="store_true",
                    help="switch each mechanism off in turn and report what the default loses without it")
    ap.add_argument("--params", default="{}", help="policy parameters to change, as a JSON object")
    a = ap.parse_args(argv)
    try:
        if a.seeds < 1:
            raise BadInput("--seeds must be >= 1")
        try:
            overrides = json.loads(a.params)
        except ValueError as e:
            raise BadInput(f"--params is not JSON: {e}") from None
        params = params_with(overrides) if overrides else None
        if (a.scenarios is None) == (a.random is None):
            raise BadInput("give --scenarios FILE or --random N")
        if a.random is None:
            two = simulate_drafts.load(a.scenarios)
            if two is not None:
                if a.ablate:
                    print(json.dumps(simulate_drafts.ablate(two, a.seeds), indent=1))
                    return 0
                return _two_drafts(simulate_drafts.report(two, a.seeds, params, a.cold), a.table)
        scenarios = load(a.scenarios) if a.random is None else _drawn(a)
        if a.ablate:
            print(json.dumps(ablate(scenarios, a.seeds), indent=1))
            return 0
        out = report(scenarios, a.seeds, params, a.cold)
        if a.random is not None:
            out["random_seed"] = a.random_seed
            out["below_0_97"] = sorted(r["name"] for r in out["scenarios"] if r["default_over_best"] < 0.97)
    except BadInput as e:
        print(f"simulate_policy: {e}", file=sys.stderr)
        return 2
    if a.table:
        print("| scenario | default tok/s | best fixed | its tok/s | default / best | informed | informed / best |")
        print("|---|---:|---|---:|---:|---|---:|")
        for r in out["scenarios"]:
            print(f"| {r['name']} | {r['default_tps']:.1f} | {r['best']['setting']} | {r['best']['tps']:.1f} "
                  f"| {r['default_over_best']:.3f} | {r['informed']['setting']} | {r['informed']['over_best']:.3f} |")
        print(f"\nmin {out['min_default_over_best']:.3f}, median {out['median_default_over_best']:.3f}")
    else:
        print(json.dumps(out, indent=1))
    return 0


def _drawn(a) -> list[Scenario]:
    """The ``--random`` scenarios, written to ``--save-scenarios`` when given.
    Raises: BadInput: the file cannot be written."""
    drawn = random_scenarios(a.random, a.random_seed)
    if a.save_scenarios:
        try:
            with open(a.save_scenarios, "w", encoding="utf-8") as f:
                json.dump({"scenarios": drawn}, f, indent=1)
        except OSError as e:
            raise BadInput(f"cannot write {a.save_scenarios}: {e}") from None
    return [Scenario.from_dict(d) for d in drawn]


def _two_drafts(out: dict, table: bool) -> int:
    if not table:
        print(json.dumps(out, indent=1))
        return 0
    print("| scenario | both tok/s | small alone | large alone | target alone | oracle | layered "
          "| both / better single | oracle / better single | layered / better single | both / oracle |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in out["scenarios"]:
        st = r["settings"]
        print(f"| {r['name']} | {st['both']:.1f} | {st['small']:.1f} | {st['large']:.1f} | {st['target']:.1f} "
              f"| {st['oracle']:.1f} | {st['layered']:.1f} | {r['both_over_better_single']:.3f} "
              f"| {r['oracle_over_better_single']:.3f} | {r['layered_over_better_single']:.3f} "
              f"| {r['both_over_oracle']:.3f} |")
    print(f"\nmin both / better single {out['min_both_over_better_single']:.3f}, "
          f"min both / oracle {out['min_both_over_oracle']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
