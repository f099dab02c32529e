"""The whole catalog (models.toml) is sound, and aliases and draft sizes resolve as promised."""

import tomllib
from pathlib import Path

import pytest

from localspec.errors import BadInput
from localspec.models.catalog import catalog_path, load_catalog, match_quant_files, size_in_billions

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_catalog_is_sound(catalog):
    assert catalog.problems() == []
    assert len(catalog.models) >= 30


def test_shipped_catalog_is_the_root_file():
    assert catalog_path().resolve() == (ROOT / "models.toml").resolve()
    raw = tomllib.loads((ROOT / "models.toml").read_text())
    aliases = [m["alias"] for m in raw["model"]]
    assert len(aliases) == len(set(aliases)), "aliases are unique"


def test_required_families_and_sizes(catalog):
    want = {
        "qwen2_5": {"0.5b", "1.5b", "3b", "7b", "14b", "32b"},
        "qwen2_5_coder": {"0.5b", "1.5b", "3b", "7b", "14b", "32b"},
        "qwen3": {"0.6b", "1.7b", "4b", "8b", "14b", "32b"},
        "llama3": {"1b", "3b", "8b", "70b"},
        "gemma3": {"270m", "1b", "4b", "12b", "27b"},
        "smollm2": {"135m", "360m", "1.7b"},
    }
    for fam, sizes in want.items():
        have = {m.size for m in catalog.family_members(fam)}
        assert sizes <= have, (fam, sizes - have)
    q27 = catalog.get("qwen-27b")
    assert q27.hybrid and q27.drafts
    assert all(catalog.models[d].family == q27.family for d in q27.drafts)


def test_every_recommended_draft_is_smaller_and_compatible(catalog):
    for m in catalog.models.values():
        for d in m.drafts:
            draft = catalog.models[d]
            assert draft.family == m.family
            assert draft.billions < m.billions


def test_draft_by_size(catalog):
    t = catalog.get("qwen2.5-32b")
    assert catalog.resolve_draft(t, "1.5b").alias == "qwen2.5-1.5b"
    assert catalog.resolve_draft(t, "qwen2.5-0.5b").alias == "qwen2.5-0.5b"
    assert catalog.resolve_draft(t, None).alias in t.drafts


def test_missing_draft_size_lists_the_nearest(catalog):
    t = catalog.get("qwen-27b")
    with pytest.raises(BadInput) as exc:
        catalog.resolve_draft(t, "1.5b")
    msg = str(exc.value)
    assert "no 1.5b model" in msg
    assert "localspec pull qwen-27b --draft" in msg
    # Nearest first: 2b (and 0.8b) are the closest sizes to 1.5b.
    listed = msg.split("nearest first:")[1]
    assert listed.index("2b") < listed.index("9b")


def test_unknown_alias_suggests(catalog):
    with pytest.raises(BadInput, match="did you mean.*qwen2.5-7b"):
        catalog.get("qwen2.5-7")
    with pytest.raises(BadInput, match="not in"):
        catalog.resolve_draft(catalog.get("qwen2.5-7b"), "llama-3.2-1b")


def test_sizes_and_split_patterns():
    assert size_in_billions("270m") == 0.27
    assert size_in_billions("1.5B") == 1.5
    files = ["m-q4_k_m-00002-of-00002.gguf", "m-q4_k_m-00001-of-00002.gguf", "m-q8_0.gguf"]
    assert match_quant_files("m-q4_k_m-*-of-*.gguf", files) == files[:2][::-1]
    assert match_quant_files("m-q8_0.gguf", files) == ["m-q8_0.gguf"]
    assert match_quant_files("m-f16.gguf", files) == []
