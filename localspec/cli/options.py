"""Options shared by ``run`` and ``compare``, and their translation into engine settings."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..engine import DraftSettings, EngineConfig, SamplingConfig
from ..engine.backend import CACHE_TYPES
from ..errors import BadInput


def resolve_model(arg: str, what: str) -> str:
    """Turn a model argument into a GGUF path: a file, a store name, or a pulled catalog alias."""
    p = Path(arg).expanduser()
    if p.exists():
        if p.is_dir():
            raise BadInput(f"{what} model {arg}: is a directory, not a .gguf file")
        return str(p)
    from ..catalog import DEFAULT_DRAFT_QUANT, DEFAULT_TARGET_QUANT, load_catalog
    from ..store import Store

    store = Store()
    entry = store.get(arg)
    if entry is None:
        catalog = load_catalog()
        if arg.lower() in catalog.models:
            prefer = DEFAULT_DRAFT_QUANT if what == "draft" else DEFAULT_TARGET_QUANT
            entry = store.by_alias(arg.lower(), prefer)
            if entry is None:
                raise BadInput(f"{arg} is not pulled yet: run `localspec pull {arg}`"
                               + (" --no-draft" if what == "draft" else ""))
        elif "/" in arg and not arg.endswith(".gguf"):
            raise BadInput(f"{arg} is not pulled yet: run `localspec pull {arg}`")
    if entry is None:
        raise BadInput(f"{what} model {arg}: no such file or local model (see `localspec list`)")
    if not entry.exists():
        raise BadInput(f"{what} model {arg}: its file {entry.path} is gone; pull or import it again")
    return entry.path


def _opts(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def drafter_options():
    """How to draft: a draft model, prompt lookup, or not at all."""
    return _opts(
        click.option("-d", "--draft", metavar="DRAFT",
                     help="Draft model (a .gguf, local name or pulled alias) with the target's tokenizer."),
        click.option("--ngram", is_flag=True, help="Draft by prompt lookup (n-grams) instead of a model."),
        click.option("--no-draft", is_flag=True, help="Target alone, no speculation."),
    )


def sampling_options(default_temp: float):
    """Sampling (one set for both models) and drafting lengths."""
    return _opts(
        click.option("--temp", type=click.FloatRange(min=0.0), default=default_temp, show_default=True,
                     help="Temperature; 0 is greedy."),
        click.option("--top-k", type=click.IntRange(min=0), default=40, show_default=True,
                     help="Top-k (0 turns it off)."),
        click.option("--top-p", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=0.95,
                     show_default=True, help="Top-p (nucleus)."),
        click.option("--min-p", type=click.FloatRange(min=0.0, max=1.0, max_open=True), default=0.05,
                     show_default=True, help="Min-p."),
        click.option("--seed", type=click.IntRange(min=0), default=None, help="Random seed (sampling)."),
        click.option("--draft-temp", type=click.FloatRange(min=0.0), default=None,
                     help="Draft temperature (default: same as --temp); stays lossless."),
        click.option("--draft-max", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Most tokens drafted per step; given explicitly, exactly this many every step."),
        click.option("--draft-min", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Tokens always drafted per step while drafting is on (adaptive mode)."),
        click.option("--p-min", type=click.FloatRange(min=0.0, max=1.0, max_open=True), default=None,
                     help="Stop drafting when the draft's top probability falls below this "
                          "(default: automatic, from measured acceptance and costs)."),
        click.option("--fixed-k", is_flag=True, help="Always draft --draft-max tokens (adaptive drafting off)."),
    )


def hardware_options():
    """Context, threads, GPU layers, KV cache."""
    return _opts(
        click.option("--ctx", "n_ctx", type=click.IntRange(min=16), default=4096, show_default=True,
                     help="Context size in tokens."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="CPU threads (default: physical cores)."),
        click.option("--gpu-layers", type=click.IntRange(min=-1), default=None,
                     help="Target layers on the GPU (-1 all; default all when llama.cpp has GPU support)."),
        click.option("--gpu-layers-draft", type=click.IntRange(min=-1), default=None,
                     help="Draft layers on the GPU (default: as --gpu-layers)."),
        click.option("--cache-type", type=click.Choice(sorted(CACHE_TYPES)), default="f16",
                     show_default=True, help="KV cache type."),
    )


def generation_options(default_temp: float):
    """The model, prompt, sampling, drafting and hardware options."""
    return _opts(
        click.option("-m", "--model", "target", metavar="TARGET",
                     help="Target model: a .gguf file, a local model name or a pulled catalog alias."),
        drafter_options(),
        click.option("--demo", is_flag=True,
                     help="Use the built-in demo pair (SmolLM2-135M: F16 target, Q4_1 draft); offline."),
        click.option("-p", "--prompt", metavar="TEXT", help="Prompt text ('-' reads standard input)."),
        click.option("-f", "--file", "prompt_file", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Read the prompt from a file."),
        click.option("--chat", is_flag=True, help="Wrap the prompt in the model's chat template."),
        click.option("--system", metavar="TEXT", help="System message (with --chat)."),
        click.option("-n", "--max-tokens", type=click.IntRange(min=1), default=256, show_default=True,
                     help="Most tokens to generate."),
        click.option("--stop", multiple=True, metavar="TEXT", help="Stop string (repeatable)."),
        sampling_options(default_temp),
        hardware_options(),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming."),
    )


def chosen_drafter(opts: dict, draft_flag: str = "-d") -> str | None:
    """"model", "ngram" or "none" from the drafter flags; None when none was given."""
    chosen = [name for name, on in ((draft_flag, bool(opts.get("draft"))), ("--ngram", opts.get("ngram")),
                                     ("--no-draft", opts.get("no_draft"))) if on]
    if len(chosen) > 1:
        raise BadInput(f"choose one of {draft_flag}, --ngram, --no-draft (got {' and '.join(chosen)})")
    return {draft_flag: "model", "--ngram": "ngram", "--no-draft": "none"}[chosen[0]] if chosen else None


def check_draft_lengths(opts: dict) -> None:
    if opts["draft_min"] > opts["draft_max"]:
        raise BadInput(f"--draft-min ({opts['draft_min']}) is larger than --draft-max ({opts['draft_max']})")


def read_prompt(opts: dict) -> str:
    prompt, path = opts.get("prompt"), opts.get("prompt_file")
    if prompt is not None and path:
        raise BadInput("give the prompt with -p or -f, not both")
    if path:
        p = Path(path)
        if not p.is_file():
            raise BadInput(f"prompt file {path}: no such file")
        return p.read_text(encoding="utf-8", errors="replace")
    if prompt == "-":
        return sys.stdin.read()
    if prompt is None:
        raise BadInput("no prompt: give -p TEXT, -p - (standard input) or -f FILE")
    return prompt


def engine_config(opts: dict) -> EngineConfig:
    """Settings for the Engine from the command-line options (``opts`` is updated in place
    with what --demo and tuned settings resolve to, for sampling_config to read)."""
    if opts.get("demo"):
        if opts.get("target") or opts.get("draft"):
            raise BadInput("--demo picks both models; leave out -m and -d")
        from ..demo import demo_pair

        target, draft = demo_pair(progress=lambda m: click.echo(m, err=True))
        opts["demo"] = False  # resolved once; the caller's dict now names the files
        opts["target"] = str(target)
        if not (opts.get("ngram") or opts.get("no_draft")):
            opts["draft"] = str(draft)
    if not opts.get("target"):
        raise BadInput("no target model: give -m TARGET.gguf (or --demo)")
    drafter = chosen_drafter(opts)
    if drafter is None:
        raise BadInput("no drafter: give a draft model with -d DRAFT, or --ngram, or --no-draft")
    target = resolve_model(opts["target"], "target")
    draft = resolve_model(opts["draft"], "draft") if drafter == "model" else None
    check_draft_lengths(opts)
    # An explicit --draft-max is the user's choice: draft that many tokens every step, like
    # --fixed-k (an explicit --p-min can still end a draft early).
    explicit_k = explicit("draft_max")
    if drafter == "model":
        apply_tuned(opts, target, draft)
    return EngineConfig(
        target=target, draft=draft, drafter=drafter, n_ctx=opts["n_ctx"], threads=opts["threads"],
        gpu_layers=opts["gpu_layers"], gpu_layers_draft=opts["gpu_layers_draft"],
        cache_type=opts["cache_type"],
        drafting=DraftSettings(draft_max=opts["draft_max"], draft_min=opts["draft_min"],
                               p_min=opts["p_min"], fixed_k=opts["fixed_k"] or explicit_k),
    )


_TUNED_FLAGS = ("draft_max", "draft_min", "p_min", "fixed_k", "draft_temp")


def explicit(name: str) -> bool:
    """Whether option ``name`` was given on the command line (not a default)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE)


def apply_tuned(opts: dict, target: str, draft: str) -> str | None:
    """Use `localspec tune`'s settings for this pair and backend unless a drafting flag was given."""
    if any(explicit(f) for f in _TUNED_FLAGS) or opts.get("tuned_applied") is not None:
        return None
    from .. import tuning
    from ..engine.backend import backend_name

    entry = tuning.lookup(target, draft, backend_name(opts.get("gpu_layers") if opts.get("gpu_layers") is not None else -1))
    if not entry:
        opts["tuned_applied"] = ""
        return None
    st = entry["settings"]
    opts.update(draft_max=st["draft_max"], fixed_k=st["fixed_k"], p_min=st.get("p_min"),
                draft_temp=st.get("draft_temp"), draft_min=min(opts["draft_min"], st["draft_max"]))
    note = f"using tuned settings for this pair ({tuning.describe(st)}) from `localspec tune`; flags override"
    opts["tuned_applied"] = note
    click.echo(f"localspec: {note}", err=True)
    return note


def sampling_config(opts: dict) -> SamplingConfig:
    return SamplingConfig(temperature=opts["temp"], top_k=opts["top_k"], top_p=opts["top_p"],
                          min_p=opts["min_p"], seed=opts["seed"], draft_temperature=opts["draft_temp"])


def prompt_tokens(engine, opts: dict, text: str) -> list[int]:
    if opts.get("chat"):
        messages = []
        if opts.get("system"):
            messages.append({"role": "system", "content": opts["system"]})
        messages.append({"role": "user", "content": text})
        return engine.chat_prompt(messages)
    if opts.get("system"):
        raise BadInput("--system needs --chat")
    return engine.tokenize(text)
