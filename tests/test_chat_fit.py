"""A chat that outgrows the context keeps going: its oldest turns are left out of the prompt
(system messages never), room is kept for the answer, turns are cut at a user message; in the
chat core (the transcript keeps everything) and on Ollama's /api/chat, with the real model's
template, as Ollama does; OpenAI's route still refuses a prompt the context cannot hold. And
a chat saved as JSON and Markdown, loaded again (bad files refused in one line)."""

from __future__ import annotations

import math

import pytest
from test_server import request, serving
from test_tools import qwen_coder_path
from test_tui_support import FakeClock, FakeEngine

from localspec.chat.fit import answer_room, fit_conversation
from localspec.engine.template import chat_tokens
from localspec.errors import ContextOverflow


class Render:
    """A stand-in template: each message is as many tokens as its content has words, plus 2."""

    def __init__(self):
        self.calls = 0

    def __call__(self, messages):
        self.calls += 1
        return [t for m in messages for t in [1] * (len(m["content"].split()) + 2)]


def turns(n: int, words: int = 8) -> list[dict]:
    out = []
    for i in range(n):
        out += [{"role": "user", "content": f"q{i} " * words}, {"role": "assistant", "content": f"a{i} " * words}]
    return out


def test_a_conversation_that_fits_is_rendered_once_whole():
    render = Render()
    msgs = [{"role": "system", "content": "be brief"}] + turns(3) + [{"role": "user", "content": "last"}]
    fitted = fit_conversation(render, msgs, n_ctx=100, answer=10)
    assert fitted.left_out == 0 and len(fitted.tokens) == 4 + 6 * 10 + 3 and render.calls == 1


def test_the_oldest_turns_go_first_the_system_messages_stay_and_no_more_than_needed():
    render = Render()
    system = {"role": "system", "content": "be brief"}                 # 4 tokens
    note = {"role": "system", "content": "a later instruction"}        # 5 tokens
    msgs = [system] + turns(3) + [note] + turns(2)[:3] + [{"role": "user", "content": "last"}]
    # Whole: 4 + 60 + 5 + 30 + 3 = 102. With 38 free for the answer, 62 may stay.
    fitted = fit_conversation(render, msgs, n_ctx=100, answer=38)
    kept = [m for i, m in enumerate(msgs) if i in (0, 7) or i >= 5]   # from turn 2's question on
    assert fitted.left_out == 4 and fitted.tokens == render(kept) and len(fitted.tokens) == 62
    one_more = [m for i, m in enumerate(msgs) if i in (0, 7) or i >= 3]
    assert len(render(one_more)) > 62                                 # (leaving out less would not fit)


def test_the_kept_part_starts_at_a_user_message():
    render = Render()
    msgs = [{"role": "user", "content": "q " * 30}, {"role": "assistant", "content": "call", "tool_calls": []},
            {"role": "tool", "content": "r " * 30}, {"role": "assistant", "content": "done"},
            {"role": "user", "content": "next"}]
    fitted = fit_conversation(render, msgs, n_ctx=40, answer=10)
    assert fitted.left_out == 4 and fitted.tokens == render(msgs[4:])


def test_the_newest_turn_alone_gets_what_room_there_is_and_one_that_fills_the_context_is_refused():
    render = Render()
    msgs = turns(2) + [{"role": "user", "content": "w " * 60}]        # the last turn alone: 62
    fitted = fit_conversation(render, msgs, n_ctx=100, answer=50)
    assert fitted.left_out == 4 and len(fitted.tokens) == 62
    with pytest.raises(ContextOverflow, match="the newest turn alone is 62 tokens but the context holds 62"):
        fit_conversation(render, msgs, n_ctx=62, answer=10)
    with pytest.raises(ContextOverflow, match="the prompt is 62 tokens"):
        fit_conversation(render, msgs[-1:], n_ctx=50, answer=10)


def test_a_long_conversation_is_fitted_in_a_logarithmic_number_of_renders():
    render = Render()
    msgs = [{"role": "system", "content": "s"}] + turns(500) + [{"role": "user", "content": "last"}]
    fitted = fit_conversation(render, msgs, n_ctx=1000, answer=100)
    assert 880 < len(fitted.tokens) <= 900 and fitted.left_out % 2 == 0
    assert render.calls <= 2 + math.ceil(math.log2(500))


def test_the_answers_room():
    assert answer_room(4096, 512) == 512 and answer_room(4096, None) == 1024 and answer_room(4096, -1) == 1024
    assert answer_room(4096, 8000) == 2048 and answer_room(4096, 0) == 0


def test_the_chat_session_leaves_out_old_turns_and_keeps_the_transcript():
    from localspec.chat.session import ChatSession, ModelChoice
    from localspec.chat.settings import CHAT_DEFAULTS

    # The fake engine's prompt is 20 + 10 tokens a message; 200 - 9 free leaves 17 messages.
    s = ChatSession(ModelChoice(target="/m/t.gguf", n_ctx=200), CHAT_DEFAULTS.with_(max_tokens=9, drafter="ngram"),
                    engine_factory=lambda config: FakeEngine(config, FakeClock()))
    s.load()
    for i in range(8):
        assert len(s.begin_turn(f"q{i}")) == 20 + 10 * (2 * i + 1) and s.left_out == 0
        s.end_turn(f"a{i}")
    assert len(s.begin_turn("q8")) == 20 + 10 * 17 and s.left_out == 0
    s.end_turn("a8")
    assert len(s.begin_turn("q9")) == 20 + 10 * 17 and s.left_out == 2 and len(s.messages) == 19
    s.new_chat()
    assert s.left_out == 0 and s.messages == []


@pytest.fixture(scope="module")
def qwen_small():
    with serving(qwen_coder_path(), drafter="ngram", n_ctx=512, model_id="qwen") as server:
        yield server


def test_ollamas_chat_leaves_out_old_turns_where_openais_refuses(qwen_small):
    """A 512-token server: a 700-token conversation is answered on /api/chat from its system
    message and newest turns (the chat route's greedy answer to just those), and refused with
    OpenAI's code on /v1/chat/completions."""
    system = {"role": "system", "content": "You answer with one word."}
    filler = "The river runs past the old mill and the bridge. " * 4
    msgs = [system]
    for i in range(12):
        msgs += [{"role": "user", "content": f"Note {i}: {filler}"}, {"role": "assistant", "content": "Noted."}]
    msgs.append({"role": "user", "content": "What colour is the sky on a clear day?"})
    status, _, refused = request(qwen_small, "POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 8})
    assert status == 400 and refused["error"]["code"] == "context_length_exceeded"

    model = qwen_small.ctx.engine.target_model
    fitted = fit_conversation(lambda m: chat_tokens(model, m), msgs, 512, answer_room(512, 8))
    kept = [system] + msgs[1 + fitted.left_out:]
    assert 0 < fitted.left_out < 24 and len(fitted.tokens) <= 504
    status, _, whole = request(qwen_small, "POST", "/api/chat", {
        "model": "qwen", "messages": msgs, "stream": False, "cache_prompt": False,
        "options": {"temperature": 0, "num_predict": 8}})
    assert status == 200 and whole["prompt_eval_count"] == len(fitted.tokens)
    _, _, chat = request(qwen_small, "POST", "/v1/chat/completions", {
        "messages": kept, "temperature": 0, "max_tokens": 8, "cache_prompt": False})
    assert whole["message"]["content"] == chat["choices"][0]["message"]["content"]


# -- saved chats ----------------------------------------------------------------------------

def test_a_chat_saved_and_loaded_again(tmp_path):
    from localspec.chat.transcript import load_transcript, save_transcript
    from localspec.errors import BadInput

    msgs = [{"role": "user", "content": "Is 91 prime?"},
            {"role": "assistant", "content": "No: 7 x 13.", "reasoning_content": "Try 7.\n"}]
    j, m = save_transcript(tmp_path / "chats", "Be brief.", msgs, models="tiny + draft", settings={"top_k": 40},
                           stem="one")
    assert (j.name, m.name) == ("one.json", "one.md")
    assert load_transcript(j) == ("Be brief.", msgs)
    md = m.read_text()
    assert "*System:* Be brief." in md and "**You:**" in md and "> Try 7." in md and "No: 7 x 13." in md
    bad = tmp_path / "bad.json"
    for text, match in (("{oops", "not a saved chat"), ('{"format": "other"}', "not a chat saved by localspec"),
                        ('{"format": "localspec-chat/1", "messages": [{"role": "tool", "content": "x"}]}',
                         "user and assistant")):
        bad.write_text(text)
        with pytest.raises(BadInput, match=match):
            load_transcript(bad)
    with pytest.raises(BadInput, match="no such file"):
        load_transcript(tmp_path / "gone.json")


def test_chat_resume_refuses_a_bad_file_before_anything_loads(tmp_path):
    from conftest import run_cli
    from test_cli import assert_one_line_error

    assert_one_line_error(run_cli("chat", "--resume", str(tmp_path / "gone.json")), 2, "no such file")
