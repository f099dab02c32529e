"""Tokenizer compatibility: llama.cpp's rules on generated pairs, via the API and `localspec check`."""

import json

import pytest
from conftest import make_engine, run_cli
from tiny import TinySpec

from localspec.engine.compat import check_files
from localspec.errors import IncompatiblePair


def _rule(report, name):
    return next(r for r in report.rules if r.name == name)


def test_vocabulary_prefix_is_compatible(zoo, tiny_target):
    """Like llama.cpp: a vocabulary that is a prefix of the other, within 128, passes."""
    shorter = zoo.get(TinySpec(n_merges=150), "fewer-merges.gguf")
    assert check_files(tiny_target, shorter).compatible


def test_compatible_pair(tiny_target, tiny_draft):
    report = check_files(tiny_target, tiny_draft)
    assert report.compatible
    assert all(r.passed for r in report.rules)
    assert report.differences == []


def test_smollm2_pair_is_compatible(smollm2_f16, smollm2_q4_1):
    assert check_files(smollm2_f16, smollm2_q4_1).compatible


def test_different_vocabulary(zoo, tiny_target):
    other = zoo.get(TinySpec(vocab_shuffle=7), "other-vocab.gguf")
    report = check_files(tiny_target, other)
    assert not report.compatible
    assert not _rule(report, "token texts").passed
    assert report.n_different > 400
    assert report.differences, "the first differing ids are listed"
    first = report.differences[0]
    assert first.target != first.draft
    spm = zoo.get(TinySpec(vocab_type="llama"), "spm-vocab.gguf")
    report = check_files(tiny_target, spm)
    assert not _rule(report, "vocabulary type").passed


def test_one_token_changed(zoo, tiny_target):
    edited = zoo.get(TinySpec(token_edits=((300, "XYZZY"),)), "edited.gguf")
    report = check_files(tiny_target, edited)
    assert not report.compatible
    assert report.n_different == 1
    d = report.differences[0]
    assert (d.id, d.draft) == (300, "XYZZY")
    assert _rule(report, "vocabulary size").passed


def test_different_bos(zoo):
    a = zoo.get(TinySpec(add_bos=True, bos_id=1), "bos1.gguf")
    b = zoo.get(TinySpec(add_bos=True, bos_id=0), "bos0.gguf")
    report = check_files(a, b)
    assert not report.compatible
    assert not _rule(report, "BOS token").passed
    # The same ids but BOS added by one model only also fails.
    c = zoo.get(TinySpec(add_bos=False, bos_id=1), "bos1-off.gguf")
    assert not _rule(check_files(a, c), "BOS token").passed


def test_vocab_sizes_128_apart_ok_129_not(zoo, tiny_target):
    ok = zoo.get(TinySpec(extra_tokens=128), "extra128.gguf")
    bad = zoo.get(TinySpec(extra_tokens=129), "extra129.gguf")
    assert check_files(tiny_target, ok).compatible
    report = check_files(tiny_target, bad)
    assert not report.compatible
    assert not _rule(report, "vocabulary size").passed
    assert "129" in _rule(report, "vocabulary size").detail


def test_engine_refuses_incompatible_pair(zoo, tiny_target):
    edited = zoo.get(TinySpec(token_edits=((300, "XYZZY"),)), "edited.gguf")
    with pytest.raises(IncompatiblePair) as exc:
        make_engine(tiny_target, edited)
    assert "token texts" in str(exc.value)
    assert exc.value.report.differences[0].id == 300


# -- the command -------------------------------------------------------------------------

def test_check_cli_compatible(tiny_target, tiny_draft):
    r = run_cli("check", str(tiny_target), str(tiny_draft))
    assert r.returncode == 0, r.stderr
    assert "verdict: compatible" in r.stdout
    assert r.stdout.count("PASS") == 5
    assert run_cli("check", "-m", str(tiny_target), "-d", str(tiny_draft)).stdout == r.stdout
    r = run_cli("check", str(tiny_target), str(tiny_draft), str(tiny_draft))   # every draft is checked
    assert r.returncode == 0 and "draft 2 of 2" in r.stdout
    r = run_cli("check")
    assert r.returncode == 2 and "give TARGET (and DRAFT)" in r.stderr


def test_check_cli_incompatible_json(zoo, tiny_target):
    edited = zoo.get(TinySpec(token_edits=((300, "XYZZY"),)), "edited.gguf")
    r = run_cli("check", str(tiny_target), str(edited), "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["compatible"] is False
    assert data["differences"][0] == {"id": 300, "target": data["differences"][0]["target"], "draft": "XYZZY"}
    r = run_cli("check", str(tiny_target), str(edited))
    assert r.returncode == 1
    assert "FAIL  token texts" in r.stdout
    assert "id 300" in r.stdout and "XYZZY" in r.stdout


@pytest.mark.parametrize("kind", ["truncated", "not-gguf", "missing"])
def test_check_cli_unreadable(kind, tiny_target, tmp_path):
    bad = tmp_path / f"{kind}.gguf"
    if kind == "truncated":
        bad.write_bytes(tiny_target.read_bytes()[:3000])
    elif kind == "not-gguf":
        bad.write_text("definitely not a model")
    r = run_cli("check", str(tiny_target), str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("localspec: error:")
