"""The row-cropped compositor draws exactly what Textual's own would, from fewer lines.

Every partial update of a real streaming answer (chat screen) and of a comparison (compare
screen) is drawn twice: by :class:`RowCroppedCompositor`, then by Textual's own compositor
from the same refreshed regions; the terminal output of the two must be the same bytes.
"""

from __future__ import annotations

from test_tui_support import SIZE, chat, run_async, send, tiny_app, wait_answer, wait_for, wait_ready
from textual._compositor import Compositor
from textual.geometry import Region
from textual.widgets import Input

from localspec.tui import compositor as compositor_module
from localspec.tui.compositor import RowCroppedCompositor, covered
from localspec.tui.screens.compare import CompareScreen


def test_covered():
    area = Region(2, 1, 6, 3)
    assert covered(area, [Region(0, 0, 10, 10)])
    assert covered(area, [Region(0, 0, 5, 10), Region(5, 0, 5, 10)])          # side by side
    assert covered(area, [Region(2, 1, 6, 1), Region(2, 2, 6, 2)])            # stacked
    assert not covered(area, [Region(0, 0, 5, 10), Region(6, 0, 5, 10)])      # a gap at x=5
    assert not covered(area, [Region(2, 1, 6, 2)])                            # the last row
    assert not covered(area, [])


class Twin:
    """Draws each partial update with both compositors and keeps the differences."""

    def __init__(self, monkeypatch):
        self.frames = self.lines_ours = self.lines_textual = 0
        self.mismatches: list[tuple[str, str]] = []
        ours = RowCroppedCompositor.render_partial_update
        twin = self

        def render_partial_update(comp):
            regions = set(comp._dirty_regions)
            mine, asked_mine = twin.drawn(comp, ours)
            comp._dirty_regions.update(regions)
            comp.__class__ = Compositor                 # Textual's own _get_renders
            try:
                theirs, asked_theirs = twin.drawn(comp, Compositor.render_partial_update)
            finally:
                comp.__class__ = RowCroppedCompositor
            if mine is not None or theirs is not None:
                twin.frames += 1
                twin.lines_ours += asked_mine
                twin.lines_textual += asked_theirs
                console = comp_console()
                a = mine.render_segments(console) if mine is not None else ""
                b = theirs.render_segments(console) if theirs is not None else ""
                if a != b:
                    twin.mismatches.append((a, b))
            return mine

        monkeypatch.setattr(RowCroppedCompositor, "render_partial_update", render_partial_update)

    @staticmethod
    def drawn(comp, method):
        """The update and the number of widget lines it asked for."""
        asked = 0
        renders = type(comp)._get_renders

        def counting(self, crop=None):
            nonlocal asked
            for region, clip, strips in renders(self, crop):
                asked += len(strips)
                yield region, clip, strips

        cls = type(comp)
        cls._get_renders = counting
        try:
            return method(comp), asked
        finally:
            cls._get_renders = renders


_console = None


def comp_console():
    global _console
    if _console is None:
        from rich.console import Console
        _console = Console(width=SIZE[0], color_system="truecolor", force_terminal=True, legacy_windows=False)
    return _console


def test_the_compositor_is_installed():
    assert compositor_module.COMPATIBLE, "this Textual's compositor is not the one tui/compositor.py expects"


@run_async
async def test_streaming_frames_are_the_same_as_textuals(slow_pair, monkeypatch):
    twin = Twin(monkeypatch)
    target, draft = slow_pair
    app = tiny_app(target, draft, max_tokens=300, n_ctx=2048, adaptive=False, draft_max=4)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = chat(app)
        assert isinstance(screen._compositor, RowCroppedCompositor)
        await send(pilot, "The quick")
        await wait_answer(pilot, 60)
        chat_frames = twin.frames
        # The comparison screen streams two panes the same way.
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen), 5, "the compare screen")
        compare = app.screen
        assert isinstance(compare._compositor, RowCroppedCompositor)
        compare.query_one("#compare-prompt", Input).value = "The quick brown fox"
        compare.query_one("#compare-tokens", Input).value = "80"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: compare.result is not None, 60, "the comparison")
        await pilot.pause()
    assert chat_frames >= 5 and twin.frames > chat_frames + 3, (chat_frames, twin.frames)
    assert not twin.mismatches, f"{len(twin.mismatches)} of {twin.frames} frames differ"
    # The point of it: far fewer widget lines asked for.
    assert twin.lines_ours < 0.6 * twin.lines_textual, (twin.lines_ours, twin.lines_textual)
