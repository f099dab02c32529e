"""``localspec compare``: target alone, then speculative, on the same prompt."""

from __future__ import annotations

import json

import click

from ..chat.comparison import compare as run_comparison
from ..engine import Done
from . import render
from .main import cli
from .options import generation_options, prepare, prompt_tokens, read_prompt


@cli.command()
@generation_options(default_temp=0.0)
def compare(**opts) -> None:
    """Run the target alone, then with speculation, and show the speed-up.

    Greedy by default (--temp 0) so the two outputs can be checked token for token.

    \b
    Example:
      localspec compare -m qwen2.5-7b-q4_k_m.gguf -d qwen2.5-0.5b-q8_0.gguf -p "Write a haiku" --chat
    """
    text = read_prompt(opts)
    config, spec = prepare(opts)
    quiet = opts["as_json"]

    def say(name: str, ev) -> None:
        if not quiet and not isinstance(ev, Done) and getattr(ev, "n_cached", None) is not None:
            click.echo(f"running {name.replace('_', ' ')}...", err=True)

    from ..engine import Engine

    with Engine(config) as engine:
        tokens = prompt_tokens(engine, opts, text)
        result = run_comparison(engine, tokens, spec, prompt=text, on_event=say)
        if opts["as_json"]:
            out = result.to_dict() | {"text_target_only": result.base.text,
                                      "text_speculative": result.spec.text, "spec": spec.to_dict()}
            click.echo(json.dumps(out, indent=2))
            return
        b, s = result.base.summary, result.spec.summary
        click.echo(f"target only : {b.tokens_per_second:8.1f} tok/s  {render.speed_line(b)}")
        click.echo(f"speculative : {s.tokens_per_second:8.1f} tok/s  {render.speed_line(s)}")
        click.echo(f"speed-up    : {result.speedup:.2f}x")
        click.echo(f"drafting    : {render.draft_line(s)}")
        if result.policy.get("adaptive"):
            click.echo(f"policy      : {s.policy}")
        if render.memory_line(s):
            click.echo(f"memory      : {render.memory_line(s)}")
        click.echo(f"outputs     : {result.outputs_line()}")
        click.echo(f"\n{result.spec.text}")
