"""Request bodies into what the engine runs: prompt tokens and a :class:`RunSpec`.

Only :meth:`RunSpec.validate` judges run settings; a :class:`SpecError` is reworded here with
the JSON field's name (``speculative.draft_max``, ``max_completion_tokens``) into a 400. What
is checked here is the shape of the request itself: JSON, messages, prompt, ``n``, and the
OpenAI options this server does not implement (refused, never silently ignored).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..engine import DrafterKind, RunSpec, SpecError
from ..errors import LocalspecError
from .errors import ApiError

# Top-level sampling fields, under their OpenAI names (also RunSpec's).
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed")

# Keys of the "speculative" object and the RunSpec field each sets.
SPECULATIVE = {"draft_max": "draft_max", "draft_min": "draft_min", "draft_temperature": "draft_temperature",
               "p_min": "p_min", "adaptive": "adaptive", "drafter": "drafter"}

# RunSpec field -> JSON field, for error messages (max_tokens depends on which name was sent).
JSON_NAMES = {name: name for name in SAMPLING} | {
    "stop": "stop", "drafter": "speculative.drafter", "draft_max": "speculative.draft_max",
    "draft_min": "speculative.draft_min", "draft_temperature": "speculative.draft_temperature",
    "p_min": "speculative.p_min"}

# OpenAI options we do not implement: refused when set to anything but their neutral value.
_UNSUPPORTED = {"logprobs": (None, False), "top_logprobs": (None, 0), "tools": (None, []),
                "functions": (None, []), "tool_choice": (None, "none"), "echo": (None, False),
                "best_of": (None, 1), "suffix": (None, ""), "presence_penalty": (None, 0, 0.0),
                "frequency_penalty": (None, 0, 0.0), "logit_bias": (None, {})}


@dataclass(frozen=True)
class Parsed:
    """One request, ready for the queue."""

    prompt: list[int]
    spec: RunSpec
    stream: bool
    include_usage: bool
    model: str | None


def parse_json(body: bytes) -> dict:
    """The request body as a JSON object, or a 400."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return data


def messages(body: dict) -> list[dict]:
    """Chat messages as the chat template wants them: role and text content."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] needs a role", param=f"messages[{i}].role")
        content = m.get("content")
        if isinstance(content, list):   # content parts: text only
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content: only text parts are supported",
                                   param=f"messages[{i}].content")
                texts.append(part["text"])
            content = "".join(texts)
        elif content is None:
            content = ""
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts",
                           param=f"messages[{i}].content")
        out.append({"role": m["role"], "content": content})
    return out


def completion_prompt(body: dict) -> str | list[int]:
    """The prompt of /v1/completions: a string, or token ids; one prompt only."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if isinstance(p, str):
        if not p:
            raise ApiError(400, "prompt is empty", param="prompt")
        return p
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return p
    if isinstance(p, list) and len(p) > 1 and all(isinstance(x, (str, list)) for x in p):
        raise ApiError(400, "one prompt per request (got a list of several)", param="prompt")
    raise ApiError(400, "prompt must be a string or a list of token ids", param="prompt")


def check_request(body: dict) -> None:
    """Refuse what this server cannot do: several choices, logprobs, tools, penalties."""
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError(400, f"n must be 1: one choice per request (got {n!r})", param="n")
    for key, neutral in _UNSUPPORTED.items():
        if key in body and body[key] not in neutral:
            raise ApiError(400, f"{key} is not supported by localspec serve", param=key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") in (None, "text")):
        raise ApiError(400, "response_format: only text is supported", param="response_format")
    if not isinstance(body.get("stream", False), (bool, type(None))):
        raise ApiError(400, "stream must be true or false", param="stream")


def run_spec(body: dict, base: RunSpec, n_prompt: int, n_ctx: int, drafters: tuple[DrafterKind, ...]) -> RunSpec:
    """The RunSpec a request asks for: the server's defaults with the request's values on top.

    Without max_tokens the answer may fill the context (as with OpenAI and llama-server).
    """
    if n_prompt >= n_ctx:
        raise ApiError(400, f"the prompt is {n_prompt} tokens but the context holds {n_ctx}; "
                            "send a shorter prompt or start the server with a larger --ctx",
                       param="messages" if "messages" in body else "prompt", code="context_length_exceeded")
    values: dict = {}
    for name in SAMPLING:
        if body.get(name) is not None:
            values[name] = body[name]
    length_name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    values["max_tokens"] = body[length_name] if body.get(length_name) is not None else n_ctx - n_prompt
    stop = body.get("stop")
    if stop is not None:
        values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else (stop,)
    values.update(_speculative(body.get("speculative"), base, drafters))
    try:
        spec = base.with_(**values)
        return spec.validate()
    except SpecError as exc:
        name = length_name if exc.field == "max_tokens" else JSON_NAMES.get(exc.field, exc.field)
        raise ApiError(400, exc.named(name), param=name) from None
    except (TypeError, ValueError) as exc:   # a value RunSpec cannot even hold
        raise ApiError(400, f"bad value: {exc}") from None


def _speculative(spec: object, base: RunSpec, drafters: tuple[DrafterKind, ...]) -> dict:
    """The RunSpec fields the ``speculative`` object sets.

    ``enabled: false`` runs the target alone; ``enabled: true`` on a server started without a
    drafter uses prompt lookup. As on the command line, a ``draft_max`` given without
    ``adaptive`` means exactly that many drafts every round.
    """
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ApiError(400, "speculative must be an object", param="speculative")
    out: dict = {}
    for key, value in spec.items():
        if key == "enabled":
            if not isinstance(value, bool):
                raise ApiError(400, "speculative.enabled must be true or false", param="speculative.enabled")
            if not value:
                out["drafter"] = DrafterKind.NONE
            elif not base.speculative and "drafter" not in spec:
                out["drafter"] = DrafterKind.MODEL if DrafterKind.MODEL in drafters else DrafterKind.NGRAM
        elif key in SPECULATIVE:
            if key == "adaptive" and not isinstance(value, bool):
                raise ApiError(400, "speculative.adaptive must be true or false", param="speculative.adaptive")
            if value is not None:
                out[SPECULATIVE[key]] = value
        else:
            raise ApiError(400, f"speculative.{key} is not a speculation setting (known: enabled, "
                                f"{', '.join(SPECULATIVE)})", param=f"speculative.{key}")
    if spec.get("enabled") is False:
        out["drafter"] = DrafterKind.NONE
    if "draft_max" in out and "adaptive" not in out:
        out["adaptive"] = False
    if "drafter" in out:
        try:
            kind = DrafterKind.parse(out["drafter"])
        except SpecError as exc:
            raise ApiError(400, exc.named("speculative.drafter"), param="speculative.drafter") from None
        except TypeError:
            raise ApiError(400, "speculative.drafter must be a string", param="speculative.drafter") from None
        if kind not in drafters:
            raise ApiError(400, "speculative.drafter: no draft model is loaded on this server "
                                "(use \"ngram\" or \"none\")", param="speculative.drafter")
        out["drafter"] = kind
    return out


def template_error(exc: LocalspecError) -> ApiError:
    """A chat template that cannot render these messages, as a 400."""
    return ApiError(400, str(exc), param="messages")
