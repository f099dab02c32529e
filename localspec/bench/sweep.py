"""Sweeps for `localspec bench` and `localspec tune`: settings x prompts x runs, measured.

A sweep first runs the target alone on every prompt (the baseline), then each cell (one
combination of drafter, draft length or adaptive policy, draft temperature and p_min) on
every prompt, ``runs`` times with a fixed seed, after an excluded warm-up. Results are kept
cell by cell so an interrupted sweep still has everything it finished.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import statistics
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..engine import Done, DrafterKind, RunSpec, SamplingConfig
from ..errors import BadInput

PROMPTS: list[dict] = [
    {"id": "code-1", "category": "code",
     "prompt": "Write a Python function that checks whether a string is a palindrome, with a docstring."},
    {"id": "code-2", "category": "code",
     "prompt": "Write a JavaScript function that returns the n-th Fibonacci number iteratively."},
    {"id": "summary-1", "category": "summarisation",
     "prompt": "Summarise in three sentences: The Industrial Revolution began in Britain in the late 18th "
               "century. It brought mechanised textile production, steam power, and new iron-making "
               "processes. Cities grew quickly as people moved from farms to factories, and working "
               "conditions were often harsh, which led to new labour laws."},
    {"id": "qa-1", "category": "question answering",
     "prompt": "What is the boiling point of water at sea level, and why does it change at altitude?"},
    {"id": "chat-1", "category": "open chat",
     "prompt": "I have a free afternoon in a rainy city. Suggest a plan."},
    {"id": "creative-1", "category": "creative writing",
     "prompt": "Write a short poem about the sea."},
]


def load_prompts(path: str | Path) -> list[dict]:
    """A JSON-lines prompt file: {"prompt": ..., "category": ..., "id": ...} per line."""
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"prompt file {path}: no such file")
    out = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise BadInput(f"{path}:{i}: not a JSON object") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise BadInput(f"{path}:{i}: each line needs a \"prompt\" string")
        out.append({"id": str(obj.get("id", f"p{i}")), "category": str(obj.get("category", "custom")),
                    "prompt": obj["prompt"]})
    if not out:
        raise BadInput(f"{path}: no prompts")
    return out


@dataclass(frozen=True)
class Setting:
    """One cell of the sweep."""

    drafter: str = "model"          # model | ngram | ngram+model | mtp
    k: int | None = None            # None: the adaptive policy (draft_max = max of the sweep)
    draft_temp: float | None = None
    p_min: float | None = None

    @property
    def label(self) -> str:
        parts = [self.drafter, "adaptive" if self.k is None else f"K={self.k}"]
        if self.draft_temp is not None:
            parts.append(f"draft-temp {self.draft_temp:g}")
        if self.p_min is not None:
            parts.append(f"p-min {self.p_min:g}")
        return ", ".join(parts)

    def spec(self, base: RunSpec, draft_max: int) -> RunSpec:
        """This cell's RunSpec: ``base`` (sampling, length) with this cell's drafting;
        ``draft_max`` bounds the adaptive policy."""
        return base.with_(drafter=DrafterKind(self.drafter), adaptive=self.k is None,
                          draft_max=draft_max if self.k is None else self.k, p_min=self.p_min,
                          draft_temperature=self.draft_temp)

    @property
    def series(self) -> str:
        """The chart line this cell belongs to (everything but K)."""
        parts = [self.drafter]
        if self.draft_temp is not None:
            parts.append(f"draft-temp {self.draft_temp:g}")
        if self.p_min is not None:
            parts.append(f"p-min {self.p_min:g}")
        return ", ".join(parts)


_SAMPLED = ("model", "ngram+model", "mtp")   # drafters with a draft distribution (a draft temperature applies)


def grid(draft_max: Iterable[int], draft_temp: Iterable[float | None], p_min: Iterable[float | None],
         policies: Iterable[str], drafters: Iterable[str]) -> list[Setting]:
    cells = []
    dm = list(draft_max)
    for drafter, pol, dt, pm in itertools.product(drafters, policies, draft_temp, p_min):
        if pol == "adaptive":
            cells.append(Setting(drafter, None, dt if drafter in _SAMPLED else None, pm))
        else:
            for k in dm:
                cells.append(Setting(drafter, k, dt if drafter in _SAMPLED else None, pm))
    seen, out = set(), []
    for c in cells:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


def expected_speedup(acceptance: float, cost_ratio: float, k: int) -> float:
    """The classic estimate (1 - a^(K+1)) / ((1 - a)(cK + 1)) for acceptance a, cost ratio c."""
    a = min(max(acceptance, 0.0), 0.999999)
    return (1 - a ** (k + 1)) / ((1 - a) * (cost_ratio * k + 1))


@dataclass
class Run:
    prompt_id: str
    category: str
    tok_s: float
    tokens: int
    acceptance: float
    mean_accepted: float
    ttft: float
    draft_seconds: float
    drafted: int
    k_max: int


@dataclass
class CellResult:
    setting: Setting
    runs: list[Run] = field(default_factory=list)

    def stats(self, baseline: CellResult | None, category: str | None = None) -> dict:
        runs = [r for r in self.runs if category is None or r.category == category]
        if not runs:
            return {}
        tps = [r.tok_s for r in runs]
        out = {
            "tok_s": statistics.median(tps), "tok_s_min": min(tps), "tok_s_max": max(tps),
            "acceptance": statistics.median(r.acceptance for r in runs),
            "mean_accepted": statistics.median(r.mean_accepted for r in runs),
            "ttft": statistics.median(r.ttft for r in runs),
        }
        if baseline is not None:
            base_runs = [r for r in baseline.runs if category is None or r.category == category]
            if base_runs:
                base = statistics.median(r.tok_s for r in base_runs)
                out["speedup"] = out["tok_s"] / base if base else 0.0
                # c: seconds per drafted token over seconds per target token.
                drafted = sum(r.drafted for r in runs)
                step = statistics.median(1.0 / r.tok_s for r in base_runs if r.tok_s)
                if drafted and step:
                    c = sum(r.draft_seconds for r in runs) / drafted / step
                    k = self.setting.k if self.setting.k is not None else max(r.k_max for r in runs)
                    out["cost_ratio"] = c
                    out["expected_speedup"] = expected_speedup(out["acceptance"], c, max(k, 1))
        return out


@dataclass
class SweepResult:
    prompts: list[dict]
    runs: int
    n: int
    seed: int
    temperature: float
    baseline: CellResult | None = None
    cells: list[CellResult] = field(default_factory=list)
    complete: bool = False
    engine: dict = field(default_factory=dict)

    def categories(self) -> list[str]:
        return list(dict.fromkeys(p["category"] for p in self.prompts))

    def to_dict(self) -> dict:
        def cell(c: CellResult) -> dict:
            return {"setting": asdict(c.setting), "label": c.setting.label,
                    "overall": c.stats(self.baseline),
                    "by_category": {cat: c.stats(self.baseline, cat) for cat in self.categories()},
                    "runs": [asdict(r) for r in c.runs]}

        return {
            "complete": self.complete, "runs": self.runs, "n": self.n, "seed": self.seed,
            "temperature": self.temperature, "prompts": self.prompts, "engine": self.engine,
            "baseline": cell(self.baseline) if self.baseline else None,
            "cells": [cell(c) for c in self.cells],
        }


def _one(engine, tokens, spec: RunSpec) -> Done:
    engine.reset()
    done = None
    for ev in engine.run(tokens, spec):
        if isinstance(ev, Done):
            done = ev
    return done


def base_spec(n: int, seed: int, temperature: float) -> RunSpec:
    """The target alone with the sweep's sampling and length; every cell starts from it."""
    return RunSpec(drafter=DrafterKind.NONE, max_tokens=n,
                   sampling=SamplingConfig(temperature=temperature, seed=seed))


def cell_specs(cells: list[Setting], base: RunSpec) -> list[RunSpec]:
    return [c.spec(base, max([c.k for c in cells if c.k] + [RunSpec.draft_max])) for c in cells]


def sweep(engine, prompts: list[dict], cells: list[Setting], *, runs: int, n: int,
          seed: int, temperature: float, chat: bool = True,
          tick: Callable[[str], None] | None = None, done_cell: Callable[[SweepResult], None] | None = None,
          cancel: threading.Event | None = None) -> SweepResult:
    """Run the baseline and every cell on one loaded Engine. ``tick`` is called after each
    generation, ``done_cell`` after each finished cell (to save partial results)."""
    first = engine
    result = SweepResult(prompts, runs, n, seed, temperature, engine=first.describe())
    encoded = {}
    for p in prompts:
        msgs = [{"role": "user", "content": p["prompt"]}]
        encoded[p["id"]] = first.chat_prompt(msgs) if chat else first.tokenize(p["prompt"])
    base = base_spec(n, seed, temperature)
    specs = dict(zip(cells, cell_specs(cells, base)))

    def measure(setting: Setting | None) -> CellResult:
        cr = CellResult(setting or Setting(drafter="none", k=0))
        spec = base if setting is None else specs[setting]
        _one(engine, encoded[prompts[0]["id"]], spec.with_(max_tokens=8))   # warm-up, excluded
        for p in prompts:
            for _ in range(runs):
                if cancel is not None and cancel.is_set():
                    raise KeyboardInterrupt
                d = _one(engine, encoded[p["id"]], spec)
                s = d.summary
                cr.runs.append(Run(p["id"], p["category"], s.tokens_per_second, s.n_generated, s.acceptance_rate,
                                   s.mean_accepted_length, s.time_to_first_token, s.draft_seconds, s.drafted,
                                   s.k_max))
                if tick:
                    tick(cr.setting.label)
        return cr

    result.baseline = measure(None)
    if done_cell:
        done_cell(result)
    for i, c in enumerate(cells):
        result.cells.append(measure(c))
        result.complete = i == len(cells) - 1
        if done_cell:
            done_cell(result)
    result.complete = True
    return result


# ---------------------------------------------------------------------------------------
# Output


def table(result: SweepResult) -> str:
    """Per category and overall: tok/s (spread), speed-up, acceptance, accepted per step, TTFT,
    expected speed-up."""
    lines = []
    cats = result.categories() + [None]
    base = result.baseline
    for cat in cats:
        title = cat or "overall"
        lines.append(f"\n{title}")
        lines.append(f"  {'setting':38} {'tok/s':>7} {'(min-max)':>13} {'speed-up':>8} {'accept':>7} "
                     f"{'acc/step':>8} {'TTFT s':>7} {'expected':>8}")
        rows = ([base] if base else []) + result.cells
        for c in rows:
            s = c.stats(base, cat)
            if not s:
                continue
            label = "target only" if c is base else c.setting.label
            exp = f"{s['expected_speedup']:.2f}x" if "expected_speedup" in s else "-"
            sp = f"{s['speedup']:.2f}x" if "speedup" in s else "-"
            lines.append(f"  {label:38} {s['tok_s']:7.1f} {s['tok_s_min']:6.1f}-{s['tok_s_max']:<6.1f} {sp:>8} "
                         f"{s['acceptance']:7.0%} {s['mean_accepted']:8.2f} {s['ttft']:7.2f} {exp:>8}")
    return "\n".join(lines).lstrip("\n")


def write_json(result: SweepResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    tmp.replace(path)


def write_csv(result: SweepResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = ["setting", "drafter", "k", "draft_temp", "p_min", "category", "tok_s", "tok_s_min", "tok_s_max",
            "speedup", "acceptance", "mean_accepted", "ttft", "expected_speedup", "cost_ratio"]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        rows = ([result.baseline] if result.baseline else []) + result.cells
        for c in rows:
            for cat in result.categories() + [None]:
                s = c.stats(result.baseline, cat)
                if not s:
                    continue
                st = c.setting
                w.writerow(["target only" if c is result.baseline else st.label, st.drafter,
                            "adaptive" if st.k is None else st.k, st.draft_temp, st.p_min, cat or "overall",
                            *(round(s.get(k), 4) if isinstance(s.get(k), float) else s.get(k)
                              for k in cols[6:])])
    tmp.replace(path)


def write_chart(result: SweepResult, path: Path) -> bool:
    """Speed-up against draft length, one line per setting; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    series: dict[str, list[tuple[int, float]]] = {}
    flat = []
    for c in result.cells:
        s = c.stats(result.baseline)
        if "speedup" not in s:
            continue
        if c.setting.k is None:
            flat.append((c.setting.label, s["speedup"]))
        else:
            series.setdefault(c.setting.series, []).append((c.setting.k, s["speedup"]))
    for name, pts in series.items():
        pts.sort()
        ax.plot([k for k, _ in pts], [v for _, v in pts], marker="o", label=name)
    for i, (name, v) in enumerate(flat):
        ax.axhline(v, linestyle="--", linewidth=1, color=f"C{len(series) + i}", label=name)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("draft length K")
    ax.set_ylabel("speed-up over the target alone")
    title = Path(result.engine.get("target", {}).get("path", "target")).name
    ax.set_title(f"{title}: speed-up by draft length", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def best_cell(result: SweepResult) -> tuple[Setting | None, float]:
    """The fastest cell overall, or None when nothing beats the target alone."""
    base = result.baseline.stats(None)["tok_s"] if result.baseline and result.baseline.runs else 0.0
    best, best_tps = None, base
    for c in result.cells:
        s = c.stats(result.baseline)
        if s and s["tok_s"] > best_tps:
            best, best_tps = c.setting, s["tok_s"]
    return best, (best_tps / base if base else math.nan)
