"""Anthropic's Messages API on `localspec serve` (``/v1/messages``, ``/v1/messages/count_tokens``),
driven by the official ``anthropic`` client: text and tool use, whole and streamed, on the
real Qwen2.5-Coder-0.5B-Instruct (whose template takes tools) with speculation on; requests
read into the chat route's exactly (the same greedy answer); errors in Anthropic's shape;
the API key as ``x-api-key``; and llama-server's routes without ``/v1``."""

from __future__ import annotations

import json
import re

import anthropic
import pytest
from test_server import client, request, serving
from test_tools import qwen_coder_path

from localspec.server import anthropic as messages_api
from localspec.server.errors import ApiError

WEATHER = {"name": "get_weather", "description": "Get the current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                            "required": ["city"]}}
TIME = {"name": "get_time", "description": "Get the current local time in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
# The current SDK has no temperature argument: clients send it in the body. Each request reads
# its prompt from scratch: a Q4_K_M model's near-ties may fall either way with a cached prefix.
GREEDY = {"temperature": 0, "cache_prompt": False}
KEY = "secret-key"


def assert_anthropic_error(status, body, want_status, kind, match=""):
    assert status == want_status, body
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind and "\n" not in body["error"]["message"]
    assert re.search(match, body["error"]["message"]), body["error"]["message"]


# -- the request, read into a chat request ------------------------------------------------------

def test_a_conversation_with_tool_use_becomes_the_chat_request():
    system = [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]
    body = {"model": "m", "max_tokens": 64, "system": system,
            "stop_sequences": ["END"], "metadata": {"user_id": "u1"}, "tools": [WEATHER],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}, "thinking": {"type": "adaptive"},
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "...", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "rain"}]},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such city", "is_error": True},
                    {"type": "text", "text": "And tomorrow?"}]}]}
    chat = messages_api.to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "...", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "rain"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such city"},
        {"role": "user", "content": "And tomorrow?"}]
    fn = {"name": "get_weather", "parameters": WEATHER["input_schema"], "description": WEATHER["description"]}
    assert chat["tools"] == [{"type": "function", "function": fn}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert (chat["max_tokens"], chat["stop"], chat["user"], chat["model"]) == (64, ["END"], "u1", "m")
    assert messages_api.to_chat(body | {"tool_choice": {"type": "tool", "name": "get_weather"}})["tool_choice"] == {
        "type": "function", "function": {"name": "get_weather"}}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = messages_api.to_chat(body | {"output_config": {"format": {"type": "json_schema", "schema": schema},
                                                         "effort": "low"}})["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


@pytest.mark.parametrize("change, param, match", [
    ({"max_tokens": None}, "max_tokens", "required"),
    ({"max_tokens": 0}, "max_tokens", ">= 1"),
    ({"messages": []}, "messages", "non-empty"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "user"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0]",
     "image blocks are not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "messages[0].content[0]", "user turn cannot hold"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]", "server tools"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice", "auto"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking", "not supported"),
    ({"output_config": {"format": {"type": "json_object"}}}, "output_config.format", "json_schema"),
    ({"stop_sequences": "END"}, "stop_sequences", "list of strings"),
    ({"container": "c1"}, "container", "refused rather than ignored"),
])
def test_what_cannot_be_answered_is_a_400_naming_the_field(change, param, match):
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]} | change
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ApiError) as err:
        messages_api.to_chat(body)
    assert err.value.status == 400 and err.value.param == param and re.search(match, err.value.message), err.value
    assert messages_api.error_body(err.value) == {"type": "error", "error": {"type": "invalid_request_error",
                                                                            "message": err.value.message}}


def test_count_tokens_takes_no_max_tokens():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert "max_tokens" not in messages_api.to_chat(body, count=True)
    with pytest.raises(ApiError, match="max_tokens"):
        messages_api.to_chat(body | {"max_tokens": 8}, count=True)


def _events(raw: list[bytes]) -> list[tuple[str, dict]]:
    out = []
    for chunk in b"".join(raw).split(b"\n\n"):
        if chunk:
            name, data = chunk.split(b"\n", 1)
            out.append((name.removeprefix(b"event: ").decode(), json.loads(data.removeprefix(b"data: "))))
    return out


def test_the_answer_in_anthropics_shape_whole_and_streamed():
    """Stop reasons by why the answer ended; streamed text and a tool call as Anthropic's blocks
    (a text block, then a tool_use block with its arguments as input_json_delta), the stop
    reason and usage in message_delta."""
    from localspec.engine import Done, StopReason, Summary
    from localspec.server.tools import HERMES, CallReader

    s = Summary(n_prompt=30, n_cached=10, n_generated=5)
    text = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    whole = {}
    for reason, want in [(StopReason.EOG, "end_turn"), (StopReason.MAX_TOKENS, "max_tokens"),
                         (StopReason.CONTEXT_FULL, "model_context_window_exceeded")]:
        whole[reason] = messages_api.MessageShape("7", "m", 30).whole(Done(s, "Hi.", (), reason))
        assert whole[reason]["stop_reason"] == want and whole[reason]["content"] == [{"type": "text", "text": "Hi."}]
    assert whole[StopReason.EOG]["usage"] == {"input_tokens": 20, "cache_read_input_tokens": 10,
                                              "cache_creation_input_tokens": 0, "output_tokens": 5}
    stop = messages_api.MessageShape("7", "m", 30, stopping=lambda done: "END")
    assert stop.whole(Done(s, "Hi.", (), StopReason.STOP_STRING))["stop_sequence"] == "END"

    reader = CallReader(HERMES, frozenset({"get_weather"}))
    called = messages_api.MessageShape("7", "m", 30, reader).whole(Done(s, text, (), StopReason.EOG))
    assert called["stop_reason"] == "tool_use" and called["content"][0] == {"type": "text", "text": "Let me check."}
    assert called["content"][1]["input"] == {"city": "Oslo"} and called["content"][1]["id"].startswith("toolu_")

    shape = messages_api.MessageShape("7", "m", 30, reader)
    raw = shape.head() + [shape.piece(text[i:i + 7]) for i in range(0, len(text), 7)]
    raw += shape.tail(Done(s, text, (), StopReason.EOG))
    events = _events(raw)
    assert [n for n, _ in events][:2] == ["message_start", "ping"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 30
    starts = [e["content_block"] for n, e in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["text", "tool_use"] and starts[1]["name"] == "get_weather"
    said = "".join(e["delta"].get("text", "") for n, e in events if n == "content_block_delta")
    args = "".join(e["delta"].get("partial_json", "") for n, e in events if n == "content_block_delta")
    assert said == "Let me check." and json.loads(args) == {"city": "Oslo"}
    assert [n for n, _ in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and events[-2][1]["usage"]["output_tokens"] == 5
    quiet = messages_api.MessageShape("8", "m", 3)
    empty = _events(quiet.head() + quiet.tail(Done(s, "", (), StopReason.EOG)))
    assert [e["content_block"] for n, e in empty if n == "content_block_start"] == [{"type": "text", "text": ""}]
    assert _events([quiet.error(ApiError(503, "bye"))]) == [
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "bye"}})]


# -- the official client on a real model ----------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_messages():
    with serving(qwen_coder_path(), drafter="ngram", n_ctx=2048, model_id="qwen", api_key=KEY) as server:
        yield server


def _client(server, key=KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=300)


def test_a_greedy_answer_is_the_chat_routes_whole_and_streamed(qwen_messages):
    """The same conversation through /v1/messages and /v1/chat/completions gives the same
    greedy text; streamed, Anthropic's events in their order put together the same message."""
    c = _client(qwen_messages)
    msgs = [{"role": "user", "content": "Name three rivers."}]
    r = c.messages.create(model="qwen", max_tokens=24, system="Be brief.", messages=msgs, extra_body=GREEDY)
    chat = client(qwen_messages, KEY).chat.completions.create(
        model="qwen", max_tokens=24, temperature=0, extra_body={"cache_prompt": False},
        messages=[{"role": "system", "content": "Be brief."}] + msgs)
    assert r.type == "message" and r.role == "assistant" and r.model == "qwen" and r.id.startswith("msg_")
    assert [b.type for b in r.content] == ["text"] and r.content[0].text == chat.choices[0].message.content
    assert r.stop_sequence is None and r.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[
        chat.choices[0].finish_reason]
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert r.model_extra["timings"]["drafter"] == "ngram"

    with c.messages.stream(model="qwen", max_tokens=24, system="Be brief.", messages=msgs, extra_body=GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == r.content[0].text == final.content[0].text and final.stop_reason == r.stop_reason
    events = list(c.messages.create(model="qwen", max_tokens=8, system="Be brief.", messages=msgs, stream=True,
                                    extra_body=GREEDY))
    assert [e.type for e in events[:3]] == ["message_start", "content_block_start", "content_block_delta"]
    assert [e.type for e in events[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 8

    r = c.messages.create(model="qwen", max_tokens=40, stop_sequences=["2."], extra_body=GREEDY,
                          messages=[{"role": "user", "content": "List three rivers, numbered."}])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == "2." and "2." not in r.content[0].text
    n = c.messages.count_tokens(model="qwen", system="Be brief.", messages=msgs).input_tokens
    assert n == chat.usage.prompt_tokens


def test_tool_use_round_trip(qwen_messages):
    """tool_use -> tool_result -> a text answer, whole and streamed, with speculation on."""
    c = _client(qwen_messages)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.messages.create(model="qwen", max_tokens=80, tools=[WEATHER, TIME], messages=msgs, extra_body=GREEDY)
    assert r.stop_reason == "tool_use", r.content
    use = r.content[-1]
    assert use.type == "tool_use" and use.id.startswith("toolu_") and use.name == "get_weather"
    assert use.input["city"].lower() == "paris"

    with c.messages.stream(model="qwen", max_tokens=80, tools=[WEATHER, TIME], messages=msgs, extra_body=GREEDY) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [
        (use.name, use.input)]

    followed = msgs + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                     "content": json.dumps({"sky": "sunny", "celsius": 24})}]}]
    answer = c.messages.create(model="qwen", max_tokens=60, tools=[WEATHER, TIME], messages=followed, extra_body=GREEDY)
    assert answer.stop_reason == "end_turn", answer.content
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text.strip()

    forced = c.messages.create(model="qwen", max_tokens=80, tools=[WEATHER, TIME], messages=msgs, extra_body=GREEDY,
                               tool_choice={"type": "tool", "name": "get_time"})
    assert [b.name for b in forced.content if b.type == "tool_use"][:1] == ["get_time"]
    assert forced.stop_reason == "tool_use"


def test_errors_come_in_anthropics_shape_and_the_key_as_x_api_key(qwen_messages):
    c = _client(qwen_messages)
    with pytest.raises(anthropic.BadRequestError) as err:
        c.messages.create(model="qwen", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    assert err.value.body["error"]["type"] == "invalid_request_error" and "image" in err.value.body["error"]["message"]
    with pytest.raises(anthropic.AuthenticationError) as err:
        _client(qwen_messages, "wrong").messages.create(model="qwen", max_tokens=8,
                                                        messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["error"]["type"] == "authentication_error"
    status, _, body = request(qwen_messages, "POST", "/v1/messages/count_tokens", {"messages": []},
                              headers={"x-api-key": KEY})
    assert_anthropic_error(status, body, 400, "invalid_request_error", "non-empty")
    status, _, body = request(qwen_messages, "POST", "/v1/messages", raw=b"{", headers={"x-api-key": KEY})
    assert_anthropic_error(status, body, 400, "invalid_request_error", "not valid JSON")
    status, _, body = request(qwen_messages, "GET", "/metrics", headers={"x-api-key": KEY})
    assert re.search(r'localspec_requests_total\{endpoint="messages",outcome="bad_request"\} [1-9]', body)
    assert re.search(r'localspec_requests_total\{endpoint="messages",outcome="unauthorized"\} [1-9]', body)


def test_llama_servers_routes_without_v1(qwen_messages):
    """Clients given the bare server address: /chat/completions and /models as with /v1,
    /completions as llama-server's native /completion."""
    auth = {"Authorization": f"Bearer {KEY}"}
    msgs = [{"role": "user", "content": "Say hi."}]
    status, _, bare = request(qwen_messages, "POST", "/chat/completions",
                              {"messages": msgs, "max_tokens": 6, "temperature": 0}, headers=auth)
    _, _, v1 = request(qwen_messages, "POST", "/v1/chat/completions",
                       {"messages": msgs, "max_tokens": 6, "temperature": 0}, headers=auth)
    assert status == 200 and bare["choices"][0]["message"] == v1["choices"][0]["message"]
    status, _, models = request(qwen_messages, "GET", "/models", headers=auth)
    assert status == 200 and [m["id"] for m in models["data"]] == ["qwen"]
    status, _, native = request(qwen_messages, "POST", "/completions",
                                {"prompt": "def add(a, b):", "n_predict": 6, "temperature": 0}, headers=auth)
    assert status == 200 and native["stop"] is True and native["tokens_predicted"] == 6 and "content" in native
