"""Logit bias and repetition penalties (llama.cpp's samplers): the arithmetic is llama.cpp's
own, speculation with them stays lossless (greedy: the target alone's tokens, in a single run
and in slots; sampling: the target's penalized distribution, by chi-square), drafts propose
penalized too (an identical draft keeps every token), and the CLI and the server's three
APIs take them."""

from __future__ import annotations

import ctypes
import json
import math

import llama_cpp.llama_cpp as ll
import numpy as np
import pytest
from conftest import make_engine, run_cli, run_to_done
from test_sampling import ALPHA, chi_square_p, sample_pairs
from test_server import assert_error, client, request, serving
from tiny import TinySpec

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, SpecError
from localspec.engine.backend import Context, Model
from localspec.engine.penalties import penalize, prepared, window
from localspec.engine.sampling import distribution
from localspec.errors import BadInput

pytestmark = pytest.mark.usefixtures("one_llama_thread")

PENALIZED = dict(repeat_penalty=1.6, frequency_penalty=0.4, presence_penalty=0.3)


def through_llama_cpp(sampler, row: np.ndarray, history: list[int]) -> np.ndarray:
    """``row`` through a llama.cpp sampler (then freed), ``history`` accepted into it first (as
    llama-server feeds a prompt)."""
    n = row.shape[0]
    try:
        for t in history:
            ll.llama_sampler_accept(sampler, t)
        data = (ll.llama_token_data * n)(*[ll.llama_token_data(i, float(x), 0.0) for i, x in enumerate(row)])
        arr = ll.llama_token_data_array(ctypes.cast(data, ctypes.POINTER(ll.llama_token_data)), n, -1, False)
        ll.llama_sampler_apply(sampler, ctypes.byref(arr))
        return np.array([d.logit for d in data], dtype=np.float32)
    finally:
        ll.llama_sampler_free(sampler)


def llama_cpp_row(row: np.ndarray, history: list[int], cfg: SamplingConfig) -> np.ndarray:
    """``row`` through llama.cpp's own logit-bias and penalties samplers."""
    n = row.shape[0]
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    if cfg.logit_bias:
        pairs = [ll.llama_logit_bias(t, b) for t, b in cfg.logit_bias]
        biases = (ll.llama_logit_bias * len(pairs))(*pairs)
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_logit_bias(n, len(cfg.logit_bias), biases))
    last_n = len(history) if cfg.repeat_last_n < 0 else cfg.repeat_last_n
    ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_penalties(
        n, last_n, cfg.repeat_penalty, cfg.frequency_penalty, cfg.presence_penalty))
    return through_llama_cpp(chain, row, history)


@pytest.mark.parametrize("cfg", [
    SamplingConfig(repeat_penalty=1.3),
    SamplingConfig(repeat_penalty=0.8, frequency_penalty=0.5, presence_penalty=-0.25, repeat_last_n=7),
    SamplingConfig(repeat_penalty=1.1, repeat_last_n=-1, logit_bias=((3, 2.5), (5, -math.inf), (40, -1.0))),
    SamplingConfig(logit_bias=((7, 4.0),), repeat_last_n=0, repeat_penalty=2.0),
], ids=["repeat", "all-three-window-7", "whole-history-and-bias", "bias-only"])
def test_the_arithmetic_is_llama_cpp_s(cfg):
    rng = np.random.default_rng(3)
    row = rng.normal(0.0, 3.0, 64).astype(np.float32)     # negative and positive logits
    history = [int(t) for t in rng.integers(0, 64, 40)] + [3, 3, 3, 40]
    ours = penalize(row, window(history, [], 0, cfg.repeat_last_n), cfg)
    theirs = llama_cpp_row(row, history, cfg)
    assert np.array_equal(np.isneginf(ours), np.isneginf(theirs))
    finite = np.isfinite(theirs)
    assert np.allclose(ours[finite], theirs[finite], rtol=1e-6, atol=1e-6)
    assert not np.allclose(ours[finite], row[finite])     # (it did something)


def test_a_draft_position_s_window_is_the_sequence_so_far():
    history, drafts = list(range(10)), [100, 101, 102]
    assert window(history, drafts, 0, 4) == [6, 7, 8, 9]
    assert window(history, drafts, 2, 4) == [8, 9, 100, 101]
    assert window(history, drafts, 3, 2) == [101, 102]
    assert window(history, drafts, 1, -1) == history + [100]
    assert window([], drafts, 3, 8) == drafts


def greedy_identity(target, draft, text: str, drafter: str, settings) -> tuple[int, int]:
    """For each of ``settings`` (SamplingConfig fields, or a function of the plain greedy
    answer giving them), speculative greedy output == the target alone's with them; returns
    (how many changed the plain answer, tokens drafted)."""
    with make_engine(target, draft, draft_max=4) as e:
        prompt = e.tokenize(text)
        plain, _ = run_to_done(e, prompt, speculative=False, max_tokens=48)
        drafted, changed = 0, 0
        for changes in settings:
            changes = changes(plain) if callable(changes) else changes
            cfg = SamplingConfig(temperature=0.0, **changes)
            e.reset()
            base, _ = run_to_done(e, prompt, speculative=False, max_tokens=48, sampling=cfg)
            e.reset()
            spec, _ = run_to_done(e, prompt, drafter=drafter, max_tokens=48, sampling=cfg)
            assert spec.token_ids == base.token_ids, changes
            changed += base.token_ids != plain.token_ids
            drafted += spec.summary.drafted
    return changed, drafted


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_greedy_with_penalties_is_the_target_alone(tiny_target, tiny_draft, drafter):
    changed, drafted = greedy_identity(
        tiny_target, tiny_draft, "The quick brown fox jumps over the lazy dog, the quick brown fox", drafter,
        (PENALIZED, dict(PENALIZED, repeat_last_n=-1), dict(repeat_penalty=1.3, repeat_last_n=4),
         lambda plain: dict(logit_bias=((plain.token_ids[1], -math.inf), (plain.token_ids[4], -2.0)))))
    # (the settings change the answer; penalties steer away from repeats, where a lookup finds its matches)
    assert changed >= 3 and drafted > 0


def test_a_banned_token_never_comes(tiny_target, tiny_draft):
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        prompt = e.tokenize("The quick brown fox")
        plain, _ = run_to_done(e, prompt, max_tokens=40)
        banned = max(set(plain.token_ids), key=plain.token_ids.count)   # its most frequent token
        e.reset()
        done, _ = run_to_done(e, prompt, max_tokens=40, sampling=SamplingConfig(temperature=0.0,
                                                                                logit_bias=((banned, -math.inf),)))
        assert banned not in done.token_ids and done.summary.drafted > 0


def test_an_identical_draft_is_accepted_whole_under_penalties(tiny_target):
    """The draft proposes from rows penalized as the target judges them: with the target's own
    weights as its draft, every drafted token is kept (unpenalized proposals would not be)."""
    with make_engine(tiny_target, tiny_target, draft_max=4) as e:
        prompt = e.tokenize("The quick brown fox jumps over the lazy dog")
        done, _ = run_to_done(e, prompt, max_tokens=40,
                              sampling=SamplingConfig(temperature=0.0, logit_bias=((11, 3.0),), **PENALIZED))
    assert done.summary.drafted > 10 and done.summary.accepted == done.summary.drafted


@pytest.mark.parametrize("changes", [PENALIZED, dict(dry_multiplier=0.8, dry_allowed_length=1)],
                         ids=["penalties", "dry"])
def test_slots_give_the_single_run_s_tokens(tiny_target, tiny_draft, changes):
    cfg = SamplingConfig(temperature=0.0, **changes)
    with make_engine(tiny_target, tiny_draft, draft_max=4) as e:
        prompt = e.tokenize("The quick brown fox jumps over the lazy dog, the quick")
        single, _ = run_to_done(e, prompt, max_tokens=32, sampling=cfg)
    slots = Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=256, threads=1,
                                remember=False, parallel=2))
    try:
        runner = slots.runner()
        spec = RunSpec(drafter=DrafterKind.MODEL, sampling=cfg, max_tokens=32)
        gens = [runner.start(prompt, spec), runner.start(slots.tokenize("x"), spec)]
        runner.run_all()
        assert gens[0].done.token_ids == single.token_ids
        assert gens[0].done.summary.drafted > 0
        with pytest.raises(BadInput, match="vocabulary"):
            runner.start(prompt, spec.with_(logit_bias=((10**6, 1.0),)))
    finally:
        slots.close()


def exact_two_tokens_penalized(target_path, prompt, cfg):
    """P(t1, t2) of target-only sampling: the chain on rows penalized (logit bias, penalties,
    DRY) by the sequence so far."""
    m = Model(str(target_path))
    c = Context(m, n_ctx=256)
    cfg = prepared(cfg, m)

    def dist(row, seq):
        dry = seq if cfg.dry_penalty_last_n < 0 else seq[-cfg.dry_penalty_last_n:]
        return distribution(penalize(row, window(seq, [], 0, cfg.repeat_last_n), cfg, dry), cfg)

    p1 = dist(c.decode(prompt, logits="last").copy(), prompt)
    c.mark()
    out = {}
    for t1, pr1 in zip(p1.ids, p1.probs):
        assert c.truncate(len(prompt)) == len(prompt)
        p2 = dist(c.decode([int(t1)], logits="last").copy(), prompt + [int(t1)])
        for t2, pr2 in zip(p2.ids, p2.probs):
            out[(int(t1), int(t2))] = float(pr1) * float(pr2)
    c.close()
    m.close()
    return out


def assert_samples_follow_the_penalized_target(engine, target, prompt, cfg, n: int = 2500) -> None:
    """Speculative samples of two tokens (``cfg``: temperature 1, top-k 8, and what
    penalizes) follow the target's penalized distribution, and not its unpenalized one."""
    expected = exact_two_tokens_penalized(target, prompt, cfg)
    plain = exact_two_tokens_penalized(target, prompt, SamplingConfig(temperature=1.0, top_k=8))
    counts, drafted, accepted = sample_pairs(engine, prompt, cfg, n)
    assert drafted > 0 and 0 < accepted < drafted, "both acceptance and rejection must occur"
    pval = chi_square_p(counts, expected, n)
    assert pval > ALPHA, f"speculative samples do not follow the penalized target (p = {pval:.2e})"
    assert chi_square_p(counts, plain, n) < ALPHA, "the unpenalized distribution must not fit as well"


@pytest.mark.slow
def test_speculative_sampling_with_penalties_follows_the_penalized_target(zoo):
    target = zoo.get(TinySpec(scale=0.35), "flat-target.gguf")
    draft = zoo.get(TinySpec(scale=0.35, noise=0.3), "flat-draft.gguf")
    with make_engine(target, draft, draft_max=3) as e:
        prompt = e.tokenize("Once upon a time, once upon")
        cfg = SamplingConfig(temperature=1.0, top_k=8, repeat_penalty=3.0, presence_penalty=1.0,
                             logit_bias=((prompt[-1], 2.0),))
        assert_samples_follow_the_penalized_target(e, target, prompt, cfg)


@pytest.mark.parametrize("changes,field,match", [
    (dict(repeat_penalty=0.0), "repeat_penalty", "> 0"), (dict(repeat_penalty=math.nan), "repeat_penalty", "> 0"),
    (dict(repeat_last_n=-2), "repeat_last_n", ">= -1"), (dict(presence_penalty=math.inf), "presence_penalty", "number"),
    (dict(logit_bias=((-1, 1.0),)), "logit_bias", "pairs"), (dict(logit_bias=((1, "x"),)), "logit_bias", "pairs"),
    (dict(logit_bias=((1, math.inf),)), "logit_bias", "-inf"),
    (dict(repeat_penalty=1.2, cascade=0.8), "cascade", "penalties"),
])
def test_out_of_range_settings_are_refused(changes, field, match):
    with pytest.raises(SpecError, match=match) as exc:
        RunSpec.of(**changes).validate()
    assert exc.value.field == field


def test_settings_round_trip_as_json():
    cfg = SamplingConfig(logit_bias={5: -math.inf, 6: 1.5}, **PENALIZED)
    d = cfg.to_dict()
    assert d["logit_bias"] == [[5, False], [6, 1.5]]
    assert SamplingConfig(**d) == cfg and cfg.penalized
    assert not SamplingConfig(repeat_penalty=1.5, repeat_last_n=0).penalized and not SamplingConfig().penalized


def test_the_cli_takes_llama_cpp_s_flags(tiny_target, tiny_draft):
    args = ("run", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "the quick brown fox the quick", "-n", "24",
            "--temp", "0", "--threads", "1", "--json")
    plain = json.loads(run_cli(*args).stdout)
    r = run_cli(*args, "--repeat-penalty", "1.6", "--presence-penalty", "0.3", "--frequency-penalty", "0.4",
                "--repeat-last-n", "32", "--logit-bias", f"{plain['token_ids'][0]}-inf", "--logit-bias", "3+1.5")
    out = json.loads(r.stdout)
    assert out["token_ids"] != plain["token_ids"] and plain["token_ids"][0] not in out["token_ids"]
    s = out["sampling"]
    assert (s["repeat_penalty"], s["presence_penalty"], s["frequency_penalty"]) == (1.6, 0.3, 0.4)
    assert s["repeat_last_n"] == 32
    assert s["logit_bias"] == [[plain["token_ids"][0], False], [3, 1.5]]
    for bad, match in ((("--logit-bias", "3x"), "--logit-bias 3x: give TOKEN_ID"),
                       (("--repeat-penalty", "0"), "--repeat-penalty must be > 0"),
                       (("--logit-bias", "999999+1"), "not in the model's vocabulary")):
        r = run_cli(*args, *bad)
        assert r.returncode == 2 and match in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture(scope="module")
def server(tiny_target, tiny_draft):
    with serving(tiny_target, tiny_draft) as s:
        yield s


def test_openai_s_penalties_and_logit_bias(server):
    c = client(server)
    ask = dict(model="tiny", messages=[{"role": "user", "content": "the quick brown fox the quick brown fox"}],
               temperature=0, max_tokens=24)
    plain = c.chat.completions.create(**ask)
    pen = c.chat.completions.create(**ask, presence_penalty=1.5, frequency_penalty=1.0)
    assert pen.choices[0].message.content != plain.choices[0].message.content
    forced = c.chat.completions.create(**ask, logit_bias={"70": 100})     # token 70 wins every step
    _, _, body = request(server, "POST", "/detokenize", {"tokens": [70] * 24})
    assert forced.choices[0].message.content == body["content"] != plain.choices[0].message.content
    for bias, match, param in (({"fox": -100}, "not a token id", "logit_bias"), ([1, 2], "token ids", "logit_bias"),
                               ({"99999999": 1}, "logit_bias: token 99999999 is not in the model's vocabulary", None)):
        status, _, body = request(server, "POST", "/v1/chat/completions", dict(ask, logit_bias=bias))
        assert_error(status, body, 400, param, match)


def test_llama_server_s_and_ollama_s_penalties(server):
    body = {"prompt": "the quick brown fox the quick brown fox", "n_predict": 16, "temperature": 0}
    _, _, plain = request(server, "POST", "/completion", dict(body, return_tokens=True))
    _, _, pen = request(server, "POST", "/completion", dict(body, repeat_penalty=1.8, repeat_last_n=32,
                                                            logit_bias=[[plain["tokens"][0], False]]))
    assert pen["content"] != plain["content"]
    gs = pen["generation_settings"]
    assert gs["repeat_penalty"] == 1.8 and gs["repeat_last_n"] == 32 and gs["logit_bias"][0][1] is False
    _, _, off = request(server, "POST", "/completion", dict(body, repeat_penalty=1.8,
                                                            samplers=["top_k", "temperature"]))
    assert off["generation_settings"]["repeat_penalty"] == 1.0     # penalties left out of the chain: off
    status, _, err = request(server, "POST", "/completion", dict(body, repeat_penalty=0))
    assert_error(status, err, 400, "repeat_penalty", "> 0")
    chat = {"model": "tiny", "stream": False,
            "messages": [{"role": "user", "content": "the quick brown fox the quick brown fox"}]}
    _, _, a = request(server, "POST", "/api/chat", dict(chat, options={"temperature": 0, "num_predict": 16}))
    _, _, b = request(server, "POST", "/api/chat", dict(chat, options={"temperature": 0, "num_predict": 16,
                                                                       "repeat_penalty": 1.8, "repeat_last_n": 32}))
    assert a["message"]["content"] != b["message"]["content"]
