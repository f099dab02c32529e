"""Anthropic's Messages API (``POST /v1/messages``), as llama-server serves it: the request is
read into the chat request the rest of the server answers, and the answer is worded as
Anthropic's ``message`` (streamed: its named events), so Anthropic's clients and the tools
built on them (the ``anthropic`` SDK, coding agents) work against the local pair.

What maps where: ``system`` becomes the first message; a message's ``text`` blocks its
content; an assistant's ``tool_use`` blocks its tool calls and a user's ``tool_result``
blocks tool messages; ``tools`` (``input_schema``) and ``tool_choice`` (auto, any, tool,
none) the chat request's; ``stop_sequences`` the stop strings; ``max_tokens`` is required,
as Anthropic's API requires it. A thinking model's reasoning comes as a ``thinking`` block
(with an empty signature); ``thinking: {"type": "disabled"}`` turns thinking off through the
chat template. Earlier ``thinking`` blocks reach the template as ``reasoning_content`` (which
decides what the model sees of them). Images,
documents, server tools and extended thinking with a budget (``enabled``) are refused with a
400 that names them. Errors are Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json

from starlette.responses import JSONResponse

from ..engine import Done, StopReason, Summary
from .errors import ApiError
from .responses import answered_by, timings, typed_sse
from .tools import response_grammar

# Top-level fields of a Messages request this server reads (``speculative``, ``localspec`` and
# llama-server's ``cache_prompt`` as on the chat route); any other is a 400 naming it.
_FIELDS = {"model", "messages", "system", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k",
           "stream", "tools", "tool_choice", "metadata", "thinking", "output_config", "cache_control",
           "service_tier", "speed", "speculative", "localspec", "cache_prompt"}
_COUNT_FIELDS = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "cache_control"}
# thinking: "disabled" (through the chat template's enable_thinking), or "adaptive" (the model
# decides; a thinking model's reasoning comes as thinking blocks).
_THINKING = ("disabled", "adaptive")

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}

_STOP = {StopReason.EOG: "end_turn", StopReason.STOP_STRING: "stop_sequence", StopReason.CANCELLED: "end_turn"}
_CUT = {StopReason.MAX_TOKENS: "max_tokens", StopReason.INDENT: "max_tokens", StopReason.TIME_LIMIT: "max_tokens",
        StopReason.CONTEXT_FULL: "model_context_window_exceeded"}


# A thinking block as it starts (a local model's has no signature to check: it is empty).
THINKING_BLOCK = {"type": "thinking", "thinking": "", "signature": ""}


def error_body(err: ApiError) -> dict:
    """An error as Anthropic words it."""
    kind = _ERROR_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(err), status_code=err.status, headers=err.headers)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def to_chat(body: dict, count: bool = False) -> dict:
    """The chat request (OpenAI's shape, as :mod:`.translate` and :mod:`.tools` read it) that
    answers a Messages request; ``count``: a ``count_tokens`` request (no ``max_tokens``).

    Raises:
        ApiError: 400 naming the field that is wrong or not supported.
    """
    for key in body:
        if key not in (_COUNT_FIELDS if count else _FIELDS):
            raise ApiError(400, f"{key} is not a field localspec serve knows on /v1/messages"
                                f"{'/count_tokens' if count else ''}; it is refused rather than ignored",
                           param=key, code="unknown_field")
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") in _THINKING):
        raise _bad("extended thinking is not supported here (only {\"type\": \"disabled\"} or \"adaptive\")",
                   "thinking")
    chat: dict = {"messages": _system(body.get("system")) + _messages(body.get("messages"))}
    if thinking is not None and thinking["type"] == "disabled":      # (the template's switch)
        chat["chat_template_kwargs"] = {"enable_thinking": False}
    fmt = _output_format(body.get("output_config"))
    if fmt is not None:
        chat["response_format"] = fmt
    for key in ("model", "temperature", "top_p", "top_k", "stream", "speculative", "localspec", "cache_prompt"):
        if key in body:
            chat[key] = body[key]
    if not count:
        n = body.get("max_tokens")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise _bad("is required: a whole number >= 1", "max_tokens")
        chat["max_tokens"] = n
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("must be a list of strings", "stop_sequences")
        chat["stop"] = stop
    meta = body.get("metadata")
    if meta is not None:
        if not isinstance(meta, dict) or not isinstance(meta.get("user_id") or "", str):
            raise _bad("must be an object; its user_id a string", "metadata")
        if meta.get("user_id"):
            chat["user"] = meta["user_id"]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat.update(_tool_choice(body["tool_choice"]))
    return chat


def _output_format(config: object) -> dict | None:
    """``output_config.format`` (a JSON schema the answer must follow) as the chat request's
    ``response_format``; ``effort`` is taken without effect (a local model has no such knob)."""
    if config is None:
        return None
    if not isinstance(config, dict) or not set(config) <= {"format", "effort"}:
        raise _bad("takes format and effort only", "output_config")
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise _bad("must be {\"type\": \"json_schema\", \"schema\": {...}}", "output_config.format")
    out = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    try:
        response_grammar(out)
    except ApiError as exc:
        raise _bad(exc.message.split(": ", 1)[-1], "output_config.format.schema") from None
    return out


def _system(system: object) -> list[dict]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list):
        return [{"role": "system", "content": "".join(_text_block(b, f"system[{i}]") for i, b in enumerate(system))}]
    raise _bad("must be a string or a list of text blocks", "system")


def _text_block(block: object, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise _bad("must be a text block ({\"type\": \"text\", \"text\": ...})", where)
    return block["text"]


def _messages(messages: object) -> list[dict]:
    """Anthropic's user and assistant turns as chat messages: tool results become tool
    messages (before the turn's text), tool uses the assistant's tool calls."""
    if not isinstance(messages, list) or not messages:
        raise _bad("must be a non-empty list", "messages")
    out: list[dict] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise _bad("needs a role, \"user\" or \"assistant\"", f"{where}.role")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise _bad("must be a string or a list of content blocks", f"{where}.content")
        texts, calls, thoughts = [], [], []
        for j, block in enumerate(content):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                texts.append(_text_block(block, at))
            elif kind == "tool_use" and m["role"] == "assistant":
                if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                    raise _bad("a tool_use block needs a name and an input object", at)
                calls.append({"id": str(block.get("id") or ""), "type": "function",
                              "function": {"name": block["name"], "arguments": block.get("input", {})}})
            elif kind == "tool_result" and m["role"] == "user":
                out.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id") or ""),
                            "content": _result_text(block, at)})
            elif kind in ("thinking", "redacted_thinking") and m["role"] == "assistant":
                if isinstance(block.get("thinking"), str):      # (for the template: it decides)
                    thoughts.append(block["thinking"])
            elif kind in ("image", "document", "search_result"):
                raise _bad(f"{kind} blocks are not supported here (text, tool_use and tool_result are)", at)
            else:
                raise _bad(f"a {m['role']} turn cannot hold a block of type {kind!r}", at)
        if texts or calls or not content:
            msg = {"role": m["role"], "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            if thoughts:
                msg["reasoning_content"] = "".join(thoughts)
            out.append(msg)
    return out


def _result_text(block: dict, where: str) -> str:
    content = block.get("content", "")
    if isinstance(content, list):
        content = "".join(_text_block(b, f"{where}.content[{i}]") for i, b in enumerate(content))
    if not isinstance(content, str):
        raise _bad("a tool_result's content must be a string or a list of text blocks", where)
    return f"Error: {content}" if block.get("is_error") else content


def _tools(tools: object) -> list[dict]:
    if not isinstance(tools, list):
        raise _bad("must be a list", "tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type", "custom") != "custom":
            raise _bad("only client tools ({name, description, input_schema}) are supported here, "
                       "not Anthropic's server tools", f"tools[{i}]")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise _bad("needs a name", f"tools[{i}].name")
        schema = t.get("input_schema", {"type": "object", "properties": {}})
        if not isinstance(schema, dict):
            raise _bad("must be a JSON schema object", f"tools[{i}].input_schema")
        fn = {"name": t["name"], "parameters": schema}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: object) -> dict:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool" and isinstance(choice.get("name"), str):
        out = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    elif kind in ("auto", "any", "none"):
        out = {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}[kind]}
    else:
        raise _bad("must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} or "
                   "{\"type\": \"tool\", \"name\": ...}", "tool_choice")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def usage(s: Summary) -> dict:
    """Anthropic's usage: input tokens read anew, those read from the prompt cache, output tokens."""
    return {"input_tokens": s.n_prompt - s.n_cached, "cache_read_input_tokens": s.n_cached,
            "cache_creation_input_tokens": 0, "output_tokens": s.n_generated}


def _tool_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


class MessageShape:
    """One Messages request's answer: whole, a ``message`` with its text and ``tool_use``
    blocks; streamed, Anthropic's events (``message_start``, each block's start, deltas and
    stop, ``message_delta`` with the stop reason and usage, ``message_stop``). ``reader``
    (a :class:`~localspec.server.tools.CallReader`, or None) reads tool calls from the text;
    ``stop`` (the stop strings) names the one that ended an answer. Like the chat route's,
    the answer carries llama-server's ``timings`` besides."""

    end = b""           # (Anthropic's stream ends with message_stop, no [DONE])

    def __init__(self, request_id: str, model: str, n_prompt: int, reader=None, stopping=None):
        self.id, self.model, self.n_prompt = "msg_" + request_id, model, n_prompt
        self.reader = reader
        self._stream = reader.stream() if reader is not None else None
        self._stopping = stopping         # done -> the stop string that ended it ("" if none)
        self._index = -1                  # the block streaming now
        self._open: str | None = None     # its type ("text" or "tool_use"); None: none open
        self._calls = 0

    def _message(self, content: list, done: Done | None) -> dict:
        out = {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
               "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": self.n_prompt, "output_tokens": 0}}
        if done is not None:
            reason, sequence = self._stop_reason(done)
            out |= {"stop_reason": reason, "stop_sequence": sequence, "usage": usage(done.summary),
                    "timings": timings(done.summary)} | answered_by(done.summary)
        return out

    def _stop_reason(self, done: Done) -> tuple[str, str | None]:
        if done.stop_reason in _CUT:
            return _CUT[done.stop_reason], None
        if self._calls:
            return "tool_use", None
        if done.stop_reason is StopReason.STOP_STRING:
            return "stop_sequence", (self._stopping(done) if self._stopping else "") or None
        return _STOP.get(done.stop_reason, "end_turn"), None

    # -- whole ------------------------------------------------------------------------------
    def whole(self, done: Done, tokens=()) -> dict:
        text, calls = (self.reader.parse(done.text) if self.reader is not None else (done.text, []))
        content = [{"type": "text", "text": text}] if text or not calls else []
        content += [{"type": "tool_use", "id": _tool_id(c.id), "name": c.name, "input": json.loads(c.arguments)}
                    for c in calls]
        self._calls = len(calls)
        return self._message(content, done)

    # -- streamed ---------------------------------------------------------------------------
    def head(self) -> list[bytes]:
        return [typed_sse({"type": "message_start", "message": self._message([], None)}),
                typed_sse({"type": "ping"})]

    def piece(self, text: str, tokens=()) -> bytes:
        return self._blocks(self._stream.feed(text) if self._stream is not None else [("content", text)])

    def tail(self, done: Done) -> list[bytes]:
        out = self._blocks(self._stream.finish()) if self._stream is not None else b""
        if self._index < 0:                 # nothing was said: one empty text block
            out += self._start("text", {"type": "text", "text": ""})
        out += self._close()
        reason, sequence = self._stop_reason(done)
        s = done.summary
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                 "usage": usage(s), "timings": timings(s)} | answered_by(s)
        return [out, typed_sse(delta), typed_sse({"type": "message_stop"})]

    def error(self, err: ApiError) -> bytes:
        return typed_sse(error_body(err))

    def thinking(self, text: str, tokens=()) -> bytes:
        """A piece of a thinking model's reasoning: a ``thinking`` block's delta (the block
        opened first)."""
        out = b"" if self._open == "thinking" else self._start("thinking", dict(THINKING_BLOCK))
        return out + self._delta({"type": "thinking_delta", "thinking": text})

    @staticmethod
    def put_thinking(answer: dict, reasoning: str) -> None:
        """A whole message's reasoning: a ``thinking`` block before the rest."""
        answer["content"].insert(0, THINKING_BLOCK | {"thinking": reasoning})

    def _blocks(self, events: list[tuple]) -> bytes:
        out = b""
        for kind, value in events:
            if kind == "content":
                if not value:
                    continue
                if self._open != "text":
                    out += self._start("text", {"type": "text", "text": ""})
                out += self._delta({"type": "text_delta", "text": value})
            elif kind == "args":
                out += self._delta({"type": "input_json_delta", "partial_json": value})
            else:                            # "start" (arguments follow) or "call" (whole)
                self._calls += 1
                out += self._start("tool_use", {"type": "tool_use", "id": _tool_id(value.id), "name": value.name,
                                                "input": {}})
                if kind == "call":
                    out += self._delta({"type": "input_json_delta", "partial_json": value.arguments})
        return out

    def _start(self, kind: str, block: dict) -> bytes:
        out = self._close()
        self._index += 1
        self._open = kind
        return out + typed_sse({"type": "content_block_start", "index": self._index, "content_block": block})

    def _delta(self, delta: dict) -> bytes:
        return typed_sse({"type": "content_block_delta", "index": self._index, "delta": delta})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return typed_sse({"type": "content_block_stop", "index": self._index})
