"""Errors that reach the user as one line and an exit code, never as a traceback."""

from __future__ import annotations


class LocalspecError(Exception):
    """A failure the user can act on; its message is a single line."""

    exit_code = 1

    def __init__(self, message: str, *, exit_code: int | None = None):
        super().__init__(" ".join(str(message).split()))
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(LocalspecError):
    """Input that cannot be used at all (missing file, not a GGUF, bad option value)."""

    exit_code = 2


class GGUFError(BadInput):
    """A file that is not a readable GGUF model."""


class IncompatiblePair(LocalspecError):
    """Target and draft tokenizers disagree; carries the full report."""

    exit_code = 1

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class ContextOverflow(LocalspecError):
    """The prompt does not fit in the context window."""

    exit_code = 1
