"""OpenAI's Responses API (``POST /v1/responses``), as llama-server serves it: the request is
read into the chat request the rest of the server answers, and the answer is worded as a
``response`` object (streamed: its typed events), for clients that have moved to it (the
``openai`` SDK's ``client.responses``, coding agents).

What maps where: ``instructions`` becomes a system message; ``input`` (a string, or items:
messages with ``input_text`` / ``output_text`` parts, ``function_call`` and
``function_call_output`` items) the chat messages, earlier ``reasoning`` items left out;
``max_output_tokens``, ``temperature``, ``top_p``, ``tools`` (function tools), ``tool_choice``,
``parallel_tool_calls`` and ``text.format`` (a JSON schema, or a JSON object) the chat
request's. A thinking model's reasoning comes as a ``reasoning`` item (its text as
``reasoning_text`` content, streamed as ``response.reasoning_text.delta``). Nothing is
stored: ``previous_response_id`` and ``store: true`` with a later lookup are not available,
so ``previous_response_id`` and ``conversation`` are refused, as are images, files and
built-in tools (web search, ...), each with a 400 naming the field.
"""

from __future__ import annotations

import json
import secrets
import time

from ..engine import Done, StopReason, Summary
from .errors import ApiError
from .responses import answered_by, timings, typed_sse

# Fields read, and fields taken without effect (nothing here stores, moderates or bills).
_FIELDS = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
           "parallel_tool_calls", "stream", "text", "user", "speculative", "localspec", "cache_prompt", "top_k",
           "min_p", "seed", "reasoning"}
_NO_EFFECT = {"store", "metadata", "safety_identifier", "prompt_cache_key", "service_tier", "truncation",
              "background", "include", "stream_options", "prompt_cache_retention"}
_CUT = (StopReason.MAX_TOKENS, StopReason.CONTEXT_FULL, StopReason.INDENT, StopReason.TIME_LIMIT)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def to_chat(body: dict) -> dict:
    """The chat request (OpenAI's chat shape, as :mod:`.translate` and :mod:`.tools` read it)
    that answers a Responses request.

    Raises:
        ApiError: 400 naming the field that is wrong or not supported.
    """
    for key in body:
        if key not in _FIELDS and key not in _NO_EFFECT:
            stored = key in ("previous_response_id", "conversation", "prompt")
            hint = "nothing is stored here: send the whole conversation as input" if stored else \
                "it is refused rather than ignored"
            raise ApiError(400, f"{key} is not a field localspec serve takes on /v1/responses; {hint}",
                           param=key, code="unknown_field")
    if body.get("background"):
        raise _bad("background responses are not supported here", "background")
    if body.get("include"):
        raise _bad("nothing extra can be included here", "include")
    chat: dict = {"messages": _instructions(body.get("instructions")) + _input(body.get("input"))}
    for key in ("model", "temperature", "top_p", "top_k", "min_p", "seed", "stream", "parallel_tool_calls", "user",
                "speculative", "localspec", "cache_prompt"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if reasoning is not None:           # (its effort as the chat route's reasoning_effort; a summary is not made)
        if not isinstance(reasoning, dict) or not set(reasoning) <= {"effort", "summary", "generate_summary"}:
            raise _bad("takes effort and summary only", "reasoning")
        if reasoning.get("effort") is not None:
            chat["reasoning_effort"] = reasoning["effort"]
    if body.get("tools") is not None:
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = _format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    return chat


def _instructions(text: object) -> list[dict]:
    if text is None or text == "":
        return []
    if not isinstance(text, str):
        raise _bad("must be a string", "instructions")
    return [{"role": "system", "content": text}]


def _parts(content: object, where: str, kinds: tuple[str, ...]) -> str:
    """A message item's text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad("must be a string or a list of content parts", where)
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in kinds and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind in ("input_image", "input_file", "input_audio"):
            raise _bad(f"{kind} is not supported here (text is)", f"{where}[{j}]")
        else:
            raise _bad(f"must be one of {', '.join(kinds)} with its text", f"{where}[{j}]")
    return "".join(out)


def _input(items: object) -> list[dict]:
    """The input as chat messages: consecutive assistant items (text, function calls) become
    one assistant message, as a chat template wants them."""
    if isinstance(items, str):
        if not items:
            raise _bad("is empty", "input")
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise _bad("must be a string or a non-empty list of items", "input")
    out: list[dict] = []

    def assistant() -> dict:
        if not out or out[-1]["role"] != "assistant":
            out.append({"role": "assistant", "content": ""})
        return out[-1]

    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad("must be an object", where)
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role in ("user", "system", "developer"):
            text = _parts(item.get("content"), f"{where}.content", ("input_text",))
            out.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "message" and role == "assistant":
            assistant()["content"] += _parts(item.get("content"), f"{where}.content", ("output_text", "input_text"))
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments", ""), str):
                raise _bad("a function_call needs a name and its arguments as JSON text", where)
            call = {"id": str(item.get("call_id") or ""), "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments", "")}}
            assistant().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = _parts(item.get("output", ""), f"{where}.output", ("input_text", "output_text"))
            out.append({"role": "tool", "tool_call_id": str(item.get("call_id") or ""), "content": output})
        elif kind == "reasoning":
            continue
        else:
            raise _bad(f"an item of type {kind!r}{f' and role {role!r}' if role else ''} is not supported here "
                       "(messages, function_call and function_call_output are)", where)
    return out


def _tools(tools: object) -> list[dict]:
    if not isinstance(tools, list):
        raise _bad("must be a list", "tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type") != "function":
            raise _bad("only function tools are supported here, not built-in ones", f"tools[{i}]")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise _bad("needs a name", f"tools[{i}].name")
        fn = {"name": t["name"], "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: object) -> object:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}", "tool_choice")


def _format(text: object) -> dict | None:
    """``text.format`` as the chat request's ``response_format``."""
    if text is None:
        return None
    if not isinstance(text, dict) or not set(text) <= {"format", "verbosity"}:
        raise _bad("takes format (and verbosity, without effect) only", "text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name") or "output", "schema": fmt["schema"]}}
    raise _bad("must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
               "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}", "text.format")


def usage(s: Summary) -> dict:
    return {"input_tokens": s.n_prompt, "input_tokens_details": {"cached_tokens": s.n_cached},
            "output_tokens": s.n_generated, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": s.n_prompt + s.n_generated}


class ResponseShape:
    """One Responses request's answer: whole, a ``response`` whose ``output`` holds a
    ``message`` item (its ``output_text``) and ``function_call`` items; streamed, the typed
    events (``response.created``, each item's added / delta / done events,
    ``response.completed`` or, cut short, ``response.incomplete``), numbered by
    ``sequence_number``. ``reader`` (a :class:`~localspec.server.tools.CallReader`, or None)
    reads tool calls from the text; ``echo`` holds the request's settings the response
    repeats. llama-server's ``timings`` come besides."""

    end = b""          # (the stream ends with response.completed, no [DONE])

    def __init__(self, request_id: str, model: str, echo: dict, reader=None):
        self.id, self.model, self.echo = "resp_" + request_id, model, echo
        self.created = int(time.time())
        self.reader = reader
        self._stream = reader.stream() if reader is not None else None
        self._seq = 0
        self._items: list[dict] = []     # the output so far (streamed)
        self._open: dict | None = None   # the item streaming now

    def _response(self, output: list, done: Done | None) -> dict:
        out = {"id": self.id, "object": "response", "created_at": self.created, "status": "in_progress",
               "model": self.model, "output": output, "error": None, "incomplete_details": None,
               "instructions": self.echo.get("instructions"), "max_output_tokens": self.echo.get("max_output_tokens"),
               "metadata": self.echo.get("metadata") or {}, "parallel_tool_calls": self.echo.get("parallel_tool_calls",
                                                                                                   True),
               "temperature": self.echo.get("temperature"), "top_p": self.echo.get("top_p"),
               "tool_choice": self.echo.get("tool_choice", "auto"), "tools": self.echo.get("tools") or [],
               "text": self.echo.get("text") or {"format": {"type": "text"}}, "truncation": "disabled",
               "store": False, "usage": None}
        if done is not None:
            cut = done.stop_reason in _CUT
            out |= {"status": "incomplete" if cut else "completed", "usage": usage(done.summary),
                    "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
                    "timings": timings(done.summary)} | answered_by(done.summary)
        return out

    @staticmethod
    def _message(text: str, status: str = "completed") -> dict:
        return {"id": "msg_" + secrets.token_hex(12), "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    @staticmethod
    def reasoning_item(text: str, status: str = "completed") -> dict:
        """A thinking model's reasoning: a ``reasoning`` item with its text (no summary)."""
        return {"id": "rs_" + secrets.token_hex(12), "type": "reasoning", "status": status, "summary": [],
                "content": [{"type": "reasoning_text", "text": text}]}

    @staticmethod
    def _call(call, status: str = "completed") -> dict:
        return {"id": "fc_" + secrets.token_hex(12), "type": "function_call", "status": status,
                "call_id": call.id, "name": call.name, "arguments": call.arguments}

    # -- whole ------------------------------------------------------------------------------
    def whole(self, done: Done, tokens=()) -> dict:
        text, calls = (self.reader.parse(done.text) if self.reader is not None else (done.text, []))
        output = [self._message(text)] if text or not calls else []
        return self._response(output + [self._call(c) for c in calls], done)

    # -- streamed ---------------------------------------------------------------------------
    def _next(self, obj: dict) -> bytes:
        obj["sequence_number"] = self._seq
        self._seq += 1
        return typed_sse(obj)

    def head(self) -> list[bytes]:
        start = self._response([], None)
        return [self._next({"type": "response.created", "response": start}),
                self._next({"type": "response.in_progress", "response": start})]

    def piece(self, text: str, tokens=()) -> bytes:
        return self._said(self._stream.feed(text) if self._stream is not None else [("content", text)])

    def tail(self, done: Done) -> list[bytes]:
        out = self._said(self._stream.finish()) if self._stream is not None else b""
        if not self._items:                       # nothing was said: an empty message
            out += self._add(self._message("", "in_progress"))
        out += self._close()
        final = self._response(self._items, done)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return [out, self._next({"type": kind, "response": final})]

    def error(self, err: ApiError) -> bytes:
        return self._next({"type": "error", "code": err.code, "message": err.message, "param": err.param})

    def thinking(self, text: str, tokens=()) -> bytes:
        """A piece of reasoning: ``response.reasoning_text.delta`` of a reasoning item (added first)."""
        out = b""
        if self._open is None or self._open["type"] != "reasoning":
            out += self._add(self.reasoning_item("", "in_progress"))
        self._open["content"][0]["text"] += text
        return out + self._next({"type": "response.reasoning_text.delta", "item_id": self._open["id"],
                                 "output_index": len(self._items) - 1, "content_index": 0, "delta": text})

    @classmethod
    def put_thinking(cls, answer: dict, reasoning: str) -> None:
        """A whole response's reasoning: a reasoning item before the rest of the output."""
        answer["output"].insert(0, cls.reasoning_item(reasoning))

    def _said(self, events: list[tuple]) -> bytes:
        out = b""
        for kind, value in events:
            if kind == "content":
                if not value:
                    continue
                if self._open is None or self._open["type"] != "message":
                    out += self._add(self._message("", "in_progress"))
                self._open["content"][0]["text"] += value
                out += self._next({"type": "response.output_text.delta", "item_id": self._open["id"],
                                   "output_index": len(self._items) - 1, "content_index": 0, "delta": value,
                                   "logprobs": []})
            elif kind == "args":
                self._open["arguments"] += value
                out += self._args(value)
            else:                                 # "start" (arguments follow) or "call" (whole)
                out += self._add(self._call(value, "in_progress") | {"arguments": ""})
                if kind == "call":
                    self._open["arguments"] = value.arguments
                    out += self._args(value.arguments)
        return out

    def _args(self, delta: str) -> bytes:
        return self._next({"type": "response.function_call_arguments.delta", "item_id": self._open["id"],
                           "output_index": len(self._items) - 1, "delta": delta})

    def _add(self, item: dict) -> bytes:
        out = self._close()
        self._items.append(item)
        self._open = item
        i = len(self._items) - 1
        added = json.loads(json.dumps(item))     # (as it is now: the item itself grows; its part comes next)
        if item["type"] in ("message", "reasoning"):
            added["content"] = []
        out += self._next({"type": "response.output_item.added", "output_index": i, "item": added})
        if item["type"] == "message":
            out += self._next({"type": "response.content_part.added", "item_id": item["id"], "output_index": i,
                               "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": [],
                                                            "logprobs": []}})
        return out

    def _close(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        i = len(self._items) - 1
        item["status"] = "completed"
        if item["type"] == "reasoning":
            out = self._next({"type": "response.reasoning_text.done", "item_id": item["id"], "output_index": i,
                              "content_index": 0, "text": item["content"][0]["text"]})
        elif item["type"] == "message":
            part = item["content"][0]
            out = self._next({"type": "response.output_text.done", "item_id": item["id"], "output_index": i,
                              "content_index": 0, "text": part["text"], "logprobs": []})
            out += self._next({"type": "response.content_part.done", "item_id": item["id"], "output_index": i,
                               "content_index": 0, "part": part})
        else:
            out = self._next({"type": "response.function_call_arguments.done", "item_id": item["id"],
                              "output_index": i, "name": item["name"], "arguments": item["arguments"]})
        return out + self._next({"type": "response.output_item.done", "output_index": i, "item": item})

