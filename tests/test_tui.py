"""The Textual app driven by Pilot on the real engine with the tiny models: send and receive,
stop, settings, comparison, pull from the local test Hub, errors, and the worker's bounds."""

from __future__ import annotations

import gc
import json
import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest
from test_tui_support import (
    SIZE,
    SYSTEM,
    TickCounter,
    chat,
    notifications,
    run_async,
    send,
    tiny_app,
    wait_answer,
    wait_for,
    wait_ready,
)
from textual.widgets import DataTable, Digits, Input, Select
from tiny import TinySpec

from localspec.chat.system_stats import StaticMonitor
from localspec.engine import Engine
from localspec.engine.events import StopReason
from localspec.tui.app import GC_THRESHOLDS
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.screens.compare import CompareScreen
from localspec.tui.screens.dialogs import ErrorDialog
from localspec.tui.screens.models import ModelsScreen
from localspec.tui.screens.settings import SettingsScreen
from localspec.tui.widgets.chat_log import ChatLog, MessageView, OriginLegend
from localspec.tui.widgets.gauge_column import GaugeColumn
from localspec.tui.widgets.pull_panel import PullPanel

# -- chatting -----------------------------------------------------------------------------

@run_async
async def test_send_a_message_and_receive_the_answer(tiny_target, tiny_draft, monkeypatch):
    # The draft reads the prompt in line: read beside the target on a thread, a busy machine
    # could leave the whole 24-token answer (a couple of milliseconds) to the target alone.
    monkeypatch.setattr(Engine, "_spare_cores", lambda self, threads: False)
    app = tiny_app(tiny_target, tiny_draft, max_tokens=24, adaptive=False, draft_max=4)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await send(pilot, "Hello there")
        await wait_answer(pilot)
        done = screen.last_done
        assert 0 < len(done.token_ids) <= 24
        # The answer is in the log as it streamed, in the conversation, and in the status line.
        views = screen.query(MessageView)
        assert len(views) == 1 and views.first().plain == done.text
        assert app.session.messages == [{"role": "user", "content": "Hello there"},
                                        {"role": "assistant", "content": done.text}]
        assert "answered" in str(screen.query_one("#status").render())
        # The gauges show the run: tokens, acceptance of the drafts, K, the time split.
        stats = screen.stats
        assert stats.phase == "finished" and stats.tokens == len(done.token_ids)
        assert stats.drafted == done.summary.drafted and stats.accepted == done.summary.accepted
        assert 1 <= stats.k <= 4 and done.summary.k_max == 4
        assert stats.draft_seconds > 0 and stats.verify_seconds > 0
        column = screen.query_one(GaugeColumn)
        assert column.speed.value == f"{done.summary.tokens_per_second:.1f}"
        assert "tok/s · done" in column.speed.text() and "─ speed ─" in column.text
        drafting = column.drafting.text()
        assert "acceptance" in drafting and "verify" in drafting
        # The model panel: names, quantisation, backend, layers, the tokenizer verdict.
        panel = column.models.text()
        assert "target.gguf" in panel and "draft.gguf" in panel and "F32" in panel
        assert "CPU" in panel and "0/2 layers on GPU" in panel and "compatible" in panel
        # A second turn reuses the conversation (and the cache).
        await send(pilot, "And again")
        await wait_answer(pilot)
        assert len(app.session.messages) == 4
        assert screen.last_done.summary.n_cached > 0


@run_async
async def test_stop_mid_answer_takes_effect_within_one_step(slow_pair):
    target, draft = slow_pair
    app = tiny_app(target, draft, max_tokens=3000, n_ctx=4096, adaptive=False, draft_max=4)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await send(pilot, "The quick")
        job = screen.job
        await wait_for(pilot, lambda: screen.stats.tokens > 0, 20, "the first tokens")
        await pilot.press("escape")
        await wait_answer(pilot)
        done = screen.last_done
        assert done.stop_reason == StopReason.CANCELLED
        assert 0 < len(done.token_ids) < 3000
        assert screen.last_finish.steps_after_stop <= 1
        assert not job.alive
        assert "stopped" in str(screen.query_one("#status").render())
        assert screen.stats.phase == "stopped"
        # The app goes on: the partial answer is in the conversation, and a new message works.
        assert app.session.messages[-1] == {"role": "assistant", "content": done.text}
        app.session.settings = app.session.settings.with_(max_tokens=5)
        await send(pilot, "more")
        await wait_answer(pilot)
        assert len(screen.last_done.token_ids) == 5


@run_async
async def test_quit_mid_generation_leaves_nothing_running(slow_pair):
    target, draft = slow_pair
    app = tiny_app(target, draft, max_tokens=3000, n_ctx=4096)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await send(pilot, "The quick")
        job = screen.job
        await wait_for(pilot, lambda: screen.stats.tokens > 0, 20, "the first tokens")
        await pilot.press("ctrl+q")
        await wait_for(pilot, lambda: not app.is_running, 10, "the app to exit")
    assert not job.alive and job.acc.done is not None and job.steps_after_stop <= 1
    assert app.session.engine is None       # the models were freed
    assert not [t for t in threading.enumerate() if t.name.startswith("localspec-")]


@run_async
async def test_progress_messages_are_coalesced_and_gauges_refresh(slow_pair, monkeypatch):
    """At most one progress message a whole ticker interval (ten a second at 0.1 s) whatever
    the token rate (test_tui_core counts the tokens a message carries from a fast engine), and
    the system gauges sampled on at least every other message while generating. The chat
    screen's clock reads the figures on screen (the seconds the answer has run when its
    message was made, each at least one interval after the last), so what the test counts
    does not depend on how busy the machine is."""
    import localspec.tui.screens.chat as chat_module

    target, draft = slow_pair
    sampled: list[str] = []

    def shown():
        screen = app.screen
        return screen.stats if isinstance(screen, ChatScreen) else None

    class Counting(StaticMonitor):
        def sample(self):
            sampled.append(shown().phase if shown() else "")   # what the screen shows while it samples
            return super().sample()

    app = tiny_app(target, draft, max_tokens=900, n_ctx=4096, monitor=Counting())
    monkeypatch.setattr(chat_module, "time", SimpleNamespace(monotonic=lambda: shown().elapsed if shown() else 0.0))
    started, ticks, posted = [], [], []

    def start_job(job, start=app.start_job):
        started.append(job)
        ticks.append(TickCounter.install(job))
        job.post = lambda msg, post=job.post: posted.append(getattr(msg, "stats", None)) or post(msg)
        return start(job)

    app.start_job = start_job
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = chat(app)
        before, first = len(sampled), len(started)     # the jobs before this one loaded the models
        await send(pilot, "The quick")
        await wait_answer(pilot, 60)
    job, ticks = started[first], ticks[first]
    n_tokens = len(screen.last_done.token_ids)
    assert n_tokens > 100
    progress = job.posted - 1            # every message but the final one
    assert 0 < progress <= len(ticks.intervals) and set(ticks.intervals) == {job.interval} and job.interval >= 0.1
    generating = sum(stats is not None and stats.phase == "generating" for stats in posted[:-1])
    assert sampled[before:].count("generating") >= (generating - 1) // 2, (sampled[before:], generating)


@run_async
async def test_garbage_is_collected_in_larger_batches_while_the_app_runs(tiny_target, tiny_draft):
    """Fewer young-generation passes while the app runs (each holds the GIL; see GC_THRESHOLDS),
    and Python's own settings back when it ends."""
    before = gc.get_threshold()
    app = tiny_app(tiny_target, tiny_draft)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_threshold() == before


@run_async
async def test_a_thinking_models_reasoning_is_shown_muted_and_kept_apart(zoo):
    from test_reasoning import ANSWER, THINKING

    thinker = zoo.get(TinySpec(chat_template=THINKING), "thinker.gguf")
    app = tiny_app(thinker, drafter="ngram", max_tokens=40, grammar=ANSWER)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await send(pilot, "Why is the sky blue?")
        await wait_answer(pilot)
        view = screen.query(MessageView).first()
        shown = {}
        for text, origin in view.segments:
            kind = origin if origin in ("thinking", "gap") else "reply"
            shown[kind] = shown.get(kind, "") + text
        assert shown == {"thinking": "The sky scatters blue light.\n", "gap": "\n\n", "reply": "Blue."}
        assert view.plain == "Blue." and app.session.last_answer() == "Blue."
        assert app.session.messages[-1] == {"role": "assistant", "content": "Blue.",
                                            "reasoning_content": "The sky scatters blue light.\n"}
        assert view._style("thinking")            # (muted, with the token colours off too)
        view.colour = False
        assert view._style("thinking") and not view._style("draft")
        assert app.session.thinking
        # Thinking off in the settings: the template closes the block, the answer is all reply.
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 5, "the settings")
        assert app.screen.query_one("#set-thinking", Select).value is True
        app.screen.query_one("#set-thinking", Select).value = False
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen), 5, "the form to close")
        assert app.session.variables == {"enable_thinking": False} and not app.session.thinking_allowed
        screen.last_done = None
        await send(pilot, "And at night?")
        await wait_answer(pilot)
        assert not app.session.thinking and "reasoning_content" not in app.session.messages[-1]


@run_async
async def test_new_chat_copy_and_colours(tiny_target, tiny_draft):
    app = tiny_app(tiny_target, tiny_draft, max_tokens=12)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Hello")
        screen = await wait_answer(pilot)
        await pilot.press("ctrl+y")
        assert app.clipboard == screen.last_done.text
        view = screen.query_one(MessageView)
        assert view.colour
        await pilot.press("ctrl+t")
        assert not view.colour and screen.query_one(OriginLegend).has_class("-off")
        await pilot.press("ctrl+t")
        assert view.colour
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.session.messages == [] and len(screen.query_one(ChatLog).children) == 0
        await pilot.press("ctrl+y")
        assert "no answer to copy yet" in notifications(app)
        await pilot.press("ctrl+r")
        assert "no answer to regenerate yet" in notifications(app)


@run_async
async def test_save_a_chat_and_resume_it(tiny_target, tiny_draft, tmp_path):
    from localspec.chat.transcript import load_transcript

    app = tiny_app(tiny_target, tiny_draft, max_tokens=10)
    app.save_dir = tmp_path
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("ctrl+s")
        assert "nothing to save yet" in notifications(app)
        await send(pilot, "Hello")
        await wait_answer(pilot)
        await pilot.press("ctrl+s")
        await pilot.pause()
        saved = sorted(tmp_path.glob("localspec-chat-*.json"))
        assert len(saved) == 1 and saved[0].with_suffix(".md").exists()
        assert any("--resume" in n for n in notifications(app))
        messages = list(app.session.messages)
    system, loaded = load_transcript(saved[0])
    assert loaded == messages
    again = tiny_app(tiny_target, tiny_draft, max_tokens=10)
    again.session.messages = loaded
    async with again.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = chat(again)
        log = screen.query_one(ChatLog)
        assert screen.query(MessageView).first().plain == messages[1]["content"]
        assert "Resumed a chat of 2 messages" in str(log.query(".note-info").last().render())
        prompt = screen.query_one("#prompt", Input)
        prompt.focus()
        await pilot.press("up")
        assert prompt.value == "Hello"
        await send(pilot, "And again")
        await wait_answer(pilot)
        assert [m["content"] for m in again.session.messages[::2]] == ["Hello", "And again"]


@run_async
async def test_regenerate_and_the_messages_sent_on_the_up_key(tiny_target, tiny_draft):
    app = tiny_app(tiny_target, tiny_draft, max_tokens=10, temperature=0.9, seed=None)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        for text in ("First", "Second"):
            await send(pilot, text)
            screen = await wait_answer(pilot)
        first_answer = app.session.messages[1]
        screen.last_done = None
        await pilot.press("ctrl+r")
        await wait_answer(pilot)
        # The last answer was taken back and given anew: one turn for it in the log and the chat.
        assert [m["role"] for m in app.session.messages] == ["user", "assistant", "user", "assistant"]
        assert app.session.messages[1] == first_answer and app.session.messages[2]["content"] == "Second"
        log = screen.query_one(ChatLog)
        assert len(log.query(MessageView)) == 2 and len(log.query(".user-message")) == 2
        assert screen.query(MessageView).last().plain == app.session.messages[3]["content"]
        prompt = screen.query_one("#prompt", Input)
        prompt.focus()
        await pilot.press("up")
        assert prompt.value == "Second"
        await pilot.press("up", "up")
        assert prompt.value == "First"
        await pilot.press("down")
        assert prompt.value == "Second"
        await pilot.press("down")
        assert prompt.value == ""


# -- settings -----------------------------------------------------------------------------

@run_async
async def test_change_a_setting_and_see_it_applied(tiny_target, tiny_draft):
    app = tiny_app(tiny_target, tiny_draft, max_tokens=40)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 5, "the settings")
        form = app.screen
        # An invalid value is refused in the form, with a message, and the form stays open.
        form.query_one("#set-top_p", Input).value = "1.5"
        await pilot.pause()
        assert await pilot.click("#settings-apply")
        assert isinstance(app.screen, SettingsScreen)
        assert "top-p must be in (0, 1]" in str(form.query_one("#settings-error").render())
        assert form.query_one("#set-top_p", Input).has_class("-invalid")
        form.query_one("#set-top_p", Input).value = "0.9"
        form.query_one("#set-draft_min", Input).value = "9"
        await pilot.press("ctrl+s")
        assert "draft min (9) is larger than draft max (8)" in str(form.query_one("#settings-error").render())
        # Valid values: applied from the next message.
        form.query_one("#set-draft_min", Input).value = "2"
        form.query_one("#set-max_tokens", Input).value = "7"
        form.query_one("#set-temperature", Input).value = "0.7"
        form.query_one("#set-seed", Input).value = "42"
        form.query_one("#set-drafter", Select).value = "ngram"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen), 5, "the form to close")
        s = app.session.settings
        assert (s.max_tokens, s.sampling.temperature, s.sampling.seed, s.draft_min, s.sampling.top_p,
                s.drafter) == (7, 0.7, 42, 2, 0.9, "ngram")
        # A new drafter runs on the loaded engine; the panel and the next answer show it.
        await wait_ready(pilot)
        screen = chat(app)
        panel = screen.query_one(GaugeColumn).models
        await wait_for(pilot, lambda: "n-gram" in panel.text(), 10, "the model panel")
        await send(pilot, "Hello")
        await wait_answer(pilot)
        done = screen.last_done
        assert len(done.token_ids) <= 7 and done.summary.drafter == "ngram" and done.summary.seed == 42


@run_async
async def test_settings_cancel_keeps_everything(tiny_target, tiny_draft):
    app = tiny_app(tiny_target, tiny_draft)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        before = app.session.settings
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen), 5, "the settings")
        app.screen.query_one("#set-temperature", Input).value = "abc"
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen), 5, "the chat")
        assert app.session.settings == before


# -- comparison ---------------------------------------------------------------------------

@run_async
async def test_comparison_shows_both_speeds_and_the_speedup(slow_pair, tmp_path):
    target, draft = slow_pair
    app = tiny_app(target, draft, n_ctx=1024, adaptive=False, draft_max=4)
    app.save_dir = tmp_path
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 5, "the compare screen")
        screen = app.screen
        screen.query_one("#compare-prompt", Input).value = "The quick brown fox"
        screen.query_one("#compare-tokens", Input).value = "60"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: screen.result is not None, 60, "the comparison")
        await pilot.pause()
        r = screen.result
        base, spec = r.base.summary, r.spec.summary
        assert base.n_generated == spec.n_generated == 60
        assert base.drafter == "none" and spec.drafted > 0
        assert r.identical is True            # greedy: the same tokens
        # Each pane shows its own speed; the summary has both, the speed-up, TTFT, the verdict.
        assert screen.query_one("#pane-base .pane-digits", Digits).value == f"{base.tokens_per_second:.1f}"
        assert screen.query_one("#pane-spec .pane-digits", Digits).value == f"{spec.tokens_per_second:.1f}"
        assert screen.query_one("#pane-base").view.plain == r.base.text
        summary = str(screen.query_one("#compare-summary").render())
        assert f"speed-up {r.speedup:.2f}x" in summary
        assert f"{base.tokens_per_second:.1f} tok/s" in summary and f"{spec.tokens_per_second:.1f} tok/s" in summary
        assert "first token" in summary and "identical (60 tokens)" in summary
        # The runs were one after the other, never together.
        assert r.base.summary.generation_seconds > 0 and r.spec.summary.generation_seconds > 0
        await pilot.press("ctrl+s")
        saved = sorted(p.suffix for p in tmp_path.iterdir())
        assert saved == [".json", ".md"]
        data = json.loads(next(tmp_path.glob("*.json")).read_text())
        assert data["identical"] is True and data["speedup"] == pytest.approx(r.speedup)
        assert "speed-up" in next(tmp_path.glob("*.md")).read_text()
        # Answers that part (here: the speculative answer's 11th token replaced by another):
        # the target's logits there are measured off the UI thread.
        ids = list(r.base.token_ids)
        r.spec = replace(r.spec, token_ids=tuple(ids[:10] + [(ids[10] + 1) % 100] + ids[11:]))
        screen.explain_difference(app.session.engine, screen._run["tokens"], r)
        await wait_for(pilot, lambda: r.gap_at_difference is not None, 30, "the logit gap")
        await pilot.pause()
        summary = str(screen.query_one("#compare-summary").render())
        assert f"from token {r.first_difference}" in summary and ("near-tie" in summary or "logits" in summary)


# -- errors -------------------------------------------------------------------------------

@run_async
async def test_incompatible_pair_is_a_dialog_not_a_crash(zoo, tiny_target):
    other = zoo.get(TinySpec(vocab_shuffle=3), "shuffled.gguf")
    app = tiny_app(tiny_target, other)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog), 20, "the error dialog")
        dialog = app.screen
        assert app.engine_state == "failed"
        assert "incompatible pair" in dialog.message
        assert "token texts" in dialog.details and "verdict: INCOMPATIBLE" in dialog.details
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen), 5, "the chat")
        # Still running: sending says why nothing can answer.
        await send(pilot, "Hello")
        assert any("no model is loaded" in n for n in notifications(app))
        assert "not loaded" in app.screen.query_one(GaugeColumn).models.text()


@run_async
async def test_missing_model_and_context_errors_are_notifications(tiny_target, tiny_draft, tmp_path):
    app = tiny_app(tmp_path / "gone.gguf", tiny_draft)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog), 20, "the error dialog")
        assert "gone.gguf: no such file" in app.screen.message
        await pilot.press("enter")
    # A prompt longer than the context: a notification, the message stays in the input to be
    # shortened, nothing is sent, the app goes on.
    app = tiny_app(tiny_target, tiny_draft, n_ctx=256, max_tokens=400)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await send(pilot, "the fox jumps " * 200)
        await pilot.pause()
        assert any("context holds 256" in n for n in notifications(app))
        assert app.session.messages == [] and screen.job is None
        assert screen.query_one("#prompt", Input).value == "the fox jumps " * 200
        # An answer that fills the context stops with a warning, keeping what it wrote.
        engine = app.session.engine
        k = max(k for k in range(1, 200)
                if len(engine.chat_prompt([{"role": "user", "content": "the fox jumps " * k}])) < 200)
        await send(pilot, "the fox jumps " * k)
        await wait_answer(pilot)
        done = screen.last_done
        assert done.stop_reason == StopReason.CONTEXT_FULL and done.token_ids
        assert any("context full" in n for n in notifications(app))
        assert app.session.messages[-1] == {"role": "assistant", "content": done.text}
        # The next message: the chat outgrew the context, its first turn is left out (with a note).
        await send(pilot, "Say hi.")
        await wait_answer(pilot)
        assert app.session.left_out == 2 and len(app.session.messages) == 4
        assert "no longer fits the context (256 tokens)" in str(screen.query(".note-info").last().render())
        assert "2 oldest messages left out" in str(screen.query_one("#status").render())


# -- models screen and pulling ------------------------------------------------------------

T_REPO, T_FILE = "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF", "smollm2-1.7b-instruct-q4_k_m.gguf"
D_REPO, D_FILE = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "smollm2-135m-instruct-q8_0.gguf"


@pytest.fixture
def hub(zoo, tiny_target, tiny_draft, monkeypatch, tmp_path):
    from hubserver import FakeHub, configure_client

    from localspec.models import hub as lhub

    big = zoo.get(TinySpec(n_embd=256, n_ff=512, n_layer=4), "hub-big.gguf")
    with FakeHub() as h:
        h.add_file(T_REPO, T_FILE, big)
        h.add_file(D_REPO, D_FILE, tiny_draft)
        configure_client(monkeypatch, h, tmp_path, chunk_size=64 * 1024)
        monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "home"))
        monkeypatch.setattr(lhub, "_retry_pause", lambda attempt: None)
        yield h


@run_async
async def test_pull_a_pair_with_progress_then_chat_with_it(hub):
    from localspec.chat.session import ChatSession, ModelChoice
    from localspec.chat.settings import CHAT_DEFAULTS
    from localspec.tui.app import LocalspecApp

    hub.throttle(T_REPO, T_FILE, chunk=256 * 1024, delay=0.03)
    session = ChatSession(ModelChoice(threads=1), CHAT_DEFAULTS.with_(temperature=0.0, max_tokens=8))
    app = LocalspecApp(session, monitor=StaticMonitor(SYSTEM), load_on_start=False)
    seen: list[dict[str, float]] = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen), 5, "the models screen")
        screen = app.screen
        panel = screen.query_one(PullPanel)
        original = panel.progress

        def spy(updates):
            original(updates)
            seen.append(panel.bars())

        panel.progress = spy
        screen.query_one("#pull-target", Select).value = "smollm2-1.7b"
        screen.query_one("#pull-draft", Input).value = "135m"
        await pilot.pause()
        assert await pilot.click("#pull")
        await wait_for(pilot, lambda: screen.pulled is not None or screen.pull is None, 60, "the pull")
        status = str(screen.query_one("#pull-status").render())
        assert screen.pulled is not None, (notifications(app), getattr(app.screen, "message", None), status)
        label = f"{T_REPO}/{T_FILE}"
        # The target's bar moved through intermediate values before reaching 100%.
        fractions = [b[label] for b in seen if label in b]
        assert any(0 < f < 1 for f in fractions) and fractions[-1] == 1.0
        assert panel.bars()[f"{D_REPO}/{D_FILE}"] == 1.0
        assert "ready: smollm2-1.7b:q4_k_m + smollm2-135m:q8_0" in str(screen.query_one("#pull-status").render())
        # The new pair is listed, selected, and can be checked and chatted with.
        table = screen.query_one("#pairs-table", DataTable)
        row = screen.selected_pair()
        assert row is not None and row.key == "smollm2-1.7b:q4_k_m + smollm2-135m:q8_0"
        assert table.row_count >= 1
        assert screen.query_one("#models-table", DataTable).row_count == 2
        await pilot.pause()
        assert await pilot.click("#check-pair")
        assert "verdict: compatible" in str(screen.query_one("#compat-report").render())
        assert await pilot.click("#use-pair")
        await wait_for(pilot, lambda: isinstance(app.screen, ChatScreen), 5, "the chat")
        await wait_ready(pilot)
        panel = app.screen.query_one(GaugeColumn).models
        await wait_for(pilot, lambda: "smollm2-1.7b:q4_k_m" in panel.text(), 10, "the model panel")
        await send(pilot, "Hi")
        done = (await wait_answer(pilot)).last_done
        assert 0 < len(done.token_ids) <= 8


@run_async
async def test_pull_can_be_cancelled_and_errors_are_dialogs(hub):
    from localspec.chat.session import ChatSession, ModelChoice
    from localspec.chat.settings import CHAT_DEFAULTS
    from localspec.tui.app import LocalspecApp

    hub.throttle(T_REPO, T_FILE, chunk=16 * 1024, delay=0.05)
    app = LocalspecApp(ChatSession(ModelChoice(), CHAT_DEFAULTS.with_()), monitor=StaticMonitor(SYSTEM),
                       load_on_start=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen), 5, "the models screen")
        screen = app.screen
        screen.query_one("#pull-target", Select).value = "smollm2-1.7b"
        await pilot.pause()
        assert await pilot.click("#pull")
        panel = screen.query_one(PullPanel)
        await wait_for(pilot, lambda: any(0 < f < 1 for f in panel.bars().values()), 30, "download progress")
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: screen.pull is None, 10, "the cancellation")
        assert "cancelled" in str(panel.query_one("#pull-status").render())
        assert any("resume" in n for n in notifications(app))
        from localspec.models.store import Store

        assert Store().models() == []
        # A draft the catalog does not know: an error dialog, and the app goes on.
        screen.query_one("#pull-draft", Input).value = "llama-99b"
        await pilot.pause()
        assert await pilot.click("#pull")
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog), 30, "the error dialog")
        assert "llama-99b" in app.screen.message
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelsScreen), 5, "the models screen")


# -- the embedded default ------------------------------------------------------------------

@run_async
async def test_fresh_machine_chats_with_the_demo_pair(monkeypatch, tmp_path):
    """`localspec chat` with nothing pulled and no Hub: the demo pair is prepared (with a
    progress message), loaded, and answers."""
    from localspec.chat.session import ChatSession
    from localspec.chat.settings import CHAT_DEFAULTS
    from localspec.cli.chat import choose_models
    from localspec.tui.app import LocalspecApp

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "fresh"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    opts = dict(n_ctx=1024, threads=1, gpu_layers=None, gpu_layers_draft=None, cache_type="f16")
    choice, drafter = choose_models(None, opts)
    assert choice.demo and drafter == "model"
    app = LocalspecApp(ChatSession(choice, CHAT_DEFAULTS.with_(temperature=0.0, max_tokens=12)),
                       monitor=StaticMonitor(SYSTEM))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot, timeout=120)
        assert any("preparing the demo pair" in s for s in app.status_log), app.status_log
        assert (tmp_path / "fresh" / "models" / "demo" / "SmolLM2-135M-Instruct.F16.gguf").is_file()
        card = chat(app).query_one(GaugeColumn).models
        await wait_for(pilot, lambda: "compatible" in card.text(), 10, "the model panel")
        panel = card.text()
        assert "SmolLM2-135M F16 (demo)" in panel and "Q4_1" in panel
        await send(pilot, "What is the capital of France?")
        done = (await wait_answer(pilot, 60)).last_done
        assert "Paris" in done.text
