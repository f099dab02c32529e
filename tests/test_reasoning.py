"""A thinking model's reasoning apart from its reply: the streaming split (tags cut anywhere, a
block the template opened, one never closed), the chat template's variables (enable_thinking),
llama-server's ``reasoning_content`` whole and streamed (``reasoning_format: none`` keeps the
raw text), Ollama's ``thinking`` and ``think: false``, and the chat core keeping the reasoning
as ``reasoning_content``; on a tiny model with a Qwen3-style template, its answer shaped by a
grammar into reasoning, ``</think>`` and a reply."""

from __future__ import annotations

import json

import pytest
from test_server import request, serving
from test_server_ollama import _ndjson
from tiny import TinySpec

from localspec.chat.reasoning import ReasoningSplit, split_reasoning
from localspec.engine import Done, StopReason, Summary
from localspec.engine.template import render_chat
from localspec.server import ollama as ollama_api
from localspec.server.thinking import ThinkingShape

# Qwen3's switch: the generation prompt opens <think>, or, with enable_thinking false, closes it empty.
THINKING = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}"
    "{% else %}{{ '<think>\n' }}{% endif %}{% endif %}"
)
ANSWER = 'root ::= "The sky scatters blue light." "\\n</think>\\n\\n" "Blue."'
CASES = [
    ("<think>\nweigh it\n</think>\n\nBlue.", False, "weigh it\n", "Blue."),
    ("weigh it</think>Blue.", True, "weigh it", "Blue."),
    ("\n\n</think>\n\nBlue.", True, "", "Blue."),
    ("  <think>cut short", False, "cut short", ""),
    ("still thinking", True, "still thinking", ""),
    ("\n Plain <think> text", False, None, "\n Plain <think> text"),
    ("<thin", False, None, "<thin"),
    ("a</think>b</think>c", True, "a", "b</think>c"),
]


@pytest.mark.parametrize("text, opened, reasoning, reply", CASES)
def test_the_split_whole_and_a_character_at_a_time(text, opened, reasoning, reply):
    assert split_reasoning(text, opened) == (reasoning, reply)
    split = ReasoningSplit(opened)
    pieces = [split.feed(c) for c in text] + [split.finish()]
    assert "".join(r for r, _ in pieces) == (reasoning or "") and "".join(c for _, c in pieces) == reply
    assert split.reasoning == (reasoning or "")


def test_the_templates_variables_and_the_ones_it_gets_from_the_renderer():
    msgs = [{"role": "user", "content": "Hi"}]
    assert render_chat(THINKING, msgs).endswith("<think>\n")
    assert render_chat(THINKING, msgs, variables={"enable_thinking": False}).endswith("<think>\n\n</think>\n\n")
    assert render_chat(THINKING, msgs, variables={"messages": [], "add_generation_prompt": False}) == \
        render_chat(THINKING, msgs)


def test_ollamas_thinking_lines_whole_and_streamed():
    s = Summary(n_prompt=3, n_generated=4, prompt_seconds=0.1, generation_seconds=0.2)
    done = Done(s, "hmm</think>\n\nHi.", (), StopReason.EOG)

    def shape():
        return ThinkingShape(ollama_api.OllamaShape("m", chat=True), True)

    whole = shape().whole(done)
    assert whole["message"] == {"role": "assistant", "content": "Hi.", "thinking": "hmm"}
    streamed = shape()
    lines = [streamed.piece(p) for p in ("hm", "m</th", "ink>\n", "\nHi", ".")] + streamed.tail(done)
    parsed = [json.loads(x) for b in lines for x in b.splitlines() if x.strip()]
    assert "".join(p["message"].get("thinking", "") for p in parsed) == "hmm"
    assert "".join(p["message"]["content"] for p in parsed) == "Hi." and parsed[-1]["done"]
    assert ollama_api.chat_request({"messages": [], "think": False})["chat_template_kwargs"] == {
        "enable_thinking": False}
    assert "chat_template_kwargs" not in ollama_api.generate_request({"prompt": "x", "raw": True, "think": False})[1]
    assert ollama_api.chat_request({"messages": [], "think": "high"})["reasoning_effort"] == "high"
    assert "reasoning_effort" not in ollama_api.generate_request({"prompt": "x", "raw": True, "think": "low"})[1]


@pytest.fixture(scope="module")
def thinker(zoo):
    model = zoo.get(TinySpec(chat_template=THINKING), "thinker.gguf")
    with serving(model, drafter="ngram", n_ctx=512, model_id="thinker") as server:
        yield server


def _chat(server, **fields) -> dict:
    status, _, body = request(server, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Why is the sky blue?"}], "temperature": 0, "max_tokens": 40,
        "grammar": ANSWER} | fields)
    assert status == 200, body
    return body


def test_reasoning_content_whole_streamed_and_raw(thinker):
    message = _chat(thinker)["choices"][0]["message"]
    assert message["reasoning_content"] == "The sky scatters blue light.\n" and message["content"] == "Blue."
    raw = _chat(thinker, reasoning_format="none")["choices"][0]["message"]
    assert raw["content"] == "The sky scatters blue light.\n</think>\n\nBlue." and "reasoning_content" not in raw

    conn_body = {"messages": [{"role": "user", "content": "Why is the sky blue?"}], "temperature": 0,
                 "max_tokens": 40, "grammar": ANSWER, "stream": True}
    status, _, text = request(thinker, "POST", "/v1/chat/completions", conn_body)
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in text.splitlines()
              if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content", "") for d in deltas) == "Blue."

    status, _, bad = request(thinker, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "reasoning_format": "deepseek-legacy"})
    assert status == 400 and bad["error"]["param"] == "reasoning_format"
    status, _, bad = request(thinker, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}})
    assert status == 400 and "may not set messages" in bad["error"]["message"]


def test_thinking_turned_off_through_the_template(thinker):
    on = _chat(thinker, grammar='root ::= "Blue."')
    off = _chat(thinker, grammar='root ::= "Blue."', chat_template_kwargs={"enable_thinking": False})
    # The closed empty block is in the prompt: more prompt tokens, the reply is all content.
    assert off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
    assert off["choices"][0]["message"] == {"role": "assistant", "content": "Blue."}
    assert on["choices"][0]["message"]["reasoning_content"] == "Blue."     # (never closed: all reasoning)
    # OpenAI's reasoning_effort: "none" is thinking off; another reaches the template (which ignores it).
    none = _chat(thinker, grammar='root ::= "Blue."', reasoning_effort="none")
    high = _chat(thinker, grammar='root ::= "Blue."', reasoning_effort="high")
    assert none["usage"]["prompt_tokens"] == off["usage"]["prompt_tokens"]
    assert high["usage"]["prompt_tokens"] == on["usage"]["prompt_tokens"]
    status, _, bad = request(thinker, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"})
    assert status == 400 and bad["error"]["param"] == "reasoning_effort"
    counted = [request(thinker, "POST", "/v1/responses/input_tokens", {"input": "Hi"} | extra)[2]["input_tokens"]
               for extra in ({}, {"reasoning": {"effort": "none"}})]
    assert counted[1] > counted[0]
    lines = _ndjson(thinker, "/api/chat", {"model": "thinker", "messages": [{"role": "user", "content": "Hi"}],
                                          "think": False, "options": {"temperature": 0, "num_predict": 4}})
    status, _, thinking = request(thinker, "POST", "/api/chat", {
        "model": "thinker", "messages": [{"role": "user", "content": "Hi"}], "stream": False,
        "options": {"temperature": 0, "num_predict": 4}})
    assert status == 200 and lines[-1]["prompt_eval_count"] > thinking["prompt_eval_count"]
    assert "thinking" in thinking["message"] and not any("thinking" in x["message"] for x in lines)
    assert "thinking" in request(thinker, "POST", "/api/show", {"model": "thinker"})[2]["capabilities"]


def test_the_chat_core_keeps_the_reasoning_apart(thinker):
    from localspec.chat.session import ChatSession, ModelChoice
    from localspec.chat.settings import CHAT_DEFAULTS

    engine = thinker.ctx.engine
    s = ChatSession(ModelChoice(target="/m/t.gguf", n_ctx=512), CHAT_DEFAULTS.with_(drafter="ngram"),
                    engine_factory=lambda config: engine)
    s.engine = engine
    s.begin_turn("Why is the sky blue?")
    assert s.thinking
    s.end_turn("Rayleigh scattering.\n</think>\n\nBlue.")
    assert s.messages[-1] == {"role": "assistant", "content": "Blue.", "reasoning_content": "Rayleigh scattering.\n"}
    assert s.last_answer() == "Blue."
    s.variables = {"enable_thinking": False}
    s.begin_turn("And at sunset?")
    assert not s.thinking


def _split_stream(shape, pieces, done) -> list[dict]:
    """The server-sent events' objects a wrapped shape writes for these pieces of text."""
    raw = b"".join([*shape.head(), *(shape.piece(p) for p in pieces), *shape.tail(done)])
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: {")]


def test_anthropics_thinking_blocks_and_the_responses_apis_reasoning_items():
    from localspec.server import anthropic, responses_api

    s = Summary(n_prompt=3, n_generated=4, prompt_seconds=0.1, generation_seconds=0.2)
    done = Done(s, "hmm</think>\n\nHi.", (), StopReason.EOG)
    pieces = ("hm", "m</th", "ink>\n", "\nHi", ".")

    def message_shape():
        return ThinkingShape(anthropic.MessageShape("1", "m", 3), True)

    assert message_shape().whole(done)["content"] == [{"type": "thinking", "thinking": "hmm", "signature": ""},
                                                      {"type": "text", "text": "Hi."}]
    events = _split_stream(message_shape(), pieces, done)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert starts == ["thinking", "text"]
    assert "".join(d.get("thinking", "") for d in deltas) == "hmm"
    assert "".join(d.get("text", "") for d in deltas) == "Hi."

    def response_shape():
        return ThinkingShape(responses_api.ResponseShape("1", "m", {}), True)

    output = response_shape().whole(done)["output"]
    assert [o["type"] for o in output] == ["reasoning", "message"] and output[0]["content"] == [
        {"type": "reasoning_text", "text": "hmm"}]
    events = _split_stream(response_shape(), pieces, done)
    assert "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta") == "hmm"
    assert [e["text"] for e in events if e["type"] == "response.reasoning_text.done"] == ["hmm"]
    final = events[-1]["response"]["output"]
    assert [o["type"] for o in final] == ["reasoning", "message"] and final[1]["content"][0]["text"] == "Hi."


def test_the_official_clients_read_the_reasoning(thinker):
    """The tiny model never closes its block: its whole answer is reasoning, which the
    anthropic and openai SDKs read back as a thinking block and a reasoning item."""
    import anthropic
    import openai

    ask = [{"role": "user", "content": "Why is the sky blue?"}]
    claude = anthropic.Anthropic(base_url=thinker.url, api_key="none", max_retries=0)
    greedy = {"temperature": 0, "cache_prompt": False}    # (the SDK sends temperature in the body)
    with claude.messages.stream(model="thinker", max_tokens=12, messages=ask, extra_body=greedy) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking"] and message.content[0].thinking
    whole = claude.messages.create(model="thinker", max_tokens=12, messages=ask, extra_body=greedy)
    assert whole.content[0].thinking == message.content[0].thinking
    off = claude.messages.count_tokens(model="thinker", messages=ask, thinking={"type": "disabled"})
    on = claude.messages.count_tokens(model="thinker", messages=ask)
    assert off.input_tokens > on.input_tokens                   # (the closed empty block)

    oai = openai.OpenAI(base_url=thinker.url + "/v1", api_key="none", max_retries=0)
    with oai.responses.stream(model="thinker", input="Why is the sky blue?", max_output_tokens=12,
                              temperature=0, extra_body={"cache_prompt": False}) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "reasoning" and final.output[0].content[0].text == message.content[0].thinking


def test_the_command_lines_template_variables(zoo):
    """`run --chat --no-think` (or llama.cpp's --chat-template-kwargs) closes the block in the
    prompt; serve's flags set the default a request's chat_template_kwargs overrides."""
    from conftest import run_cli
    from test_cli import assert_one_line_error

    thinker = str(zoo.get(TinySpec(chat_template=THINKING), "thinker.gguf"))

    def n_prompt(*flags):
        r = run_cli("run", "-m", thinker, "--ngram", "--chat", "-p", "Hi", "-n", "2", "--threads", "1", "--json",
                    *flags)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["stats"]["n_prompt"]

    on = n_prompt()
    r = run_cli("run", "-m", thinker, "--ngram", "--chat", "-p", "Hi", "-n", "3", "--threads", "1", "--json",
                "--temp", "0")
    out = json.loads(r.stdout)
    assert out["reasoning"] == out["text"].lstrip() and out["reply"] == ""     # (the block the template opened)
    assert n_prompt("--no-think") == n_prompt("--chat-template-kwargs", '{"enable_thinking": false}') > on
    assert n_prompt("--chat-template-kwargs", '{"enable_thinking": true}') == on
    for flags, match in ((["--chat-template-kwargs", "[1]"], "give a JSON object"),
                         (["--chat-template-kwargs", "{oops"], "not JSON"),
                         (["--chat-template-kwargs", '{"messages": []}'], "messages is set by localspec")):
        assert_one_line_error(run_cli("run", "-m", thinker, "--chat", "-p", "Hi", *flags), 2, match)
    assert_one_line_error(run_cli("run", "-m", thinker, "-p", "Hi", "--no-think"), 2, "--no-think needs --chat")


def test_a_servers_default_template_variables(zoo):
    from localspec.cli.options import template_variables

    thinker = zoo.get(TinySpec(chat_template=THINKING), "thinker.gguf")
    variables = template_variables({"no_think": True})
    assert variables == {"enable_thinking": False}
    with serving(thinker, drafter="ngram", n_ctx=512, model_id="thinker", template_variables=variables) as server:
        off = _chat(server, grammar='root ::= "Blue."')
        on = _chat(server, grammar='root ::= "Blue."', chat_template_kwargs={"enable_thinking": True})
    assert off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
    assert off["choices"][0]["message"] == {"role": "assistant", "content": "Blue."}


def test_the_chat_fields_are_refused_on_text_endpoints(thinker):
    for path, body in (("/v1/completions", {"prompt": "Hi"}), ("/completion", {"prompt": "Hi"})):
        for field, value in (("chat_template_kwargs", {"enable_thinking": False}), ("reasoning_effort", "low"),
                             ("reasoning_format", "auto")):
            status, _, err = request(thinker, "POST", path, body | {field: value})
            assert status == 400 and err["error"]["param"] == field, (path, field)


def test_earlier_reasoning_reaches_the_template():
    """``reasoning_content`` of an assistant message (Ollama's ``thinking``) goes to the chat
    template, which decides what the model sees of it."""
    from localspec.server.tools import chat_messages

    msgs = chat_messages({"messages": [{"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"}]})
    assert msgs[1] == {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"}
    shows = ("{% for m in messages %}{{ m.role }}:{% if m.reasoning_content %}[{{ m.reasoning_content }}]"
             "{% endif %}{{ m.content }}|{% endfor %}")
    assert render_chat(shows, msgs, add_generation_prompt=False) == "user:Hi|assistant:[greet]Hello.|"
    assert ollama_api.chat_request({"messages": [{"role": "assistant", "content": "x", "thinking": "t"}]})[
        "messages"] == [{"role": "assistant", "content": "x", "reasoning_content": "t"}]
