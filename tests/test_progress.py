"""Progress bars are drawn for a person at a terminal only: piped or redirected output gets
the results alone."""

import io

from localspec.cli import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _streams(monkeypatch, out_tty: bool, err_tty: bool) -> io.StringIO:
    err = _Terminal() if err_tty else io.StringIO()
    monkeypatch.setattr(progress.sys, "stdout", _Terminal() if out_tty else io.StringIO())
    monkeypatch.setattr(progress.sys, "stderr", err)
    return err


def _drive(bars: progress.Bars) -> None:
    for done in (0, 500, 1000):
        bars("model.gguf", done, 1000)
    bars.close()


def test_bars_draw_at_a_terminal(monkeypatch):
    err = _streams(monkeypatch, True, True)
    _drive(progress.Bars())
    assert "model.gguf" in err.getvalue() and "100%" in err.getvalue()


def test_bars_are_quiet_when_stdout_or_stderr_is_not_a_terminal(monkeypatch):
    for out_tty, err_tty in ((False, True), (True, False), (False, False)):
        err = _streams(monkeypatch, out_tty, err_tty)
        _drive(progress.Bars())
        assert err.getvalue() == "", (out_tty, err_tty)


def test_bars_asked_off_stay_off_at_a_terminal(monkeypatch):
    err = _streams(monkeypatch, True, True)
    _drive(progress.Bars(enabled=False))
    assert err.getvalue() == ""


def test_a_sweep_bar_draws_only_at_a_terminal(monkeypatch):
    for tty in (False, True):
        err = _streams(monkeypatch, tty, tty)
        b = progress.bar(total=3, desc="sweep", unit="gen")
        b.update(3)
        b.close()
        assert ("sweep" in err.getvalue()) is tty
