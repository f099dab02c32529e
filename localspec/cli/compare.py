"""``localspec compare``: target alone, then speculative, on the same prompt."""

from __future__ import annotations

import json

import click

from ..engine import Done, Engine
from . import render
from .main import cli
from .options import engine_config, generation_options, prompt_tokens, read_prompt, sampling_config


def _run(engine: Engine, tokens, sampling, opts, speculative: bool, policy=None) -> Done:
    engine.reset()
    done = None
    for ev in engine.generate(tokens, sampling=sampling, max_tokens=opts["max_tokens"],
                              stop=opts["stop"], speculative=speculative, policy=policy):
        if isinstance(ev, Done):
            done = ev
    return done


def comparison(base: Done, spec: Done, greedy: bool) -> dict:
    b, s = base.summary, spec.summary
    speedup = s.tokens_per_second / b.tokens_per_second if b.tokens_per_second else 0.0
    identical = list(base.token_ids) == list(spec.token_ids) if greedy else None
    return {"speedup": speedup, "identical": identical,
            "target_only": b.to_dict(), "speculative": s.to_dict()}


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
    config = engine_config(opts)
    sampling = sampling_config(opts)
    with Engine(config) as engine:
        tokens = prompt_tokens(engine, opts, text)
        if not opts["as_json"]:
            click.echo("running the target alone...", err=True)
        base = _run(engine, tokens, sampling, opts, speculative=False)
        if not opts["as_json"]:
            click.echo("running speculative...", err=True)
        policy = engine.new_policy()
        spec = _run(engine, tokens, sampling, opts, speculative=True, policy=policy)
        result = comparison(base, spec, sampling.greedy)
        if opts["as_json"]:
            result |= {"text_target_only": base.text, "text_speculative": spec.text,
                       "policy": policy.estimates(), "sampling": sampling.to_dict(),
                       "engine": engine.describe()}
            click.echo(json.dumps(result, indent=2))
            return
        b, s = base.summary, spec.summary
        click.echo(f"target only : {b.tokens_per_second:8.1f} tok/s  {render.speed_line(b)}")
        click.echo(f"speculative : {s.tokens_per_second:8.1f} tok/s  {render.speed_line(s)}")
        click.echo(f"speed-up    : {result['speedup']:.2f}x")
        click.echo(f"drafting    : {render.draft_line(s)}")
        if policy.adaptive:
            click.echo(f"policy      : {s.policy}")
        if render.memory_line(s):
            click.echo(f"memory      : {render.memory_line(s)}")
        if result["identical"] is None:
            click.echo("outputs     : not compared (sampling: same distribution, different draws; "
                       "use --temp 0 for a token-for-token check)")
        elif result["identical"]:
            click.echo(f"outputs     : identical ({len(spec.token_ids)} tokens)")
        else:
            n = next((i for i, (x, y) in enumerate(zip(base.token_ids, spec.token_ids)) if x != y),
                     min(len(base.token_ids), len(spec.token_ids)))
            click.echo(f"outputs     : DIFFERENT from token {n}")
        click.echo(f"\n{spec.text}")
