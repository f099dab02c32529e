"""What the generator asks of a drafting policy each round, and the fixed policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ...errors import BadInput
from ..events import Step

QUIET_ALWAYS = 1 << 30   # quiet rounds of a policy that never drafts


class Policy(Protocol):
    """A drafting policy, asked before each round (:meth:`next_k`) and told after it.

    ``may_draft``: this generation may draft at all (else no drafter prefill); ``drafting``:
    False while paused; ``probe``: the K just returned tries a paused drafter again.
    """

    adaptive: bool
    may_draft: bool
    drafting: bool
    probe: bool
    reason: str              # the latest reasoning, in plain words
    pauses: int
    probes: int

    @property
    def k_now(self) -> int: ...

    def next_k(self) -> int:
        """The most tokens to draft this round (0: a plain target step)."""

    def gate(self) -> Callable[[int, float], bool] | None:
        """A per-token stop rule for the draft (``gate(position, top probability)``), or None."""

    def plain_step_seconds(self) -> float | None:
        """What a plain target step costs, as measured (None: unknown)."""

    def observe(self, step: Step) -> str | None:
        """Learn from a finished round; returns a sentence when drafting turns on or off."""

    def opening_note(self) -> str | None:
        """A sentence to say before the first round (a pause it starts in), once; else None."""

    def quiet_rounds(self) -> int:
        """How many next rounds are plain steps this policy need neither choose nor see: the
        generator runs them without asking and reports them with :meth:`passed`."""

    def passed(self, rounds: int, tokens: int) -> None:
        """``rounds`` quiet plain rounds went by, emitting ``tokens``."""

    def describe(self) -> str: ...

    def estimates(self) -> dict: ...

    def learned(self) -> dict | None:
        """What seeds the next generation (JSON), or None."""


class FixedPolicy:
    """Always allow K drafts (the user's explicit choice; 0: the target alone); p_min may end
    a draft early. Raises BadInput for k < 0."""

    adaptive = False
    probe = False
    pauses = probes = 0
    reason = ""

    def __init__(self, k: int, p_min: float | None = None):
        if k < 0:
            raise BadInput(f"draft length must be >= 0 (got {k})")
        self.k = self.k_now = k
        self.p_min = p_min or 0.0
        self.may_draft = self.drafting = k > 0

    def next_k(self) -> int:
        return self.k

    def gate(self):
        p_min = self.p_min
        return (lambda i, top: top >= p_min) if p_min > 0 else None

    def plain_step_seconds(self) -> None:
        return None

    def observe(self, step: Step) -> None:
        return None

    def opening_note(self) -> None:
        return None

    def quiet_rounds(self) -> int:
        return QUIET_ALWAYS if not self.k else 0

    def passed(self, rounds: int, tokens: int) -> None:
        pass

    def describe(self) -> str:
        if not self.k:
            return "target only"
        return f"fixed K={self.k}" + (f", p_min {self.p_min}" if self.p_min else "")

    def estimates(self) -> dict:
        return {"adaptive": False, "k": self.k}

    def learned(self) -> None:
        return None
