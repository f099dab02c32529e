"""scripts/bench_policy.py's verdicts: where an answer parts from the target alone's (and
whether the target's logits there make it a near-tie, llama.cpp's batch rounding, or a real
difference), and the default against a best chosen on held-out repetitions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_policy  # noqa: E402


class GapEngine:
    """Answers logit_gap from a table by position; records what it was asked."""

    def __init__(self, gaps: dict[int, float]):
        self.gaps = gaps
        self.asked: list[tuple[list[int], int, int, int]] = []

    def logit_gap(self, tokens, a, b, stepped=0):
        self.asked.append((list(tokens), a, b, stepped))
        return self.gaps[len(tokens)]

    def batch_rounding(self, tokens):
        return 0.002 * len(tokens)


def test_differences_say_where_answers_part_and_how_close():
    prompt = [1, 2]
    target = (10, 11, 12, 13)
    rows = {"target": [{"ids": target}, {"ids": target}],
            "K=8": [{"ids": target}],
            "ngram": [{"ids": (10, 11, 99, 5)}, {"ids": (10, 11, 99, 5)}],   # the same answer twice
            "default": [{"ids": (10, 77, 12, 13)}],
            "short": [{"ids": (10, 11)}]}                                  # stopped early
    engine = GapEngine({4: 0.004, 3: -0.8})
    out = bench_policy.differences(engine, prompt, rows)
    assert out == [{"setting": "ngram", "token": 2, "gap": 0.004, "rounding": 0.008, "near_tie": True},
                   {"setting": "default", "token": 1, "gap": -0.8, "rounding": 0.006, "near_tie": False},
                   {"setting": "short", "token": 2, "gap": None, "rounding": None, "near_tie": False}]
    # the target reads the prompt, then the common part a token at a time (as it read its own
    # answer), and compares its token with the other
    assert engine.asked == [([1, 2, 10, 11], 12, 99, 2), ([1, 2, 10], 11, 77, 1)]


def test_the_tables_list_where_answers_part(tmp_path):
    runs = {"tok_s": 10.0, "min": 9.0, "max": 11.0, "runs": [10.0], "cpu_tok_s": 10.0}
    cell = {"prompt": "qa-1", "n": 128, "settings": {"target": runs, "K=8": runs, "default": runs},
            "best": "target", "default_vs_best": 1.0, "default_vs_best_range": [0.9, 1.1],
            "meets_0_97": True, "cpu_default_vs_best": 1.0, "cpu_meets_0_97": True, "cpu_best": "target",
            "lossless": False,
            "differences": [{"setting": "default", "token": 104, "gap": 0.0019, "near_tie": True}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"runs": 1, "threads": 1,
                                "pairs": [{"pair": "demo", "cold_default": runs, "cells": [cell]}]}))
    table = bench_policy.markdown([str(path)])
    assert "qa-1 128 default at token 104 (near-tie, gap 0.0019)" in table


def test_held_out_picks_the_best_on_one_half_and_judges_on_the_other():
    def runs(*xs):
        return {"runs": list(xs)}
    # K=8 was lucky in the even repetitions: chosen there, it is judged on the odd ones
    cell = {"settings": {"target": runs(100, 100, 100, 100), "K=8": runs(130, 90, 130, 90),
                         "default": runs(110, 110, 110, 110), "ngram": runs(500, 500, 500, 500)}}
    assert bench_policy.held_out(cell) == pytest.approx(((110 / 90) * (110 / 100)) ** 0.5)
    one = {"settings": {"target": runs(100), "default": runs(90)}}
    assert bench_policy.held_out(one) is None


def test_a_warm_up_runs_the_same_setting_first_and_teaches_the_measured_run_nothing(tiny_target, tiny_draft):
    from localspec.engine import Engine, EngineConfig, RunSpec, SamplingConfig

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=512, remember=False)) as e:
        toks = e.tokenize("The quick brown fox")
        asked = []
        run = e.run
        e.run = lambda tokens, spec, cancel=None: (asked.append(spec.max_tokens), run(tokens, spec, cancel))[1]
        row = bench_policy.warmed(e, toks, RunSpec(sampling=SamplingConfig(temperature=0.0), max_tokens=40), 6)
        assert asked == [6, 40]
        # each round's K, run-length encoded: one entry per round
        rounds = [(int(k), int(n or 1)) for k, _, n in (p.partition("*") for p in row["ks"].split())]
        assert sum(n for _, n in rounds) == round(row["tokens"] / row["tokens_per_step"])
        assert rounds[0][0] == 0 and any(k > 0 for k, _ in rounds)
        assert not row["seeded"], "the measured run starts from what was learned before the warm-up"
        assert e.memory.get("model") is not None     # what the measured run learned is kept
        snap = e.memory.snapshot()
        e.memory.restore({})
        assert e.memory.get("model") is None
        e.memory.restore(snap)
        assert e.memory.get("model") == snap["model"]


def test_run_lengths_say_what_each_round_drafted_in_a_few_characters():
    assert bench_policy.run_lengths([0] + [8] * 14 + [0, 2]) == "0 8*14 0 2"
    assert bench_policy.run_lengths([]) == ""
    assert bench_policy.run_lengths([0] * 512) == "0*512"


def test_the_interval_of_a_ratio_of_medians_says_when_noise_explains_a_miss():
    """A cell whose runs spread widely gets an interval that straddles the goal; one whose
    runs are tight and clearly slower gets one wholly below it. The best rival is chosen
    anew in every resample, and the same file gives the same interval."""
    def cell(default, k8):
        return {"settings": {"target": {"runs": [100.0] * 7}, "K=8": {"runs": k8}, "default": {"runs": default}}}

    noisy = cell([80, 120, 95, 105, 70, 130, 100], [100, 100, 100, 100, 100, 100, 100])
    lo, hi = bench_policy.interval(noisy, "default", ["target", "K=8"])
    assert lo < 0.97 < hi
    assert bench_policy.interval(noisy, "default", ["target", "K=8"]) == (lo, hi)
    tight = cell([90, 91, 89, 90, 90, 91, 89], [100, 101, 99, 100, 100, 101, 99])
    lo, hi = bench_policy.interval(tight, "default", ["target", "K=8"])
    assert hi < 0.97 and lo > 0.85
    assert bench_policy._interval_text((lo, hi), 0.97).endswith("✗✗")
    assert bench_policy.interval({"settings": {"default": {"runs": [1.0, 2.0]}}}, "default", []) is None


def _run(rounds, outside=0.001):
    """A run of rounds (verify batch, verify seconds, draft steps, draft seconds), each of one
    token per batch position, with ``outside`` seconds outside its decodes."""
    recs, at, wall, tokens = [], 10, outside, 0
    for batch, v_s, steps, d_s in rounds:
        step = bench_policy.Step(0, steps, steps, steps, batch, d_s, v_s, True, draft_steps=steps,
                                 verify_batch=batch)
        recs.append(bench_policy.round_record(step, "model", at))
        at += batch
        wall += v_s + d_s
        tokens += batch
    return {"rounds": recs, "wall": wall, "tokens": tokens}


def test_pricing_takes_the_machines_moods_out_and_leaves_what_each_run_did():
    """Two runs that drafted alike, one in a slow spell (every decode 1.5x), price alike;
    a run that took a plain step where the others drafted prices slower, however fast the
    machine was during it; a key measured fewer than three times keeps its own cost."""
    fast = _run([(9, 0.010, 8, 0.002)] * 4)
    slow = _run([(9, 0.015, 8, 0.003)] * 4)
    plain = _run([(9, 0.008, 8, 0.0016)] * 3 + [(1, 0.006, 0, 0.0)] + [(9, 0.008, 8, 0.0016)])
    table = bench_policy.cost_table([r["rounds"] for r in (fast, slow, plain)])
    assert ("v", 1, 0) not in table                      # one plain step: measured once
    a, b, c = (bench_policy.priced(r, table) for r in (fast, slow, plain))
    assert a == pytest.approx(b)
    wall = [r["tokens"] / r["wall"] for r in (fast, slow, plain)]
    assert wall[2] > wall[0] > wall[1]                   # the wall clock ranks them by the machine
    assert c < a                                         # priced, the plain step shows
    assert c == pytest.approx(plain["tokens"] / (0.001 + 4 * table[("v", 9, 0)] + 4 * table[("d", "model", 8, 0, 0)]
                                                  + 0.006))


def test_the_chain_is_judged_against_the_better_drafter_chosen_on_other_runs():
    """Where the lookups alone and the draft model alone tie, the larger of their two noisy
    medians is lucky and a chain equal to both reads below it; chosen on one half of the
    repetitions and measured on the other, the better one carries no luck."""
    def runs(*xs):
        return {"runs": [0.0] * len(xs), "priced_runs": list(xs)}
    cell = {"settings": {"ngram": runs(101, 99, 101, 99), "default": runs(99, 101, 99, 101),
                         "ngram+model": runs(100, 100, 100, 100), "target": runs(1, 1, 1, 1)}}
    singles = ["ngram", "default"]
    # the plain ratio of medians says 100 / 100; each half's best is the other half's worst
    assert bench_policy.held_out(cell, "ngram+model", singles, key="priced_runs") == pytest.approx(100 / 99)
    assert bench_policy.held_out(cell, "ngram+model", ["target"], key="priced_runs") == pytest.approx(100.0)


def test_a_chain_run_drafted_by_one_drafter_alone_is_counted_as_that_drafter():
    chain = {"drafted_by": [{"ngram": 12}, {"ngram": 3, "model": 1}, {"model": 15}, {}, {"ngram": 1}]}
    assert bench_policy.one_drafter_runs(chain) == {"ngram": 2, "model": 1}
    assert bench_policy.one_drafter_runs({}) == {"ngram": 0, "model": 0}    # a file from before the count


def test_a_cell_where_no_setting_drafted_is_told_apart():
    """The losing pair's short answers: even fixed K never drafts (its draft is still reading
    the prompt), so every setting did the target alone's work and a ratio there is noise."""
    idle = {"target": {"drafted_by": [{}, {}]}, "K=4": {"drafted_by": [{}, {}]}, "default": {"drafted_by": [{}]}}
    assert bench_policy.nothing_drafted(idle)
    assert not bench_policy.nothing_drafted(idle | {"ngram": {"drafted_by": [{}, {"ngram": 1}]}})
    assert bench_policy.nothing_drafted({"target": {}})     # a file from before drafted_by was kept


def test_a_cell_of_answers_a_few_ms_long_repeats_until_it_has_measured_enough(tiny_target, tiny_draft, tmp_path):
    """--cell-seconds repeats a cell's rotation beyond --runs until the target alone's answers
    add up to that many seconds (up to --max-runs): a median of 14 answers of 6 ms swings by
    several percent. Every setting gets the same number of runs; the tables say how many."""
    from types import SimpleNamespace

    args = SimpleNamespace(ks=[2], chain_all=False, no_chain=True, threads=1, prompts=["qa-1", "code-1"],
                           lengths=[8], runs=2, warm=0, cell_seconds=0.03, max_runs=40)
    entry = bench_policy.run_pair("loses", str(tiny_target), str(tiny_draft), args, log=lambda msg: None)
    for cell in entry["cells"]:
        runs = cell["runs"]
        st = cell["settings"]
        assert {len(v["runs"]) for v in st.values()} == {runs}
        assert 2 <= runs <= 40
        walls = [r / t for r, t in zip([8] * runs, st["target"]["runs"])]
        assert sum(walls) >= 0.03 or runs == 40
        assert runs > 2, "8-token answers of a tiny model need more than two runs to add up to 30 ms"
    data = {"runs": 2, "threads": 1, "pairs": [entry]}
    entry["cells"][1]["runs"] = entry["cells"][0]["runs"] + 5
    lo, hi = entry["cells"][0]["runs"], entry["cells"][1]["runs"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert f"{lo}-{hi} runs" in bench_policy.markdown([str(path)])


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_each_setting_follows_every_other_equally_often(n):
    """A plain rotation kept the default behind K=8 in every repetition; the orders put each
    setting right after every other, and in every place, equally often."""
    from collections import Counter

    rows = bench_policy.orders(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    after = Counter((a, b) for row in rows for a, b in zip(row, row[1:]))
    assert len(after) == n * (n - 1) and len(set(after.values())) == 1
    places = Counter((i, x) for row in rows for i, x in enumerate(row))
    assert len(places) == n * n and len(set(places.values())) == 1
