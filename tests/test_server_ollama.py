"""Ollama's API on `localspec serve` (``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``,
``/api/ps``, ``/api/version``), driven by the official ``ollama`` client: chat and generate,
whole and streamed (one JSON object a line), tool calls, JSON formats, fill in the middle and
the "load" call, on the real Qwen2.5-Coder-0.5B-Instruct with speculation on; requests read
into the chat route's exactly (the same greedy answer); errors as Ollama words them."""

from __future__ import annotations

import http.client
import json
import re

import ollama
import pytest
from test_server import request, serving
from test_tools import WEATHER, qwen_coder_path

from localspec.engine import Done, StopReason, Summary
from localspec.server import ollama as ollama_api
from localspec.server.errors import ApiError
from localspec.server.tools import HERMES, CallReader

GREEDY = {"temperature": 0}


# -- the request, read into a chat or text completion request ---------------------------------------

def test_chat_and_generate_become_the_chat_and_completion_requests():
    body = {"model": "qwen:latest", "keep_alive": "5m", "format": "json", "tools": [WEATHER],
            "options": {"temperature": 0.2, "top_k": 20, "num_predict": 64, "stop": ["END"], "seed": 3,
                        "num_ctx": 8192, "num_gpu": 99, "repeat_penalty": 1.0},
            "messages": [{"role": "user", "content": "Weather in Oslo?"},
                         {"role": "assistant", "content": "", "thinking": "hmm",
                          "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
                         {"role": "tool", "content": "rain", "tool_name": "get_weather"}]}
    chat = ollama_api.chat_request(body)
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "reasoning_content": "hmm",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "rain", "name": "get_weather"}]
    assert (chat["temperature"], chat["top_k"], chat["max_tokens"], chat["stop"], chat["seed"]) == (0.2, 20, 64,
                                                                                                  ["END"], 3)
    assert chat["stream"] is True and chat["response_format"] == {"type": "json_object"} and chat["tools"] == [WEATHER]
    assert chat["repeat_penalty"] == 1.0 and "num_ctx" not in chat
    assert "max_tokens" not in ollama_api.chat_request({"messages": [], "options": {"num_predict": -1}})
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert ollama_api.chat_request({"messages": [], "format": schema})["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "output", "schema": schema}}

    kind, gen = ollama_api.generate_request({"prompt": "Hi", "system": "Be brief.", "stream": False})
    assert kind == "chat" and gen["messages"] == [{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Hi"}] and gen["stream"] is False
    assert ollama_api.generate_request({"prompt": "def f():", "raw": True}) == ("completions", {
        "stream": True, "prompt": "def f():"})
    assert ollama_api.generate_request({"prompt": "a", "suffix": "b"})[1]["suffix"] == "b"
    assert ollama_api.loading({"model": "m"}, chat=False) and ollama_api.loading({"messages": []}, chat=True)
    assert not ollama_api.loading({"prompt": "x"}, chat=False)


@pytest.mark.parametrize("route, body, param, match", [
    ("chat", {"messages": [{"role": "user", "content": "x", "images": ["AA=="]}]}, "messages[0].images", "images"),
    ("chat", {"messages": [], "think": "max"}, "think", "true, false or one of high"),
    ("chat", {"messages": [], "options": {"num_predict": 0}}, "options.num_predict", "at least 1"),
    ("chat", {"messages": [], "options": {"tfs_z": 0.5}}, "options.tfs_z", "not an option"),
    ("chat", {"messages": [], "format": "xml"}, "format", "json"),
    ("chat", {"messages": [], "prompt": "x"}, "prompt", "refused rather than ignored"),
    ("generate", {"prompt": "x", "template": "{{ .Prompt }}"}, "template", "own template"),
    ("generate", {"prompt": "x", "context": [1, 2]}, "context", "old context"),
    ("generate", {"prompt": "x", "raw": True, "system": "s"}, "system", "no system"),
])
def test_what_cannot_be_answered_is_a_400_naming_the_field(route, body, param, match):
    with pytest.raises(ApiError) as err:
        ollama_api.chat_request(body) if route == "chat" else ollama_api.generate_request(body)
    assert err.value.status == 400 and err.value.param == param and re.search(match, err.value.message), err.value


def test_the_answer_in_ollamas_shape_whole_and_streamed():
    s = Summary(n_prompt=30, n_cached=10, n_generated=5, prompt_seconds=0.5, generation_seconds=2.0)
    whole = ollama_api.OllamaShape("m", chat=False).whole(Done(s, "Hi.", (), StopReason.MAX_TOKENS))
    assert whole["response"] == "Hi." and whole["done"] and whole["done_reason"] == "length"
    assert (whole["prompt_eval_count"], whole["eval_count"], whole["eval_duration"], whole["total_duration"]) == (
        20, 5, 2_000_000_000, 2_500_000_000)
    text = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    reader = CallReader(HERMES, frozenset({"get_weather"}))
    called = ollama_api.OllamaShape("m", True, reader).whole(Done(s, text, (), StopReason.EOG))
    assert called["message"] == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]} and called["done_reason"] == "stop"
    shape = ollama_api.OllamaShape("m", True, reader)
    raw = shape.head() + [shape.piece(text[i:i + 7]) for i in range(0, len(text), 7)] + shape.tail(
        Done(s, text, (), StopReason.EOG))
    lines = [json.loads(x) for x in b"".join(raw).splitlines()]
    assert all(not x["done"] for x in lines[:-1]) and lines[-1]["done"] and lines[-1]["message"]["content"] == ""
    assert "".join(x["message"]["content"] for x in lines) == "Let me check."
    assert [c for x in lines for c in x["message"].get("tool_calls", [])] == called["message"]["tool_calls"]
    assert json.loads(shape.error(ApiError(503, "bye"))) == {"error": "bye"}


# -- the official client on a real model ----------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_ollama():
    with serving(qwen_coder_path(), drafter="ngram", n_ctx=2048, model_id="qwen") as server:
        yield server


def _ndjson(server, path: str, body: dict) -> list[dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in resp.read().splitlines() if x.strip()]
    conn.close()
    return lines


def test_a_greedy_answer_is_the_chat_routes_whole_and_streamed(qwen_ollama):
    """Each read from scratch (``cache_prompt: false``; a Q4_K_M model's near-ties may fall
    either way with a cached prefix), /api/chat and /api/generate give the chat route's text."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three rivers."}]
    options = {"temperature": 0, "num_predict": 24}
    _, _, chat = request(qwen_ollama, "POST", "/v1/chat/completions", {
        "messages": msgs, "temperature": 0, "max_tokens": 24, "cache_prompt": False})
    want = chat["choices"][0]["message"]["content"]
    reason = chat["choices"][0]["finish_reason"]
    status, _, whole = request(qwen_ollama, "POST", "/api/chat", {
        "model": "qwen", "messages": msgs, "options": options, "stream": False, "cache_prompt": False})
    assert status == 200 and whole["message"] == {"role": "assistant", "content": want}
    assert whole["done"] and whole["done_reason"] == reason
    assert whole["eval_count"] == chat["usage"]["completion_tokens"]
    assert whole["timings"]["drafter"] == "ngram"
    lines = _ndjson(qwen_ollama, "/api/chat", {"model": "qwen", "messages": msgs, "options": options,
                                               "cache_prompt": False})
    assert "".join(x["message"]["content"] for x in lines) == want and lines[-1]["done_reason"] == reason
    status, _, gen = request(qwen_ollama, "POST", "/api/generate", {
        "model": "qwen", "system": "Be brief.", "prompt": "Name three rivers.", "options": options, "stream": False,
        "cache_prompt": False})
    assert status == 200 and gen["response"] == want


def test_the_official_client(qwen_ollama):
    c = ollama.Client(host=qwen_ollama.url, timeout=300)
    assert [m.model for m in c.list().models] == ["qwen"] and c.list().models[0].details.family == "qwen2"
    assert c.list().models[0].details.quantization_level == "Q4_K_M"
    shown = c.show("qwen")
    assert {"completion", "tools", "insert"} <= set(shown.capabilities) and "tools" in shown.template
    assert c.ps().models[0].context_length == 2048
    assert request(qwen_ollama, "GET", "/api/version")[2]["version"]
    assert c.chat(model="qwen", messages=[]).done_reason == "load"
    assert c.generate(model="qwen").done_reason == "load"

    ask = dict(model="qwen", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=[WEATHER],
               options=GREEDY | {"num_predict": 80})
    r = c.chat(**ask)
    assert r.message.tool_calls and r.message.tool_calls[0].function.name == "get_weather"
    assert r.message.tool_calls[0].function.arguments["city"].lower() == "paris"
    streamed = [call for part in c.chat(**ask, stream=True) for call in part.message.tool_calls or []]
    # (the client cannot send cache_prompt: the second read of this prompt reuses its prefix, so
    # a near-tie on whether a second call follows may fall the other way; the first call is compared)
    assert (streamed[0].function.name, streamed[0].function.arguments) == (
        r.message.tool_calls[0].function.name, r.message.tool_calls[0].function.arguments)

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    shaped = c.chat(model="qwen", messages=[{"role": "user", "content": "Give a JSON object with n, an integer."}],
                    format=schema, options=GREEDY | {"num_predict": 30})
    assert isinstance(json.loads(shaped.message.content)["n"], int)
    raw = c.generate(model="qwen", prompt="def add(a, b):", raw=True, options=GREEDY | {"num_predict": 8})
    assert raw.response and raw.eval_count == 8 and raw.done_reason == "length"
    filled = c.generate(model="qwen", prompt="def add(a, b):\n    ", suffix="\n\nprint(add(1, 2))\n",
                        options=GREEDY | {"num_predict": 12})
    assert "a + b" in filled.response

    with pytest.raises(ollama.ResponseError) as err:
        c.chat(model="qwen", messages=[{"role": "user", "content": "hi"}], options={"mirostat": 2})
    assert err.value.status_code == 400 and "mirostat" in err.value.error
    _, _, body = request(qwen_ollama, "GET", "/metrics")
    assert re.search(r'localspec_requests_total\{endpoint="ollama",outcome="bad_request"\} [1-9]', body)
    assert re.search(r'localspec_requests_total\{endpoint="ollama",outcome="(stop|length)"\} [1-9]', body)
