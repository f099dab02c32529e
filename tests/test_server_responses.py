"""OpenAI's Responses API on `localspec serve` (``/v1/responses``, ``/v1/responses/input_tokens``),
driven by the official ``openai`` client's ``responses``: text and function calls, whole and
streamed (the SDK's own accumulation of the typed events), on the real
Qwen2.5-Coder-0.5B-Instruct with speculation on; requests read into the chat route's exactly
(the same greedy answer); what cannot be answered refused with a 400 naming the field."""

from __future__ import annotations

import json
import re

import openai
import pytest
from test_server import client, request, serving
from test_tools import qwen_coder_path

from localspec.engine import Done, StopReason, Summary
from localspec.server import responses_api
from localspec.server.errors import ApiError
from localspec.server.tools import HERMES, CallReader

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                          "required": ["city"]}}
# Each request reads its prompt from scratch: a Q4_K_M model's near-ties may fall either way
# with a cached prefix (see test_tools.test_forced_calls_are_the_target_alone_with_speculation).
FRESH = {"cache_prompt": False}


# -- the request, read into a chat request ------------------------------------------------------

def test_input_items_become_the_chat_request():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    body = {"model": "m", "instructions": "Be brief.", "max_output_tokens": 64, "temperature": 0.2, "top_p": 0.9,
            "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False, "store": True, "metadata": {"a": "b"}, "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}},
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in "},
                                             {"type": "input_text", "text": "Oslo?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
                {"role": "user", "content": "Thanks."}]}
    chat = responses_api.to_chat(body)
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [{
            "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "user", "content": "Thanks."}]
    fn = {"name": "get_weather", "parameters": WEATHER["parameters"], "description": WEATHER["description"]}
    assert chat["tools"] == [{"type": "function", "function": fn}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat["max_tokens"], chat["temperature"], chat["top_p"]) == (64, 0.2, 0.9)
    assert chat["parallel_tool_calls"] is False
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    assert responses_api.to_chat({"input": "Hi"})["messages"] == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize("change, param, match", [
    ({"input": ""}, "input", "empty"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0]", "input_image is not supported"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0]", "not supported"),
    ({"previous_response_id": "resp_1"}, "previous_response_id", "nothing is stored"),
    ({"tools": [{"type": "web_search"}]}, "tools[0]", "built-in"),
    ({"tool_choice": "sometimes"}, "tool_choice", "auto"),
    ({"text": {"format": {"type": "xml"}}}, "text.format", "json_schema"),
    ({"background": True}, "background", "not supported"),
    ({"include": ["reasoning.encrypted_content"]}, "include", "nothing extra"),
    ({"frequency": 1}, "frequency", "refused rather than ignored"),
])
def test_what_cannot_be_answered_is_a_400_naming_the_field(change, param, match):
    with pytest.raises(ApiError) as err:
        responses_api.to_chat({"input": "hi"} | change)
    assert err.value.status == 400 and err.value.param == param and re.search(match, err.value.message), err.value


def _events(raw: list[bytes]) -> list[dict]:
    out = []
    for chunk in b"".join(raw).split(b"\n\n"):
        if chunk:
            name, data = chunk.split(b"\n", 1)
            obj = json.loads(data.removeprefix(b"data: "))
            assert name == b"event: " + obj["type"].encode()
            out.append(obj)
    return out


def test_the_answer_in_the_responses_shape_whole_and_streamed():
    """Whole: a message item and function_call items, "incomplete" when cut short; streamed:
    numbered typed events, text then a call, the completed response holding both."""
    s = Summary(n_prompt=30, n_cached=10, n_generated=5)
    shape = responses_api.ResponseShape("7", "m", {"instructions": "x"})
    whole = shape.whole(Done(s, "Hi.", (), StopReason.EOG))
    assert whole["status"] == "completed" and whole["output"][0]["content"][0]["text"] == "Hi."
    assert whole["usage"] == {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 10}, "output_tokens": 5,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 35}
    cut = shape.whole(Done(s, "Hi", (), StopReason.MAX_TOKENS))
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}

    text = 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    reader = CallReader(HERMES, frozenset({"get_weather"}))
    called = responses_api.ResponseShape("7", "m", {}, reader).whole(Done(s, text, (), StopReason.EOG))
    assert [o["type"] for o in called["output"]] == ["message", "function_call"]
    assert json.loads(called["output"][1]["arguments"]) == {"city": "Oslo"} and called["output"][1]["call_id"]

    shape = responses_api.ResponseShape("8", "m", {}, reader)
    raw = shape.head() + [shape.piece(text[i:i + 7]) for i in range(0, len(text), 7)]
    events = _events(raw + shape.tail(Done(s, text, (), StopReason.EOG)))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert events[2]["item"]["content"] == [] and kinds[-1] == "response.completed"
    said = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert said == "Let me check." and json.loads(args) == {"city": "Oslo"}
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    assert all(o["status"] == "completed" for o in final["output"]) and final["status"] == "completed"
    assert _events([shape.error(ApiError(503, "bye", code="shutting_down"))])[0]["message"] == "bye"


# -- the official client on a real model ----------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_responses():
    with serving(qwen_coder_path(), drafter="ngram", n_ctx=2048, model_id="qwen") as server:
        yield server


def test_a_greedy_answer_is_the_chat_routes_whole_and_streamed(qwen_responses):
    c = client(qwen_responses, timeout=300)
    r = c.responses.create(model="qwen", instructions="Be brief.", input="Name three rivers.", max_output_tokens=24,
                           temperature=0, extra_body=FRESH)
    chat = c.chat.completions.create(model="qwen", max_tokens=24, temperature=0, extra_body=FRESH,
                                     messages=[{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Name three rivers."}])
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "qwen"
    assert r.output_text == chat.choices[0].message.content
    assert r.status == {"length": "incomplete", "stop": "completed"}[chat.choices[0].finish_reason]
    assert r.usage.input_tokens == chat.usage.prompt_tokens and r.usage.output_tokens == chat.usage.completion_tokens
    assert r.model_extra["timings"]["drafter"] == "ngram"
    with c.responses.stream(model="qwen", instructions="Be brief.", input="Name three rivers.", max_output_tokens=24,
                            temperature=0, extra_body=FRESH) as stream:
        said = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert said == final.output_text == r.output_text and final.status == r.status
    count = c.responses.input_tokens.count(model="qwen", instructions="Be brief.", input="Name three rivers.")
    assert count.input_tokens == chat.usage.prompt_tokens
    status, _, bare = request(qwen_responses, "POST", "/responses",
                              {"input": "Name three rivers.", "instructions": "Be brief.", "max_output_tokens": 24,
                               "temperature": 0, "cache_prompt": False})
    assert status == 200 and bare["output"][0]["content"][0]["text"] == r.output_text


def test_function_calls_whole_streamed_and_answered(qwen_responses):
    c = client(qwen_responses, timeout=300)
    ask = dict(model="qwen", input="What is the weather in Paris?", tools=[WEATHER], max_output_tokens=80,
               temperature=0, extra_body=FRESH)
    r = c.responses.create(**ask)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and calls and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments)["city"].lower() == "paris" and calls[0].call_id.startswith("call_")
    with c.responses.stream(**ask) as stream:
        final = stream.get_final_response()
    assert [(o.name, o.arguments) for o in final.output if o.type == "function_call"] == [
        (x.name, x.arguments) for x in calls]
    forced = c.responses.create(**ask | {"tool_choice": {"type": "function", "name": "get_weather"}})
    assert [o.name for o in forced.output if o.type == "function_call"][:1] == ["get_weather"]
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.create(model="qwen", input="hi", previous_response_id="resp_000001")
    assert err.value.body["param"] == "previous_response_id"
    status, _, body = request(qwen_responses, "GET", "/metrics")
    assert re.search(r'localspec_requests_total\{endpoint="responses",outcome="bad_request"\} [1-9]', body)
    assert re.search(r'localspec_requests_total\{endpoint="responses",outcome="(stop|length)"\} [1-9]', body)
