"""Target alone vs speculative on the same prompt: the two runs, the result, JSON and Markdown.

The one comparison implementation: ``localspec compare`` calls :func:`compare`; the app's
compare screen streams the two runs of :func:`runs` itself and builds the same
:class:`ComparisonResult`. No textual here.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine import DrafterKind, RunSpec
from ..engine.events import Done, Event

if TYPE_CHECKING:   # the engine loads llama.cpp; a comparison only drives one it is given
    from ..engine import Engine

# Logits closer than this where two greedy answers part are a near-tie on any model: llama.cpp's
# batch rounding of F16 weights on a CPU moves them by up to ~0.009. K-quant weights are
# rounded far more differently in a batch (tenths of a logit), measured where answers part.
NEAR_TIE = 0.01


def near_tie(gap: float | None, rounding: float | None = None) -> bool:
    """Whether two tokens ``gap`` apart in the target's logits are a near-tie: closer than
    NEAR_TIE, or than the batch rounding measured there (:meth:`Engine.batch_rounding`)."""
    return gap is not None and abs(gap) < max(NEAR_TIE, rounding or 0.0)


@dataclass
class ComparisonResult:
    prompt: str
    max_tokens: int
    greedy: bool
    base: Done                       # the target alone
    spec: Done                       # speculative
    models: dict = field(default_factory=dict)
    sampling: dict = field(default_factory=dict)
    # Where greedy answers part: the target's logit of its own token there minus that of the
    # speculative answer's (None: not measured), and how far llama.cpp's batched decode moves
    # such gaps over the tokens before it (None: not measured). A smaller gap is a near-tie.
    gap_at_difference: float | None = None
    batch_rounding: float | None = None

    @property
    def policy(self) -> dict:
        """The speculative run's policy: its estimates and decisions."""
        return self.spec.policy

    @property
    def speedup(self) -> float:
        b = self.base.summary.tokens_per_second
        return self.spec.summary.tokens_per_second / b if b else 0.0

    @property
    def identical(self) -> bool | None:
        """Token for token equal (greedy only; sampled runs take different draws)."""
        if not self.greedy:
            return None
        return list(self.base.token_ids) == list(self.spec.token_ids)

    @property
    def first_difference(self) -> int | None:
        return first_difference(self.base.token_ids, self.spec.token_ids)

    def outputs_line(self) -> str:
        same = self.identical
        if same is None:
            return "not compared (sampling: same distribution, different draws; greedy gives a token check)"
        if same:
            return f"identical ({len(self.spec.token_ids)} tokens)"
        gap, rounding = self.gap_at_difference, self.batch_rounding
        if near_tie(gap, rounding):
            measured = (f" (on this model it moves such gaps by up to {rounding:.4f} over the tokens before)"
                        if rounding is not None and rounding >= NEAR_TIE else "")
            return (f"different from token {self.first_difference}, at a near-tie: the target's two best "
                    f"tokens there are {abs(gap):.4f} apart, and llama.cpp rounds a batch of tokens "
                    f"differently from one at a time{measured}")
        note = f" (the target's logits for the two tokens {gap:.3f} apart)" if gap is not None else ""
        return f"DIFFERENT from token {self.first_difference}{note}"

    def to_dict(self) -> dict:
        return {
            "prompt": self.prompt, "max_tokens": self.max_tokens, "greedy": self.greedy,
            "speedup": self.speedup, "identical": self.identical,
            "first_difference": self.first_difference, "gap_at_difference": self.gap_at_difference,
            "batch_rounding": self.batch_rounding,
            "target_only": self.base.summary.to_dict() | {"text": self.base.text,
                                                           "token_ids": list(self.base.token_ids)},
            "speculative": self.spec.summary.to_dict() | {"text": self.spec.text,
                                                           "token_ids": list(self.spec.token_ids)},
            "models": self.models, "sampling": self.sampling, "policy": self.policy,
        }

    def to_markdown(self) -> str:
        b, s = self.base.summary, self.spec.summary
        t = self.models.get("target", {}).get("model", "?")
        d = self.models.get("draft", {}).get("model") or self.spec.summary.drafter or "?"
        lines = [
            "# localspec comparison", "",
            f"- target: {t}", f"- drafter: {d}",
            f"- prompt: {self.prompt!r}", f"- max tokens: {self.max_tokens}, "
            f"{'greedy' if self.greedy else 'sampling'}", "",
            "| run | tokens | tok/s | first token (s) | acceptance | tokens/step |",
            "|---|---:|---:|---:|---:|---:|",
            f"| target only | {b.n_generated} | {b.tokens_per_second:.1f} | {b.time_to_first_token:.3f} | - | "
            f"{b.tokens_per_step:.2f} |",
            f"| speculative | {s.n_generated} | {s.tokens_per_second:.1f} | {s.time_to_first_token:.3f} | "
            f"{s.acceptance_rate:.1%} | {s.tokens_per_step:.2f} |", "",
            f"**speed-up: {self.speedup:.2f}x**; outputs {self.outputs_line()}.", "",
            "## Speculative output", "", "```text", self.spec.text, "```", "",
        ]
        return "\n".join(lines)

    def save(self, folder: Path, stem: str | None = None) -> tuple[Path, Path]:
        """Write ``<stem>.json`` and ``<stem>.md`` into ``folder``; return both paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        stem = stem or time.strftime("localspec-compare-%Y%m%d-%H%M%S")
        j, m = folder / f"{stem}.json", folder / f"{stem}.md"
        j.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        m.write_text(self.to_markdown(), encoding="utf-8")
        return j, m


def runs(spec: RunSpec) -> tuple[RunSpec, RunSpec]:
    """(the target alone, speculative): the same settings, only the drafter differs."""
    return spec.with_(drafter=DrafterKind.NONE), spec


def compare(engine: Engine, tokens: list[int], spec: RunSpec, *, prompt: str = "",
            on_event: Callable[[str, Event], None] | None = None,
            cancel: threading.Event | None = None) -> ComparisonResult:
    """Run the target alone, then speculative, each from an empty cache (a fair race)."""
    done: dict[str, Done] = {}
    for name, run in zip(("target_only", "speculative"), runs(spec)):
        engine.reset()
        for ev in engine.run(tokens, run, cancel):
            if on_event is not None:
                on_event(name, ev)
            if isinstance(ev, Done):
                done[name] = ev
    result = ComparisonResult(prompt=prompt, max_tokens=spec.max_tokens, greedy=spec.sampling.greedy,
                              base=done["target_only"], spec=done["speculative"], models=engine.describe(),
                              sampling=spec.sampling.to_dict())
    measure_difference(engine, tokens, result)
    return result


def first_difference(a, b) -> int | None:
    """The first position where two token sequences differ (the shorter one's length when
    one is the other's start); None when they are equal."""
    a, b = list(a), list(b)
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def gap_where_they_part(engine: Engine, prompt: list[int], a, b) -> tuple[int | None, float | None]:
    """Where answer ``b`` parts from ``a`` after ``prompt``, and the target's logit of a's
    token there minus b's, read as the target alone read it when ``a`` is its answer (the
    prompt in one batch, then a's tokens one at a time): the gap its own pick was made on.
    The gap is None where one answer only stopped sooner."""
    i = first_difference(a, b)
    a, b = list(a), list(b)
    if i is None or i >= min(len(a), len(b)):
        return i, None
    return i, engine.logit_gap(list(prompt) + a[:i], a[i], b[i], stepped=i)


def where_they_part(engine: Engine, prompt: list[int], a, b) -> tuple[int | None, float | None, float | None]:
    """:func:`gap_where_they_part`, and how far the target's batched decode moves such gaps
    there (:meth:`Engine.batch_rounding`; None with the gap): what :func:`near_tie` reads."""
    i, gap = gap_where_they_part(engine, prompt, a, b)
    rounding = engine.batch_rounding(list(prompt) + list(a)[:i]) if gap is not None else None
    return i, gap, rounding


def measure_difference(engine: Engine, tokens: list[int], result: ComparisonResult) -> None:
    """Where greedy answers part, how far apart the target puts the two tokens, and how far
    its batched decode moves such gaps there."""
    if result.greedy:
        _, result.gap_at_difference, result.batch_rounding = where_they_part(
            engine, tokens, result.base.token_ids, result.spec.token_ids)
