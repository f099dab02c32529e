"""scripts/time_policy.py: the policy's own calls timed while the simulator drives it, its
decisions untouched by the timing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import time_policy  # noqa: E402

from localspec.bench import simulate, simulate_drafts  # noqa: E402


def _first(path: Path, out: Path) -> Path:
    data = json.loads(path.read_text())
    items = data["scenarios"] if isinstance(data, dict) else data
    out.write_text(json.dumps({"scenarios": items[:1]}))
    return out


def test_each_scenario_gets_the_policys_time_per_round(tmp_path, monkeypatch):
    for module, name in ((simulate, "AdaptivePolicy"), (simulate_drafts, "LayeredPair")):
        monkeypatch.setattr(module, name, getattr(module, name))      # (put back after the test)
    single = _first(ROOT / "scripts" / "policy_scenarios.json", tmp_path / "single.json")
    two = _first(ROOT / "scripts" / "two_draft_scenarios.json", tmp_path / "two.json")
    s1, s2 = simulate.load(str(single))[0], simulate_drafts.load(str(two))[0]
    untimed = {"single": simulate.simulate(s1, "default", 0), "pair": simulate_drafts.simulate(s2, "both", 0)}
    out = tmp_path / "t.json"
    assert time_policy.main(["--scenarios", str(single), str(two), "--seeds", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [(r["name"], r["policy"]) for r in data["scenarios"]] == [(s1.name, "single"), (s2.name, "pair")]
    for r in data["scenarios"]:
        tokens, seconds = untimed[r["policy"]][:2]
        assert r["simulated_tps"] == tokens / seconds      # the same answer as untimed
        assert r["rounds"] > 0 and r["range"][0] <= r["us_per_round"] <= r["range"][1] and r["us_per_round"] > 0
    assert data["median_single_us"] > 0 and data["median_pair_us"] > 0
