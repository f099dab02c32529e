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
    probs = request(qwen, "POST", "/infill", body | {"n_indent": 4, "n_probs": 1})[2]["completion_probabilities"]
    # the tokens listed are those whose text the answer holds (the last one's in part, where the cut falls in it)
    assert "".join(p["token"] for p in probs).startswith(out["content"])
    assert len("".join(p["token"] for p in probs[:-1])) < len(out["content"])
    assert_error(*request(qwen, "POST", "/infill", body | {"n_indent": -1})[::2], 400, "n_indent", ">= 0")


# -- llama.cpp's infill sampler, and what editors send ------------------------------------------

def _llama_cpp_infill(model, logits, k, p):
    """llama.cpp's own chain (top-k, top-p, infill) on a row, then its draw's distribution:
    the survivors' softmax (what this server's sampler must equal)."""
    import ctypes

    import llama_cpp.llama_cpp as ll
    import numpy as np

    n = len(logits)
    data = (ll.llama_token_data * n)()
    for i in range(n):
        data[i].id, data[i].logit, data[i].p = i, float(logits[i]), 0.0
    arr = ll.llama_token_data_array(data, n, -1, False)
    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    for part in (ll.llama_sampler_init_top_k(k), ll.llama_sampler_init_top_p(p, 1),
                 ll.llama_sampler_init_infill(model.vocab)):
        ll.llama_sampler_chain_add(chain, part)
    ll.llama_sampler_apply(chain, ctypes.byref(arr))
    ids = np.array([arr.data[i].id for i in range(arr.size)])
    lg = np.array([arr.data[i].logit for i in range(arr.size)])
    ll.llama_sampler_free(chain)
    ids, lg = ids[np.isfinite(lg)], lg[np.isfinite(lg)]
    e = np.exp(lg - lg.max())
    order = np.argsort(ids)
    return ids[order], (e / e.sum())[order]


def test_the_infill_sampler_is_llama_cpps(qwen_model):
    import numpy as np

    from localspec.engine import SamplingConfig
    from localspec.engine.sampling import distribution

    m, rng = qwen_model, np.random.default_rng(0)
    cfg = SamplingConfig(temperature=1.0, top_k=40, top_p=0.99, min_p=0.0, infill=True)
    words = [t[0] for w in (" return", " re", " ret", "def", "de") if len(t := m.tokenize(w, add_special=False,
                                                                                         parse_special=False)) == 1]
    kinds = set()
    for trial in range(30):
        logits = (rng.normal(size=m.n_vocab) * 2).astype(np.float32)
        logits[rng.choice(m.n_vocab, 12, replace=False)] += rng.uniform(6, 12, 12)
        if trial % 3 == 0:
            logits[m.eos] += 14          # the end of the text likely: only end tokens stay
        if trial % 3 == 1:
            logits[words] += 13          # tokens that are prefixes of others: merged
        want_ids, want_p = _llama_cpp_infill(m, logits, 40, 0.99)
        plain = distribution(logits, cfg)
        got = m.infilled(plain)
        assert np.array_equal(got.ids, want_ids) and np.allclose(got.probs, want_p, atol=1e-5), trial
        kinds.add("end" if all(m.is_eog(int(t)) for t in got.ids) else
                  "cut" if len(got.ids) < len(plain.ids) else "same")
    assert {"end", "cut"} <= kinds


def test_what_llama_vscode_and_llama_vim_send_is_answered(qwen):
    vscode = {"input_prefix": "def fib(n):\n    ", "input_suffix": "\n\nprint(fib(10))\n",
              "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
              "prompt": "", "n_predict": 48, "top_k": 40, "top_p": 0.99, "stream": False,
              "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": 4,
              "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "seed": 3}
    status, _, out = request(qwen, "POST", "/infill", vscode)
    assert status == 200, out
    settings = out["generation_settings"]
    assert settings["temperature"] == 1.0 and settings["min_p"] == 0.0 and settings["top_k"] == 40
    assert out["content"] and all(line.startswith("    ") for line in out["content"].split("\n")[1:] if line)
    vim = vscode | {"id_slot": 0, "stop": [], "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"],
                    "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated",
                                        "tokens_cached", "no/such"]}
    status, _, out = request(qwen, "POST", "/infill", vim)
    assert status == 200 and set(out) == {"content", "timings/prompt_n", "timings/predicted_n", "truncated",
                                          "tokens_cached"}
    assert_error(*request(qwen, "POST", "/infill", vim | {"response_fields": "content"})[::2], 400,
                 "response_fields", "list of paths")
    assert_error(*request(qwen, "POST", "/infill", vim | {"top_k": 0})[::2], 400, "samplers", "needs top_k")


def test_the_target_draws_through_the_infill_sampler_in_a_run_and_in_slots(qwen_model, monkeypatch):
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig
    from localspec.engine.backend import Model

    calls = []
    real = Model.infilled

    def counted(self, p):
        calls.append(p)
        return real(self, p)

    monkeypatch.setattr(Model, "infilled", counted)
    spec = RunSpec(drafter=DrafterKind.NGRAM, max_tokens=8,
                   sampling=SamplingConfig(temperature=1.0, top_k=40, top_p=0.99, min_p=0.0, seed=1, infill=True))
    prompt = fim_prompt(qwen_model, PREFIX, SUFFIX, n_ctx=1024)
    for parallel in (1, 2):
        engine = Engine(EngineConfig(target=qwen_model.path, n_ctx=1024, threads=1, remember=False, parallel=parallel))
        try:
            calls.clear()
            if parallel == 1:
                list(engine.run(prompt, spec))
            else:
                runner = engine.runner()
                runner.start(prompt, spec)
                runner.run_all()
            assert len(calls) >= 8
        finally:
            engine.close()


def test_t_max_predict_ms_ends_the_answer_at_a_new_line(qwen):
    body = {"input_prefix": "def fib(n):\n    ", "input_suffix": "", "n_predict": 64, "temperature": 0}
    free = request(qwen, "POST", "/infill", body)[2]
    out = request(qwen, "POST", "/infill", body | {"t_max_predict_ms": 0.001})[2]
    assert out["stop_type"] == "limit" and out["content"].endswith("\n") and out["content"].count("\n") == 1
    assert free["content"].startswith(out["content"])


def test_the_bench_cuts_function_bodies_out_of_the_sources():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "bench_infill.py"
    spec = importlib.util.spec_from_file_location("bench_infill", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    got = bench.cases(4, 500)
    assert len(got) == 4 and len({c["name"] for c in got}) == 4
    for c in got:
        assert c["indent"] >= 4 and c["prefix"].endswith(" " * c["indent"]) and len(c["prefix"]) <= 500
        assert c["suffix"] == "" or not c["suffix"].startswith(" " * (c["indent"] + 1))


def test_llama_vims_cache_warm_up_reads_the_extra_context_for_the_next_completion(qwen):
    extra = [{"text": "def sub(a, b):\n    return a - b\n", "time": 1.0, "filename": "util.py"}]
    warm = {"id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": extra, "prompt": "",
            "n_predict": 0, "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""]}
    status, _, out = request(qwen, "POST", "/infill", warm)
    assert status == 200 and out == {}
    fim = warm | {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8,
                  "samplers": ["top_k", "top_p", "infill"], "response_fields": ["content", "timings/cache_n"]}
    out = request(qwen, "POST", "/infill", fim)[2]
    assert out["timings/cache_n"] > 10
