"""DRY (llama.cpp's "don't repeat yourself" sampler): the arithmetic is llama.cpp's own (its
sampler through the C API on the same vocabulary, breakers and history), speculation with it
stays lossless (greedy: the target alone's tokens, single runs and slots; an identical draft
keeps every token), and the CLI and the server's fields take it."""

from __future__ import annotations

import ctypes
import json

import llama_cpp.llama_cpp as ll
import numpy as np
import pytest
from conftest import make_engine, run_cli, run_to_done
from test_penalties import assert_samples_follow_the_penalized_target, greedy_identity, through_llama_cpp
from test_server import request, serving
from tiny import TinySpec

from localspec.engine import RunSpec, SamplingConfig, SpecError
from localspec.engine.backend import Model
from localspec.engine.dry import restart_sequences
from localspec.engine.penalties import penalize, prepared

pytestmark = pytest.mark.usefixtures("one_llama_thread")

DRY = dict(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)


def llama_cpp_dry(model: Model, row: np.ndarray, history: list[int], cfg: SamplingConfig) -> np.ndarray:
    """``row`` through llama.cpp's own DRY sampler, ``history`` accepted into it first."""
    last_n = len(history) if cfg.dry_penalty_last_n < 0 else cfg.dry_penalty_last_n
    breakers = [b.encode() for b in cfg.dry_sequence_breakers]
    arr_b = (ctypes.c_char_p * max(len(breakers), 1))(*breakers)
    return through_llama_cpp(ll.llama_sampler_init_dry(model.vocab, cfg.dry_multiplier, cfg.dry_base,
                                                       cfg.dry_allowed_length, last_n, arr_b, len(breakers)),
                             row, history)


@pytest.fixture(scope="module")
def vocab_model(tiny_target):
    m = Model(str(tiny_target))
    yield m
    m.close()


def _histories(m: Model) -> dict[str, list[int]]:
    rng = np.random.default_rng(5)
    noise = [int(t) for t in rng.integers(20, m.n_vocab, 30)]
    phrase = m.tokenize("the quick brown fox jumps", add_special=False)
    nl = m.tokenize("\n", add_special=False)
    lazy = m.tokenize("lazy dog", add_special=False)
    return {
        "a-break-long-ago": noise + lazy + phrase + noise[:4] + lazy[1:] + phrase[:-1],
        "phrase-repeated": noise + phrase + noise[:5] + phrase[:-1],
        "broken-by-a-newline": noise + phrase + noise[:3] + phrase[:2] + nl + phrase[2:-1],
        "long-repeat": (phrase * 12)[:-1],
        "short": phrase[:2],
    }


@pytest.mark.parametrize("changes", [
    {}, dict(dry_allowed_length=1, dry_penalty_last_n=20), dict(dry_base=3.0, dry_multiplier=2.0),
    dict(dry_sequence_breakers=("\n", "lazy dog", "zz top")), dict(dry_sequence_breakers=()), dict(dry_base=200.0),
], ids=["defaults", "window-20", "steep", "multi-token-breakers", "no-breakers", "clamped-exponent"])
def test_the_arithmetic_is_llama_cpp_s(vocab_model, changes):
    m = vocab_model
    cfg = prepared(SamplingConfig(**(DRY | changes)), m)
    rng = np.random.default_rng(2)
    row = rng.normal(0.0, 3.0, m.n_vocab).astype(np.float32)
    moved = 0
    for name, history in _histories(m).items():
        last_n = cfg.dry_penalty_last_n
        ours = penalize(row, [], cfg, history if last_n < 0 else history[-last_n:])
        theirs = llama_cpp_dry(m, row, history, cfg)
        assert np.allclose(ours, theirs, rtol=1e-6, atol=1e-6), name
        moved += not np.array_equal(ours, row)
    assert moved >= 1      # (it did something)


def test_breakers_become_restart_sequences(vocab_model):
    m = vocab_model
    nl = m.tokenize("\n", add_special=False)
    restarts = restart_sequences(m, ("\n", "ck br"))
    assert (nl[0], ()) in restarts
    assert any(tail for _, tail in restarts)                # "ck br" spans tokens: a head and a tail
    assert restart_sequences(m, ("\n", "ck br")) is restarts   # (once per model)


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_greedy_with_dry_is_the_target_alone(tiny_target, tiny_draft, drafter):
    changed, drafted = greedy_identity(
        tiny_target, tiny_draft, "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the",
        drafter, (DRY, dict(DRY, dry_allowed_length=1, dry_penalty_last_n=16),
                  dict(DRY, dry_sequence_breakers=(), dry_multiplier=3.0)))
    assert changed >= 2 and drafted > 0


def test_an_identical_draft_is_accepted_whole(tiny_target):
    """(Slots: test_penalties.py's slot test runs DRY too.)"""
    with make_engine(tiny_target, tiny_target, draft_max=4) as e:
        prompt = e.tokenize("The quick brown fox jumps over the lazy dog, the quick brown fox")
        same, _ = run_to_done(e, prompt, max_tokens=40, sampling=SamplingConfig(temperature=0.0, **DRY))
    assert same.summary.drafted > 10 and same.summary.accepted == same.summary.drafted


@pytest.mark.parametrize("changes,field,match", [
    (dict(dry_multiplier=-1.0), "dry_multiplier", ">= 0"), (dict(dry_base=0.5), "dry_base", ">= 1"),
    (dict(dry_allowed_length=-1), "dry_allowed_length", ">= 0"), (dict(dry_penalty_last_n=-2), "dry_penalty_last_n",
                                                                    ">= -1"),
    (dict(dry_sequence_breakers=(1,)), "dry_sequence_breakers", "strings"),
    (dict(dry_multiplier=0.8, cascade=0.8), "cascade", "penalties"),
])
def test_out_of_range_settings_are_refused(changes, field, match):
    with pytest.raises(SpecError, match=match) as exc:
        RunSpec.of(**changes).validate()
    assert exc.value.field == field


def test_settings_round_trip_and_the_cli(tiny_target, tiny_draft):
    cfg = SamplingConfig(**DRY, dry_sequence_breakers=["\n", "###"])
    assert SamplingConfig(**cfg.to_dict()) == cfg and cfg.penalized and cfg.dry
    assert not SamplingConfig(dry_multiplier=0.8, dry_penalty_last_n=0).penalized
    r = run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "The quick brown", "-n", "12",
                "--temp", "0", "--dry-multiplier", "0.8", "--dry-allowed-length", "3", "--dry-penalty-last-n", "64",
                "--dry-sequence-breaker", "\n", "--dry-sequence-breaker", "###", "--json", "--threads", "1")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["sampling"]
    assert (spec["dry_multiplier"], spec["dry_allowed_length"], spec["dry_penalty_last_n"]) == (0.8, 3, 64)
    assert spec["dry_sequence_breakers"] == ["\n", "###"]
    bad = run_cli("run", "-m", str(tiny_target), "--ngram", "-p", "x", "--dry-base", "0.5")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--dry-base" in bad.stderr, bad.stderr


def test_llama_servers_dry_fields(zoo):
    """On a model that continues a bigram cycle, a prompt whose end repeats its start: DRY turns
    the answer away from the token that would extend the repeat (a large multiplier: the
    bigram model's choice leads by a wide margin)."""
    bigram = zoo.get(TinySpec(n_embd=64, n_layer=1, bigram_seed=5, layer_gain=0.05), "bigram-dry.gguf")
    with serving(bigram, drafter="ngram", n_ctx=256) as server:
        def complete(prompt, **fields):
            status, _, out = request(server, "POST", "/completion", {
                "prompt": prompt, "n_predict": 4, "temperature": 0, "return_tokens": True} | fields)
            assert status == 200, out
            return out

        cycle = complete([100], n_predict=6)["tokens"]
        prompt = [100, *cycle, 7, 100, cycle[0]]         # "100, cycle[0]" again: cycle[1] would extend it
        assert complete(prompt)["tokens"][0] == cycle[1]
        dry = complete(prompt, dry_multiplier=300.0, dry_base=2.0, dry_allowed_length=1, dry_penalty_last_n=-1,
                       dry_sequence_breakers=[])
        assert dry["tokens"][0] != cycle[1]
        settings = dry["generation_settings"]
        assert (settings["dry_multiplier"], settings["dry_allowed_length"], settings["dry_sequence_breakers"]) == (
            300.0, 1, [])
        assert complete(prompt, dry_multiplier=300.0, dry_allowed_length=1, samplers=["dry", "temperature"],
                        dry_sequence_breakers=[])["tokens"][0] != cycle[1]
        assert complete(prompt, dry_multiplier=300.0, dry_allowed_length=1, samplers=["top_k", "temperature"],
                        dry_sequence_breakers=[])["tokens"][0] == cycle[1]      # (left out of samplers: off)
        for field, value in (("dry_multiplier", -1), ("dry_sequence_breakers", "\n")):
            status, _, err = request(server, "POST", "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "hi"}], field: value})
            assert status == 400 and err["error"]["param"] == field


@pytest.mark.slow
def test_speculative_sampling_with_dry_follows_the_penalized_target(zoo):
    """The prompt repeats its opening after the target's own continuation of it, so DRY
    weighs on the token the target likes most there."""
    target = zoo.get(TinySpec(scale=0.35), "flat-target.gguf")
    draft = zoo.get(TinySpec(scale=0.35, noise=0.3), "flat-draft.gguf")
    with make_engine(target, draft, draft_max=3) as e:
        opening = e.tokenize("Once upon a time")
        own, _ = run_to_done(e, opening, speculative=False, max_tokens=3)
        prompt = opening + list(own.token_ids) + opening
        cfg = SamplingConfig(temperature=1.0, top_k=8, dry_multiplier=1.0, dry_allowed_length=2,
                             dry_sequence_breakers=())
        assert_samples_follow_the_penalized_target(e, target, prompt, cfg)
