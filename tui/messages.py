"""Messages from the worker threads to the UI.

Generation and pull progress is coalesced by :mod:`.worker`: a message carries everything
that happened since the previous one (text segments, a statistics snapshot, the latest
byte counts), and at most ``1 / interval`` of them are posted per second. They go to the
screen that started the job and stop there (``bubble=False``: no second dispatch at the app).
"""

from __future__ import annotations

from textual.message import Message

from ..chat.live import LiveStats, Segment
from ..chat.session import ModelSummary
from ..engine.events import Done

# -- the engine ---------------------------------------------------------------------------

class EngineLoading(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class EngineReady(Message):
    def __init__(self, summary: ModelSummary) -> None:
        super().__init__()
        self.summary = summary


class EngineFailed(Message):
    def __init__(self, error: str, details: str = "") -> None:
        super().__init__()
        self.error = error
        self.details = details


# -- generation ---------------------------------------------------------------------------

class GenerationProgress(Message, bubble=False):
    """Text and statistics since the previous progress message of the same job."""

    def __init__(self, job: str, segments: list[Segment], stats: LiveStats) -> None:
        super().__init__()
        self.job = job
        self.segments = segments
        self.stats = stats


class GenerationFinished(Message, bubble=False):
    """The last message of a job that ran to its end (or was stopped)."""

    def __init__(self, job: str, segments: list[Segment], stats: LiveStats, done: Done,
                 steps_after_stop: int) -> None:
        super().__init__()
        self.job = job
        self.segments = segments
        self.stats = stats
        self.done = done
        self.steps_after_stop = steps_after_stop


class GenerationFailed(Message, bubble=False):
    """The last message of a job that raised (context overflow, a broken template...)."""

    def __init__(self, job: str, segments: list[Segment], stats: LiveStats, error: str) -> None:
        super().__init__()
        self.job = job
        self.segments = segments
        self.stats = stats
        self.error = error


# -- pulling ------------------------------------------------------------------------------

class PullStatus(Message, bubble=False):
    def __init__(self, text: str, files: list[tuple[str, int]] | None = None) -> None:
        super().__init__()
        self.text = text
        self.files = files or []      # (progress label, bytes) of every file, once the plan is known


class PullProgress(Message, bubble=False):
    """Latest (done, total) bytes of every file that moved since the previous message."""

    def __init__(self, progress: dict[str, tuple[int, int]]) -> None:
        super().__init__()
        self.progress = progress


class PullFinished(Message, bubble=False):
    def __init__(self, target: str, draft: str | None, target_path: str, draft_path: str | None) -> None:
        super().__init__()
        self.target = target
        self.draft = draft
        self.target_path = target_path
        self.draft_path = draft_path


class PullFailed(Message, bubble=False):
    def __init__(self, error: str, details: str = "", cancelled: bool = False) -> None:
        super().__init__()
        self.error = error
        self.details = details
        self.cancelled = cancelled
