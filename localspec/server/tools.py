"""Tool calls and structured output: what a chat request's ``tools``, ``tool_choice`` and
``response_format`` ask of the engine, and the model's tool calls read back.

The tools reach the model through its own chat template (``tools`` is passed to it, as
Hugging Face's ``apply_chat_template`` does); a template that never looks at ``tools`` gets
them as a system message in the Hermes form instead, so they are never dropped silently.
The model's answer is read back in the syntax of its family, judged from the template:

* Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number;
* Llama 3.x: the whole answer is ``{"name": ..., "parameters": {...}}`` (after an optional
  ``<|python_tag|>``), or several of them separated by ``;``;
* Mistral: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``.

An answer that is nothing but a JSON call of an offered function (bare, or in a ```json
block) counts as a call in any syntax: small models often leave out the tags. An answer that
does not parse as calls is returned as text, never an error. Call ids are OpenAI's
``call_...``, or nine letters and digits for Mistral, whose templates insist on that.
``tool_choice`` "required" or a named function is enforced with a grammar in that syntax
(only calls of the allowed functions, their arguments following each function's
``parameters`` schema); "none" renders the prompt without the tools and reads no calls.
``response_format`` ``json_object`` / ``json_schema`` becomes a grammar the same way, as do
llama-server's own ``json_schema`` (a schema) and ``grammar`` (GBNF text) fields.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field

from ..engine import RunSpec, StopReason
from ..engine.grammar import check_grammar, json_grammar, schema_grammar
from ..engine.text import partial_tail
from ..errors import BadInput
from .errors import ApiError
from .responses import sse

HERMES, LLAMA3, MISTRAL = "hermes", "llama3", "mistral"

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"

_FALLBACK_NOTE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}}\n</tool_call>")


def call_format(template: str | None) -> str:
    """The tool-call syntax a chat template's model family writes (Hermes when unknown)."""
    t = template or ""
    if "[TOOL_CALLS]" in t:
        return MISTRAL
    if "<|python_tag|>" in t or "ipython" in t:
        return LLAMA3
    return HERMES


def template_takes_tools(template: str | None) -> bool:
    """Whether a chat template renders ``tools`` itself."""
    return bool(template) and re.search(r"\btools\b", template) is not None


# -- the request ------------------------------------------------------------------------------

@dataclass
class Plan:
    """What one request's tools and response format ask for.

    ``messages`` go to the chat template (with ``tools`` when it takes them), ``grammar``
    (GBNF or None) constrains the answer, ``calls`` reads tool calls back (None: plain text);
    ``source`` is the request field the grammar comes from (for error messages).
    """

    messages: list[dict] | None
    tools: list[dict] | None = None
    grammar: str | None = None
    calls: CallReader | None = None
    source: str = "response_format"


def plan(body: dict, template: str | None, chat: bool = True) -> Plan:
    """Validate ``tools``, ``tool_choice``, ``response_format`` and (``chat``: a chat request)
    the messages of a request (``body``) for a model with this chat template.

    Raises:
        ApiError: 400 naming the field that is wrong.
    """
    grammar, source = _answer_grammar(body)
    if not chat:
        if body.get("tools") is not None or body.get("tool_choice") is not None:
            raise ApiError(400, "tools are for /v1/chat/completions", param="tools")
        return Plan(None, grammar=grammar, source=source)
    tools = _tools(body.get("tools"))
    choice = _choice(body.get("tool_choice"), tools)
    msgs = chat_messages(body)
    if not tools or choice == "none":
        if any(m.get("tool_calls") or m["role"] == "tool" for m in msgs) and not template_takes_tools(template):
            msgs = _as_text(msgs)
        return Plan(msgs, grammar=grammar, source=source)
    fmt = call_format(template)
    if not template_takes_tools(template):
        msgs = _with_tool_note(_as_text(msgs), tools)
        fmt, tools_for_template = HERMES, None
    else:
        tools_for_template = tools
    if choice != "auto":
        if grammar is not None:
            raise ApiError(400, f"{source} cannot be combined with a tool_choice that forces a call", param=source)
        names = [choice] if isinstance(choice, str) and choice != "required" else [t["function"]["name"] for t in tools]
        wanted = [t for t in tools if t["function"]["name"] in names]
        grammar = call_grammar(fmt, wanted, several=body.get("parallel_tool_calls") is not False)
    names = frozenset(t["function"]["name"] for t in tools)
    return Plan(msgs, tools_for_template, grammar, CallReader(fmt, names, forced=choice != "auto"), source)


def constrain(spec: RunSpec, plan: Plan, model) -> RunSpec:
    """``spec`` with the grammar a plan asks for, checked against the model's vocabulary.

    Raises:
        ApiError: 400 naming the plan's source field when llama.cpp cannot parse the grammar.
    """
    if plan.grammar is None:
        return spec
    try:
        check_grammar(model, plan.grammar)
    except BadInput as exc:
        raise ApiError(400, f"{plan.source}: {exc}", param=plan.source) from None
    return spec.with_(grammar=plan.grammar)


def _answer_grammar(body: dict) -> tuple[str | None, str]:
    """(the grammar the answer must follow, the field it comes from): ``response_format``, or
    llama-server's ``json_schema`` or ``grammar``; one of them at most.

    Raises:
        ApiError: 400 for a bad value or two of them at once.
    """
    given = []
    grammar = response_grammar(body.get("response_format"))
    if grammar is not None:
        given.append(("response_format", grammar))
    schema = body.get("json_schema")
    if schema is not None:
        if not isinstance(schema, dict):
            raise ApiError(400, "json_schema must be a JSON schema object", param="json_schema")
        try:
            given.append(("json_schema", schema_grammar(schema)))
        except BadInput as exc:
            raise ApiError(400, f"json_schema: {exc}", param="json_schema") from None
    text = body.get("grammar")
    if text is not None:
        if not isinstance(text, str):
            raise ApiError(400, "grammar must be GBNF text", param="grammar")
        if text.strip():
            given.append(("grammar", text))
    if len(given) > 1:
        raise ApiError(400, f"give one of {' and '.join(k for k, _ in given)}: each sets the answer's grammar",
                       param=given[1][0])
    return (given[0][1], given[0][0]) if given else (None, "response_format")


def response_grammar(fmt: object) -> str | None:
    """The grammar of ``response_format``: None for text, any JSON object for
    ``json_object``, the schema's values for ``json_schema``.

    Raises:
        ApiError: 400 for an unknown type or a schema that cannot become a grammar.
    """
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise ApiError(400, "response_format must be an object", param="response_format")
    kind = fmt.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return json_grammar()
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise ApiError(400, "response_format.json_schema.schema must be a JSON schema object",
                           param="response_format.json_schema.schema")
        try:
            return schema_grammar(spec["schema"])
        except BadInput as exc:
            raise ApiError(400, f"response_format.json_schema: {exc}", param="response_format.json_schema") from None
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema (got {kind!r})",
                   param="response_format.type")


def _tools(tools: object) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ApiError(400, "tools must be a list", param="tools")
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ApiError(400, f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}",
                           param=f"tools[{i}]")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ApiError(400, f"tools[{i}].function.name must be a non-empty string",
                           param=f"tools[{i}].function.name")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ApiError(400, f"tools[{i}].function.parameters must be a JSON schema object",
                           param=f"tools[{i}].function.parameters")
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def _choice(choice: object, tools: list[dict]) -> str:
    """"auto", "none", "required" or the name of the one function to call."""
    if choice is None:
        return "auto" if tools else "none"
    if choice in ("auto", "none", "required"):
        if choice == "required" and not tools:
            raise ApiError(400, "tool_choice is \"required\" but no tools are given", param="tool_choice")
        return choice
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise ApiError(400, "tool_choice must be \"auto\", \"none\", \"required\" or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}", param="tool_choice")
    if name not in {t["function"]["name"] for t in tools}:
        raise ApiError(400, f"tool_choice names {name!r}, which is not among the tools", param="tool_choice")
    return name


def chat_messages(body: dict) -> list[dict]:
    """The chat messages as a chat template wants them: role and text content, an assistant's
    ``tool_calls`` (arguments as objects) and ``reasoning_content`` (a thinking model's earlier
    reasoning), a tool result's ``tool_call_id`` and ``name``.

    Raises:
        ApiError: 400 for a message of the wrong shape.
    """
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] needs a role", param=f"messages[{i}].role")
        msg = {"role": m["role"], "content": _text(m.get("content"), i)}
        if m.get("tool_calls") is not None:
            msg["tool_calls"] = _calls_in(m["tool_calls"], i)
        for key in ("tool_call_id", "name", "reasoning_content"):
            if m.get(key) is not None:
                if not isinstance(m[key], str):
                    raise ApiError(400, f"messages[{i}].{key} must be a string", param=f"messages[{i}].{key}")
                msg[key] = m[key]
        out.append(msg)
    return out


def _text(content: object, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported",
                               param=f"messages[{i}].content")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts",
                   param=f"messages[{i}].content")


def _calls_in(calls: object, i: int) -> list[dict]:
    """An assistant message's tool calls, arguments decoded to objects (templates dump them)."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise ApiError(400, f"{where} must be a list", param=where)
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(400, f"{where}[{j}] needs function.name", param=f"{where}[{j}]")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                raise ApiError(400, f"{where}[{j}].function.arguments is not JSON",
                               param=f"{where}[{j}].function.arguments") from None
        out.append({"id": c.get("id") or _call_id(), "type": "function",
                    "function": {"name": fn["name"], "arguments": args}})
    return out


def _as_text(msgs: list[dict]) -> list[dict]:
    """Tool calls and results written out as plain messages, Hermes-style, for a template
    that knows nothing of them."""
    out = []
    for m in msgs:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        elif m.get("tool_calls"):
            calls = "\n".join(f"{_OPEN}\n" + json.dumps({"name": c["function"]["name"],
                                                        "arguments": c["function"]["arguments"]},
                                                       ensure_ascii=False) + f"\n{_CLOSE}"
                              for c in m["tool_calls"])
            text = (m["content"] + "\n" if m["content"] else "") + calls
            out.append({"role": m["role"], "content": text})
        else:
            out.append({k: v for k, v in m.items() if k in ("role", "content")})
    return out


def _with_tool_note(msgs: list[dict], tools: list[dict]) -> list[dict]:
    """The tools described in the system message (a new one first, or the first one's end)."""
    listed = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    note = _FALLBACK_NOTE.format(tools=listed)
    if msgs and msgs[0]["role"] == "system":
        return [{"role": "system", "content": msgs[0]["content"] + "\n\n" + note}] + msgs[1:]
    return [{"role": "system", "content": note}] + msgs


def call_grammar(fmt: str, tools: list[dict], *, several: bool = True) -> str:
    """GBNF for one (or, with ``several``, one or more) calls of ``tools`` in ``fmt``'s syntax.

    Raises:
        ApiError: 400 when a function's parameters schema cannot become a grammar.
    """
    key = "parameters" if fmt == LLAMA3 else "arguments"
    alts = [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                              key: t["function"]["parameters"]},
             "required": ["name", key], "additionalProperties": False} for t in tools]
    schema = alts[0] if len(alts) == 1 else {"anyOf": alts}
    try:
        body = schema_grammar(schema)
    except BadInput as exc:
        raise ApiError(400, f"tools: a function's parameters cannot become a grammar: {exc}", param="tools") from None
    lines = [("tool-call ::= " + line[len("root ::= "):]) if line.startswith("root ::= ") else line
             for line in body.splitlines()]
    if fmt == HERMES:
        repeat = ' ("\\n" block)*' if several else ""
        root = (f"root ::= block{repeat}\n"
                f'block ::= "{_OPEN}" [ \\n]{{0,2}} tool-call [ \\n]{{0,2}} "{_CLOSE}"')
    elif fmt == MISTRAL:
        repeat = ' ("," " "? tool-call)*' if several else ""
        root = f'root ::= "[TOOL_CALLS]" " "? "[" tool-call{repeat} "]"'
    else:
        repeat = ' ("; " tool-call)*' if several else ""
        root = f"root ::= tool-call{repeat}"
    return root + "\n" + "\n".join(lines) + "\n"


def _call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _mistral_id() -> str:
    """Mistral's templates refuse a tool call id that is not nine letters and digits."""
    return "".join(secrets.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(9))


# -- the answer -------------------------------------------------------------------------------

@dataclass
class Call:
    """One tool call read from the model's text."""

    name: str
    arguments: str      # JSON text, as OpenAI sends it
    id: str = field(default_factory=_call_id)

    def to_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def _call(obj: object, names: frozenset[str] | None = None) -> Call | None:
    """A call from a parsed JSON object (``arguments`` or Llama's ``parameters``, an object or
    its JSON text), or None when it is not one; ``names``: the only functions it may call."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    if names is not None and obj["name"] not in names:
        return None
    args = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return Call(obj["name"], json.dumps(args, ensure_ascii=False))


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


class CallReader:
    """Reads the tool calls of one answer in one syntax, whole (:meth:`parse`) or streamed
    (:meth:`stream`).

    Args:
        fmt: HERMES, LLAMA3 or MISTRAL.
        names: the functions the request offered; an answer that is nothing but a JSON call
            of one of them counts as a call in any syntax (small models often leave out the
            Hermes tags).
        forced: a grammar makes every call well formed (``tool_choice`` required or named),
            so a streamed Hermes call's arguments go out as they are written.
    """

    def __init__(self, fmt: str, names: frozenset[str] = frozenset(), forced: bool = False):
        self.fmt = fmt
        self.names = names
        self.forced = forced

    def parse(self, text: str) -> tuple[str | None, list[Call]]:
        """(the text that is not a call, or None when nothing else is left; the calls).
        Text that does not parse as calls is all content."""
        calls = self._bare(text)
        if calls:
            return None, calls
        if self.fmt == HERMES:
            return _parse_hermes(text)
        return text, []

    def _bare(self, text: str) -> list[Call]:
        """The calls when the whole answer is JSON calls in this syntax (or bare)."""
        s = _unfenced(text.strip())
        for prefix in ("[TOOL_CALLS]", "<|python_tag|>"):
            s = s.removeprefix(prefix).strip()
        whole = _json(s)
        if whole is None and self.fmt == LLAMA3 and ";" in s:
            whole = [_json(p.strip()) for p in s.split(";")]
        items = whole if isinstance(whole, list) else [whole]
        names = None if self.fmt != HERMES else self.names
        calls = [_call(o, names) for o in items]
        return calls if calls and all(c is not None for c in calls) else []

    def stream(self) -> CallStream:
        return CallStream(self)


def _unfenced(s: str) -> str:
    """The body of a Markdown code block that is the whole text (```json ... ```), else s."""
    if s.startswith("```") and s.endswith("```") and "\n" in s:
        first = s.index("\n")
        if s[3:first].strip().lower() in ("", "json"):
            return s[first + 1:-3].strip()
    return s


def _parse_hermes(text: str) -> tuple[str | None, list[Call]]:
    calls: list[Call] = []
    rest: list[str] = []
    pos = 0
    while True:
        i = text.find(_OPEN, pos)
        if i < 0:
            rest.append(text[pos:])
            break
        j = text.find(_CLOSE, i)
        body = text[i + len(_OPEN):j if j >= 0 else len(text)]
        call = _call(_json(body.strip()))
        if call is None:
            rest.append(text[pos:])   # a malformed call stays text, with all that follows
            break
        rest.append(text[pos:i])
        calls.append(call)
        if j < 0:
            break
        pos = j + len(_CLOSE)
    content = "".join(rest)
    if not calls:
        return content, []
    return (content.strip() or None), calls


class CallStream:
    """A streamed answer cut into content and whole tool calls as its text arrives.

    :meth:`feed` and :meth:`finish` return events: ``("content", text)``, ``("call", Call)``
    (a whole call), or for a call streamed as it is written ``("start", Call)`` (its id and
    name; ``arguments`` empty) then ``("args", text)`` pieces. An answer that starts like
    JSON is held to its end and judged whole; otherwise Hermes calls go out as each
    ``</tool_call>`` arrives (text that may still become a tag is held back), or, when the
    reader is ``forced`` (a grammar guarantees well-formed calls), start as soon as the name
    is written and stream their arguments; in the other syntaxes the text is content as it
    comes.
    """

    def __init__(self, reader: CallReader):
        self.reader = reader
        self._held = ""
        self._in_call = False
        self._mode: str | None = None     # "whole", "hermes" or "text", from the first characters
        self.calls = 0
        self._args: _ArgScan | None = None   # the call whose arguments are streaming

    def feed(self, text: str) -> list[tuple]:
        self._held += text
        if self._mode is None:
            self._mode = _mode(self._held.lstrip(), self.reader.fmt)
            if self._mode is None:
                return []
        if self._mode == "text":
            out, self._held = self._held, ""
            return [("content", out)]
        if self._mode == "whole":
            return []
        return self._hermes(final=False)

    def finish(self) -> list[tuple]:
        if self._mode == "whole":
            content, calls = self.reader.parse(self._held)
            self._held = ""
            self.calls += len(calls)
            return [("call", c) for c in calls] + ([("content", content)] if content else [])
        if self._mode == "hermes":
            return self._hermes(final=True)
        out, self._held = self._held, ""
        return [("content", out)] if out else []

    def _content(self, text: str) -> list[tuple]:
        if not text or (self.calls and not text.strip()):
            return []
        return [("content", text)]

    def _hermes(self, final: bool) -> list[tuple]:
        events: list[tuple] = []
        while True:
            if not self._in_call:
                i = self._held.find(_OPEN)
                if i < 0:
                    keep = 0 if final else partial_tail(self._held, _OPEN)
                    cut = len(self._held) - keep
                    events += self._content(self._held[:cut])
                    self._held = self._held[cut:]
                    return events
                events += self._content(self._held[:i])
                self._held = self._held[i + len(_OPEN):]
                self._in_call = True
            j = self._held.find(_CLOSE)
            body = self._held if j < 0 else self._held[:j]
            if self.reader.forced:
                events += self._grow(body)
            if j < 0 and not final:
                return events
            if self._args is not None:
                self._args = None     # its arguments went out as they came
                self._held = "" if j < 0 else self._held[j + len(_CLOSE):]
                self._in_call = False
                if j < 0:
                    return events
                continue
            call = _call(_json(body.strip()))
            if call is None:
                # Not a call after all: the tag and its body go out as text.
                events.append(("content", _OPEN + body + (_CLOSE if j >= 0 else "")))
            else:
                self.calls += 1
                events.append(("call", call))
            self._held = "" if j < 0 else self._held[j + len(_CLOSE):]
            self._in_call = False
            if j < 0:
                return events


    def _grow(self, body: str) -> list[tuple]:
        """A forced call's events for what of its ``body`` has arrived: its start once the
        name is written, then the new part of its arguments (never the object's own end)."""
        if self._args is None:
            m = _HEADER.match(body)
            if m is None:
                return []
            self._args = _ArgScan(m.end())
            self.calls += 1
            return [("start", Call(json.loads(f'"{m.group(1)}"'), ""))] + self._grow(body)
        piece = self._args.more(body)
        return [("args", piece)] if piece else []


_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=[{\[])')


class _ArgScan:
    """Follows a JSON value as its text arrives and hands out the part not yet sent, up to
    the value's end (strings and nesting tracked, so a brace in a string does not end it)."""

    def __init__(self, start: int):
        self.start = start      # where the value starts in the call's body
        self.sent = 0           # characters of it sent
        self.depth = 0
        self.in_string = self.escaped = self.done = False

    def more(self, body: str) -> str:
        text = body[self.start:]
        end = self.sent
        while end < len(text) and not self.done:
            c = text[end]
            end += 1
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                self.done = self.depth == 0
        piece, self.sent = text[self.sent:end], end
        return piece


def _mode(s: str, fmt: str) -> str | None:
    """How to stream an answer that starts with ``s``: "whole" (it starts like JSON, or a
    JSON code block: held to the end), "hermes" or "text"; None while that is not known."""
    for tag in ("```", "<|python_tag|>", "[TOOL_CALLS]"):
        if len(s) < len(tag) and tag.startswith(s):
            return None
        if tag != "```" and s.startswith(tag):
            return "whole"
    if s.startswith("```"):
        nl = s.find("\n")
        rest = s[nl + 1:].lstrip() if nl >= 0 else ""
        if not rest:
            return None
        if s[3:nl].strip().lower() in ("", "json") and rest.startswith(("{", "[")):
            return "whole"
    elif s.startswith(("{", "[")):
        return "whole"
    return "hermes" if fmt == HERMES else "text"


# -- the response -----------------------------------------------------------------------------

class CallShape:
    """A chat response whose answer may hold tool calls: wraps the plain chat
    :class:`~localspec.server.responses.Shape` and answers what app.py asks of a shape
    (``head``, ``piece``, ``tail``, ``whole``, ``end``), with ``message.tool_calls``,
    streamed ``delta.tool_calls`` (a call's id and name first, then its arguments) and
    ``finish_reason: "tool_calls"`` when the answer holds calls (``"length"`` when it was cut
    short)."""

    def __init__(self, shape, reader: CallReader):
        self.shape = shape
        self.reader = reader
        self._stream = reader.stream()
        self._index = 0

    @property
    def end(self) -> bytes:
        return self.shape.end

    def head(self) -> list[bytes]:
        return self.shape.head()

    def error(self, err) -> bytes:
        return self.shape.error(err)

    def thinking(self, text: str, tokens=()) -> bytes:
        return self.shape.thinking(text, tokens)

    def put_thinking(self, answer: dict, reasoning: str) -> None:
        self.shape.put_thinking(answer, reasoning)

    def piece(self, text: str, tokens=()) -> bytes:
        return self._events(self._stream.feed(text))

    def tail(self, done) -> list[bytes]:
        out = [self._events(self._stream.finish())]
        closing = self.shape.tail(done)
        if self._stream.calls and done.stop_reason not in _CUT:
            closing[0] = _with_finish(closing[0], "tool_calls")
        return [b for b in out + closing if b]

    def whole(self, done, tokens=()) -> dict:
        answer = self.shape.whole(done)
        content, calls = self.reader.parse(done.text)
        for c in calls:
            self._name(c)
        if calls:
            choice = answer["choices"][0]
            choice["message"] = {"role": "assistant", "content": content,
                                 "tool_calls": [c.to_dict() for c in calls]}
            if done.stop_reason not in _CUT:
                choice["finish_reason"] = "tool_calls"
        return answer

    def _events(self, events: list[tuple]) -> bytes:
        out = []
        for kind, value in events:
            if kind == "content":
                out.append(self.shape.chunk(value))
                continue
            if kind == "args":
                out.append(self._delta({"tool_calls": [{"index": self._index - 1, "function": {"arguments": value}}]}))
                continue
            self._name(value)
            i, self._index = self._index, self._index + 1
            first = {"index": i, "id": value.id, "type": "function",
                     "function": {"name": value.name, "arguments": ""}}
            out.append(self._delta({"tool_calls": [first]}))
            if kind == "call":
                out.append(self._delta({"tool_calls": [{"index": i, "function": {"arguments": value.arguments}}]}))
        return b"".join(out)

    def _name(self, call: Call) -> None:
        if self.reader.fmt == MISTRAL:
            call.id = _mistral_id()

    def _delta(self, delta: dict) -> bytes:
        obj = json.loads(self.shape.chunk("")[len(b"data: "):])
        obj["choices"][0]["delta"] = delta
        return sse(obj)


_CUT = (StopReason.MAX_TOKENS, StopReason.CONTEXT_FULL)   # the answer was cut: "length" stays


def _with_finish(event: bytes, reason: str) -> bytes:
    """A closing chunk's event with another finish_reason."""
    obj = json.loads(event[len(b"data: "):])
    obj["choices"][0]["finish_reason"] = reason
    return sse(obj)
