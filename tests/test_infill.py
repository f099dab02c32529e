"""Fill in the middle: llama-server's ``/infill`` and OpenAI's ``suffix`` on /v1/completions
build the prompt from the model's own FIM tokens as llama-server does (other files first, in
the repository pattern), on a real code model; a model without FIM tokens is a clear 400."""

from __future__ import annotations

import json

import pytest
from test_server import client, request, serving
from test_server_compat import assert_error
from test_tools import qwen_coder_path

from localspec.engine.backend import Model
from localspec.server.infill import fim_prompt

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def qwen_model():
    return Model(str(qwen_coder_path()))


@pytest.fixture(scope="module")
def qwen(qwen_model):
    with serving(qwen_model.path, drafter="ngram", n_ctx=2048, model_id="qwen") as server:
        yield server


def test_the_prompt_is_llama_servers(qwen_model):
    m = qwen_model
    f = m.fim

    def tok(text):
        return m.tokenize(text, add_special=False, parse_special=False)

    head = [f["rep"]] + tok("myproject\n")
    tail = [f["pre"]] + tok(PREFIX) + [f["suf"]] + tok(SUFFIX) + [f["mid"]]
    assert fim_prompt(m, PREFIX, SUFFIX, n_ctx=2048) == head + [f["sep"]] + tok("filename\n") + tail
    extra = [{"filename": "util.py", "text": "X = 1\n"}, {"text": "Y = 2\n"}]
    assert fim_prompt(m, PREFIX, SUFFIX, extra=extra, n_ctx=2048) == (
        head + [f["sep"]] + tok("util.py\n") + tok("X = 1\n") + [f["sep"]] + tok("tmp\n") + tok("Y = 2\n")
        + [f["sep"]] + tok("filename\n") + tail)
    # long inputs: the prefix keeps its end, the suffix its start, the extra context what fits
    long = fim_prompt(m, "x = 1\n" * 200, "y = 2\n" * 200, extra=extra, n_ctx=64)
    pre, suf, mid = long.index(f["pre"]), long.index(f["suf"]), long.index(f["mid"])
    assert suf - pre - 1 == 3 * (32 // 4) and mid - suf - 1 == 32 // 4 - 2
    assert long[pre + 1:suf] == tok("x = 1\n" * 200)[-24:] and long[suf + 1:mid] == tok("y = 2\n" * 200)[:6]


def test_infill_answers_what_completion_answers_for_its_prompt(qwen, qwen_model):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "temperature": 0}
    status, _, out = request(qwen, "POST", "/infill", body)
    assert status == 200, out
    assert out["content"] and out["tokens_predicted"] > 0 and out["stop"] is True
    tokens = fim_prompt(qwen_model, PREFIX, SUFFIX, n_ctx=2048)
    same = request(qwen, "POST", "/completion", {"prompt": tokens, "n_predict": 12, "temperature": 0})[2]
    assert same["content"] == out["content"] and out["tokens_evaluated"] == len(tokens)
    alone = request(qwen, "POST", "/infill", body | {"speculative": {"enabled": False}})[2]
    assert alone["content"] == out["content"]
    # OpenAI's insertion: the same prompt, the same answer
    r = client(qwen).completions.create(model="qwen", prompt=PREFIX, suffix=SUFFIX, max_tokens=12, temperature=0)
    assert r.choices[0].text == out["content"]
    assert r.usage.prompt_tokens == len(tokens)


def test_infill_streams_and_takes_extra_context(qwen):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8, "temperature": 0,
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
            "prompt": "return"}
    whole = request(qwen, "POST", "/infill", body)[2]
    assert whole["tokens_evaluated"] > 30
    status, headers, text = request(qwen, "POST", "/infill", body | {"stream": True})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")

    data = [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: ")]
    assert "".join(d["content"] for d in data) == whole["content"] and data[-1]["stop"] is True


@pytest.mark.parametrize("body,param,match", [
    ({"input_suffix": ""}, "input_prefix", "required"),
    ({"input_prefix": "x", "input_suffix": 3}, "input_suffix", "required"),
    ({"input_prefix": "x", "input_suffix": "", "input_extra": [{"name": "a"}]}, "input_extra", "list of"),
    ({"input_prefix": "x", "input_suffix": "", "prompt": ["a"]}, "prompt", "must be a string"),
    ({"input_prefix": "x", "input_suffix": "", "messages": []}, "messages", "it takes prompt"),
])
def test_bad_infill_requests(qwen, body, param, match):
    assert_error(*request(qwen, "POST", "/infill", body)[::2], 400, param, match)


def test_suffix_needs_text_and_a_fim_model(qwen, tiny_target):
    status, _, out = request(qwen, "POST", "/v1/completions", {"prompt": [1, 2, 3], "suffix": "x"})
    assert_error(status, out, 400, "prompt", "needs the prompt as text")
    with serving(tiny_target, drafter="none") as tiny:
        for path, body in (("/infill", {"input_prefix": "a", "input_suffix": "b"}),
                           ("/v1/completions", {"prompt": "a", "suffix": "b"})):
            status, _, out = request(tiny, "POST", path, body)
            assert_error(status, out, 400, None, "cannot fill in the middle")


def test_n_indent_ends_the_completion_at_the_end_of_the_block(qwen):
    body = {"input_prefix": "def fib(n):\n    ", "input_suffix": "\n\nprint(fib(10))\n", "n_predict": 64,
            "temperature": 0}
    free = request(qwen, "POST", "/infill", body)[2]
    out = request(qwen, "POST", "/infill", body | {"n_indent": 4})[2]
    assert out["stop_type"] == "limit" and out["generation_settings"]["n_indent"] == 4
    assert free["content"].startswith(out["content"]) and len(out["content"]) < len(free["content"])
    assert all(line.startswith("    ") for line in out["content"].split("\n")[1:] if line)
    assert_error(*request(qwen, "POST", "/infill", body | {"n_indent": -1})[::2], 400, "n_indent", ">= 0")
