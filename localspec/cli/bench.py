"""``localspec bench`` (measure a sweep of settings) and ``localspec tune`` (store the best)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..bench import sweep as benchmark
from ..bench import tuning
from ..errors import BadInput
from ..models.mtp_head import locate_mtp, parse_draft_arg
from .main import cli
from .options import hardware_options, model_argument, resolve_model, rpc_config, take_target, validated

if TYPE_CHECKING:   # the engine loads llama.cpp: imported where a command runs, not for --help
    from ..engine import Engine


def _list(value: str | None, kind, name: str) -> list:
    if value is None:
        return []
    out = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(kind(part))
        except ValueError:
            raise BadInput(f"{name}: {part!r} is not a {kind.__name__}") from None
    if not out:
        raise BadInput(f"{name}: give at least one value")
    return out


def _choices(value: str, name: str, allowed: tuple[str, ...]) -> list[str]:
    out = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        raise BadInput(f"{name}: {', '.join(bad) or value!r} is not one of {', '.join(allowed)}")
    return out


@dataclass(frozen=True)
class _Models:
    """What a sweep loads: the target, a draft model and/or the target's MTP head."""

    target: str
    draft: str | None
    mtp: bool = False
    mtp_file: str | None = None      # None with mtp: embedded in the target
    draft2: str | None = None        # a second draft model (drafter "models")

    def key(self, backend: str) -> str:
        if self.draft is None and self.mtp:
            return tuning.mtp_key(self.target, self.mtp_file, backend)
        return tuning.pair_key(self.target, self.draft, backend)

    @property
    def draft_label(self) -> str:
        if self.draft:
            return Path(self.draft).name
        return "MTP head" + (f" ({Path(self.mtp_file).name})" if self.mtp_file else " (embedded)")


def _all_drafts(ctx: click.Context, param, values) -> str | None:
    """``-d`` given several times: the first is ``draft``; all are kept for :func:`_draft_list`."""
    values = tuple(v for v in values or () if v)
    ctx.meta["localspec.drafts"] = values
    return values[0] if values else None


def _draft_list() -> tuple[str, ...]:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("localspec.drafts", ()) if ctx else ()


def _drafters(opts: dict) -> list[str]:
    """--drafter, whose default follows -d: a draft model (two: both, switched), or the MTP
    head with -d mtp."""
    default = "mtp" if parse_draft_arg(opts.get("draft"))[0] else "models" if len(_draft_list()) == 2 else "model"
    return _choices(opts["drafter"] or default, "--drafter", ("model", "ngram", "ngram+model", "mtp", "models"))


def _models(opts: dict, drafters: list[str] | tuple[str, ...] = ("model",)) -> _Models:
    take_target(opts)
    is_mtp, head = parse_draft_arg(opts.get("draft"))
    if opts["demo"]:
        if opts["target"] or opts["draft"]:
            raise BadInput("--demo picks both models; leave out -m and -d")
        if "mtp" in drafters:
            raise BadInput("the demo pair (SmolLM2) has no MTP head: leave out --drafter mtp")
        from ..models.demo import demo_pair

        t, d = demo_pair(progress=lambda m: click.echo(m, err=True))
        return _Models(str(t), str(d))
    draft = None if is_mtp else opts["draft"]
    if not opts["target"] or (not draft and not is_mtp) or ("model" in drafters and not draft):
        raise BadInput("give MODEL (or -m MODEL) and -d DRAFT (or -d mtp for the target's MTP head, or --demo)")
    target = resolve_model(opts["target"], "target")
    mtp = is_mtp or "mtp" in drafters
    src = locate_mtp(target, resolve_model(head, "MTP head") if head else None) if mtp else None
    more = _draft_list()[1:]
    if "models" in drafters and len(more) != 1:
        raise BadInput("--drafter models needs two draft models: -d SMALL -d LARGE")
    draft2 = resolve_model(more[0], "draft") if "models" in drafters else None
    return _Models(target, resolve_model(draft, "draft") if draft else None, mtp, src.file if src else None, draft2)


def _engine(opts: dict, models: _Models, specs) -> Engine:
    from ..engine import Engine, EngineConfig, rollback_depth

    return Engine(EngineConfig(target=models.target, draft=models.draft, draft2=models.draft2, mtp=models.mtp,
                               mtp_file=models.mtp_file,
                               n_ctx=opts["n_ctx"], threads=opts["threads"],
                               gpu_layers=opts["gpu_layers"], gpu_layers_draft=opts["gpu_layers_draft"],
                               cache_type=opts["cache_type"], rollback_depth=rollback_depth(*specs),
                               **rpc_config(opts)))


def _hardware(f):
    for d in reversed([
        model_argument(),
        click.option("-m", "--model", "target", metavar="TARGET", help="Target model (as MODEL: file, name or alias)."),
        click.option("-d", "-md", "--draft", "--model-draft", "draft", metavar="DRAFT", multiple=True,
                     callback=_all_drafts,
                     help="Draft model (file, name or alias); 'mtp' or 'mtp:PATH': the target's MTP head. Twice "
                          "for bench: two drafts (--drafter models); several for tune: each measured, the "
                          "fastest kept."),
        click.option("--demo", is_flag=True, help="Use the built-in demo pair."),
        hardware_options(n_ctx=2048),
    ]):
        f = d(f)
    return f


def _checked(cells, n: int, seed: int, temp: float) -> list:
    """Every cell's RunSpec, validated (the sweep's values worded as its flags)."""
    specs = benchmark.cell_specs(cells, validated(benchmark.base_spec(n, seed, temp)))
    for spec in specs:
        validated(spec)
    return specs


def _run_sweep(engine, prompts, cells, *, runs, n, seed, temp, save, label: str):
    total = (len(cells) + 1) * len(prompts) * runs
    from .progress import bar as progress_bar

    bar = progress_bar(total=total, desc=label, unit="gen")
    partial: list = []

    def done_cell(res):
        partial[:] = [res]
        if save:
            save(res)

    try:
        res = benchmark.sweep(engine, prompts, cells, runs=runs, n=n, seed=seed, temperature=temp,
                              tick=lambda _label: bar.update(1), done_cell=done_cell)
    except KeyboardInterrupt:
        bar.close()
        res = partial[0] if partial else None
        return res, True
    bar.close()
    return res, False


@cli.command()
@_hardware
@click.option("--draft-max", "draft_max", default="2,4,6,8", show_default=True, help="Draft lengths to sweep.")
@click.option("--draft-temp", default=None, help="Draft temperatures to sweep, e.g. 0,0.3,0.7.")
@click.option("--p-min", "--draft-p-min", "p_min", default=None, help="Confidence cutoffs to sweep, e.g. 0,0.4,0.75.")
@click.option("--policy", default="adaptive,fixed", show_default=True, help="adaptive and/or fixed K.")
@click.option("--drafter", default=None,
              help="model, ngram, ngram+model (prompt lookup, then the model) and/or mtp, e.g. model,ngram+model "
                   "(default: model; mtp with -d mtp).")
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False), help="JSON-lines prompts file.")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Repetitions per cell.")
@click.option("-n", "n", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens per run.")
@click.option("-s", "--seed", type=int, default=0, show_default=True)
@click.option("--temp", "--temperature", "temp", type=float, default=0.0, show_default=True,
              help="Target temperature (0: greedy).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON (instead of the table).")
@click.option("--out", "json_out", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the results as JSON to FILE (after each setting, so an interruption keeps them).")
@click.option("--csv", "csv_out", type=click.Path(dir_okay=False), help="Write the results as CSV.")
def bench(**opts) -> int:
    """Measure target-only and a sweep of speculative settings on a prompt set.

    Each cell runs every prompt --runs times with a fixed seed after a warm-up; the table
    shows the median tok/s with its spread, the speed-up over the target alone, acceptance,
    accepted tokens per step, time to first token, and the speed-up the classic formula
    (1 - a^(K+1)) / ((1 - a)(cK + 1)) expects from the measured acceptance a and cost ratio c.
    --json prints the results as JSON on stdout; with --out/--csv the files are written and a
    PNG chart (speed-up against K) next to them.

    \b
    Examples:
      localspec bench --demo --draft-max 2,4,8 --runs 2 --out bench.json --csv bench.csv
      localspec bench target.gguf -md draft.gguf --draft-temp 0,0.7 --p-min 0,0.5 --policy fixed --json
      localspec bench -m qwen3.6-27b.gguf -d draft.gguf --drafter model,mtp
    """
    arg = opts.get("model_arg")
    if arg and arg.endswith(".json"):
        raise BadInput(f"{arg} is not a model: --json prints the results on stdout; --out {arg} writes them "
                       "to a file")
    take_target(opts)
    ks = _list(opts["draft_max"], int, "--draft-max")
    temps = _list(opts["draft_temp"], float, "--draft-temp") or [None]
    pmins = _list(opts["p_min"], float, "--p-min") or [None]
    policies = _choices(opts["policy"], "--policy", ("adaptive", "fixed"))
    drafters = _drafters(opts)
    prompts = benchmark.load_prompts(opts["prompts_file"]) if opts["prompts_file"] else benchmark.PROMPTS
    cells = benchmark.grid(ks, temps, pmins, policies, drafters)
    specs = _checked(cells, opts["n"], opts["seed"], opts["temp"])
    models = _models(opts, drafters)
    outputs = [Path(p) for p in (opts["json_out"], opts["csv_out"]) if p]
    chart = outputs[0].with_suffix(".png") if outputs else None

    def save(res):
        """After each cell: what an interruption keeps. The chart is drawn once, at the end."""
        if opts["json_out"]:
            benchmark.write_json(res, Path(opts["json_out"]))
        if opts["csv_out"]:
            benchmark.write_csv(res, Path(opts["csv_out"]))

    with _engine(opts, models, specs) as engine:
        click.echo(f"{len(cells)} settings x {len(prompts)} prompts x {opts['runs']} runs, "
                   f"{opts['n']} tokens each, plus the target alone", err=True)
        res, interrupted = _run_sweep(engine, prompts, cells, runs=opts["runs"], n=opts["n"], seed=opts["seed"],
                                      temp=opts["temp"], save=save if outputs else None, label="bench")
    if res is None or res.baseline is None:
        raise BadInput("interrupted before the first cell finished; nothing to report") if interrupted else \
            BadInput("no results")
    # Drawn once, after the sweep (finished or interrupted), not after each cell: a cell's
    # save is what an interruption keeps, and matplotlib's import and drawing (~0.5 s) need
    # not run between cells.
    if chart is not None and res.cells:
        benchmark.write_chart(res, chart)
    if opts["as_json"]:
        click.echo(json.dumps(res.to_dict(), indent=2))
    else:
        click.echo(benchmark.table(res))
    for p in outputs + ([chart] if chart is not None and chart.exists() else []):
        click.echo(f"wrote {p}", err=True)
    if interrupted:
        click.echo(f"localspec: interrupted: kept the {len(res.cells)} finished of {len(cells)} settings", err=True)
        return 130
    return 0


def _tune_cascade(opts: dict) -> int:
    """`localspec tune --cascade`: calibrate and store the pair's cascade threshold."""
    from ..bench import calibrate
    from ..engine import RunSpec

    models = _models(opts)
    if not models.draft:
        raise BadInput("--cascade needs a draft model: give -d DRAFT (or --demo)")
    questions = calibrate.load_questions(opts["questions"])[:opts["limit"]]
    from .progress import bar as progress_bar

    bar = progress_bar(total=len(questions), desc="cascade", unit="question")
    with _engine(opts, models, [RunSpec()]) as engine:
        backend = engine.target_model.info.backend
        result = calibrate.calibrate(engine, questions, tick=lambda _o: bar.update(1))
    bar.close()
    result |= {"target": models.target, "draft": models.draft, "backend": backend}
    click.echo(calibrate.render(result))
    if opts["json_out"]:
        Path(opts["json_out"]).write_text(json.dumps(result, indent=1), encoding="utf-8")
        click.echo(f"wrote {opts['json_out']}", err=True)
    chosen = result["chosen"]
    if chosen is None:
        return 0
    tuning.store(tuning.cascade_key(models.target, models.draft, backend),
                 {"target": Path(models.target).name, "draft": models.draft_label, "backend": backend,
                  "threshold": chosen["threshold"] if chosen else None, "questions": result["questions"],
                  "target_accuracy": result["target_accuracy"], "chosen": chosen})
    click.echo(f"stored for this pair on {backend}: cascade threshold {chosen['threshold']:g} "
               f"({chosen['accuracy']:.1%} right vs {result['target_accuracy']:.1%} alone, "
               f"{chosen['time_saved']:+.1%} time saved); `--cascade` without a value uses it")
    return 0


TUNE_CELLS = [benchmark.Setting("model", None), benchmark.Setting("model", 2), benchmark.Setting("model", 4),
              benchmark.Setting("model", 6), benchmark.Setting("model", 8),
              benchmark.Setting("model", None, p_min=0.5)]
TUNE_PROMPTS = ["code-1", "qa-1", "chat-1"]


@cli.command()
@_hardware
@click.option("--show", is_flag=True, help="List the stored settings.")
@click.option("--reset", is_flag=True, help="Forget stored settings (of this pair with -m/-d, else all).")
@click.option("--runs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("-n", "n", type=click.IntRange(min=1), default=96, show_default=True, help="Tokens per run.")
@click.option("--cascade", is_flag=True,
              help="Calibrate the cascade instead: accuracy vs time saved at several thresholds on questions with "
                   "known answers; stores the threshold that saves most within 2 points of the target's accuracy.")
@click.option("--questions", metavar="FILE", default=None,
              help="With --cascade: your own JSON lines of {\"q\": ..., \"a\": ...} (default: the shipped set).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="With --cascade: the first N questions.")
@click.option("--json", "json_out", metavar="FILE", default=None, help="With --cascade: write the figures here.")
def tune(**opts) -> int:
    """Find and store the fastest settings for a pair on this machine.

    A compact sweep (adaptive, fixed K 2/4/6/8, adaptive with p-min 0.5) on three prompts;
    the winner is stored under the two files and the backend. `run`, `chat` and `compare`
    then use it by default and say so; an explicit flag still wins.

    \b
    Examples:
      localspec tune -m qwen2.5-7b -d qwen2.5-0.5b
      localspec tune -m qwen3.6-27b -d mtp
      localspec tune -m qwen2.5-7b -d qwen2.5-0.5b --cascade
      localspec tune --show
      localspec tune --reset
    """
    take_target(opts)
    if opts["cascade"] and not (opts["show"] or opts["reset"]):
        return _tune_cascade(opts)
    if opts["show"]:
        data = tuning.load()
        if not data:
            click.echo("no tuned settings yet: localspec tune -m TARGET -d DRAFT")
        for e in data.values():
            if "candidates" in e:
                click.echo(f"{e.get('target')} [{e.get('backend')}]: fastest draft {e.get('draft')} "
                           f"({e['speedup']:.2f}x, of {len(e['candidates'])} measured {e.get('tuned_at')})")
                continue
            if "threshold" in e and "questions" in e:
                th = f"{e['threshold']:g}"
                click.echo(f"{e.get('target')} + {e.get('draft')} [{e.get('backend')}]: cascade threshold {th} "
                           f"({e['questions']} questions, measured {e.get('tuned_at')})")
                continue
            click.echo(f"{e['target']} + {e['draft']} [{e['backend']}]: {tuning.describe(e['settings'])} "
                       f"({e['speedup']:.2f}x measured {e['tuned_at']})")
        return 0
    if opts["reset"]:
        if opts["target"] or opts["draft"] or opts["demo"]:
            models = _models(opts, _drafters(opts | {"drafter": None}))
            from ..engine.backend import backend_name

            n = tuning.reset(models.key(backend_name(opts["gpu_layers"] or -1, bool(opts.get("rpc")))))
        else:
            n = tuning.reset()
        click.echo(f"forgot {n} tuned setting{'s' if n != 1 else ''}")
        return 0
    candidates = _draft_list()
    if len(candidates) > 1:
        return _tune_candidates(opts, candidates)
    _tune_pair(opts, _models(opts, _drafters(opts | {"drafter": None})))
    return 0


def _tune_candidates(opts: dict, candidates: tuple[str, ...]) -> int:
    """Several drafts for one target: each pair tuned and stored; the fastest said (and kept)."""
    results = []
    for d in candidates:
        click.echo(f"== draft {d}", err=True)
        models = _models(opts | {"draft": d}, ["model"])
        results.append((d, models, *_tune_pair(opts, models)))
    d, models, backend, speedup = max(results, key=lambda r: r[3])
    for name, _m, _b, x in results:
        click.echo(f"{name}: {x:.2f}x the target alone")
    tuning.store(tuning.pair_key(models.target, None, backend) + "|best_draft",
                 {"target": Path(models.target).name, "draft": Path(models.draft).name, "draft_path": models.draft,
                  "backend": backend, "speedup": speedup, "candidates": [r[0] for r in results]})
    click.echo(f"fastest draft for {Path(models.target).name}: {d} ({speedup:.2f}x); "
               f"run it: localspec run -m {models.target} -d {models.draft}")
    return 0


def _tune_pair(opts: dict, models: _Models) -> tuple[str, float]:
    """The compact sweep on one pair, its best stored; (backend, best speed-up)."""
    # A target drafting with its MTP head is tuned like a pair: the same cells, drafter mtp.
    cells = TUNE_CELLS if models.draft else [replace(c, drafter="mtp") for c in TUNE_CELLS]
    prompts = [p for p in benchmark.PROMPTS if p["id"] in TUNE_PROMPTS]
    with _engine(opts, models, _checked(cells, opts["n"], 0, 0.0)) as engine:
        backend = engine.target_model.info.backend
        res, interrupted = _run_sweep(engine, prompts, cells, runs=opts["runs"], n=opts["n"], seed=0,
                                      temp=0.0, save=None, label="tune")
    if interrupted or res is None:
        raise BadInput("tune was interrupted; nothing stored")
    click.echo(benchmark.table(res))
    best, speedup = benchmark.best_cell(res)
    if best is None:
        best, note = cells[0], "nothing beat the target alone; storing the adaptive default"
        speedup = 1.0
    else:
        note = f"best: {best.label}"
    settings = {"fixed_k": best.k is not None, "draft_max": best.k or 8, "p_min": best.p_min,
                "draft_temp": best.draft_temp}
    tuning.store(models.key(backend),
                 {"target": Path(models.target).name, "draft": models.draft_label, "backend": backend,
                  "settings": settings, "speedup": speedup})
    click.echo(f"{note} ({speedup:.2f}x); stored for this pair on {backend}: {tuning.describe(settings)}")
    return backend, speedup
