"""Options shared by the commands, and their translation into an EngineConfig and a RunSpec.

The run settings' defaults are RunSpec's and their ranges are checked by RunSpec alone; a
:class:`~localspec.engine.SpecError` is reworded here with the flag's name.

llama.cpp's own flags are aliases where they mean the same thing (``-c``/``--ctx-size``,
``-t``, ``-ngl``/``--n-gpu-layers``, ``-ngld``, ``-md``/``--model-draft``, ``-s``,
``--draft-p-min``), and the target may be given as a positional MODEL as well as ``-m``
(:func:`model_argument`, :func:`take_target`), as Ollama's users type it.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..engine import DrafterKind, RunSpec, SamplingConfig, SpecError
from ..engine.kv_cache import CACHE_TYPES
from ..engine.template import RESERVED
from ..errors import BadInput
from ..models.mtp_head import locate_mtp, parse_draft_arg

if TYPE_CHECKING:   # the engine loads llama.cpp: imported where a command runs, not for --help
    from ..engine import EngineConfig

_SPEC = RunSpec()
_SAMPLING = SamplingConfig()

# RunSpec field -> the flag that sets it
FLAGS = {"temperature": "--temp", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p", "seed": "--seed",
         "draft_temperature": "--draft-temp", "draft_max": "--draft-max", "draft_min": "--draft-min",
         "p_min": "--p-min", "max_tokens": "--max-tokens", "stop": "--stop", "drafter": "--drafter",
         "cascade": "--cascade", "repeat_penalty": "--repeat-penalty", "repeat_last_n": "--repeat-last-n",
         "presence_penalty": "--presence-penalty", "frequency_penalty": "--frequency-penalty",
         "logit_bias": "--logit-bias", "dry_multiplier": "--dry-multiplier", "dry_base": "--dry-base",
         "dry_allowed_length": "--dry-allowed-length", "dry_penalty_last_n": "--dry-penalty-last-n",
         "dry_sequence_breakers": "--dry-sequence-breaker"}


def resolve_model(arg: str, what: str) -> str:
    """Turn a model argument into a GGUF path: a file, a store name, or a pulled catalog alias."""
    p = Path(arg).expanduser()
    if p.exists():
        if p.is_dir():
            raise BadInput(f"{what} model {arg}: is a directory, not a .gguf file")
        return str(p)
    from ..models.catalog import DEFAULT_DRAFT_QUANT, DEFAULT_TARGET_QUANT, load_catalog
    from ..models.store import Store

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


def model_argument():
    """The target as a positional MODEL (the same as -m); see :func:`take_target`."""
    return click.argument("model_arg", required=False, metavar="[MODEL]")


def take_target(opts: dict) -> None:
    """Fold the positional MODEL into ``opts["target"]`` (the -m option).

    Raises:
        BadInput: MODEL and -m name two different models.
    """
    arg = opts.pop("model_arg", None)
    if arg and opts.get("target") and arg != opts["target"]:
        raise BadInput(f"two targets given ({arg} and -m {opts['target']}): give one")
    if arg:
        opts["target"] = arg


class DraftArg(click.types.StringParamType):
    """A draft argument; from an environment variable (LOCALSPEC_DRAFT) several are split on
    ';', never on the spaces a path may hold."""

    envvar_list_splitter = ";"


def _drafts(ctx: click.Context, param, values) -> str | None:
    """``-d`` given up to twice: the first is ``draft``; a second is kept for :func:`second_draft`."""
    values = tuple(v for v in values or () if v)
    if len(values) > 2:
        raise BadInput(f"at most two draft models (-d SMALL -d LARGE; got {len(values)})")
    ctx.meta["localspec.draft2"] = values[1] if len(values) > 1 else None
    return values[0] if values else None


def second_draft() -> str | None:
    """The second ``-d`` of this command line, if one was given."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("localspec.draft2") if ctx else None


TUNED_CASCADE = -1.0   # --cascade without a value: the pair's calibrated threshold, else the default


def cascade_option():
    """``--cascade [THRESHOLD]``: opt in to the draft model answering alone (not lossless)."""
    from ..engine.spec import CASCADE_THRESHOLD as DEFAULT_THRESHOLD

    return click.option(
        "--cascade", type=float, is_flag=False, flag_value=TUNED_CASCADE, default=None, metavar="[THRESHOLD]",
        help="CHANGES ANSWERS: the draft model answers alone and its answer is returned (marked as the draft's) "
             "when its mean token probability is at least THRESHOLD (without one: the pair's threshold from "
             f"`localspec tune --cascade`, else {DEFAULT_THRESHOLD}); below it the target answers.")


def cascade_threshold(opts: dict, target: str | None, draft: str | None, *, quiet: bool = False) -> float | None:
    """The threshold ``--cascade`` asks for: its value, or for a bare ``--cascade`` the one
    `localspec tune --cascade` stored for this pair and backend (else the default)."""
    value = opts.get("cascade")
    if value != TUNED_CASCADE:
        return value
    from ..engine.spec import CASCADE_THRESHOLD as DEFAULT_THRESHOLD

    if target and draft:
        from ..bench import tuning
        from ..engine.backend import backend_name

        gl = opts.get("gpu_layers")
        entry = tuning.lookup_cascade(target, draft, backend_name(gl if gl is not None else -1))
        if entry and entry.get("threshold") is not None:
            if not quiet:
                click.echo(f"localspec: cascade threshold {entry['threshold']:g} calibrated for this pair "
                           "(`localspec tune --cascade`)", err=True)
            return float(entry["threshold"])
    return DEFAULT_THRESHOLD


def drafter_options():
    """How to draft: a draft model (or two), prompt lookup, or not at all."""
    return _opts(
        click.option("-d", "-md", "--draft", "--model-draft", "draft", metavar="DRAFT", multiple=True,
                     type=DraftArg(), callback=_drafts,
                     help="Draft model (a .gguf, local name or pulled alias) with the target's tokenizer; "
                          "'mtp' drafts with the target's own MTP head (embedded, or a sibling "
                          "mtp-*.gguf), 'mtp:PATH' with the MTP head in PATH. Twice (-d SMALL -d LARGE): "
                          "two drafts, the policy picking one per stretch of the answer (docs/drafts.md)."),
        click.option("--ngram", is_flag=True, help="Draft by prompt lookup (n-grams) instead of a model."),
        click.option("--chain", is_flag=True,
                     help="Prompt lookup first, the draft model when it finds nothing (needs a draft model)."),
        click.option("--no-draft", is_flag=True, help="Target alone, no speculation."),
    )


def _sampling_flag(name: str, help: str):
    """``--NAME`` (dashes for underscores) for a SamplingConfig field: its type and default."""
    default = getattr(_SAMPLING, name)
    return click.option("--" + name.replace("_", "-"), type=type(default), default=default, show_default=True,
                        help=help)


def sampling_options(default_temp: float = _SAMPLING.temperature):
    """Sampling (one set for both models) and drafting lengths; defaults are RunSpec's."""
    return _opts(
        click.option("--temp", "--temperature", "temp", type=float, default=default_temp, show_default=True,
                     help="Temperature; 0 is greedy."),
        click.option("--top-k", type=int, default=_SAMPLING.top_k, show_default=True,
                     help="Top-k (0 turns it off)."),
        click.option("--top-p", type=float, default=_SAMPLING.top_p, show_default=True, help="Top-p (nucleus)."),
        click.option("--min-p", type=float, default=_SAMPLING.min_p, show_default=True, help="Min-p."),
        click.option("-s", "--seed", type=int, default=None, help="Random seed (sampling)."),
        _sampling_flag("repeat_penalty", "Divide the logits of recent tokens by this (1 turns it off)."),
        _sampling_flag("repeat_last_n", "How many last tokens the penalties look at (-1: all, 0: penalties off)."),
        _sampling_flag("presence_penalty", "Lower the logit of every recent token by this."),
        _sampling_flag("frequency_penalty", "Lower a recent token's logit by this per occurrence."),
        click.option("--logit-bias", "logit_bias", multiple=True, metavar="ID(+/-)BIAS",
                     help="Add BIAS to token ID's logit, as llama.cpp's: 15043+1, 15043-1, 15043-inf "
                          "(never). Repeatable."),
        _sampling_flag("dry_multiplier", "DRY: penalize tokens that extend a repeat (0 turns it off; 0.8 is usual)."),
        _sampling_flag("dry_base", "DRY: the penalty grows by this factor per repeated token."),
        _sampling_flag("dry_allowed_length", "DRY: repeats up to this long go unpenalized."),
        _sampling_flag("dry_penalty_last_n", "DRY: how many last tokens it looks at (-1: all, 0: off)."),
        click.option("--dry-sequence-breaker", "dry_breakers", multiple=True, metavar="TEXT",
                     help="DRY: a text that ends repeats (repeatable; replaces the defaults \\n : \" *; "
                          "'none': no breakers)."),
        click.option("--draft-temp", type=float, default=None,
                     help="Draft temperature (default: same as --temp); stays lossless."),
        click.option("--draft-max", type=int, default=_SPEC.draft_max, show_default=True,
                     help="Most tokens drafted per step; given explicitly, exactly this many every step."),
        click.option("--draft-min", type=int, default=_SPEC.draft_min, show_default=True,
                     help="Tokens always drafted per step while drafting is on (adaptive mode)."),
        click.option("--p-min", "--draft-p-min", "p_min", type=float, default=None,
                     help="Stop drafting when the draft's top probability falls below this "
                          "(default: automatic, from measured acceptance and costs)."),
        click.option("--fixed-k", is_flag=True, help="Always draft --draft-max tokens (adaptive drafting off)."),
    )


def hardware_options(n_ctx: int = 4096):
    """Context, threads, GPU layers, KV cache."""
    return _opts(
        click.option("-c", "--ctx", "--ctx-size", "n_ctx", type=click.IntRange(min=16), default=n_ctx,
                     show_default=True, help="Context size in tokens."),
        click.option("-t", "--threads", "threads", type=click.IntRange(min=1), default=None,
                     help="CPU threads (default: physical cores)."),
        click.option("-ngl", "--gpu-layers", "--n-gpu-layers", "gpu_layers", type=click.IntRange(min=-1),
                     default=None,
                     help="Target layers on the GPU (-1 all; default all when llama.cpp has GPU support)."),
        click.option("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "gpu_layers_draft",
                     type=click.IntRange(min=-1), default=None,
                     help="Draft layers on the GPU (default: as --gpu-layers)."),
        click.option("--cache-type", type=click.Choice(sorted(CACHE_TYPES)), default="f16",
                     show_default=True, help="KV cache type."),
        rpc_options(),
    )


def rpc_options():
    """The target's layers on other machines (`localspec worker`)."""
    return _opts(
        click.option("--rpc", metavar="HOST:PORT[,...]", default=None,
                     help="RPC workers (`localspec worker`) whose devices take the target's layers "
                          "with this machine's GPUs; the draft stays here."),
        click.option("--rpc-draft", is_flag=True,
                     help="Put the draft model (or an MTP head's file) on the workers too."),
        click.option("--tensor-split", metavar="SHARES", default=None,
                     help="Share of the target's layers per device, workers first (e.g. 3,1; "
                          "default: by free memory)."),
    )


def rpc_config(opts: dict) -> dict:
    """The EngineConfig fields the RPC flags set (checked by EngineConfig.validate).

    Raises:
        BadInput: --tensor-split is not a list of numbers.
    """
    split = opts.get("tensor_split")
    shares = None
    if split:
        try:
            shares = tuple(float(x) for x in split.replace("/", ",").split(","))
        except ValueError:
            raise BadInput(f"--tensor-split {split}: give numbers separated by commas (e.g. 3,1)") from None
    return {"rpc": tuple(x for x in (opts.get("rpc") or "").split(",") if x.strip()) if opts.get("rpc") else (),
            "rpc_draft": bool(opts.get("rpc_draft")), "tensor_split": shares}


def template_options():
    """Variables for the model's chat template: llama.cpp's ``--chat-template-kwargs`` and the
    thinking switch most thinking models' templates read (``enable_thinking``)."""
    return _opts(
        click.option("--chat-template-kwargs", "template_kwargs", metavar="JSON",
                     help="Variables for the model's chat template, e.g. '{\"enable_thinking\": false}'."),
        click.option("--no-think", is_flag=True,
                     help="Turn a thinking model's thinking off (its template's enable_thinking)."),
    )


def template_variables(opts: dict) -> dict | None:
    """What :func:`template_options` asks for, as the chat template's variables (None: none).

    Raises:
        BadInput: the JSON is not an object, or sets a variable the renderer sets itself.
    """
    out: dict = {}
    raw = opts.get("template_kwargs")
    if raw:
        try:
            out = json.loads(raw)
        except ValueError as exc:
            raise BadInput(f"--chat-template-kwargs: not JSON ({exc})") from None
        if not isinstance(out, dict):
            raise BadInput("--chat-template-kwargs: give a JSON object, e.g. '{\"enable_thinking\": false}'")
        taken = sorted(RESERVED & set(out))
        if taken:
            raise BadInput(f"--chat-template-kwargs: {', '.join(taken)} is set by localspec itself")
    if opts.get("no_think"):
        out["enable_thinking"] = False
    return out or None


def generation_options(default_temp: float):
    """The model (MODEL or -m), prompt, sampling, drafting and hardware options."""
    return _opts(
        model_argument(),
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
        template_options(),
        click.option("-n", "--max-tokens", type=int, default=_SPEC.max_tokens, show_default=True,
                     help="Most tokens to generate (0: read the prompt only)."),
        click.option("--stop", multiple=True, metavar="TEXT", help="Stop string (repeatable)."),
        sampling_options(default_temp),
        hardware_options(),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming."),
    )


def chosen_drafter(opts: dict, draft_flag: str = "-d") -> DrafterKind | None:
    """The drafter the flags ask for; None when none was given."""
    chosen = [name for name, on in ((draft_flag, bool(opts.get("draft"))), ("--ngram", opts.get("ngram")),
                                     ("--no-draft", opts.get("no_draft"))) if on]
    if len(chosen) > 1:
        raise BadInput(f"choose one of {draft_flag}, --ngram, --no-draft (got {' and '.join(chosen)})")
    kinds = {draft_flag: DrafterKind.MODEL, "--ngram": DrafterKind.NGRAM, "--no-draft": DrafterKind.NONE}
    kind = kinds[chosen[0]] if chosen else None
    if kind is DrafterKind.MODEL and parse_draft_arg(opts.get("draft"))[0]:
        kind = DrafterKind.MTP
    if second_draft():
        if kind is not DrafterKind.MODEL or opts.get("chain") or parse_draft_arg(second_draft())[0]:
            raise BadInput("two drafts (-d SMALL -d LARGE) are two draft models: leave out --chain and mtp")
        return DrafterKind.MODELS
    if opts.get("chain"):
        if kind not in (None, DrafterKind.MODEL):
            raise BadInput(f"--chain drafts with prompt lookup and a draft model: leave out {chosen[0]}")
        return DrafterKind.NGRAM_MODEL
    return kind


def validated(spec: RunSpec) -> RunSpec:
    """RunSpec's validation, worded with the flags' names."""
    try:
        return spec.validate()
    except SpecError as exc:
        raise BadInput(exc.named(FLAGS.get(exc.field, exc.field))) from None


_BIAS = re.compile(r"(\d+)([+-])(inf|\d+(?:\.\d*)?|\.\d+)")


def logit_bias(values: tuple[str, ...]) -> tuple[tuple[int, float], ...]:
    """``--logit-bias`` values (llama.cpp's ``ID+BIAS`` / ``ID-BIAS`` / ``ID-inf``) as pairs.

    Raises:
        BadInput: a value not of that form.
    """
    out = []
    for v in values:
        m = _BIAS.fullmatch(v.strip())
        if m is None:
            raise BadInput(f"--logit-bias {v}: give TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043-1, 15043-inf)")
        out.append((int(m[1]), float(m[2] + m[3])))
    return tuple(out)


def run_spec(opts: dict, drafter: DrafterKind, tuned: dict | None = None) -> RunSpec:
    """The RunSpec the flags describe; ``tuned`` (from `localspec tune`) fills in the drafting
    settings no flag gave. An explicit --draft-max means exactly that many every step."""
    values = dict(drafter=drafter, draft_max=opts["draft_max"], draft_min=opts["draft_min"],
                  p_min=opts["p_min"], adaptive=not (opts["fixed_k"] or explicit("draft_max")),
                  temperature=opts["temp"], top_k=opts["top_k"], top_p=opts["top_p"], min_p=opts["min_p"],
                  seed=opts["seed"], draft_temperature=opts["draft_temp"],
                  max_tokens=opts["max_tokens"], stop=tuple(opts.get("stop") or ()),
                  repeat_penalty=opts["repeat_penalty"], repeat_last_n=opts["repeat_last_n"],
                  presence_penalty=opts["presence_penalty"], frequency_penalty=opts["frequency_penalty"],
                  logit_bias=logit_bias(opts.get("logit_bias") or ()),
                  dry_multiplier=opts["dry_multiplier"], dry_base=opts["dry_base"],
                  dry_allowed_length=opts["dry_allowed_length"], dry_penalty_last_n=opts["dry_penalty_last_n"])
    breakers = opts.get("dry_breakers") or ()
    if breakers:          # (llama.cpp's: given ones replace the defaults, "none" clears them)
        values["dry_sequence_breakers"] = () if tuple(breakers) == ("none",) else tuple(breakers)
    if tuned:
        values.update(tuned)
    if opts.get("cascade") is not None:
        values["cascade"] = opts["cascade"]
    return validated(RunSpec.of(**values))


@dataclass(frozen=True)
class Pair:
    """The models a command runs: GGUF paths and the drafter the flags chose."""

    target: str
    draft: str | None
    drafter: DrafterKind
    mtp_file: str | None = None      # DrafterKind.MTP: the head's own GGUF; None: embedded
    draft2: str | None = None        # DrafterKind.MODELS: the second draft model


def resolve_pair(opts: dict) -> Pair:
    """MODEL or -m, -d/--ngram/--no-draft/--demo into paths (the demo pair is made on first use)."""
    take_target(opts)
    target, draft = opts.get("target"), opts.get("draft")
    drafter = chosen_drafter(opts)
    if opts.get("demo"):
        if drafter is DrafterKind.MTP:
            raise BadInput("the demo pair (SmolLM2) has no MTP head: leave out --draft mtp")
        if target or draft:
            raise BadInput("--demo picks both models; leave out -m and -d")
        from ..models.demo import demo_pair

        t, d = demo_pair(progress=lambda m: click.echo(m, err=True))
        if drafter is DrafterKind.MODELS:
            raise BadInput("--demo picks both models; leave out -d")
        return Pair(str(t), str(d) if drafter is None or drafter.uses_model else None, drafter or DrafterKind.MODEL)
    if not target:
        raise BadInput("no target model: give MODEL (or -m MODEL.gguf, or --demo)")
    if drafter is None:
        resolve_model(target, "target")   # (a target that is not there says so first)
        raise BadInput("no drafter: give a draft model with -d DRAFT, or --ngram, or --no-draft")
    if drafter is DrafterKind.MTP:
        return mtp_pair(resolve_model(target, "target"), draft)
    if drafter.uses_model and not draft:
        raise BadInput("--chain needs a draft model: give -d DRAFT (or --demo)")
    return Pair(resolve_model(target, "target"),
                resolve_model(draft, "draft") if drafter.uses_model else None, drafter,
                draft2=resolve_model(second_draft(), "draft") if drafter is DrafterKind.MODELS else None)


def mtp_pair(target_path: str, draft_arg: str) -> Pair:
    """A target and where its MTP head is (--draft mtp / mtp:PATH)."""
    _, head = parse_draft_arg(draft_arg)
    src = locate_mtp(target_path, resolve_model(head, "MTP head") if head else None)
    return Pair(target_path, None, DrafterKind.MTP, src.file)


def engine_config(opts: dict, pair: Pair, spec: RunSpec | None = None) -> EngineConfig:
    """What to load: the pair and the hardware flags."""
    from ..engine import EngineConfig, rollback_depth

    depth = rollback_depth(spec) if spec is not None else None
    return EngineConfig(target=pair.target, draft=pair.draft, draft2=pair.draft2, mtp=pair.drafter is DrafterKind.MTP,
                        mtp_file=pair.mtp_file, n_ctx=opts["n_ctx"], threads=opts["threads"],
                        gpu_layers=opts["gpu_layers"], gpu_layers_draft=opts["gpu_layers_draft"],
                        cache_type=opts["cache_type"], rollback_depth=depth, **rpc_config(opts))


def prepare(opts: dict) -> tuple[EngineConfig, RunSpec]:
    """Everything `run` and `compare` need before loading: the models and the RunSpec."""
    pair = resolve_pair(opts)
    tuned = tuned_settings(opts, pair) if pair.drafter in (DrafterKind.MODEL, DrafterKind.MTP) else None
    opts["cascade"] = cascade_threshold(opts, pair.target, pair.draft)
    spec = run_spec(opts, pair.drafter, tuned)
    return engine_config(opts, pair, spec), spec


def read_prompt(opts: dict) -> str:
    """The prompt's text (-p, -p - or -f), its chat flags checked before any model loads.

    Raises:
        BadInput: no prompt or two, a missing file, a chat flag without --chat, bad
            --chat-template-kwargs.
    """
    for flag, key in (("--system", "system"), ("--chat-template-kwargs", "template_kwargs"),
                      ("--no-think", "no_think")):
        if opts.get(key) and not opts.get("chat"):
            raise BadInput(f"{flag} needs --chat")
    template_variables(opts)
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


_TUNED_FLAGS = ("draft_max", "draft_min", "p_min", "fixed_k", "draft_temp")


def explicit(name: str) -> bool:
    """Whether option ``name`` was given on the command line or in its environment variable
    (not a default)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.get_parameter_source(name) in (click.core.ParameterSource.COMMANDLINE,
                                                           click.core.ParameterSource.ENVIRONMENT))


def tuned_settings(opts: dict, pair: Pair, *, quiet: bool = False) -> dict | None:
    """`localspec tune`'s drafting settings for this pair and backend, unless a drafting flag
    was given (flags win); says so on stderr."""
    mtp = pair.drafter is DrafterKind.MTP
    if any(explicit(f) for f in _TUNED_FLAGS) or not (pair.draft or mtp):
        return None
    from ..bench import tuning
    from ..engine.backend import backend_name

    gl = opts.get("gpu_layers")
    backend = backend_name(gl if gl is not None else -1, bool(opts.get("rpc")))
    entry = (tuning.lookup_mtp(pair.target, pair.mtp_file, backend) if mtp
             else tuning.lookup(pair.target, pair.draft, backend))
    if not entry:
        return None
    st = entry["settings"]
    if not quiet:
        click.echo(f"localspec: using tuned settings for this pair ({tuning.describe(st)}) from "
                   "`localspec tune`; flags override", err=True)
    return {"draft_max": st["draft_max"], "adaptive": not st["fixed_k"], "p_min": st.get("p_min"),
            "draft_temperature": st.get("draft_temp"), "draft_min": min(opts["draft_min"], st["draft_max"])}


def prompt_tokens(engine, opts: dict, text: str) -> list[int]:
    if opts.get("chat"):
        messages = []
        if opts.get("system"):
            messages.append({"role": "system", "content": opts["system"]})
        messages.append({"role": "user", "content": text})
        return engine.chat_prompt(messages, template_variables(opts))
    return engine.tokenize(text)
