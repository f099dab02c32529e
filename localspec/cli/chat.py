"""``localspec chat``: the terminal app (Textual), with live speculative-decoding gauges."""

from __future__ import annotations

import click

from ..chat.settings import CHAT_DEFAULTS
from ..engine import DrafterKind
from ..errors import BadInput
from ..models.catalog import load_catalog
from .main import cli
from .options import (
    Pair,
    cascade_option,
    cascade_threshold,
    chosen_drafter,
    drafter_options,
    hardware_options,
    mtp_pair,
    resolve_model,
    rpc_config,
    run_spec,
    sampling_options,
    second_draft,
    template_options,
    template_variables,
    tuned_settings,
)


def _store_draft(target_arg: str, target_path: str) -> tuple[str, str] | None:
    """(draft path, draft name) of a compatible registered pair whose target is this model."""
    from pathlib import Path

    from ..models.store import Store

    store = Store()
    names = {target_arg}
    names |= {m.name for m in store.models() if Path(m.path) == Path(target_path)}
    alias = target_arg.lower()
    if alias in load_catalog().models:
        names |= {m.name for m in store.models() if m.alias == alias}
    for pair in store.pairs():
        if pair.target in names and pair.compatible:
            entry = store.get(pair.draft)
            if entry is not None and entry.exists():
                return entry.path, entry.name
    return None


def choose_models(target: str | None, opts: dict):
    """A ModelChoice from the command line (the demo pair when no TARGET is given)."""
    from pathlib import Path

    from ..chat.session import ModelChoice

    drafter = chosen_drafter(opts, "--draft") or DrafterKind.MODEL
    hw = dict(n_ctx=opts["n_ctx"], threads=opts["threads"], gpu_layers=opts["gpu_layers"],
              gpu_layers_draft=opts["gpu_layers_draft"], cache_type=opts["cache_type"], **rpc_config(opts))
    if target is None:
        if opts.get("draft"):
            raise BadInput("--draft needs a TARGET (without one, chat uses the built-in demo pair)")
        return ModelChoice(demo=True, **hw), drafter
    target_path = resolve_model(target, "target")
    draft_path = draft_name = None
    if drafter is DrafterKind.MTP:
        pair = mtp_pair(target_path, opts["draft"])   # refuses a target without a head, here
        t_name = target if not Path(target).exists() else None
        return ModelChoice(target=target_path, target_name=t_name, mtp_file=pair.mtp_file, **hw), drafter
    draft2 = resolve_model(second_draft(), "draft") if drafter is DrafterKind.MODELS else None
    if opts.get("draft"):
        draft_path, draft_name = resolve_model(opts["draft"], "draft"), opts["draft"]
    elif drafter.uses_model:
        found = _store_draft(target, target_path)
        if found is None:
            raise BadInput(f"no draft for {target}: give --draft DRAFT, or --ngram, or --no-draft "
                           "(`localspec pull` registers pairs)")
        draft_path, draft_name = found
    t_name = target if not Path(target).exists() else None
    d_name = draft_name if draft_name and not Path(draft_name).exists() else None
    return ModelChoice(target=target_path, draft=draft_path, target_name=t_name, draft_name=d_name,
                       draft2=draft2, **hw), drafter


@cli.command()
@click.argument("target", required=False, metavar="[TARGET]")
@click.option("-m", "--model", "model", metavar="TARGET",
              help="Target model (as TARGET): a .gguf file, a local model name or a pulled catalog alias.")
@drafter_options()
@click.option("--system", metavar="TEXT", help="System message.")
@template_options()
@click.option("-n", "--max-tokens", type=int, default=CHAT_DEFAULTS.max_tokens, show_default=True,
              help="Most tokens per answer.")
@sampling_options(default_temp=0.8)
@hardware_options()
@cascade_option()
@click.option("--save-dir", type=click.Path(file_okay=False), default=None,
              help="Where chats (ctrl+s) and comparisons are saved as JSON and Markdown (default: here).")
@click.option("--resume", metavar="FILE", default=None,
              help="Go on with a chat saved with ctrl+s (its .json file).")
def chat(target, model, **opts) -> None:
    """Chat with a model in the terminal, with live speculative-decoding gauges.

    Without TARGET it uses the built-in demo pair (SmolLM2-135M: F16 target, Q4_1 draft;
    needs `pip install 'localspec[demo]'`), prepared on first use. With TARGET and no
    --draft it uses the draft of a pair registered by `localspec pull`.

    \b
    Keys: Enter send · Esc stop · ctrl+n new chat · ctrl+y copy answer · ctrl+r retry
          ctrl+s save chat · up/down earlier messages · ctrl+t token colours
          F2 settings · F3 models (pull, pairs) · F4 compare · ctrl+q quit
    \b
    Examples:
      localspec chat
      localspec chat qwen2.5-7b --draft qwen2.5-0.5b
      localspec chat -m target.gguf -d draft.gguf
      localspec chat model.gguf --ngram --temp 0
      localspec chat qwen3.6-27b.gguf --draft mtp
      localspec chat qwen2.5-7b --resume localspec-chat-20261207-2300.json
    """
    if target and model and target != model:
        raise BadInput(f"two targets given ({target} and -m {model}): give one")
    system, messages = opts["system"], []
    if opts["resume"]:
        from ..chat.transcript import load_transcript

        saved_system, messages = load_transcript(opts["resume"])
        system = system if system is not None else saved_system
    variables = template_variables(opts)
    choice, drafter = choose_models(target or model, opts)
    tuned = None
    if drafter is DrafterKind.MODEL:
        from ..models.demo import prepared_demo_pair

        pair = prepared_demo_pair() if choice.demo else (choice.target, choice.draft)
        if pair is not None:   # `localspec tune`'s settings; flags win
            tuned = tuned_settings(opts, Pair(str(pair[0]), str(pair[1]), drafter))
    opts["cascade"] = cascade_threshold(opts, choice.target, choice.draft)
    settings = run_spec(opts, drafter, tuned)
    from ..chat.session import ChatSession
    from ..tui.app import LocalspecApp

    session = ChatSession(choice, settings, system=system, variables=variables)
    session.messages = messages
    app = LocalspecApp(session, save_dir=opts["save_dir"])
    app.run()
    if app.return_code:
        raise SystemExit(app.return_code)
