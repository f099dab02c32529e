"""Chat prompts from the model's own Jinja chat template, rendered in a sandbox.

A chat template comes from a downloaded file, so it is untrusted input: it is rendered in
Jinja's immutable sandbox (no attribute access to internals, no mutation of our objects).
The statements beyond plain Jinja that llama.cpp's and transformers' template engines take
render too: ``{% generation %}...{% endgeneration %}`` (it marks the assistant's tokens for
training; a prompt keeps its body as it is), ``{% break %}`` / ``{% continue %}`` and
``{% do expression %}``.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import LocalspecError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _raise(message: str):
    raise jinja2.TemplateError(message)


def _tojson(value, indent=None, ensure_ascii=False, **_):
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


class GenerationBlocks(Extension):
    """``{% generation %}body{% endgeneration %}`` renders ``body`` unchanged."""

    tags = {"generation"}

    def parse(self, parser) -> list[nodes.Node]:
        next(parser.stream)   # the tag's own name
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do", GenerationBlocks])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


_ENV = _environment()


@functools.lru_cache(maxsize=16)
def _compiled(template: str) -> jinja2.Template:
    """A chat template compiled once (compiling takes milliseconds; a chat renders every turn)."""
    return _ENV.from_string(template)


# The variables a template gets from the renderer itself, never from a caller's extras.
RESERVED = frozenset({"messages", "tools", "bos_token", "eos_token", "add_generation_prompt"})


def render_chat(template: str | None, messages: list[dict], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, tools: list[dict] | None = None,
                variables: dict | None = None) -> str:
    """Render ``messages`` with a chat template.

    Args:
        template: the Jinja source; None renders ChatML.
        messages: dicts with a role and a content.
        bos_token, eos_token: the texts the template may place.
        add_generation_prompt: end with the opening of the assistant's turn.
        tools: OpenAI-style tool definitions, given to the template as ``tools`` (as
            transformers' ``apply_chat_template`` does); None: the template sees none.
        variables: more variables for the template (llama-server's ``chat_template_kwargs``,
            e.g. ``enable_thinking``); none of :data:`RESERVED`.

    Returns:
        The prompt text.

    Raises:
        LocalspecError: a message lacks a role or content, or the template fails or tries
            something the sandbox forbids (one line).
    """
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise LocalspecError("each chat message needs a role and a content")
    try:
        tmpl = _compiled(template or CHATML)
        extra = {k: v for k, v in (variables or {}).items() if k not in RESERVED}
        if tools:
            extra["tools"] = tools
        return tmpl.render(messages=messages, bos_token=bos_token, eos_token=eos_token,
                           add_generation_prompt=add_generation_prompt, **extra)
    except jinja2.exceptions.SecurityError as exc:
        raise LocalspecError(f"the model's chat template tried something unsafe: {exc}") from None
    except jinja2.TemplateError as exc:
        raise LocalspecError(f"the model's chat template failed: {exc}") from None


def chat_tokens(model, messages: list[dict], tools: list[dict] | None = None,
                variables: dict | None = None) -> list[int]:
    """Render with the model's template and tokenize, adding BOS once when the model wants it.

    Args:
        model: a loaded :class:`~localspec.engine.backend.Model` (its template, BOS/EOS and
            tokenizer).
        messages, tools, variables: as for :func:`render_chat`.

    Returns:
        The prompt's token ids.

    Raises:
        LocalspecError: as :func:`render_chat`.
    """
    bos = model.token_text(model.bos) if model.bos >= 0 else ""
    eos = model.token_text(model.eos) if model.eos >= 0 else ""
    text = render_chat(model.chat_template(), messages, bos_token=bos, eos_token=eos, tools=tools,
                       variables=variables)
    tokens = model.tokenize(text, add_special=False, parse_special=True)
    if model.add_bos and model.bos >= 0 and (not tokens or tokens[0] != model.bos):
        tokens.insert(0, model.bos)
    return tokens
