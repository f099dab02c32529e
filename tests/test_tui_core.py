"""The TUI's UI-free core: live statistics, settings parsing, system gauges (NVML faked), the
comparison's files, the chat command's model choice, and the worker's messages and bounds."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
from test_tui_support import FakeClock, FakeEngine, TickCounter

from localspec.chat.comparison import ComparisonResult
from localspec.chat.live import Accumulator
from localspec.chat.settings import (
    CHAT_DEFAULTS,
    SettingError,
    form_values,
    parse_settings,
)
from localspec.chat.system_stats import SystemMonitor
from localspec.engine import EngineConfig
from localspec.engine.events import (
    Done,
    Origin,
    PolicyNote,
    PromptProcessed,
    Step,
    StopReason,
    Summary,
    TextChunk,
    Token,
)
from localspec.errors import BadInput
from localspec.tui.format import bar, printable
from localspec.tui.messages import (
    GenerationFailed,
    GenerationFinished,
    GenerationProgress,
)
from localspec.tui.worker import GenerationJob

# -- live statistics ----------------------------------------------------------------------

def test_accumulator_folds_events_into_stats_and_segments():
    clock = FakeClock()
    acc = Accumulator(drafter="model", clock=clock, window=1.0)
    clock.now += 0.5
    acc.feed(PromptProcessed(30, 10, 0.5))
    clock.now += 0.1
    for text, origin in (("a", Origin.DRAFT), ("b", Origin.DRAFT), ("c", Origin.TARGET)):
        acc.feed(Token(1, text, origin))
    acc.feed(Step(0, 4, 4, 2, 3, 0.02, 0.08, True))
    assert acc.take_segments() == [("ab", "draft"), ("c", "target")]   # merged by origin
    assert acc.take_segments() == []
    st = acc.snapshot()
    assert st.phase == "generating" and st.tokens == 3 and st.prompt_tokens == 30 and st.cached_tokens == 10
    assert st.ttft == pytest.approx(0.6)
    assert st.rate == pytest.approx(3 / 0.1)
    assert st.acceptance == pytest.approx(0.5) and st.accepted_per_step == 2 and st.tokens_per_step == 3
    assert st.draft_share == pytest.approx(0.2) and st.k == 4 and st.drafting
    # The rate is over the recent window: old tokens drop out of it.
    clock.now += 2.0
    for _ in range(4):
        acc.feed(Token(1, "x", Origin.BONUS))
    acc.feed(PolicyNote(False, 0, "drafting paused because"))
    acc.feed(TextChunk("tail"))
    st = acc.snapshot()
    assert st.rate == pytest.approx(4 / 2.0) and not st.drafting and st.policy_reason == "drafting paused because"
    assert len(st.history) == 2
    assert acc.take_segments() == [("xxxx", "bonus"), ("tail", "text")]
    summary = Summary(n_generated=7, generation_seconds=2.2, tokens_per_second=3.18)
    acc.feed(Done(summary, "abcxxxxtail", (1,) * 7, StopReason.CANCELLED))
    st = acc.snapshot()
    assert st.phase == "stopped" and st.rate == 3.18 and st.elapsed == 2.2


def test_printable_keeps_the_terminal_safe():
    assert printable("a\x1b[31mb\x00\tc\nd\x7f\x9b") == "a␛[31mb␀\tc\nd␡\ufffd"
    assert bar(0.5, 4) == "██  " and bar(None, 3) == "   " and bar(1.0, 2) == "██"


# -- settings -----------------------------------------------------------------------------

def test_settings_parse_refuse_and_round_trip():
    good = form_values(CHAT_DEFAULTS.with_())
    s = parse_settings(good, drafter="ngram", adaptive=False)
    assert s == CHAT_DEFAULTS.with_(drafter="ngram", adaptive=False)
    assert not s.adaptive and s.sampling.top_k == 40
    assert parse_settings(good | {"p_min": "0.3", "seed": "7", "draft_temperature": "0"}, drafter="model",
                          adaptive=True).p_min == 0.3
    cases = {
        "temperature": ("-1", "temperature must be >= 0"),
        "top_p": ("0", "top-p must be in (0, 1]"),
        "min_p": ("1", "min-p must be in [0, 1)"),
        "top_k": ("2.5", "top-k: '2.5' is not a whole number"),
        "draft_max": ("0", "draft max must be at least 1"),
        "p_min": ("1.2", "p_min must be in [0, 1)"),
        "seed": ("-3", "seed must be >= 0"),
        "repeat_penalty": ("0", "repeat penalty must be > 0"),
        "dry_multiplier": ("-1", "DRY multiplier must be >= 0"),
        "max_tokens": ("", "max tokens: a value is needed"),
        "draft_temperature": ("nan", "is not a finite number"),
    }
    for field, (value, message) in cases.items():
        with pytest.raises(SettingError) as exc:
            parse_settings(good | {field: value}, drafter="model", adaptive=True)
        assert exc.value.field == field and message in str(exc.value)
    with pytest.raises(SettingError) as exc:
        parse_settings(good | {"draft_min": "5", "draft_max": "3"}, drafter="model", adaptive=True)
    assert exc.value.field == "draft_min"
    assert CHAT_DEFAULTS.with_(drafter="none", temperature=0).describe().startswith("target only · greedy")
    # What the form does not show (from the command line) stays as it was.
    base = CHAT_DEFAULTS.with_(presence_penalty=0.5, logit_bias=((5, -1.0),), stop=("END",))
    kept = parse_settings(good | {"top_k": "7"}, drafter="model", adaptive=True, base=base)
    assert kept == base.with_(top_k=7, drafter="model", adaptive=True)
    tuned = parse_settings(good | {"repeat_penalty": "1.3", "dry_multiplier": "0.8"}, drafter="model", adaptive=True)
    assert (tuned.sampling.repeat_penalty, tuned.sampling.dry_multiplier) == (1.3, 0.8) and tuned.sampling.penalized


# -- system gauges ------------------------------------------------------------------------

class FakeNvml:
    def __init__(self, n=2, fail=None):
        self.n, self.fail, self.shut = n, fail, False

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(h + 1) * 1_000_000_000, total=80_000_000_000)

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100"

    def nvmlShutdown(self):
        self.shut = True


def test_system_monitor_reads_vram_per_gpu_and_says_when_there_is_none():
    nv = FakeNvml()
    mon = SystemMonitor(nvml=nv)
    st = mon.sample()
    assert [(g.index, g.name, g.used, g.total) for g in st.gpus] == [
        (0, "NVIDIA H100", 1_000_000_000, 80_000_000_000), (1, "NVIDIA H100", 2_000_000_000, 80_000_000_000)]
    assert st.gpu_note == "" and st.ram_total > 0 and st.process_rss > 0 and st.cpu_count >= 1
    mon.close()
    assert nv.shut
    st = SystemMonitor(nvml=FakeNvml(fail="NVML Shared Library Not Found")).sample()
    assert st.gpus == () and st.gpu_note == "no NVIDIA GPU (NVML Shared Library Not Found): models run in RAM"
    assert SystemMonitor(nvml=FakeNvml(n=0)).sample().gpu_note == "no NVIDIA GPU found; models run in RAM"
    # The real NVML on this machine: whatever it finds, sampling never raises.
    real = SystemMonitor().sample()
    assert real.gpus or real.gpu_note


# -- the comparison -----------------------------------------------------------------------

def _done(ids, tps, ttft, drafted=0, accepted=0):
    s = Summary(n_generated=len(ids), tokens_per_second=tps, time_to_first_token=ttft, drafted=drafted,
                accepted=accepted, acceptance_rate=accepted / drafted if drafted else 0.0,
                tokens_per_step=1.5, drafter="model" if drafted else "none")
    return Done(s, "text " * len(ids), tuple(ids), StopReason.MAX_TOKENS)


def test_comparison_result_json_and_markdown(tmp_path):
    r = ComparisonResult("Hi", 3, True, _done([1, 2, 3], 50.0, 0.1), _done([1, 2, 3], 80.0, 0.12, 4, 3),
                         models={"target": {"model": "llama 1B Q4_K - Medium"}, "drafter": "model"})
    assert r.speedup == pytest.approx(1.6) and r.identical is True and r.outputs_line() == "identical (3 tokens)"
    j, m = r.save(tmp_path, "run")
    data = json.loads(j.read_text())
    assert data["speedup"] == pytest.approx(1.6) and data["identical"] is True
    assert data["target_only"]["token_ids"] == [1, 2, 3] and data["speculative"]["tokens_per_second"] == 80.0
    md = m.read_text()
    assert "**speed-up: 1.60x**" in md and "| speculative | 3 | 80.0 | 0.120 | 75.0% |" in md
    diff = ComparisonResult("Hi", 3, True, _done([1, 2, 3], 50.0, 0.1), _done([1, 9, 3], 80.0, 0.1, 4, 3))
    assert diff.identical is False and diff.outputs_line() == "DIFFERENT from token 1"
    sampled = ComparisonResult("Hi", 3, False, _done([1], 1.0, 0.1), _done([2], 1.0, 0.1, 1, 0))
    assert sampled.identical is None and sampled.outputs_line().startswith("not compared")


# -- the worker ---------------------------------------------------------------------------

class Sink:
    """Collects posted messages, from any thread."""

    def __init__(self):
        self.messages = []
        self.lock = threading.Lock()

    def post_message(self, msg):
        with self.lock:
            self.messages.append((time.monotonic(), msg))
        return True


def test_generation_job_coalesces_at_a_bounded_rate():
    """A fast engine (hundreds of events between two ticks) gives one message a tick: at most
    ten a second at the 0.1 s interval, however fast the tokens come."""
    sink = Sink()

    def events(cancel):
        yield PromptProcessed(5, 0, 0.0)
        n = 0
        while sum(isinstance(m, GenerationProgress) for _, m in sink.messages) < 4:
            for _ in range(200):
                n += 1
                yield Token(n, "x", Origin.DRAFT)
                yield Step(n, 1, 1, 1, 1, 0.0, 0.0, True)
        yield Done(Summary(n_generated=n, tokens_per_second=1000.0), "x" * n, tuple(range(n)), StopReason.MAX_TOKENS)

    job = GenerationJob(sink, "t", events, drafter="model", interval=0.1)
    ticks = TickCounter.install(job)
    assert job.start().join(60)
    kinds = [type(m) for _, m in sink.messages]
    assert kinds[-1] is GenerationFinished and kinds.count(GenerationFinished) == 1
    progress = [m for _, m in sink.messages if isinstance(m, GenerationProgress)]
    assert 4 <= len(progress) <= len(ticks.intervals)      # one message a whole interval at most
    assert set(ticks.intervals) == {0.1}
    last = sink.messages[-1][1]
    text = "".join(t for m in progress for t, _ in m.segments) + "".join(t for t, _ in last.segments)
    assert text == last.done.text          # nothing lost, nothing doubled
    assert last.stats.tokens == len(last.done.token_ids) > 5 * len(progress)   # coalesced


def test_generation_job_keeps_the_gauges_moving_through_a_slow_step():
    """A slow step (a big model on a CPU): the ticker still posts at its pace, with no text and
    a live rate that falls, so the screen needs no timer of its own meanwhile. The step lasts
    until three such messages came (the engine's clock moving on meanwhile): a ticker that
    posted nothing without new text would leave the job running and the test failing."""
    sink = Sink()
    clock = FakeClock()

    def quiet() -> list:
        """Progress messages without text after the first one with text."""
        progress = [m for _, m in sink.messages if isinstance(m, GenerationProgress)]
        first = next((i for i, m in enumerate(progress) if m.segments), len(progress))
        return [m for m in progress[first:] if not m.segments]

    def events(cancel):
        yield PromptProcessed(5, 0, 0.0)
        yield Token(1, "a", Origin.TARGET)
        yield Step(1, 0, 0, 0, 1, 0.0, 0.01, False)
        for seen in range(3):
            clock.now += 0.2
            while len(quiet()) <= seen and not cancel.wait(0.01):
                pass
        yield Token(2, "b", Origin.TARGET)
        yield Step(2, 0, 0, 0, 1, 0.0, 0.6, False)
        yield Done(Summary(n_generated=2), "ab", (1, 2), StopReason.MAX_TOKENS)

    job = GenerationJob(sink, "t", events, interval=0.1, clock=clock)
    assert job.start().join(60)
    progress = [(t, m) for t, m in sink.messages if isinstance(m, GenerationProgress)]
    assert len(quiet()) >= 3                     # posted during the slow step, without new text
    rates = [m.stats.rate for m in quiet()]
    assert rates[-1] < rates[0]                  # the live tok/s falls while nothing comes
    text = "".join(t for _, m in progress for t, _ in m.segments) + "".join(t for t, _ in sink.messages[-1][1].segments)
    assert text == "ab"


def test_generation_job_stop_and_failure():
    started = threading.Event()

    def endless(cancel):
        yield PromptProcessed(5, 0, 0.0)
        n = 0
        while not cancel.is_set():
            n += 1
            started.set()
            yield Token(n, "y", Origin.TARGET)
            time.sleep(0.001)
            yield Step(n, 0, 0, 0, 1, 0.0, 0.001, False)
        yield Done(Summary(n_generated=n), "y" * n, tuple(range(n)), StopReason.CANCELLED)

    sink = Sink()
    job = GenerationJob(sink, "t", endless, interval=0.05).start()
    assert started.wait(5)
    job.stop()
    assert job.join(5) and not job.alive
    last = sink.messages[-1][1]
    assert isinstance(last, GenerationFinished) and last.done.stop_reason == StopReason.CANCELLED
    assert last.steps_after_stop <= 1 and last.stats.phase == "stopped"

    def broken(cancel):
        yield PromptProcessed(5, 0, 0.0)
        yield Token(1, "z", Origin.TARGET)
        raise BadInput("the prompt is 9000 tokens but the context holds 4096")

    sink = Sink()
    job = GenerationJob(sink, "t", broken, interval=0.05).start()
    assert job.join(5)
    last = sink.messages[-1][1]
    assert isinstance(last, GenerationFailed) and "context holds 4096" in last.error
    assert last.segments == [("z", "target")] and last.stats.phase == "failed"

    def crash(cancel):
        raise ZeroDivisionError("boom")
        yield  # pragma: no cover

    sink = Sink()
    GenerationJob(sink, "t", crash, interval=None).start().join(5)
    assert sink.messages[-1][1].error == "unexpected error: ZeroDivisionError: boom"


# -- the session ---------------------------------------------------------------------------

def test_session_turns_settings_and_reload_rules():
    from localspec.chat.session import ChatSession, ModelChoice

    clock = FakeClock()
    made = []

    def factory(config: EngineConfig):
        made.append(config)
        return FakeEngine(config, clock)

    s = ChatSession(ModelChoice(target="/m/t.gguf", draft="/m/d.gguf"), CHAT_DEFAULTS.with_(max_tokens=9),
                    system="Be brief.", engine_factory=factory)
    with pytest.raises(BadInput, match="no model is loaded"):
        s.begin_turn("hi")
    summary = s.load()
    assert made[-1].draft == "/m/d.gguf"
    assert summary.compatible and summary.target.quant == "Q4_K_M" and summary.draft.quant == "Q8_0"
    s.begin_turn("hi")
    assert s.messages == [{"role": "user", "content": "hi"}]
    s.end_turn("hello")
    assert s.last_answer() == "hello"
    assert not s.needs_reload(s.settings.with_(temperature=0.1, draft_max=3))
    # Another drafter runs on the loaded engine (its draft model stays loaded for later).
    assert not s.needs_reload(s.settings.with_(drafter="ngram"))
    s.use(s.settings.with_(drafter="ngram"))
    assert s.summary.drafter == "ngram" and len(made) == 1
    # Loading without the draft model: then the draft model needs a reload.
    first = s.engine
    s.load()
    assert first.closed and made[-1].draft is None
    assert "n-gram" in s.summary.compat and s.summary.compatible is None
    assert s.needs_reload(s.settings.with_(drafter="model"))
    s.new_chat()
    assert s.messages == []
    no_draft = ChatSession(ModelChoice(target="/m/t.gguf"), CHAT_DEFAULTS.with_(), engine_factory=factory)
    with pytest.raises(BadInput, match="no draft model"):
        no_draft.load()
    with pytest.raises(BadInput, match="needs a draft model"):
        no_draft.check_settings(CHAT_DEFAULTS.with_(drafter="model"))
    s.close()
    assert s.engine is None


# -- the chat command ----------------------------------------------------------------------

def test_chat_command_errors_are_one_line(tiny_target, tiny_draft, capsys):
    from localspec.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as exc:
            main(["chat", *args])
        return exc.value.code, capsys.readouterr().err

    for args, message in (
        (("--draft", str(tiny_draft)), "--draft needs a TARGET"),
        ((str(tiny_target), "--ngram", "--no-draft"), "choose one of --draft, --ngram, --no-draft"),
        ((str(tiny_target),), f"no draft for {tiny_target}: give --draft DRAFT"),
        (("no-such-model",), "target model no-such-model: no such file or local model"),
        ((str(tiny_target), "--draft-min", "5", "--draft-max", "3", "--ngram"), "--draft-min (5) is larger"),
    ):
        code, err = run(*args)
        lines = [row for row in err.splitlines() if row.strip()]
        assert code == 2 and len(lines) == 1 and message in lines[0], (args, err)
        assert "Traceback" not in err


def test_chat_command_finds_the_draft_of_a_registered_pair(tiny_target, tiny_draft, monkeypatch, tmp_path):
    from localspec.cli.chat import choose_models
    from localspec.models.store import ModelEntry, PairEntry, Store

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    store = Store()
    store.add_model(ModelEntry(name="tiny:f32", path=str(tiny_target), files=[str(tiny_target)]))
    store.add_model(ModelEntry(name="tiny-draft:f32", path=str(tiny_draft), files=[str(tiny_draft)]))
    store.add_pair(PairEntry("tiny:f32", "tiny-draft:f32", True))
    opts = dict(n_ctx=512, threads=1, gpu_layers=None, gpu_layers_draft=None, cache_type="f16")
    choice, drafter = choose_models("tiny:f32", opts)
    assert (choice.target, choice.draft, drafter) == (str(tiny_target), str(tiny_draft), "model")
    assert choice.label() == "tiny:f32 + tiny-draft:f32"
    choice, drafter = choose_models(str(tiny_target), opts | {"ngram": True})
    assert choice.draft is None and drafter == "ngram"


def test_chat_command_uses_tuned_settings_unless_a_flag_is_given(tiny_target, tiny_draft, monkeypatch, tmp_path,
                                                                  capsys):
    from localspec.bench import tuning
    from localspec.cli import main
    from localspec.tui.app import LocalspecApp

    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path))
    key = tuning.pair_key(tiny_target, tiny_draft, "CPU")
    tuning.store(key, {"target": str(tiny_target), "draft": str(tiny_draft), "backend": "CPU",
                       "settings": {"draft_max": 3, "fixed_k": True, "p_min": None, "draft_temp": None}})
    seen = []
    monkeypatch.setattr(LocalspecApp, "run", lambda self: seen.append(self.session.settings))

    def chat(*args):
        with pytest.raises(SystemExit) as exc:
            main(["chat", *args])
        assert exc.value.code == 0

    chat(str(tiny_target), "--draft", str(tiny_draft))
    assert (seen[-1].draft_max, seen[-1].adaptive) == (3, False)
    assert "using tuned settings for this pair" in capsys.readouterr().err

    chat(str(tiny_target), "--draft", str(tiny_draft), "--draft-max", "6")   # a flag wins
    assert (seen[-1].draft_max, seen[-1].adaptive) == (6, False)
    assert "using tuned" not in capsys.readouterr().err


def test_gauge_lines_wider_than_the_box_are_cut_keeping_their_styles():
    from localspec.tui.widgets.gauge_column import clip

    line = (("acceptance", "label"), (" 59% ", "value"), ("█" * 40, "bar"))
    cut = clip(line, 20)
    assert cut == (("acceptance", "label"), (" 59% ", "value"), ("█" * 5, "bar"))
    assert clip((("日本語", None),), 3) == (("日 ", None),)      # a wide glyph never split in half
    assert clip(line, 100) == line
