"""Calibrate a cascade: accuracy against time saved at several thresholds, on questions with
known answers.

Each question runs twice, greedy: the target alone (its answer and time) and a cascade that
always falls back (the draft's answer, its confidence and time, then the target drafting
from it). A threshold's figures follow from those without running again: a question whose
draft confidence clears it is answered by the draft (its time alone), the rest by the target
after the draft (both times). The threshold kept is the one that saves the most time while
its accuracy stays within ``max_loss`` of the target alone's; none when no threshold saves
time (a draft hardly cheaper than the target).

A question file is JSON lines: ``{"q": "...", "a": "...", "kind": "..."}`` (kind optional).
An answer is right when the answer's text appears as a whole word in the first line of the
output (case and surrounding spaces ignored).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..engine import Done, Engine, RunSpec, SamplingConfig
from ..errors import BadInput

QUESTIONS = Path(__file__).with_name("cascade_questions.jsonl")
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99)
INSTRUCTION = "Answer with the answer only, no explanation."


@dataclass(frozen=True)
class Question:
    q: str
    a: str
    kind: str = ""


@dataclass(frozen=True)
class Outcome:
    """One question's two runs."""

    question: Question
    target_right: bool
    target_seconds: float
    draft_right: bool
    confidence: float
    draft_seconds: float
    fallback_seconds: float      # the target after the draft, drafting from its answer


def load_questions(path: str | Path | None = None) -> list[Question]:
    """The shipped question set, or a JSON-lines file of {"q", "a"[, "kind"]}.

    Raises:
        BadInput: unreadable, empty, or a line without q and a.
    """
    p = Path(path) if path else QUESTIONS
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise BadInput(f"cannot read questions from {p}: {e.strerror or e}") from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out.append(Question(str(d["q"]), str(d["a"]), str(d.get("kind", ""))))
        except (ValueError, KeyError, TypeError):
            raise BadInput(f"{p}:{i}: each line must be a JSON object with \"q\" and \"a\"") from None
    if not out:
        raise BadInput(f"{p}: no questions")
    return out


def is_right(output: str, answer: str) -> bool:
    """Whether ``answer`` appears as a whole word in the output's first non-empty line."""
    first = next((line for line in output.strip().splitlines() if line.strip()), "")
    pattern = r"(?<![\w])" + re.escape(answer.strip().lower()) + r"(?![\w])"
    return re.search(pattern, first.lower()) is not None


def ask(engine: Engine, question: Question) -> list[int]:
    """The question as a chat prompt, with the instruction to answer briefly."""
    return engine.chat_prompt([{"role": "user", "content": f"{question.q} {INSTRUCTION}"}])


def run_question(engine: Engine, question: Question, max_tokens: int = 24) -> Outcome:
    """The target alone, then a cascade that always falls back (threshold 1)."""
    tokens = ask(engine, question)
    greedy = SamplingConfig(temperature=0.0)
    engine.reset()
    t0 = time.perf_counter()
    target = _done(engine.run(tokens, RunSpec(drafter="none", sampling=greedy, max_tokens=max_tokens)))
    t_target = time.perf_counter() - t0
    engine.reset()
    t0 = time.perf_counter()
    cascade = _done(engine.run(tokens, RunSpec(sampling=greedy, max_tokens=max_tokens, cascade=1.0)))
    t_cascade = time.perf_counter() - t0
    s = cascade.summary
    if s.answered_by == "draft":     # a confidence of exactly 1: no fallback was run
        draft_text, fallback = cascade.text, t_target
    else:
        draft_text, fallback = _draft_text(engine, tokens, max_tokens), max(t_cascade - s.cascade_seconds, 0.0)
    return Outcome(question, is_right(target.text, question.a), t_target, is_right(draft_text, question.a),
                   s.cascade_confidence or 0.0, s.cascade_seconds, fallback)


def _draft_text(engine: Engine, tokens: list[int], max_tokens: int) -> str:
    """The draft's own greedy answer (a cascade whose threshold any answer clears)."""
    engine.reset()
    return _done(engine.run(tokens, RunSpec(sampling=SamplingConfig(temperature=0.0), max_tokens=max_tokens,
                                            cascade=1e-9))).text


def _done(events) -> Done:
    done = None
    for ev in events:
        done = ev
    assert isinstance(done, Done)
    return done


def table(outcomes: list[Outcome], thresholds=THRESHOLDS, max_loss: float = 0.02) -> dict:
    """Accuracy, share answered by the draft and time saved per threshold; the chosen one."""
    n = len(outcomes)
    t_target = sum(o.target_seconds for o in outcomes)
    acc_target = sum(o.target_right for o in outcomes) / n
    rows = []
    for th in thresholds:
        by_draft = [o.confidence >= th for o in outcomes]
        right = sum(o.draft_right if d else o.target_right for o, d in zip(outcomes, by_draft))
        seconds = sum(o.draft_seconds + (0.0 if d else o.fallback_seconds) for o, d in zip(outcomes, by_draft))
        saved = round(1.0 - seconds / t_target, 4) if t_target else 0.0
        rows.append({"threshold": th, "accuracy": round(right / n, 4), "answered_by_draft": round(sum(by_draft) / n, 4),
                     "seconds": round(seconds, 3), "time_saved": saved})
    ok = [r for r in rows if r["accuracy"] >= acc_target - max_loss - 1e-9 and r["time_saved"] > 0]
    chosen = max(ok, key=lambda r: (r["time_saved"], -r["threshold"])) if ok else None
    kinds = sorted({o.question.kind for o in outcomes})
    return {"questions": n, "target_accuracy": round(acc_target, 4), "target_seconds": round(t_target, 3),
            "draft_accuracy": round(sum(o.draft_right for o in outcomes) / n, 4),
            "median_confidence": round(statistics.median(o.confidence for o in outcomes), 4),
            "max_accuracy_loss": max_loss, "thresholds": rows, "chosen": chosen,
            "by_kind": {k: {"n": sum(o.question.kind == k for o in outcomes),
                            "target": sum(o.target_right for o in outcomes if o.question.kind == k),
                            "draft": sum(o.draft_right for o in outcomes if o.question.kind == k)} for k in kinds}}


def calibrate(engine: Engine, questions: list[Question], thresholds=THRESHOLDS, max_tokens: int = 24,
              max_loss: float = 0.02, tick: Callable[[Outcome], None] | None = None) -> dict:
    """Run every question (see the module docstring) and return :func:`table`'s figures,
    with each question's outcome."""
    outcomes = []
    for q in questions:
        o = run_question(engine, q, max_tokens)
        outcomes.append(o)
        if tick:
            tick(o)
    out = table(outcomes, thresholds, max_loss)
    out["outcomes"] = [{"q": o.question.q, "a": o.question.a, "kind": o.question.kind, "target_right": o.target_right,
                        "draft_right": o.draft_right, "confidence": round(o.confidence, 4),
                        "target_seconds": round(o.target_seconds, 4), "draft_seconds": round(o.draft_seconds, 4),
                        "fallback_seconds": round(o.fallback_seconds, 4)} for o in outcomes]
    return out


def render(result: dict) -> str:
    """The table as text."""
    lines = [f"{result['questions']} questions: target alone {result['target_accuracy']:.1%} right in "
             f"{result['target_seconds']:.1f} s; the draft alone {result['draft_accuracy']:.1%} right",
             "threshold  accuracy  by draft  time saved"]
    for r in result["thresholds"]:
        mark = "  <- chosen" if result["chosen"] is r else ""
        lines.append(f"{r['threshold']:>9.2f}  {r['accuracy']:>8.1%}  {r['answered_by_draft']:>8.1%}  "
                     f"{r['time_saved']:>+10.1%}{mark}")
    if result["chosen"] is None:
        lines.append(f"no threshold saves time with accuracy within {result['max_accuracy_loss']:.0%} of the target "
                     "alone's: the cascade does not pay on this pair (nothing stored)")
    return "\n".join(lines)
