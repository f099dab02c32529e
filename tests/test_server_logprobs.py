"""Log-probabilities through `localspec serve`, in each endpoint's own shape, read by the
official openai client: chat's ``logprobs``/``top_logprobs``, text completion's ``logprobs:
N``, llama-server's ``n_probs``; streamed pieces carry their own tokens' entries, and the
figures are the target's whether or not the server speculates."""

from __future__ import annotations

import json

import pytest
from test_server import client, request, serving
from test_server_compat import assert_error, events

QUESTION = [{"role": "user", "content": "Name three colours."}]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def smol(smollm2_f16, smollm2_q4_1):
    with serving(smollm2_f16, smollm2_q4_1, model_id="smollm2") as server:
        yield server


def test_chat_logprobs_whole_and_streamed(smol):
    c = client(smol)
    kw = dict(model="smollm2", messages=QUESTION, temperature=0, max_tokens=16, logprobs=True, top_logprobs=3)
    r = c.chat.completions.create(**kw)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert bytes(b for e in content for b in e.bytes).decode() == r.choices[0].message.content
    for e in content:       # greedy: each token is its position's most likely one
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token and e.logprob <= 0
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob)
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
    chunks = list(c.chat.completions.create(**kw, stream=True))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]
    # (the same text; the figures up to batch rounding: this request reads its prompt from the cache)
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=0.05)

    alone = c.chat.completions.create(**kw, extra_body={"speculative": {"enabled": False}})
    assert alone.choices[0].message.content == r.choices[0].message.content
    assert [e.logprob for e in alone.choices[0].logprobs.content] == pytest.approx([e.logprob for e in content],
                                                                                 abs=0.05)
    plain = c.chat.completions.create(model="smollm2", messages=QUESTION, temperature=0, max_tokens=4)
    assert plain.choices[0].logprobs is None


def test_text_completion_logprobs(smol):
    c = client(smol)
    kw = dict(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=12, logprobs=2)
    r = c.completions.create(**kw)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.token_logprobs) == r.usage.completion_tokens
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(1 <= len(top) <= 2 and max(top.values()) == pytest.approx(v) for top, v in
               zip(lp.top_logprobs, lp.token_logprobs))
    chunks = list(c.completions.create(**kw, stream=True))
    got = [x for ch in chunks if ch.choices[0].logprobs for x in ch.choices[0].logprobs.tokens]
    offsets = [x for ch in chunks if ch.choices[0].logprobs for x in ch.choices[0].logprobs.text_offset]
    assert got == lp.tokens and offsets == lp.text_offset


def test_llama_server_n_probs(smol):
    body = {"prompt": PROMPT, "n_predict": 10, "temperature": 0, "n_probs": 2}
    status, _, out = request(smol, "POST", "/completion", body)
    assert status == 200, out
    probs = out["completion_probabilities"]
    assert len(probs) == out["tokens_predicted"] == 10
    assert "".join(p["token"] for p in probs) == out["content"]
    assert all(len(p["top_logprobs"]) == 2 and p["top_logprobs"][0]["id"] == p["id"] for p in probs)
    status, _, text = request(smol, "POST", "/completion", body | {"stream": True})
    data = [json.loads(e) for e in events(text)]
    assert [p["id"] for d in data[:-1] for p in d["completion_probabilities"]] == [p["id"] for p in probs]
    assert all([p["id"] for p in d["completion_probabilities"]] == d["tokens"] for d in data[:-1])
    assert "completion_probabilities" not in request(smol, "POST", "/completion", body | {"n_probs": 0})[2]


@pytest.mark.parametrize("path,body,param,match", [
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
    ("/v1/chat/completions", {"logprobs": 2}, "logprobs", "true or false"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "from 0 to 20"),
    ("/v1/chat/completions", {"n_probs": 2}, "n_probs", "/completion's field"),
    ("/v1/completions", {"top_logprobs": 2}, "top_logprobs", "chat's field"),
    ("/completion", {"logprobs": 2}, "logprobs", "takes n_probs"),
    ("/v1/chat/completions", {"logprobs": True, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {}}}}]}, "logprobs", "tools"),
])
def test_logprobs_fields_out_of_place_are_refused(smol, path, body, param, match):
    prompt = {"messages": QUESTION} if "chat" in path else {"prompt": PROMPT}
    status, _, out = request(smol, "POST", path, prompt | body)
    assert_error(status, out, 400, param, match)
