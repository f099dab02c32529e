"""`localspec serve` as a drop-in for OpenAI clients, browsers and llama-server clients: any
model name, CORS, llama-server's per-request fields and its own routes (/props, /slots,
/tokenize, /detokenize, /completion, /v1/health), and streamed usage as OpenAI sends it.
OpenAI-shaped calls go through the official client; raw HTTP where a client would hide what
is tested (headers, preflights, llama-server's routes)."""

from __future__ import annotations

import json

import openai
import pytest
from test_server import client, request, serving  # one server harness for both files

PROMPT = "The quick brown fox"


def events(text: str) -> list:
    """The data of each server-sent event."""
    return [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]


def assert_error(status, body, want_status, param=None, match=""):
    assert status == want_status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "\n" not in err["message"] and match in err["message"], err["message"]
    if param is not None:
        assert err["param"] == param


@pytest.fixture(scope="module")
def tiny(tiny_target, tiny_draft):
    with serving(tiny_target, tiny_draft) as server:
        yield server


def complete(server, **body):
    status, _, out = request(server, "POST", "/v1/completions", {"prompt": PROMPT, "temperature": 0} | body)
    assert status == 200, out
    return out


# -- model names ----------------------------------------------------------------------------------

def test_any_model_name_is_answered_by_the_pair(tiny, tiny_target, tiny_draft):
    c = client(tiny)
    r = c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert r.model == "tiny" and r.choices[0].message.content is not None
    r = c.completions.create(model="llama3", prompt=PROMPT, max_tokens=3)
    assert r.model == "tiny"
    assert c.models.retrieve("gpt-4o-mini").id == "tiny"
    models = c.models.list().data
    assert [m.id for m in models] == ["tiny"]
    meta = models[0].model_extra["meta"]
    assert meta["target_file"] == str(tiny_target) and meta["draft_file"] == str(tiny_draft)
    assert meta["drafter"] == "model"
    status, _, body = request(tiny, "POST", "/v1/completions", {"prompt": "hi", "model": 7})
    assert_error(status, body, 400, "model", "model must be a string")


def test_strict_model_refuses_other_names(tiny_target):
    with serving(tiny_target, drafter="none", strict_model=True) as server:
        c = client(server)
        with pytest.raises(openai.NotFoundError, match="not served here"):
            c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve("gpt-4o-mini")
        assert c.completions.create(model="tiny", prompt="hi", max_tokens=2).model == "tiny"


# -- CORS -----------------------------------------------------------------------------------------

def preflight(server, origin, path="/v1/chat/completions"):
    return request(server, "OPTIONS", path, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})


def cors_headers(headers) -> dict:
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("access-control-")}


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1:3000", "http://[::1]:8080",
                                    "http://localhost"])
def test_loopback_preflight_passes(tiny, origin):
    status, headers, _ = preflight(tiny, origin)
    assert status == 200
    h = cors_headers(headers)
    assert h["access-control-allow-origin"] == origin
    assert "POST" in h["access-control-allow-methods"]
    assert "authorization" in h["access-control-allow-headers"]
    status, headers, _ = request(tiny, "GET", "/v1/models", headers={"Origin": origin})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == origin


@pytest.mark.parametrize("origin", ["https://evil.example", "http://localhost.evil.example",
                                    "http://127.0.0.1.evil.example:80", "null"])
def test_other_origins_get_no_cors_headers(tiny, origin):
    status, headers, body = preflight(tiny, origin)
    assert_error(status, body, 403, match=f"--cors {origin}")
    assert cors_headers(headers) == {}
    status, headers, _ = request(tiny, "GET", "/v1/models", headers={"Origin": origin})
    assert status == 200 and cors_headers(headers) == {}


def test_cors_option_widens(tiny_target):
    with serving(tiny_target, drafter="none", cors=("https://app.example",), api_key="k") as server:
        status, headers, _ = preflight(server, "https://app.example")   # no key on a preflight
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert preflight(server, "http://localhost:8000")[0] == 200    # loopback stays allowed
        assert preflight(server, "https://other.example")[0] == 403
        status, headers, body = request(server, "GET", "/v1/models", headers={"Origin": "https://app.example"})
        assert_error(status, body, 401)                                   # the key still applies...
        assert headers["Access-Control-Allow-Origin"] == "https://app.example"   # ...and the page can read why
    with serving(tiny_target, drafter="none", cors=("*",)) as server:
        status, headers, _ = preflight(server, "https://anywhere.example")
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "*"


# -- llama-server's per-request fields ----------------------------------------------------------

def test_flat_speculative_fields_set_the_run(tiny):
    """speculative.n_max/n_min/p_min set draft_max/draft_min/p_min: the answer is the same text,
    drafted as asked, and /completion reports the settings it ran with."""
    base = complete(tiny, max_tokens=30, speculative={"enabled": False})
    flat = complete(tiny, max_tokens=30, **{"speculative.n_max": 3, "speculative.n_min": 2, "speculative.p_min": 0.0})
    assert flat["choices"][0]["text"] == base["choices"][0]["text"]
    assert flat["timings"]["drafter"] == "model" and flat["timings"]["draft_n"] > 0
    status, _, out = request(tiny, "POST", "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0,
                                                           "speculative.n_max": 3, "speculative.n_min": 2,
                                                           "speculative.p_min": 0.25})
    assert status == 200, out
    settings = out["generation_settings"]
    assert (settings["speculative.n_max"], settings["speculative.n_min"], settings["speculative.p_min"]) == (3, 2, 0.25)
    assert settings["speculative.adaptive"] is False    # a length given alone is every round's, as draft_max
    nested = request(tiny, "POST", "/completion", {"prompt": PROMPT, "n_predict": 2,
                                                   "speculative": {"n_max": 5, "adaptive": True}})[2]
    assert nested["generation_settings"]["speculative.n_max"] == 5
    assert nested["generation_settings"]["speculative.adaptive"] is True


@pytest.mark.parametrize("body,param,match", [
    ({"speculative.n_max": 0}, "speculative.n_max", "speculative.n_max must be at least 1"),
    ({"speculative.n_min": 5, "speculative.n_max": 3}, "speculative.n_min", "speculative.n_min (5) is larger"),
    ({"speculative.p_min": 1.5}, "speculative.p_min", "speculative.p_min must be in"),
    ({"speculative.n_draft": 4}, "speculative.n_draft", "not a speculation setting"),
    ({"speculative": {"n_probs": 2}}, "speculative.n_probs", "not a speculation setting"),
    ({"speculative": {"n_max": 4}, "speculative.n_max": 4}, "speculative.n_max", "sent twice"),
    ({"speculative": {"draft_max": 4, "n_max": 4}}, "speculative.n_max", "set the same thing"),
    ({"n_predict": 5, "max_tokens": 6}, "n_predict", "disagree"),
    ({"cache_prompt": "yes"}, "cache_prompt", "true or false"),
    ({"id_slot": 3}, "id_slot", "one slot"),
])
def test_bad_llama_server_fields(tiny, body, param, match):
    for path in ("/v1/completions", "/completion"):
        status, _, out = request(tiny, "POST", path, {"prompt": "hi"} | body)
        assert_error(status, out, 400, param, match)


def test_n_predict(tiny):
    assert complete(tiny, n_predict=5)["usage"]["completion_tokens"] == 5
    # 0: llama-server's endpoints read the prompt only (an editor's cache warm-up); OpenAI's refuse it
    warm = request(tiny, "POST", "/completion", {"prompt": PROMPT + " and more", "n_predict": 0,
                                                 "response_fields": ["content", "tokens_predicted"]})[2]
    assert warm == {"content": "", "tokens_predicted": 0}
    assert complete(tiny, max_tokens=3, prompt=PROMPT + " and more")["timings"]["cache_n"] > 0
    for field in ("n_predict", "max_tokens"):
        status, _, out = request(tiny, "POST", "/v1/completions", {"prompt": "hi", field: 0})
        assert_error(status, out, 400, field, f"{field} must be at least 1")
    assert complete(tiny, n_predict=5, max_tokens=5)["usage"]["completion_tokens"] == 5   # agreeing is fine
    with serving(tiny.ctx.engine.config.target, drafter="none", n_ctx=48) as small:
        for field in ("n_predict", "max_tokens"):                # -1, llama-server's "no limit": the room left
            out = complete(small, **{field: -1})
            assert out["choices"][0]["finish_reason"] == "length"
            assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] >= 47


def test_cache_prompt_and_id_slot(tiny):
    complete(tiny, max_tokens=4)
    again = complete(tiny, max_tokens=4, id_slot=0)
    assert again["timings"]["cache_n"] > 0                     # the default reuses the prefix
    fresh = complete(tiny, max_tokens=4, cache_prompt=False, id_slot=-1)
    assert fresh["timings"]["cache_n"] == 0 and fresh["timings"]["prompt_n"] == fresh["usage"]["prompt_tokens"]
    assert fresh["choices"][0]["text"] == again["choices"][0]["text"]


# -- nothing silently ignored ---------------------------------------------------------------------

@pytest.mark.parametrize("path,body,status,param,match", [
    ("/v1/completions", {"prompt": "hi", "frobnicate": 1}, 400, "frobnicate", "refused rather than ignored"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "prompt": "x"}, 400, "prompt",
     "it takes messages"),
    ("/v1/completions", {"prompt": "hi", "messages": []}, 400, "messages", "it takes prompt"),
    ("/v1/completions", {"prompt": "hi", "typical_p": 0.9}, 400, "typical_p", "only its off value"),
    ("/v1/completions", {"prompt": "hi", "mirostat": 2}, 400, "mirostat", "not supported"),
    ("/v1/completions", {"prompt": "hi", "ignore_eos": True}, 400, "ignore_eos", "not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "reasoning_format": "deepseek-legacy"},
     400, "reasoning_format", "must be one of auto, deepseek, none"),
    ("/v1/completions", {"prompt": "hi", "samplers": "tkpm"}, 400, "samplers", "in that order"),
    ("/v1/completions", {"prompt": "hi", "samplers": ["top_k", "magic"]}, 400, "samplers", "'magic'"),
    ("/v1/completions", {"prompt": "hi", "stream_options": {"include_usage": True, "x": 1}}, 400,
     "stream_options", "include_usage"),
    ("/v1/completions", {"prompt": "hi", "user": 5}, 400, "user", "string"),
    ("/completion", {"prompt": "hi", "stream": True, "stream_options": {"include_usage": True}}, 400,
     "stream_options", "last event has the token counts"),
])
def test_unknown_and_unsupported_fields_are_refused(tiny, path, body, status, param, match):
    s, _, out = request(tiny, "POST", path, body)
    assert_error(s, out, status, param, match)


def test_llama_server_off_values_are_accepted(tiny):
    """What llama.cpp's own clients send with their samplers off, and the fields that only tune
    a sampler that is off, ask for nothing this server does not do."""
    off = {"repeat_penalty": 1.0, "typical_p": 1, "dynatemp_range": 0, "dynatemp_exponent": 1.0,
           "xtc_probability": 0, "xtc_threshold": 0.1, "dry_multiplier": 0, "dry_base": 1.75, "mirostat": 0,
           "top_n_sigma": -1, "timings_per_token": False, "samplers": "edkypmxt", "user": "me",
           "presence_penalty": 0, "logit_bias": [], "cache_prompt": True, "reasoning_format": "none",
           "backend_sampling": False}
    out = complete(tiny, max_tokens=5, **off)
    assert out["choices"][0]["text"] == complete(tiny, max_tokens=5)["choices"][0]["text"]
    assert complete(tiny, max_tokens=2, samplers=["penalties", "top_k", "top_p", "min_p", "temperature"])


# -- llama-server's routes ------------------------------------------------------------------------

def test_props_and_slots(tiny, tiny_target):
    status, _, props = request(tiny, "GET", "/props")
    assert status == 200
    gen = props["default_generation_settings"]
    assert gen["n_ctx"] == 512 and gen["speculative"] is True and gen["is_processing"] is False
    params = gen["params"]
    assert params["n_predict"] == -1 and params["temperature"] == 0.8 and params["top_k"] == 40
    assert params["speculative.n_max"] == 8 and params["speculative.n_min"] == 1
    assert params["speculative.drafter"] == "model" and params["speculative.adaptive"] is True
    assert props["total_slots"] == 1 and props["model_path"] == str(tiny_target)
    assert props["model_alias"] == "tiny" and isinstance(props["chat_template"], str)
    assert props["localspec"]["drafters"] == ["model", "ngram", "ngram+model", "none"]
    status, _, slots = request(tiny, "GET", "/slots")
    assert status == 200 and [s["id"] for s in slots] == [0] and slots[0]["is_processing"] is False
    assert slots[0]["params"]["speculative.n_max"] == 8


def test_tokenize_and_detokenize(tiny):
    model = tiny.ctx.engine.target_model
    status, _, out = request(tiny, "POST", "/tokenize", {"content": PROMPT})
    assert status == 200 and out["tokens"] == model.tokenize(PROMPT, add_special=False) and out["tokens"]
    with_bos = request(tiny, "POST", "/tokenize", {"content": PROMPT, "add_special": True})[2]["tokens"]
    assert with_bos == model.tokenize(PROMPT, add_special=True)
    pieces = request(tiny, "POST", "/tokenize", {"content": PROMPT, "with_pieces": True})[2]["tokens"]
    assert [p["id"] for p in pieces] == out["tokens"]
    assert "".join(p["piece"] for p in pieces if isinstance(p["piece"], str)).strip() == PROMPT
    status, _, back = request(tiny, "POST", "/detokenize", {"tokens": out["tokens"]})
    assert status == 200 and back["content"].strip() == PROMPT
    assert_error(*request(tiny, "POST", "/tokenize", {"content": "x", "bos": True})[::2], 400, "bos", "/tokenize")
    assert_error(*request(tiny, "POST", "/tokenize", {"content": 3})[::2], 400, "content", "must be a str")
    assert_error(*request(tiny, "POST", "/tokenize", {})[::2], 400, "content", "missing")
    assert_error(*request(tiny, "POST", "/detokenize", {"tokens": [1, -1]})[::2], 400, "tokens", "must be in")


def test_native_completion_returns_token_ids(tiny):
    """``return_tokens``: a whole answer's ``tokens`` are its generated ids; streamed, each
    event carries its own text's ids (llama-server sends them whether asked or not)."""
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0}
    plain = request(tiny, "POST", "/completion", body)[2]
    assert plain["tokens"] == []
    out = request(tiny, "POST", "/completion", body | {"return_tokens": True})[2]
    assert len(out["tokens"]) == out["tokens_predicted"] == 12 and out["content"] == plain["content"]
    assert request(tiny, "POST", "/detokenize", {"tokens": out["tokens"]})[2]["content"] == out["content"]
    text = request(tiny, "POST", "/completion", body | {"stream": True})[2]
    data = [json.loads(e) for e in events(text)]
    assert all(d["tokens"] for d in data[:-1]) and data[-1]["tokens"] == []
    assert [t for d in data for t in d["tokens"]] == out["tokens"]
    status, _, err = request(tiny, "POST", "/completion", body | {"return_tokens": "yes"})
    assert_error(status, err, 400, "return_tokens", "true or false")
    status, _, err = request(tiny, "POST", "/v1/completions", body | {"return_tokens": True})
    assert_error(status, err, 400, "return_tokens", "only its off value")


def test_native_completion(tiny):
    want = complete(tiny, max_tokens=12)["choices"][0]["text"]
    status, _, out = request(tiny, "POST", "/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 0})
    assert status == 200, out
    assert out["content"] == want and out["stop"] is True and out["stop_type"] == "limit"
    assert out["tokens_predicted"] == 12 and out["tokens_evaluated"] > 0 and out["model"] == "tiny"
    assert out["prompt"] == PROMPT and out["id_slot"] == 0
    t = out["timings"]
    assert t["predicted_n"] == 12 and t["prompt_n"] + t["cache_n"] == out["tokens_evaluated"]

    status, headers, text = request(tiny, "POST", "/completion", {"prompt": PROMPT, "n_predict": 12,
                                                                  "temperature": 0, "stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    data = [json.loads(e) for e in events(text)]                # llama-server sends no [DONE]
    assert all(d["stop"] is False for d in data[:-1]) and data[-1]["stop"] is True
    assert "".join(d["content"] for d in data) == want
    assert data[-1]["timings"]["predicted_n"] == 12 and data[-1]["stop_type"] == "limit"

    stop = want[4:7]
    out = request(tiny, "POST", "/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 0,
                                                 "stop": [stop]})[2]
    assert out["stop_type"] == "word" and out["stopping_word"] == stop and want.startswith(out["content"])
    assert_error(*request(tiny, "POST", "/completion", {"prompt": "hi", "messages": []})[::2], 400, "messages")


def test_health_routes(tiny_target):
    with serving(tiny_target, drafter="none", api_key="k") as server:
        for path in ("/health", "/v1/health"):
            status, _, body = request(server, "GET", path)
            assert status == 200 and body["status"] == "ok"
        assert request(server, "GET", "/props")[0] == 401


# -- streamed usage -------------------------------------------------------------------------------

def test_streamed_usage_as_openai_sends_it(tiny):
    """Usage only in a last chunk without choices, and only when include_usage asks for it
    (every other chunk then says "usage": null); the timings in the finish_reason chunk."""
    c = client(tiny)
    chunks = list(c.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, temperature=0, stream=True))
    assert all(ch.usage is None and "usage" not in ch.model_fields_set for ch in chunks)
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].model_extra["timings"]["predicted_n"] == 4
    msgs = [{"role": "user", "content": "hi"}]
    chunks = list(c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert all(ch.usage is None and "usage" in ch.model_fields_set for ch in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    assert chunks[-2].model_extra["timings"]["predicted_n"] == chunks[-1].usage.completion_tokens
