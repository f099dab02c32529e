"""Request bodies into what the engine runs: prompt tokens and a :class:`RunSpec`.

Only :meth:`RunSpec.validate` judges run settings; a :class:`SpecError` is reworded here with
the JSON field's name (``speculative.draft_max``, ``max_completion_tokens``) into a 400. What
is checked here is the shape of the request itself: JSON, prompt, ``n``, and the options
this server does not implement (refused, never silently ignored); chat messages, tools and
the answer's grammar are :mod:`localspec.server.tools`'.

Every top-level field a request sends is one of :func:`known_fields`: a field this server
honours, or an option it does not implement sent at its neutral ("off") value. Anything else
is a 400 naming the field. llama-server's own per-request fields are honoured under their
names: the flat ``speculative.n_max`` / ``speculative.n_min`` / ``speculative.p_min``,
``n_predict``, ``cache_prompt``, ``id_slot``, ``n_indent``, ``n_probs``, ``t_max_predict_ms``
and (``/completion``, ``/infill``) ``return_tokens`` and ``response_fields``;
``t_max_prompt_ms`` is taken as llama-server takes it, without effect.
"""

from __future__ import annotations

import json

from ..engine import DrafterKind, RunSpec, SpecError
from ..engine.spec import LOGPROBS_MAX
from ..engine.template import RESERVED
from ..errors import LocalspecError
from .errors import ApiError

# Top-level sampling fields, under their OpenAI names (also RunSpec's).
SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
            "repeat_penalty", "repeat_last_n", "dry_multiplier", "dry_base", "dry_allowed_length",
            "dry_penalty_last_n", "dry_sequence_breakers")

# Keys of the "speculative" object (also sent flat, llama-server's way: "speculative.n_max")
# and the RunSpec field each sets; n_max and n_min are llama-server's names.
SPECULATIVE = {"draft_max": "draft_max", "draft_min": "draft_min", "draft_temperature": "draft_temperature",
               "p_min": "p_min", "adaptive": "adaptive", "drafter": "drafter",
               "n_max": "draft_max", "n_min": "draft_min"}

# RunSpec field -> JSON field, for error messages (max_tokens depends on which name was sent).
JSON_NAMES = {name: name for name in SAMPLING} | {
    "stop": "stop", "drafter": "speculative.drafter", "draft_max": "speculative.draft_max",
    "draft_min": "speculative.draft_min", "draft_temperature": "speculative.draft_temperature",
    "p_min": "speculative.p_min"}

# OpenAI options we do not implement: refused when set to anything but their neutral value.
_UNSUPPORTED = {"functions": (None, []), "echo": (None, False),
                "best_of": (None, 1), "suffix": (None, "")}

# llama-server's sampler switches this server does not have: accepted at their "off" value
# (llama.cpp's default), refused otherwise.
_LLAMA_OFF = {"typical_p": (None, 1, 1.0), "typ_p": (None, 1, 1.0),
              "dynatemp_range": (None, 0, 0.0), "xtc_probability": (None, 0, 0.0),
              "mirostat": (None, 0), "top_n_sigma": (None, -1, -1.0), "min_keep": (None, 0),
              "ignore_eos": (None, False), "timings_per_token": (None, False), "post_sampling_probs": (None, False),
              "return_tokens": (None, False), "lora": (None, []),
              "backend_sampling": (None, False)}

# llama-server's fields that only tune one of those switches: no effect while it is off.
_LLAMA_TUNING = {"dynatemp_exponent": "dynatemp_range", "xtc_threshold": "xtc_probability",
                 "mirostat_tau": "mirostat", "mirostat_eta": "mirostat"}

# The fields every generating endpoint honours, besides the prompt's own field.
_HONOURED = {"model", "stream", "stream_options", "n", "stop", "speculative", "localspec", "max_tokens",
             "max_completion_tokens", "n_predict", "cache_prompt", "id_slot", "samplers", "user",
             "parallel_tool_calls", "response_format", "tools", "tool_choice", "grammar", "json_schema",
             "logprobs", "top_logprobs", "n_probs", "n_indent", "t_max_predict_ms", "t_max_prompt_ms", "logit_bias",
             "reasoning_format", "chat_template_kwargs", "reasoning_effort", *SAMPLING}

# Fields about the chat template and a thinking model's reasoning: chat requests only (a text
# endpoint's answer is its raw text: reasoning_format "none" there).
_CHAT_ONLY = ("chat_template_kwargs", "reasoning_effort", "reasoning_format")
# OpenAI's reasoning efforts: the template's reasoning_effort (gpt-oss reads it); "none" turns
# thinking off (enable_thinking, which Qwen's templates read).
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# llama-server's reasoning formats: whether a thinking model's reasoning comes apart from the reply.
_REASONING = {"auto": True, "deepseek": True, "none": False}

# The prompt's field of each endpoint ("completion" is llama-server's native /completion,
# "infill" its fill-in-the-middle, where the prompt is optional text after the prefix).
PROMPT_FIELD = {"chat": "messages", "completions": "prompt", "completion": "prompt", "infill": "prompt"}
NATIVE = ("completion", "infill")   # the endpoints that answer in llama-server's shape
_INFILL = {"input_prefix", "input_suffix", "input_extra"}

# llama.cpp's sampler names and letters (its --samplers); this server's chain is top-k, top-p,
# min-p, temperature, and the others are off (their switches are checked above).
_SAMPLER_LETTERS = {"dry": "d", "top_k": "k", "typ_p": "y", "typical_p": "y", "top_p": "p", "top_n_sigma": "s",
                    "min_p": "m", "temperature": "t", "xtc": "x", "infill": "i", "penalties": "e"}
_CHAIN = "kpmti"
# A sampler left out of ``samplers`` is off, as in llama.cpp's chain (no temperature: 1).
_LEFT_OUT = {"k": ("top_k", 0), "p": ("top_p", 1.0), "m": ("min_p", 0.0), "t": ("temperature", 1.0)}
_PENALTIES_OFF = {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}   # ("e" left out)

# Length fields, in the order they are looked at.
_LENGTH = ("max_completion_tokens", "max_tokens", "n_predict")


def parse_json(body: bytes) -> dict:
    """The request body as a JSON object, or a 400."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return data


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


def known_fields(kind: str) -> frozenset[str]:
    """The top-level fields an endpoint takes (``kind``: "chat", "completions" or "completion");
    llama-server's flat ``speculative.KEY`` fields come on top of these."""
    return frozenset(_HONOURED | set(_UNSUPPORTED) | set(_LLAMA_OFF) | set(_LLAMA_TUNING) | {PROMPT_FIELD[kind]}
                     | (_INFILL if kind == "infill" else set()) | ({"response_fields"} if kind in NATIVE else set()))


def _neutral(value, allowed: tuple) -> bool:
    """Whether ``value`` is one of ``allowed`` (a bool matches only a bool: True is not 1)."""
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed)


def check_request(body: dict, kind: str) -> None:
    """Refuse what this server cannot do (several choices, legacy functions, other samplers)
    and any field it does not know, naming it: nothing is silently ignored."""
    known = known_fields(kind)
    for key in body:
        if key in known or key.startswith("speculative."):
            continue
        if key in PROMPT_FIELD.values():
            raise ApiError(400, f"{key} is not a field of this endpoint (it takes {PROMPT_FIELD[kind]})", param=key)
        raise ApiError(400, f"{key} is not a field localspec serve knows; it is refused rather than ignored",
                       param=key, code="unknown_field")
    n = body.get("n")
    if n is not None and n != 1:
        raise ApiError(400, f"n must be 1: one choice per request (got {n!r})", param="n")
    for key, neutral in _UNSUPPORTED.items():
        if key == "suffix" and kind == "completions":
            if not isinstance(body.get(key) or "", str):
                raise ApiError(400, "suffix must be a string", param=key)
            continue                        # (filled in the middle: app.py, infill.py)
        if key in body and not _neutral(body[key], neutral):
            raise ApiError(400, f"{key} is not supported by localspec serve", param=key)
    for key, neutral in _LLAMA_OFF.items():
        if key == "return_tokens" and kind in NATIVE:
            if not isinstance(body[key] if key in body else False, bool):
                raise ApiError(400, "return_tokens must be true or false", param=key)
            continue                        # (/completion's answer carries the ids when asked)
        if key in body and not _neutral(body[key], neutral):
            raise ApiError(400, f"{key} is not supported by localspec serve (only its off value, "
                                f"{neutral[1]!r})", param=key)
    if kind != "chat":
        for key in _CHAT_ONLY:
            if body.get(key) is not None and not (key == "reasoning_format" and body[key] == "none"):
                raise ApiError(400, f"{key} is for chat requests (the chat template); this endpoint takes text",
                               param=key)
    if not isinstance(body.get("stream", False), (bool, type(None))):
        raise ApiError(400, "stream must be true or false", param="stream")
    opts = body.get("stream_options")
    if opts is not None and not (isinstance(opts, dict) and set(opts) <= {"include_usage"}
                                 and isinstance(opts.get("include_usage", False), bool)):
        raise ApiError(400, "stream_options takes include_usage (true or false) only", param="stream_options")
    if kind in NATIVE and opts is not None and opts.get("include_usage"):
        raise ApiError(400, "stream_options.include_usage is OpenAI's: /completion's last event has the token "
                            "counts and timings", param="stream_options")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise ApiError(400, "user must be a string", param="user")
    if body.get("parallel_tool_calls") is not None and not isinstance(body["parallel_tool_calls"], bool):
        raise ApiError(400, "parallel_tool_calls must be true or false", param="parallel_tool_calls")
    if body.get("samplers") is not None:
        _samplers(body["samplers"])


def _samplers(samplers: object) -> dict:
    """llama-server's ``samplers`` (a string of letters or a list of names): the settings it
    changes. This server's chain is top-k, top-p, min-p, temperature, then llama.cpp's infill
    sampler; a list keeps their order, and one it leaves out is off (as llama.cpp leaves it
    out of its chain), the infill sampler on when named.

    Raises:
        ApiError: a sampler not known here, or out of that order (400).
    """
    if isinstance(samplers, str):
        letters = samplers
        bad = [c for c in letters if c not in _SAMPLER_LETTERS.values()]
    elif isinstance(samplers, list) and all(isinstance(x, str) for x in samplers):
        bad = [x for x in samplers if x not in _SAMPLER_LETTERS]
        letters = "".join(_SAMPLER_LETTERS.get(x, "") for x in samplers)
    else:
        raise ApiError(400, "samplers must be a string of letters or a list of names", param="samplers")
    if bad:
        raise ApiError(400, f"samplers: {', '.join(map(repr, bad))} not known here", param="samplers")
    ours = "".join(c for c in letters if c in _CHAIN)
    if ours != "".join(c for c in _CHAIN if c in ours):
        raise ApiError(400, "samplers: localspec serve applies top_k, top_p, min_p, temperature, infill in that "
                            "order (leave one out to turn it off)", param="samplers")
    penalties = {} if "e" in letters else _PENALTIES_OFF
    dry = {} if "d" in letters else {"dry_multiplier": 0.0}
    return ({name: off for c, (name, off) in _LEFT_OUT.items() if c not in ours} | {"infill": "i" in ours}
            | penalties | dry)


def _logit_bias(value: object) -> list:
    """``logit_bias`` as (token id, bias) pairs: OpenAI's object of token ids (as strings) to
    biases, or llama-server's list of [token id, bias] pairs (or its object); a bias of false
    never lets the token be chosen. RunSpec judges the biases.

    Raises:
        ApiError: another shape, or a token given as text (400).
    """
    pairs = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        raise ApiError(400, "logit_bias must map token ids to biases (an object, or a list of [id, bias] pairs)",
                       param="logit_bias")
    out = []
    for token, bias in pairs:
        if isinstance(token, str) and token.strip().isdigit():
            token = int(token)
        if not isinstance(token, int) or isinstance(token, bool):
            raise ApiError(400, f"logit_bias: {token!r} is not a token id (biases by text are not supported here; "
                                "/tokenize gives the ids)", param="logit_bias")
        out.append((token, bias))
    return out


def logprobs(body: dict, kind: str) -> int | None:
    """How many most likely tokens each answer token comes with, its own log-probability
    included (None: no log-probabilities): chat's ``logprobs: true`` with ``top_logprobs``
    (0 to 20), text completion's ``logprobs: N``, llama-server's ``n_probs: N`` (0: none).
    Each endpoint takes its own fields only.

    Raises:
        ApiError: a field of another endpoint, or a value out of range (400).
    """
    own = {"chat": ("logprobs", "top_logprobs"), "completions": ("logprobs",), "completion": ("n_probs",),
           "infill": ("n_probs",)}[kind]
    for key in ("logprobs", "top_logprobs", "n_probs"):
        if key not in own and body.get(key) not in (None, False, 0):
            where = {"logprobs": "the OpenAI endpoints'", "top_logprobs": "chat's", "n_probs": "/completion's"}[key]
            raise ApiError(400, f"{key} is {where} field; this endpoint takes {' and '.join(own)}", param=key)

    def count(key: str) -> int | None:
        value = body.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LOGPROBS_MAX:
            raise ApiError(400, f"{key} must be a whole number from 0 to {LOGPROBS_MAX} (got {value!r})", param=key)
        return value

    if kind in NATIVE:
        return count("n_probs") or None
    if kind == "completions":
        return count("logprobs")
    wanted, top = body.get("logprobs"), count("top_logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise ApiError(400, "logprobs must be true or false", param="logprobs")
    if top is not None and not wanted:
        raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    return (top or 0) if wanted else None


def response_fields(body: dict) -> list[str]:
    """llama-server's ``response_fields``: the paths (``"timings/prompt_n"``) a native answer
    keeps; [] keeps all.

    Raises:
        ApiError: not a list of strings (400).
    """
    value = body.get("response_fields") or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ApiError(400, 'response_fields must be a list of paths such as "timings/prompt_n"',
                       param="response_fields")
    return value


def id_slot(body: dict, slots: int) -> int:
    """llama-server's ``id_slot``: the slot (0 to ``slots`` - 1) that generates the answer, the
    request waiting while it is busy; -1 (the default): any free slot.

    Raises:
        ApiError: not an integer, or no such slot (400).
    """
    slot = body.get("id_slot")
    if slot is None:
        return -1
    if isinstance(slot, bool) or not isinstance(slot, int) or not -1 <= slot < slots:
        which = "this server has one slot" if slots == 1 else f"this server has slots 0 to {slots - 1}"
        raise ApiError(400, f"id_slot must be -1 or a slot: {which} (got {slot!r})", param="id_slot")
    return slot


def cache_prompt(body: dict) -> bool:
    """llama-server's ``cache_prompt`` (true by default: reuse the previous request's cached
    prefix; false: decode the whole prompt)."""
    value = body.get("cache_prompt")
    if value is None:
        return True
    if not isinstance(value, bool):
        raise ApiError(400, "cache_prompt must be true or false", param="cache_prompt")
    return value


def include_usage(body: dict) -> bool:
    """OpenAI's ``stream_options.include_usage``: a last streamed chunk with the usage."""
    opts = body.get("stream_options")
    return bool(isinstance(opts, dict) and opts.get("include_usage"))


def run_spec(body: dict, base: RunSpec, n_prompt: int, n_ctx: int, drafters: tuple[DrafterKind, ...],
             n_logprobs: int | None = None, kind: str = "completions") -> RunSpec:
    """The RunSpec a request asks for: the server's defaults with the request's values on top
    (``n_logprobs``: what :func:`logprobs` read). A length of 0 reads the prompt only, on
    llama-server's endpoints (a cache warm-up); OpenAI's take 1 at least.

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
    if body.get("logit_bias") is not None:
        values["logit_bias"] = _logit_bias(body["logit_bias"])
    if body.get("samplers") is not None:
        values.update(_samplers(body["samplers"]))
    length_name, values["max_tokens"] = _length(body, n_ctx - n_prompt)
    if values["max_tokens"] == 0 and not isinstance(values["max_tokens"], bool) and kind not in NATIVE:
        raise ApiError(400, f"{length_name} must be at least 1 (got 0)", param=length_name)
    stop = body.get("stop")
    if stop is not None:
        values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list) else (stop,)
    spec_values, names = _speculative(speculative_fields(body), base, drafters)
    values.update(spec_values)
    values.update(_localspec_fields(body.get("localspec"), drafters))
    names.setdefault("cascade", "localspec.cascade")
    names["infill"] = "samplers"
    for name in ("n_indent", "t_max_predict_ms"):
        if body.get(name) is not None:
            values[name] = body[name]
    if n_logprobs is not None:
        values["logprobs"] = n_logprobs
        names["logprobs"] = "logprobs"
    try:
        spec = base.with_(**values)
        return spec.validate()
    except SpecError as exc:
        name = length_name if exc.field == "max_tokens" else names.get(exc.field) or JSON_NAMES.get(exc.field,
                                                                                                      exc.field)
        raise ApiError(400, exc.named(name), param=name) from None
    except (TypeError, ValueError) as exc:   # a value RunSpec cannot even hold
        raise ApiError(400, f"bad value: {exc}") from None


def _length(body: dict, room: int) -> tuple[str, object]:
    """(the length field sent, the answer's most tokens): max_completion_tokens, max_tokens or
    llama-server's n_predict; none, or -1 (llama-server's "no limit", which its web UI sends
    as max_tokens too): what the context has room for. Two of them that disagree are a 400."""
    given = [(k, body[k]) for k in _LENGTH if body.get(k) is not None]
    for k, v in given[1:]:
        if v != given[0][1]:
            raise ApiError(400, f"{given[0][0]} ({given[0][1]!r}) and {k} ({v!r}) disagree: give one", param=k)
    if not given:
        return "max_tokens", room
    name, value = given[0]
    if value == -1 and not isinstance(value, bool):
        return name, room
    return name, value


def n_predict(body: dict) -> int:
    """The answer's length a (validated) request asked for, as llama-server's ``n_predict``:
    -1 when it set none."""
    given = [body[k] for k in _LENGTH if body.get(k) is not None]
    return given[0] if given else -1


def speculative_fields(body: dict) -> dict | None:
    """The ``speculative`` object and llama-server's flat ``speculative.KEY`` fields as one
    object (None when the request has neither); a key sent both ways is a 400."""
    nested = body.get("speculative")
    if nested is not None and not isinstance(nested, dict):
        raise ApiError(400, "speculative must be an object", param="speculative")
    flat = {k[len("speculative."):]: v for k, v in body.items() if k.startswith("speculative.")}
    if nested is None and not flat:
        return None
    for key in flat:
        if key in (nested or {}):
            raise ApiError(400, f"speculative.{key} is sent twice (in the speculative object and as a flat "
                                "field): give one", param=f"speculative.{key}")
    return {**(nested or {}), **flat}


def _speculative(spec: dict | None, base: RunSpec, drafters: tuple[DrafterKind, ...]) -> tuple[dict, dict]:
    """The RunSpec fields the ``speculative`` object sets, and each field's JSON name (for
    error messages: ``speculative.n_max`` when that is what was sent).

    ``enabled: false`` runs the target alone; ``enabled: true`` on a server started without a
    drafter uses prompt lookup. As on the command line, a ``draft_max`` (``n_max``) given
    without ``adaptive`` means exactly that many drafts every round.
    """
    if spec is None:
        return {}, {}
    out: dict = {}
    names: dict = {}
    for key, value in spec.items():
        if key == "enabled":
            if not isinstance(value, bool):
                raise ApiError(400, "speculative.enabled must be true or false", param="speculative.enabled")
            if not value:
                out["drafter"] = DrafterKind.NONE
            elif not base.speculative and "drafter" not in spec:
                out["drafter"] = DrafterKind.MODEL if DrafterKind.MODEL in drafters else DrafterKind.NGRAM
        elif key in SPECULATIVE:
            field_name = SPECULATIVE[key]
            if field_name in names:
                raise ApiError(400, f"{names[field_name]} and speculative.{key} set the same thing: give one",
                               param=f"speculative.{key}")
            names[field_name] = f"speculative.{key}"
            if key == "adaptive" and not isinstance(value, bool):
                raise ApiError(400, "speculative.adaptive must be true or false", param="speculative.adaptive")
            if value is not None:
                out[field_name] = value
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
    return out, names


def _localspec_fields(obj, drafters: tuple[DrafterKind, ...]) -> dict:
    """localspec's own request settings: ``{"cascade": THRESHOLD}`` (opt-in, not lossless: the
    draft model's answer is returned when its confidence is at least THRESHOLD; null: off)."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ApiError(400, "localspec must be an object", param="localspec")
    for key in obj:
        if key != "cascade":
            raise ApiError(400, f"localspec.{key} is not a localspec setting (known: cascade)",
                           param=f"localspec.{key}")
    if "cascade" not in obj:
        return {}
    value = obj["cascade"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ApiError(400, "localspec.cascade must be a number in (0, 1] or null", param="localspec.cascade")
    if value is not None and DrafterKind.MODEL not in drafters:
        raise ApiError(400, "localspec.cascade: no draft model is loaded on this server", param="localspec.cascade")
    return {"cascade": None if value is None else float(value)}


def template_error(exc: LocalspecError) -> ApiError:
    """A chat template that cannot render these messages, as a 400."""
    return ApiError(400, str(exc), param="messages")


def reasoning_apart(body: dict) -> bool:
    """Whether a thinking model's reasoning comes as ``reasoning_content`` apart from the
    reply (llama-server's ``reasoning_format``: "auto", the default, or "deepseek"), or stays
    in the text ("none").

    Raises:
        ApiError: 400, another format.
    """
    fmt = body.get("reasoning_format")
    if fmt is None:
        return True
    if fmt not in _REASONING:
        raise ApiError(400, f"reasoning_format must be one of {', '.join(_REASONING)} (got {fmt!r})",
                       param="reasoning_format")
    return _REASONING[fmt]


def template_variables(body: dict) -> dict | None:
    """llama-server's ``chat_template_kwargs``: more variables for the chat template (such as
    ``enable_thinking``); OpenAI's ``reasoning_effort`` becomes the template's (and "none" turns
    thinking off), under what ``chat_template_kwargs`` sets.

    Raises:
        ApiError: 400, not an object of names, a name the template gets from the server, an
            effort OpenAI does not name.
    """
    effort = body.get("reasoning_effort")
    base: dict = {}
    if effort is not None:
        if effort not in _EFFORTS:
            raise ApiError(400, f"reasoning_effort must be one of {', '.join(_EFFORTS)} (got {effort!r})",
                           param="reasoning_effort")
        base = {"reasoning_effort": effort} | ({"enable_thinking": False} if effort == "none" else {})
    extra = body.get("chat_template_kwargs")
    if extra is None:
        return base or None
    if not isinstance(extra, dict):
        raise ApiError(400, "chat_template_kwargs must be an object", param="chat_template_kwargs")
    taken = sorted(RESERVED & set(extra))
    if taken:
        raise ApiError(400, f"chat_template_kwargs may not set {', '.join(taken)} (the server does)",
                       param="chat_template_kwargs")
    return base | extra

