"""``localspec run``: generate once, streaming text to stdout and the statistics to stderr."""

from __future__ import annotations

import json
import sys

import click

from ..engine import Done, PolicyNote, TextChunk, Token
from . import render
from .main import cli
from .options import cascade_option, generation_options, prepare, prompt_tokens, read_prompt


@cli.command()
@generation_options(default_temp=0.8)
@cascade_option()
def run(**opts) -> None:
    """Generate from a prompt with a target and a drafter.

    \b
    Example:
      localspec run -m qwen2.5-7b-q4_k_m.gguf -d qwen2.5-0.5b-q8_0.gguf -p "Explain TCP" --chat
    """
    text = read_prompt(opts)
    config, spec = prepare(opts)
    from ..engine import Engine

    with Engine(config) as engine:
        tokens = prompt_tokens(engine, opts, text)
        done = None
        out = sys.stdout
        wrote = False        # a note after some text starts a line of its own
        for ev in engine.run(tokens, spec):
            if isinstance(ev, (Token, TextChunk)):
                if not opts["as_json"] and ev.text:
                    out.write(ev.text)
                    out.flush()
                    wrote = True
            elif isinstance(ev, PolicyNote):
                if not opts["as_json"]:
                    click.echo(("\n" if wrote else "") + f"[localspec] {ev.reason}", err=True)
            elif isinstance(ev, Done):
                done = ev
        s = done.summary
        if opts["as_json"]:
            extra = {}
            if opts["chat"]:      # a thinking model's reasoning apart from its reply
                from ..chat.reasoning import prompt_opens_thinking, split_reasoning

                reasoning, reply = split_reasoning(done.text, prompt_opens_thinking(engine.target_model, tokens))
                extra = {"reasoning": reasoning, "reply": reply}
            click.echo(json.dumps({
                "text": done.text,
                **extra,
                "token_ids": list(done.token_ids),
                "answered_by": s.answered_by or "target",
                "stop_reason": done.stop_reason.value,
                "message": done.message,
                "stats": s.to_dict(),
                "policy": done.policy,
                "sampling": spec.sampling.to_dict() | {"seed": s.seed},
                "spec": spec.to_dict(),
                "engine": engine.describe(),
            }, indent=2))
            return
        out.write("\n")
        out.flush()
        if done.message:
            click.echo(f"localspec: {done.message}", err=True)
        info = engine.describe()
        click.echo(f"--- {render.speed_line(s)}", err=True)
        if s.answered_by:
            click.echo(f"--- {render.cascade_line(s, spec.cascade)}", err=True)
        click.echo(f"--- {render.draft_line(s)}; backend {info['target']['backend']}", err=True)
        if done.policy.get("adaptive"):
            click.echo(f"--- {render.policy_line(s)}", err=True)
        memory = render.memory_line(s)
        if memory:
            click.echo(f"--- {memory}", err=True)
