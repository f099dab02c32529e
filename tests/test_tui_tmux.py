"""The real app in a real terminal: ``localspec chat`` inside tmux (send-keys, capture-pane) on
the tiny models. Start, ask, see the answer and the gauges, quit, and nothing is left running.

Needs tmux (Debian: ``apt-get install -y tmux``). A private tmux server (its own socket) is
started for the test, so a tmux the user runs is never touched.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.terminal

WIDTH, HEIGHT = 130, 42


class Tmux:
    def __init__(self, socket: str):
        self.socket = socket

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=20,
                              check=check)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "chat").stdout

    def wait(self, predicate, timeout: float, what: str) -> str:
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; the screen was:\n{text}")


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (apt-get install -y tmux)")
    t = Tmux(f"localspec-test-{os.getpid()}")
    yield t
    t("kill-server", check=False)


def test_chat_in_a_real_terminal(tmux, tiny_target, tiny_draft, tmp_path):
    status = tmp_path / "exit-status"
    # COLUMNS/LINES would pin Textual to a stale size (the pane may start at 80x24 and grow).
    cmd = (f"unset COLUMNS LINES; {shlex.quote(sys.executable)} -m localspec chat {shlex.quote(str(tiny_target))} "
           f"--draft {shlex.quote(str(tiny_draft))} --temp 0 --threads 1 -n 40 --fixed-k --draft-max 4; "
           f"echo $? > {shlex.quote(str(status))}; sleep 60")
    env = {k: os.environ[k] for k in ("LOCALSPEC_HOME", "HF_HOME", "HF_HUB_CACHE", "PATH") if k in os.environ}
    args = ["new-session", "-d", "-s", "chat", "-x", str(WIDTH), "-y", str(HEIGHT)]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    tmux(*args, "-e", "TERM=xterm-256color", cmd)

    pattern = f"^{sys.executable} -m localspec chat {tiny_target}"   # the app, not the shell around it

    def running() -> str:
        return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.strip()

    # Start: the models load and the screen says so.
    # One frame reaches tmux in pieces: wait for all of it, not just the first part seen.
    ready = ("ready ·", "target.gguf", "compatible", "tok/s", "VRAM", "RAM")
    screen = tmux.wait(lambda s: all(x in s for x in ready), 60, "the app to be ready")
    assert running()
    assert "target.gguf" in screen and "compatible" in screen       # the model panel
    assert "tok/s" in screen and "VRAM" in screen and "RAM" in screen   # the gauges

    # Ask: the answer streams into the log; the status line and the gauges show the run.
    tmux("send-keys", "-t", "chat", "-l", "Hello there")
    tmux("send-keys", "-t", "chat", "Enter")
    answered = ("answered:", "Hello there", "assistant", "acceptance", "per drafting step", "verify")
    screen = tmux.wait(lambda s: all(x in s for x in answered), 60, "the answer")
    assert "you" in screen and "Hello there" in screen and "assistant" in screen
    assert "acceptance" in screen and "per drafting step" in screen and "verify" in screen
    line = next(row for row in screen.splitlines() if "answered:" in row)
    n_tokens = int(line.split("answered:")[1].split("tokens")[0])
    assert 0 < n_tokens <= 40
    assert "tok/s" in line and "first token" in line

    # Quit: the app ends cleanly and leaves no process behind.
    tmux("send-keys", "-t", "chat", "C-q")
    end = time.monotonic() + 20
    while not status.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert status.exists(), tmux.screen()
    assert status.read_text().strip() == "0"
    assert running() == ""
