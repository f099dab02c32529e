"""Draft advice: which drafts suit a target and why (catalog, files), and `tune` with several
candidate drafts keeping the fastest."""

import json

import pytest
from conftest import run_cli
from tiny import TinySpec

from localspec.models import advice
from localspec.models.catalog import load_catalog

pytestmark = pytest.mark.usefixtures("one_llama_thread")


def test_ratio_rules():
    assert advice.judge_ratio(1 / 14)[0] is True and "1/10-1/20" in advice.judge_ratio(1 / 14)[1]
    assert advice.judge_ratio(1 / 40)[0] is False and "smaller than 1/20" in advice.judge_ratio(1 / 40)[1]
    assert advice.judge_ratio(1 / 6)[0] is False and "dearer" in advice.judge_ratio(1 / 6)[1]
    assert advice.judge_ratio(1.0)[0] is False


def test_catalog_advice_same_family_and_band():
    cat = load_catalog()
    target = cat.get("qwen2.5-32b")
    rows = advice.for_catalog(cat, target)
    assert rows and all(cat.models[a.alias].family == target.family for a in rows)
    assert rows[0].suits and 1 / 20 <= rows[0].ratio <= 1 / 10
    assert any("quantization barely matters" in line for line in advice.lines(cat, target))
    mtp = next(m for m in cat.models.values() if m.mtp)
    assert "--draft mtp" in advice.lines(cat, mtp)[0]


def test_list_catalog_says_what_suits():
    r = run_cli("list", "--catalog")
    assert r.returncode == 0 and "suits:" in r.stdout and "1/10-1/20" in r.stdout
    rows = json.loads(run_cli("list", "--catalog", "--json").stdout)
    assert any(a["suits"] for row in rows for a in row["draft_advice"])


def test_check_says_whether_the_size_suits(zoo, tiny_target):
    big = zoo.get(TinySpec(n_embd=768, n_ff=1536, n_layer=4, n_head=8, n_head_kv=4, bigram_seed=5, layer_gain=0.05,
                           f16=True), "bigram-big.gguf")
    r = run_cli("check", str(big), str(tiny_target), "--json")
    out = json.loads(r.stdout)
    assert out["compatible"] and out["size_advice"]["why"].startswith("1/")
    r = run_cli("check", str(big), str(tiny_target))
    assert "size: " in r.stdout


def test_tune_measures_several_drafts_and_keeps_the_fastest(cost_pairs, zoo):
    target, small = cost_pairs["big"], cost_pairs["small"]
    wrong = zoo.get(TinySpec(n_embd=64, n_layer=1, bigram_seed=9, layer_gain=0.05), "bigram-other.gguf")
    r = run_cli("tune", "-m", str(target), "-d", str(wrong), "-d", str(small), "-n", "24", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert f"fastest draft for {target.name}: {small}" in r.stdout
    assert "fastest draft" in run_cli("tune", "--show").stdout
