"""Constrained decoding (issue 41, JSON mode): a GBNF grammar through llama.cpp's grammar
sampler with speculation on. Greedy output under a grammar is the target's alone under the
same grammar, token for token, whatever drafts; the grammar-constrained distribution is
llama.cpp's (forbidden tokens out, then top-k, top-p, min-p, temperature); draft tokens the
grammar forbids are rejected; answers parse and match their schema; and ``response_format``
through the official ``openai`` client on a real instruct model."""

from __future__ import annotations

import json

import numpy as np
import openai
import pydantic
import pytest
from conftest import GREEDY, make_engine, run_to_done
from test_server import assert_error, client, request, serving
from test_tools import qwen_coder_path

from localspec.engine import RunSpec, SamplingConfig, SpecError
from localspec.engine.backend import Model
from localspec.engine.grammar import Grammar, json_grammar, schema_grammar
from localspec.engine.outputs import LogitRows
from localspec.errors import BadInput

CAT = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                        "indoor": {"type": "boolean"}},
       "required": ["name", "age", "indoor"], "additionalProperties": False}


class Cat(pydantic.BaseModel):
    name: str
    age: int
    indoor: bool


def matches_cat(value) -> bool:
    return (isinstance(value, dict) and set(value) == {"name", "age", "indoor"} and isinstance(value["name"], str)
            and isinstance(value["age"], int) and isinstance(value["indoor"], bool))


@pytest.fixture(scope="module")
def qwen():
    return qwen_coder_path()


# -- the engine ---------------------------------------------------------------------------------

@pytest.mark.parametrize("grammar", ["json", "schema"])
def test_greedy_under_a_grammar_is_the_target_alone(tiny_target, tiny_draft, grammar, one_llama_thread):
    """Random-weight models follow the grammar; every drafter (a draft model that knows
    nothing of the grammar, prompt lookup) gives the target-alone tokens, and drafts were
    really proposed and judged."""
    gbnf = json_grammar() if grammar == "json" else schema_grammar(CAT)
    engine = make_engine(tiny_target, tiny_draft, draft_max=4)
    try:
        prompt = engine.tokenize("The quick brown fox jumps over")
        base, _ = run_to_done(engine, prompt, speculative=False, max_tokens=48, grammar=gbnf)
        g = Grammar(engine.target_model, gbnf)
        for t in base.token_ids:   # each token was allowed where it stands
            assert g.allowed(np.array([t]))[0]
            g.accept(t)
        drafted = 0
        for drafter in ("model", "ngram"):
            done, _ = run_to_done(engine, prompt, drafter=drafter, max_tokens=48, grammar=gbnf)
            assert done.token_ids == base.token_ids, drafter
            drafted += done.summary.drafted
        assert drafted > 0
    finally:
        engine.close()


def _reference(row: np.ndarray, allowed: np.ndarray, cfg: SamplingConfig) -> dict[int, float]:
    """llama.cpp's chain on a masked row, written out plainly: top-k, top-p (normalised over
    the top-k set), min-p, temperature."""
    ids = np.flatnonzero(allowed)
    ids = ids[np.lexsort((ids, -row[ids]))]
    if cfg.top_k > 0:
        ids = ids[:cfg.top_k]
    x = row[ids].astype(np.float64)
    e = np.exp(x - x[0])
    keep = len(ids)
    if cfg.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(e) / e.sum(), cfg.top_p)) + 1
    if cfg.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(e >= cfg.min_p)))
    x = x[:keep] / cfg.temperature
    p = np.exp(x - x.max())
    return dict(zip(ids[:keep].tolist(), (p / p.sum()).tolist()))


@pytest.mark.parametrize("cfg", [SamplingConfig(temperature=0.8), SamplingConfig(temperature=1.3, top_k=0, top_p=0.9),
                                 SamplingConfig(temperature=0.7, top_k=3, min_p=0.0, top_p=1.0)],
                         ids=["defaults", "top-p", "top-k-3"])
def test_grammar_distribution_is_llama_cpps_chain_on_the_allowed_tokens(smollm2_q4_1, cfg):
    model = Model(smollm2_q4_1, gpu_layers=0)
    g = Grammar(model, schema_grammar(CAT))
    rng = np.random.default_rng(7)
    everything = np.arange(model.n_vocab)
    for text in ('{', ' "name"', ':', ' "Tom', '",', ' "age"', ': 1'):
        row = rng.normal(0.0, 3.0, model.n_vocab).astype(np.float32)
        allowed = g.allowed(everything)
        d = g.dist(row, cfg)
        want = _reference(row, allowed, cfg)
        assert sorted(d.ids.tolist()) == sorted(want), text
        assert np.allclose([d.prob(t) for t in want], list(want.values()), atol=1e-9)
        assert g.argmax(row) == max(want, key=lambda t: (row[t], -t))
        for t in model.tokenize(text, add_special=False):
            g.accept(t)


def test_draft_tokens_the_grammar_forbids_are_rejected(smollm2_q4_1):
    """A draft token that is the row's best but forbidden is never accepted, greedy or
    sampled; the target's token is then an allowed one (greedy: the best allowed)."""
    model = Model(smollm2_q4_1, gpu_layers=0)
    g = Grammar(model, json_grammar())
    brace = model.tokenize("{", add_special=False)[0]
    word = model.tokenize("hello", add_special=False)[0]
    rows = np.zeros((2, model.n_vocab), dtype=np.float32)
    rows[:, word] = 10.0          # the best token, which the grammar forbids at the start
    rows[:, brace] = 5.0
    sampled = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    for cfg in (GREEDY, sampled, sampled, sampled):
        state = g.clone()
        a, nxt = state.verify(LogitRows(rows), [word], None, cfg, model.n_vocab, np.random.default_rng(len(str(cfg))))
        assert a == 0 and nxt != word
        assert g.allowed(np.array([nxt]))[0]
        if cfg.greedy:
            assert nxt == brace
    state = g.clone()
    a, nxt = state.verify(LogitRows(rows), [brace], None, GREEDY, model.n_vocab, np.random.default_rng(0))
    assert a == 1 and nxt != word     # "{" kept; after it "hello" is still not allowed


def test_rejection_sampling_under_a_grammar_keeps_the_targets_constrained_distribution(smollm2_q4_1):
    """Inside a JSON string a newline is forbidden. A draft that proposes it 40% of the time
    (and allowed tokens in other shares than the target's) still leaves the first emitted
    token distributed as the target's grammar-constrained distribution (chi-square, 0.1%)."""
    from collections import Counter

    from test_sampling import ALPHA, chi_square_p

    from localspec.engine.sampling import Dist

    model = Model(smollm2_q4_1, gpu_layers=0)
    g = Grammar(model, json_grammar())
    for t in model.tokenize('{"', add_special=False):
        g.accept(t)
    tok = {c: model.tokenize(c, add_special=False)[0] for c in ("\n", "a", "b", '"')}
    rng = np.random.default_rng(11)
    row = rng.normal(-8.0, 1.0, model.n_vocab).astype(np.float32)
    for c, logit in (("\n", 6.0), ("a", 5.0), ("b", 4.0), ('"', 4.5)):
        row[tok[c]] = logit
    rows = LogitRows(row.reshape(1, -1).repeat(2, axis=0))
    cfg = SamplingConfig(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0)
    p = g.dist(row, cfg)
    assert p.prob(tok["\n"]) == 0.0 and p.prob(tok["a"]) > 0.3
    ids = np.array(sorted(tok.values()))
    q = Dist(ids, np.array([{tok["\n"]: 0.4, tok["a"]: 0.1, tok["b"]: 0.3, tok['"']: 0.2}[i] for i in ids]))
    n, seen, accepted = 3000, Counter(), 0
    for _ in range(n):
        x = q.sample(rng)
        a, nxt = g.clone().verify(rows, [x], [q], cfg, model.n_vocab, rng)
        seen[x if a else nxt] += 1
        accepted += a
        assert not (a and x == tok["\n"])
    expected = {int(i): float(pr) for i, pr in zip(p.ids, p.probs)}
    assert chi_square_p(seen, expected, n) > ALPHA
    assert 0 < accepted < n


def test_sampled_answers_parse_and_match_the_schema(smollm2_q4_1, one_llama_thread):
    engine = make_engine(smollm2_q4_1, smollm2_q4_1, n_ctx=1024, draft_max=4)
    try:
        prompt = engine.chat_prompt([{"role": "user", "content": "Describe a cat as JSON."}])
        short = json.loads(json.dumps(CAT))
        short["properties"]["name"]["maxLength"] = 16    # so that every sample ends in 120 tokens
        short["properties"]["age"] = {"type": "integer", "minimum": 0, "maximum": 30}
        gbnf = schema_grammar(short)
        for seed in range(3):
            done, _ = run_to_done(engine, prompt, sampling=SamplingConfig(temperature=0.9, seed=seed),
                                  max_tokens=120, grammar=gbnf)
            assert done.stop_reason.value == "eog", done.text
            assert matches_cat(json.loads(done.text)), done.text
            assert done.summary.drafted > 0
    finally:
        engine.close()


def test_a_grammar_llama_cpp_rejects_is_one_clear_line(smollm2_q4_1):
    model = Model(smollm2_q4_1, gpu_layers=0)
    with pytest.raises(BadInput) as info:
        Grammar(model, 'root ::= "a" undefined-rule')
    assert str(info.value).startswith("grammar: ") and "\n" not in str(info.value)
    with pytest.raises(SpecError, match="grammar"):
        RunSpec(grammar="  ").validate()
    with pytest.raises(BadInput, match="schema"):
        schema_grammar("[1, 2")


# -- the server ---------------------------------------------------------------------------------

def test_response_format_errors_are_400s(tiny_target, tiny_draft):
    with serving(tiny_target, tiny_draft) as server:
        msgs = [{"role": "user", "content": "hi"}]
        cases = [({"type": "xml"}, "response_format.type", "text, json_object or json_schema"),
                 ({"type": "json_schema"}, "response_format.json_schema.schema", "schema object"),
                 ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
                     "a": {"$ref": "#/nowhere"}}}}}, "response_format.json_schema", "grammar|schema"),
                 ("json", "response_format", "must be an object")]
        for fmt, param, match in cases:
            status, _, body = request(server, "POST", "/v1/chat/completions",
                                      {"messages": msgs, "response_format": fmt, "max_tokens": 4})
            assert_error(status, body, 400, param, match)
        status, _, body = request(server, "POST", "/v1/completions",
                                  {"prompt": "x", "response_format": {"type": "json_object"}, "max_tokens": 8,
                                   "temperature": 0})
        assert status == 200, body
        both = {"messages": msgs, "response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}
        assert_error(*request(server, "POST", "/v1/chat/completions", both)[::2], 400, "grammar", "give one of")
        bad = {"prompt": "x", "grammar": 'root ::= "a" nowhere'}
        assert_error(*request(server, "POST", "/v1/completions", bad)[::2], 400, "grammar", "^grammar: ")
        bad = {"prompt": "x", "json_schema": {"type": "frobnicate"}}
        assert_error(*request(server, "POST", "/v1/completions", bad)[::2], 400, "json_schema", "schema")


def test_llama_servers_grammar_and_json_schema_fields(tiny_target, tiny_draft, one_llama_thread):
    """llama-server's own ``grammar`` (GBNF) and ``json_schema`` fields, on its native
    /completion and the OpenAI routes, with a draft model drafting."""
    flag = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
            "additionalProperties": False}
    with serving(tiny_target, tiny_draft) as server:
        for path, body in (("/v1/completions", {"prompt": "The quick brown fox"}),
                           ("/completion", {"prompt": "The quick brown fox"}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "The quick"}]})):
            got = []
            for extra in ({"grammar": 'root ::= ("yes" | "no") " fox"'}, {"json_schema": flag}):
                status, _, answer = request(server, "POST", path, body | extra | {"max_tokens": 40, "temperature": 0})
                assert status == 200, answer
                got.append(answer["content"] if path == "/completion" else
                           answer["choices"][0].get("text", answer["choices"][0].get("message", {}).get("content")))
            assert got[0] in ("yes fox", "no fox"), got
            assert isinstance(json.loads(got[1])["ok"], bool), got


def test_json_modes_through_the_openai_client_on_a_real_model(qwen):
    """json_object and json_schema (whole and streamed) on Qwen2.5-Coder-0.5B-Instruct with
    prompt lookup drafting: the answers parse, match the schema, and are the target-alone
    answer under the same grammar."""
    with serving(qwen, drafter="ngram", n_ctx=2048, model_id="qwen") as server:
        c = client(server, timeout=300)
        msgs = [{"role": "user", "content": 'Here is a cat: {"name": "Felix", "age": 3, "indoor": true}. Describe '
                                            "a cat called Tom the same way, as a JSON object."}]
        fmt = {"type": "json_schema", "json_schema": {"name": "cat", "schema": CAT, "strict": True}}
        spec = c.chat.completions.create(model="qwen", messages=msgs, response_format=fmt, temperature=0,
                                         max_tokens=80, extra_body={"speculative": {"draft_max": 4}})
        assert matches_cat(json.loads(spec.choices[0].message.content))
        assert spec.model_extra["timings"]["draft_n"] > 0
        alone = c.chat.completions.create(model="qwen", messages=msgs, response_format=fmt, temperature=0,
                                          max_tokens=80, extra_body={"speculative": {"enabled": False}})
        assert alone.choices[0].message.content == spec.choices[0].message.content
        streamed = c.chat.completions.create(model="qwen", messages=msgs, response_format=fmt, temperature=0,
                                             max_tokens=80, stream=True)
        text = "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices)
        assert matches_cat(json.loads(text))
        parsed = c.chat.completions.parse(model="qwen", messages=msgs, response_format=Cat, temperature=0,
                                          max_tokens=80)
        cat = parsed.choices[0].message.parsed
        assert isinstance(cat, Cat) and isinstance(cat.age, int)
        obj = c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "List three colours."}],
                                        response_format={"type": "json_object"}, temperature=0.7, seed=1,
                                        max_tokens=120)
        assert obj.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(obj.choices[0].message.content), dict)
        with pytest.raises(openai.BadRequestError):
            c.chat.completions.create(model="qwen", messages=msgs, max_tokens=4,
                                      response_format={"type": "json_schema", "json_schema": {"name": "x"}})
