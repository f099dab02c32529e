"""Ollama's API (``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``,
``/api/version``), for the many apps that speak only Ollama: a chat or generate request is
read into the chat (or text completion) request the rest of the server answers, and the
answer is worded as Ollama's: one JSON object, or, streamed (Ollama's default), one per line
(``application/x-ndjson``), the last with ``done: true``, ``done_reason`` and the timings in
nanoseconds.

What maps where: ``options`` (``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed``,
``num_predict``, ``stop``, the penalties; mirostat and typical_p at their off values) become the request's
sampling fields; ``format`` (``"json"`` or a JSON schema) its ``response_format``; ``tools``
and a message's ``tool_calls`` / a tool message's ``tool_name`` the chat request's.
A chat longer than the context loses its oldest turns, as Ollama's does (:mod:`..chat.fit`).
``/api/generate`` renders its ``prompt`` (and ``system``) through the model's chat template,
as Ollama does, or sends it as it is with ``raw``; with ``suffix`` it fills in the middle.
Options that set up a model (``num_ctx``, ``num_gpu``, ``num_thread``, ...) and
``keep_alive`` are taken without effect: the server's flags set them once. Images,
``template`` and the old ``context`` are refused with a 400 naming them. A thinking model's
reasoning comes apart from the reply, in ``thinking``; ``think: false`` turns thinking off
through the chat template (``enable_thinking``), a level (``high``, ...) reaches it as
``reasoning_effort``. A request
with no prompt (or no messages) is Ollama's way to load a model: answered at once,
``done_reason: "load"``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import gguf
from starlette.responses import JSONResponse

from .. import __version__
from ..engine import Done, StopReason, Summary
from .errors import ApiError
from .infill import check_model
from .responses import timings

# Ollama's options this server reads, under the request field each becomes.
_OPTIONS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
            "stop": "stop", "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
            "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
            "mirostat": "mirostat", "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta",
            "typical_p": "typical_p"}
# Options that set up the model: the server's flags set them once.
_LOAD_OPTIONS = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "num_keep", "use_mmap", "use_mlock",
                 "numa", "low_vram", "vocab_only", "f16_kv", "penalize_newline"}
# think: true, false, or an effort (gpt-oss's levels, given to the template as reasoning_effort).
_EFFORT = ("high", "medium", "low")
_COMMON = {"model", "format", "options", "stream", "keep_alive", "think", "speculative", "localspec", "cache_prompt"}
_CHAT = _COMMON | {"messages", "tools"}
_GENERATE = _COMMON | {"prompt", "suffix", "system", "raw", "images", "template", "context"}


def error_response(err: ApiError) -> JSONResponse:
    """An error as Ollama words it: ``{"error": "message"}``."""
    return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _common(body: dict, known: set[str], where: str) -> dict:
    """The fields every Ollama request shares, as the chat or completion request's."""
    for key in body:
        if key not in known:
            raise ApiError(400, f"{key} is not a field localspec serve takes on {where}; it is refused rather "
                                "than ignored", param=key, code="unknown_field")
    think = body.get("think")
    if not isinstance(think, (bool, str, type(None))) or isinstance(think, str) and think not in _EFFORT:
        raise _bad(f"must be true, false or one of {', '.join(_EFFORT)}", "think")
    out: dict = {"stream": body.get("stream", True)}      # (Ollama streams unless told not to)
    if think is False:                                     # (the template's switch; Qwen3's and others')
        out["chat_template_kwargs"] = {"enable_thinking": False}
    elif isinstance(think, str):                           # (a level: the template's reasoning_effort)
        out["reasoning_effort"] = think
    for key in ("model", "speculative", "localspec", "cache_prompt"):
        if body.get(key) is not None:
            out[key] = body[key]
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise _bad("must be an object", "options")
    for key, value in options.items():
        if key == "num_predict":
            if not isinstance(value, int) or isinstance(value, bool):
                raise _bad("must be a whole number", "options.num_predict")
            if value > 0:               # (-1: no limit, -2: fill the context)
                out["max_tokens"] = value
            elif value == 0:
                raise _bad("must be -1, -2 or at least 1", "options.num_predict")
        elif key in _OPTIONS:
            out[_OPTIONS[key]] = value
        elif key not in _LOAD_OPTIONS:
            raise ApiError(400, f"options.{key} is not an option localspec serve knows", param=f"options.{key}")
    fmt = body.get("format")
    if fmt == "json":
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, dict):
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt}}
    elif fmt not in (None, ""):
        raise _bad("must be \"json\" or a JSON schema", "format")
    return out


def chat_request(body: dict) -> dict:
    """An ``/api/chat`` request as the chat route's (empty ``messages``: see :func:`loading`).

    Raises:
        ApiError: 400 naming the field that is wrong or not supported.
    """
    out = _common(body, _CHAT, "/api/chat")
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        raise _bad("must be a list", "messages")
    out["messages"] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise _bad("must be an object", f"messages[{i}]")
        if m.get("images"):
            raise _bad("images are not supported here", f"messages[{i}].images")
        msg = {k: v for k, v in m.items() if k in ("role", "content", "tool_calls")}
        if m.get("thinking"):               # (an earlier answer's reasoning: the template decides)
            msg["reasoning_content"] = m["thinking"]
        if m.get("tool_name") is not None:
            msg["name"] = m["tool_name"]
        out["messages"].append(msg)
    if body.get("tools") is not None:
        out["tools"] = body["tools"]
    return out


def generate_request(body: dict) -> tuple[str, dict]:
    """An ``/api/generate`` request as ("chat", the chat route's request) when its prompt goes
    through the chat template, or ("completions", the text completion's) with ``raw`` or a
    ``suffix`` (fill in the middle).

    Raises:
        ApiError: 400 naming the field that is wrong or not supported.
    """
    out = _common(body, _GENERATE, "/api/generate")
    for key, why in (("images", "images are not supported here"), ("template", "the model's own template is used"),
                     ("context", "the old context field is not supported: send the text")):
        if body.get(key):
            raise _bad(why, key)
    prompt = body.get("prompt") or ""
    if not isinstance(prompt, str):
        raise _bad("must be a string", "prompt")
    suffix = body.get("suffix") or ""
    if body.get("raw") or suffix:
        if body.get("system"):
            raise _bad("a raw or fill-in-the-middle prompt takes no system text", "system")
        out.pop("chat_template_kwargs", None)
        out.pop("reasoning_effort", None)
        return "completions", out | {"prompt": prompt} | ({"suffix": suffix} if suffix else {})
    system = body.get("system")
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return "chat", out | {"messages": msgs}


def loading(body: dict, chat: bool) -> bool:
    """Whether the request is Ollama's "load the model" call: no messages, or an empty prompt."""
    return not body.get("messages") if chat else not body.get("prompt") and not body.get("suffix")


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def loaded(model: str, chat: bool) -> dict:
    """The answer to a load call: nothing generated, ``done_reason: "load"``."""
    out = {"model": model, "created_at": _now(), "done": True, "done_reason": "load"}
    return out | ({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})


def stats(s: Summary) -> dict:
    """Ollama's timings, in nanoseconds, and token counts (``prompt_eval_count``: the prompt
    tokens read, not those reused from the cache)."""
    return {"total_duration": int((s.prompt_seconds + s.generation_seconds) * 1e9), "load_duration": 0,
            "prompt_eval_count": s.n_prompt - s.n_cached, "prompt_eval_duration": int(s.prompt_seconds * 1e9),
            "eval_count": s.n_generated, "eval_duration": int(s.generation_seconds * 1e9)}


def _line(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


_LENGTH = (StopReason.MAX_TOKENS, StopReason.CONTEXT_FULL, StopReason.INDENT, StopReason.TIME_LIMIT)


class OllamaShape:
    """One ``/api/chat`` or ``/api/generate`` answer in Ollama's shape: whole, one object;
    streamed, one JSON object a line, the text in ``message.content`` (chat) or ``response``
    (generate), tool calls (chat, read by ``reader``) in a line of their own as each call is
    whole, and a last line with ``done: true``, ``done_reason`` (``stop`` or ``length``) and
    the timings. llama-server's ``timings`` come besides in the last line."""

    end = b""
    media_type = "application/x-ndjson"

    def __init__(self, model: str, chat: bool, reader=None):
        self.model, self.chat = model, chat
        self.reader = reader
        self._stream = reader.stream() if reader is not None else None
        self._pending = None          # a call whose arguments are still streaming

    def _base(self, text: str, calls=()) -> dict:
        out = {"model": self.model, "created_at": _now()}
        if not self.chat:
            return out | {"response": text, "done": False}
        message = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [{"function": {"name": c.name, "arguments": json.loads(c.arguments)}}
                                     for c in calls]
        return out | {"message": message, "done": False}

    def _final(self, done: Done, text: str = "", calls=()) -> dict:
        s = done.summary
        reason = "length" if done.stop_reason in _LENGTH else "stop"
        return self._base(text, calls) | {"done": True, "done_reason": reason} | stats(s) | {"timings": timings(s)}

    def thinking(self, text: str, tokens=()) -> bytes:
        """A line of reasoning: ``message.thinking`` (chat) or ``thinking`` (generate)."""
        line = self._base("")
        self.put_thinking(line, text)
        return _line(line)

    @staticmethod
    def put_thinking(answer: dict, reasoning: str) -> None:
        """Ollama's ``thinking``: in the message (chat) or beside the response (generate)."""
        (answer["message"] if "message" in answer else answer)["thinking"] = reasoning

    def whole(self, done: Done, tokens=()) -> dict:
        text, calls = (self.reader.parse(done.text) if self.reader is not None else (done.text, []))
        return self._final(done, text or "", calls)

    def head(self) -> list[bytes]:
        return []

    def piece(self, text: str, tokens=()) -> bytes:
        if self._stream is None:
            return _line(self._base(text))
        return self._said(self._stream.feed(text))

    def tail(self, done: Done) -> list[bytes]:
        out = self._said(self._stream.finish()) if self._stream is not None else b""
        return [out + self._flush() + _line(self._final(done))]

    def error(self, err: ApiError) -> bytes:
        return _line({"error": err.message})

    def _said(self, events: list[tuple]) -> bytes:
        out = b""
        for kind, value in events:
            if kind == "args":
                self._pending.arguments += value
                continue
            out += self._flush()
            if kind == "content":
                out += _line(self._base(value)) if value else b""
            elif kind == "call":
                out += _line(self._base("", [value]))
            else:                          # "start": its arguments follow
                self._pending = value
        return out

    def _flush(self) -> bytes:
        call, self._pending = self._pending, None
        return _line(self._base("", [call])) if call is not None else b""


def _size(n_params: int) -> str:
    return f"{n_params / 1e9:.1f}B" if n_params >= 1e9 else f"{n_params / 1e6:.0f}M"


def _quantization(model) -> str:
    """The weights' type as Ollama names it (Q4_K_M, F16), from the GGUF's general.file_type."""
    try:
        return gguf.LlamaFileType(int(model.meta("general.file_type"))).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return ""


def details(engine) -> dict:
    """Ollama's ``details`` of the served target: format, family, size, quantization."""
    model = engine.target_model
    arch = model.meta("general.architecture") or ""
    return {"parent_model": "", "format": "gguf", "family": arch, "families": [arch] if arch else None,
            "parameter_size": _size(model.info.n_params), "quantization_level": _quantization(model)}


def tags(engine, model_id: str, started: int) -> dict:
    """``/api/tags``: the one model served, under its id."""
    info = engine.target_model.info
    when = datetime.fromtimestamp(started, UTC).isoformat().replace("+00:00", "Z")
    return {"models": [{"name": model_id, "model": model_id, "modified_at": when, "size": info.size_bytes,
                        "digest": "", "details": details(engine)}]}


def show(engine, model_id: str) -> dict:
    """``/api/show``: the served model's template, details, context length and capabilities."""
    model = engine.target_model
    template = model.chat_template() or ""
    arch = model.meta("general.architecture") or "llama"
    caps = (["completion"] + (["tools"] if "tools" in template else []) + (["insert"] if _fills(model) else [])
            + (["thinking"] if "<think>" in template or "enable_thinking" in template else []))
    return {"modelfile": f"# served by localspec {__version__}\nFROM {model.info.path}\n", "parameters": "",
            "template": template, "details": details(engine), "capabilities": caps,
            "model_info": {"general.architecture": arch, "general.parameter_count": model.info.n_params,
                           f"{arch}.context_length": model.info.n_ctx_train},
            "modified_at": _now()}


def _fills(model) -> bool:
    try:
        check_model(model)
        return True
    except ApiError:
        return False


def ps(engine, model_id: str) -> dict:
    """``/api/ps``: the served model, loaded for as long as the server runs."""
    info = engine.target_model.info
    vram = info.size_bytes if info.gpu_layers else 0
    return {"models": [{"name": model_id, "model": model_id, "size": info.size_bytes, "digest": "",
                        "details": details(engine), "expires_at": "2262-01-01T00:00:00Z", "size_vram": vram,
                        "context_length": engine.target_ctx.n_ctx}]}


def version() -> dict:
    return {"version": __version__}

