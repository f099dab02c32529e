"""Speculative decoding with recurrent (Mamba) and hybrid (LFM2) models, whose state cannot
simply drop a rejected tail: greedy output identical to the target alone, lossless sampling,
exact bookkeeping in every corner, checkpoint costs in the stats, and `check` explaining it."""

import json
from dataclasses import replace

import llama_cpp.llama_cpp as ll
import pytest
from conftest import alone_and_with, make_engine, run_cli, run_to_done
from test_sampling import ALPHA, chi_square_p, exact_two_tokens, sample_pairs
from tiny import TinySpec, hybrid_spec, mamba2_spec, mamba_spec

from localspec.engine import DrafterKind, SamplingConfig, Step, StopReason
from localspec.engine.compat import check_files

GREEDY = SamplingConfig(temperature=0.0)
PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time there was"]

pytestmark = pytest.mark.usefixtures("one_llama_thread")


@pytest.fixture(scope="module")
def models(zoo):
    return {
        "mamba": zoo.get(mamba_spec(), "mamba.gguf"),
        "mamba-d": zoo.get(mamba_spec(noise=0.1), "mamba-d.gguf"),
        "mamba2": zoo.get(mamba2_spec(), "mamba2.gguf"),
        "mamba2-d": zoo.get(mamba2_spec(noise=0.05), "mamba2-d.gguf"),
        "lfm2": zoo.get(hybrid_spec(), "lfm2.gguf"),
        "lfm2-d": zoo.get(hybrid_spec(noise=0.1), "lfm2-d.gguf"),
        "llama": zoo.get(TinySpec(), "llama.gguf"),
        "llama-d": zoo.get(TinySpec(noise=0.1), "llama-d.gguf"),
        # Pairs that agree on every token (all drafts accepted).
        "lfm2-agree": zoo.get(hybrid_spec(bigram_seed=5, layer_gain=0.05), "lfm2-agree.gguf"),
        "mamba-agree": zoo.get(mamba_spec(bigram_seed=5, layer_gain=0.05), "mamba-agree.gguf"),
        "llama-agree": zoo.get(TinySpec(bigram_seed=5, layer_gain=0.05), "llama-agree.gguf"),
        "blind": zoo.get(TinySpec(blind_output=True), "blind.gguf"),
    }


def kv_exact(ctx) -> bool:
    return ll.llama_memory_seq_pos_max(ctx.mem, 0) + 1 == len(ctx.tokens)


def compare(engine, prompt, n, **kw):
    toks = engine.tokenize(prompt)
    engine.reset()
    base, _ = run_to_done(engine, toks, sampling=GREEDY, max_tokens=n, speculative=False)
    engine.reset()
    spec, events = run_to_done(engine, toks, sampling=GREEDY, max_tokens=n, **kw)
    assert spec.token_ids == base.token_ids, prompt
    assert kv_exact(engine.target_ctx) and (engine.draft_ctx is None or kv_exact(engine.draft_ctx))
    return base, spec, events


PAIRS = [
    ("mamba", "mamba-d"),       # recurrent target, recurrent draft
    ("mamba", "llama-d"),       # recurrent target, transformer draft
    ("llama", "mamba-d"),       # transformer target, recurrent draft (where vocabularies allow it)
    ("mamba2", "mamba2-d"),
    ("lfm2", "lfm2-d"),         # hybrid target, hybrid draft
    ("lfm2", "llama-d"),        # hybrid target, transformer draft
    ("llama", "lfm2-d"),        # transformer target, hybrid draft
]


def assert_greedy_identical(target, draft, k: int) -> None:
    """A compatible pair drafts, and greedy speculation with K=k gives the target's own
    tokens on every prompt."""
    assert check_files(target, draft).compatible
    with make_engine(target, draft, draft_max=k) as e:
        for prompt in PROMPTS:
            _, spec, _ = compare(e, prompt, 40)
            assert spec.summary.drafted > 0


@pytest.mark.parametrize("target,draft", PAIRS)
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_identical(models, target, draft, k):
    assert_greedy_identical(models[target], models[draft], k)


def test_adaptive_policy_too(models):
    with make_engine(models["lfm2"], models["lfm2-d"], fixed_k=False, draft_max=6) as e:
        compare(e, PROMPTS[0], 60)


def test_partial_acceptance_rolls_back_with_checkpoints(models):
    """Mamba has no state snapshots: rejected tails come off by restoring a checkpoint."""
    with make_engine(models["mamba"], models["mamba-d"], draft_max=4) as e:
        assert e.target_ctx.rollback == "checkpoint" and e.draft_ctx.rollback == "checkpoint"
        _, spec, events = compare(e, PROMPTS[0], 60)
        s = spec.summary
        assert 0 < s.accepted < s.drafted, "partial acceptance happened"
        assert s.target_memory == "checkpoint" and s.draft_memory == "checkpoint"
        assert s.checkpoints > 0 and s.checkpoint_bytes > 0 and s.checkpoint_size > 0
        assert s.rollbacks > 0 and s.checkpoint_seconds > 0
        assert s.restarts == 0, "never fell back to decoding everything again"
        # Each rollback re-decodes only what that round accepted (plus the round's first token).
        assert 0 < s.redecoded_tokens <= s.accepted + s.rollbacks


def test_hybrid_target_uses_state_snapshots(models):
    """LFM2 supports llama.cpp's recurrent-state snapshots: the verify tail comes off directly."""
    with make_engine(models["lfm2"], models["llama-d"], draft_max=4) as e:
        assert e.target_ctx.rollback == "rs" and e.target_ctx.rs_depth >= 4
        _, spec, _ = compare(e, PROMPTS[1], 60)
        s = spec.summary
        assert s.target_memory == "rs" and s.draft_memory == "kv"
        assert s.rollbacks > 0 and s.restarts == 0 and s.redecoded_tokens == 0


def test_all_accepted(models):
    for target, draft in (("lfm2-agree", "llama-agree"), ("mamba-agree", "lfm2-agree"),
                          ("llama-agree", "mamba-agree")):
        with make_engine(models[target], models[draft], draft_max=4) as e:
            _, spec, events = compare(e, PROMPTS[0], 40)
            assert spec.summary.acceptance_rate == 1.0
            assert spec.summary.restarts == 0


def test_none_accepted(models):
    with make_engine(models["mamba"], models["blind"], draft_max=3) as e:
        _, spec, _ = compare(e, PROMPTS[2], 30)
        assert spec.summary.accepted == 0 and spec.summary.drafted > 0


def test_end_of_generation_inside_a_draft(zoo):
    base_model = zoo.get(hybrid_spec(bigram_seed=5, layer_gain=0.05), "lfm2-agree.gguf")
    with make_engine(base_model, drafter="none") as e:
        ids = run_to_done(e, e.tokenize(PROMPTS[0]), sampling=GREEDY, max_tokens=20,
                          speculative=False)[0].token_ids
    j = next(i for i in range(5, len(ids)) if ids[i] not in ids[:i] and ids[i] > 2)
    target = zoo.get(hybrid_spec(bigram_seed=5, layer_gain=0.05, eos_id=ids[j]), f"lfm2-eos{ids[j]}.gguf")
    draft = zoo.get(mamba_spec(bigram_seed=5, layer_gain=0.05, eos_id=ids[j]), f"mamba-eos{ids[j]}.gguf")
    with make_engine(target, draft, draft_max=8) as e:
        base, spec, events = compare(e, PROMPTS[0], 50)
        assert spec.stop_reason == StopReason.EOG and len(spec.token_ids) == j
        last = [ev for ev in events if isinstance(ev, Step)][-1]
        assert last.drafted >= 1


def test_context_full(models):
    with make_engine(models["mamba"], models["lfm2-d"], n_ctx=48, draft_max=6) as e:
        base, spec, _ = compare(e, PROMPTS[0], 1000)
        assert spec.stop_reason == StopReason.CONTEXT_FULL
        assert len(e.tokenize(PROMPTS[0])) + len(spec.token_ids) == e.target_ctx.n_ctx + 1


def test_chat_turns_on_a_hybrid_target(models):
    with make_engine(models["lfm2"], models["lfm2-d"], draft_max=4) as e:
        msgs = [{"role": "user", "content": "The quick brown fox"}]
        first, _ = run_to_done(e, e.chat_prompt(msgs), sampling=GREEDY, max_tokens=20)
        msgs += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "and then?"}]
        toks = e.chat_prompt(msgs)
        second, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=20)
        e.reset()
        alone, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=20, speculative=False)
        assert second.token_ids == alone.token_ids


@pytest.mark.slow
@pytest.mark.parametrize("target,draft", [("lfm2", "lfm2-d"), ("mamba", "llama-d")])
def test_lossless_sampling(zoo, target, draft):
    t = zoo.get(hybrid_spec(scale=0.35) if target == "lfm2" else mamba_spec(scale=0.35), f"{target}-flat.gguf")
    d = zoo.get(hybrid_spec(scale=0.35, noise=0.3) if draft == "lfm2-d" else TinySpec(scale=0.35, noise=0.3),
               f"{draft}-flat.gguf")
    cfg = SamplingConfig(temperature=1.0, top_k=8)
    with make_engine(t, d, draft_max=3) as e:
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(t, prompt, cfg)
        counts, drafted, accepted = sample_pairs(e, prompt, cfg, 2000)
    assert 0 < accepted < drafted
    assert chi_square_p(counts, expected, 2000) > ALPHA


def test_check_reports_hybrid_and_recurrent(models):
    r = run_cli("check", str(models["lfm2"]), str(models["mamba-d"]), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    notes = " ".join(data["notes"])
    assert "hybrid" in notes and "recurrent" in notes and "checkpoint" in notes
    r = run_cli("check", str(models["lfm2"]), str(models["mamba-d"]))
    assert "target is a hybrid model (lfm2)" in r.stdout
    assert "draft is a recurrent model (mamba)" in r.stdout
    r = run_cli("check", str(models["llama"]), str(models["llama-d"]), "--json")
    assert json.loads(r.stdout)["notes"] == []


def test_run_json_shows_checkpoint_cost(models):
    r = run_cli("run", "-m", str(models["mamba"]), "-d", str(models["mamba-d"]), "-p", "The quick", "-n", "30",
                "--temp", "0", "--fixed-k", "--draft-max", "4", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    s = data["stats"]
    assert s["target_memory"] == "checkpoint" and s["checkpoint_bytes"] > 0 and s["checkpoint_seconds"] > 0
    assert data["engine"]["target"]["kind"] == "recurrent"
    r = run_cli("run", "-m", str(models["mamba"]), "-d", str(models["mamba-d"]), "-p", "The quick", "-n", "30",
                "--temp", "0", "--fixed-k", "--draft-max", "4")
    assert "checkpoints" in r.stderr


def recurrent_and_hybrid_drafts(models):
    """An engine with a Llama target, a Mamba draft and an LFM2 draft."""
    from localspec.engine import Engine, EngineConfig

    return Engine(EngineConfig(target=str(models["llama-agree"]), draft=str(models["mamba-agree"]),
                               draft2=str(models["lfm2-d"]), n_ctx=512, rollback_depth=9))


@pytest.fixture
def pair_never_paused(monkeypatch):
    """Two drafts' policy that never pauses and measures (and scores) the idle draft after 4
    rounds, not 16: what the test checks does not hang on the machine's timings (a spiked
    sample could pause a draft that pays), and a short answer gets to score the idle draft."""
    import localspec.engine.engine as engine_module
    from localspec.engine.policy import DEFAULT, LayeredPair

    params = replace(DEFAULT, route_rounds=4)
    monkeypatch.setattr(engine_module, "policy_for", lambda spec, learned=None, ratio=None: LayeredPair.build(
        spec.draft_min, spec.draft_max, spec.p_min, False, learned, params=params,
        size_ratios=ratio if isinstance(ratio, tuple) else None))


@pytest.mark.usefixtures("pair_never_paused")
def test_two_drafts_scoring_recurrent_and_hybrid_drafts(models):
    """Two drafts whose states are recurrent (Mamba) and hybrid (LFM2): the idle one is scored
    (it decodes the tokens it missed in one batch with every row read) and measured, and the
    answer is the target's alone, answer after answer (what each learned carries into the
    next). The LFM2 draft's tokens are never accepted: it drafts only to measure its costs.
    (Its probes while paused are the policy's: tests/test_policy.py.)"""
    from localspec.engine import memory

    memory.reset()   # from nothing: what earlier tests taught the store (a layered pair) is not this test's subject
    scores = 0
    with recurrent_and_hybrid_drafts(models) as e:
        for prompt in PROMPTS[:2] * 2:
            want, got = alone_and_with(e, e.tokenize(prompt), DrafterKind.MODELS, 120)
            assert got.token_ids == want.token_ids, prompt
            assert got.summary.drafted > 0 and got.policy["pair"] is True
            bad = got.summary.by_drafter.get("large", {"drafted": 0})
            assert bad["drafted"] <= 12, got.summary.by_drafter
            scores += got.policy["scores"]
    assert scores >= 1


@pytest.mark.usefixtures("always_layered")
def test_layered_rounds_with_recurrent_and_hybrid_drafts(models):
    """Every round layered, the large draft checking the small one's blocks: a recurrent or
    hybrid draft gives back a block's dropped tokens from its checkpoint (decoding again what
    it keeps), and the answer is the target's alone."""
    with recurrent_and_hybrid_drafts(models) as e:
        for prompt in PROMPTS[:2]:
            want, got = alone_and_with(e, e.tokenize(prompt), DrafterKind.MODELS, 60)
            assert got.token_ids == want.token_ids, prompt
            blocks = got.summary.by_drafter["small_for_large"]
            assert blocks["drafted"] > blocks["accepted"], blocks     # blocks were cut: states went back
