"""The objects a client reads: completions, stream chunks, ``usage`` and llama-server's ``timings``.

Figures come from the engine's :class:`Summary` alone, so a response says what ``localspec
run`` would print for the same generation. Streamed, ``usage`` comes as OpenAI sends it: only
in a last chunk without choices, when ``stream_options.include_usage`` asks for it (every
other chunk then has ``"usage": null``); llama-server's ``timings`` come in the chunk with the
``finish_reason``.
"""

from __future__ import annotations

import json
import time

from ..engine import Done, StopReason, Summary, Token

_FINISH = {StopReason.EOG: "stop", StopReason.STOP_STRING: "stop", StopReason.INDENT: "length",
           StopReason.TIME_LIMIT: "length", StopReason.MAX_TOKENS: "length", StopReason.CONTEXT_FULL: "length",
           StopReason.CANCELLED: "stop"}


def finish_reason(reason: StopReason) -> str:
    return _FINISH[reason]


def usage(s: Summary) -> dict:
    return {"prompt_tokens": s.n_prompt, "completion_tokens": s.n_generated,
            "total_tokens": s.n_prompt + s.n_generated,
            "prompt_tokens_details": {"cached_tokens": s.n_cached}}


def answered_by(s: Summary) -> dict:
    """With a cascade, who answered: ``{"localspec": {"answered_by": "draft" | "target", ...}}``
    ("draft": the draft model's answer, not the target's); nothing without one."""
    if not s.answered_by:
        return {}
    return {"localspec": {"answered_by": s.answered_by, "cascade_confidence": s.cascade_confidence,
                          "cascade_seconds": round(s.cascade_seconds, 4)}}


def timings(s: Summary) -> dict:
    """llama-server's ``timings``: prompt_n counts the prompt tokens decoded (cache_n were reused)."""
    prompt_n = s.n_prompt - s.n_cached
    prompt_ms = s.prompt_seconds * 1000.0
    predicted_ms = s.generation_seconds * 1000.0
    return {
        "cache_n": s.n_cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / s.prompt_seconds if prompt_n and s.prompt_seconds > 0 else 0.0,
        "predicted_n": s.n_generated,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / s.n_generated if s.n_generated else 0.0,
        "predicted_per_second": s.tokens_per_second,
        "draft_n": s.drafted,
        "draft_n_accepted": s.accepted,
        "drafter": s.drafter,
        "time_to_first_token_ms": s.time_to_first_token * 1000.0,
    }


def released(tokens: list[Token], done: Done) -> list[Token]:
    """The tokens whose text the answer holds: at a stop string or an under-indented line, not
    the ones whose text was cut."""
    if done.stop_reason in (StopReason.STOP_STRING, StopReason.INDENT):
        while tokens and not tokens[-1].text:
            tokens = tokens[:-1]
    return tokens


def token_text(vocab, token: int) -> tuple[str, list[int]]:
    """A token's text and its bytes (a token may hold part of a character)."""
    raw = vocab.piece(token)
    return raw.decode("utf-8", errors="replace"), list(raw)


def token_entry(vocab, token: int, logprob: float) -> dict:
    """One token's log-probability entry as OpenAI and llama-server word it: text, logprob, bytes."""
    text, raw = token_text(vocab, token)
    return {"token": text, "logprob": logprob, "bytes": raw}


class Shape:
    """One request's response shape: chat (``chat.completion``) or text (``text_completion``),
    with OpenAI's ``logprobs`` when ``vocab`` (the target model, whose token texts they name)
    is given: chat's ``{"content": [{token, logprob, bytes, top_logprobs}]}``, text
    completion's ``{tokens, token_logprobs, top_logprobs, text_offset}``."""

    def __init__(self, kind: str, request_id: str, model: str, include_usage: bool = False, vocab=None):
        self.chat = kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + request_id
        self.model = model
        self.include_usage = include_usage
        self.created = int(time.time())
        self.vocab = vocab
        self._offset = 0      # text completion: where the next streamed token's text starts

    def logprobs(self, tokens: list[Token]) -> dict | None:
        """``logprobs`` for these tokens (None when not asked for)."""
        if self.vocab is None:
            return None
        if self.chat:
            v = self.vocab
            return {"content": [token_entry(v, t.id, t.logprob)
                                | {"top_logprobs": [token_entry(v, i, lp) for i, lp in t.top]}
                                for t in tokens], "refusal": None}
        texts = [token_text(self.vocab, t.id)[0] for t in tokens]
        offsets = []
        for text in texts:
            offsets.append(self._offset)
            self._offset += len(text)
        return {"tokens": texts, "token_logprobs": [t.logprob for t in tokens],
                "top_logprobs": [{token_text(self.vocab, i)[0]: lp for i, lp in t.top} for t in tokens],
                "text_offset": offsets}

    def _base(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": "localspec"}

    def complete(self, text: str, reason: StopReason, s: Summary, logprobs: dict | None = None) -> dict:
        """The whole answer (non-streaming)."""
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": logprobs, "finish_reason": finish_reason(reason)}
            out = self._base("chat.completion")
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason(reason)}
            out = self._base("text_completion")
        return out | {"choices": [choice], "usage": usage(s), "timings": timings(s)} | answered_by(s)

    # -- streaming ----------------------------------------------------------------------
    def chunk(self, text: str | None = None, *, role: bool = False, reason: StopReason | None = None,
              s: Summary | None = None, logprobs: dict | None = None, reasoning: str | None = None) -> bytes:
        """One server-sent event: a piece of text (or of reasoning, llama-server's
        ``reasoning_content``), the opening role, or the closing chunk (finish_reason and timings)."""
        fr = finish_reason(reason) if reason is not None else None
        if self.chat:
            delta: dict = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            if reasoning:
                delta["reasoning_content"] = reasoning
            out = self._base("chat.completion.chunk") | {
                "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": fr}]}
        else:
            out = self._base("text_completion") | {
                "choices": [{"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": fr}]}
        if self.include_usage:
            out["usage"] = None
        if s is not None:
            out["timings"] = timings(s)
            out |= answered_by(s)
        return sse(out)

    # -- what app's streaming and whole answers call (llama.Native has the same) ------------
    @property
    def end(self) -> bytes:
        """The last event of a stream, after the closing chunk or an error: ``[DONE]``."""
        return DONE

    def head(self) -> list[bytes]:
        """The events before any text: the assistant's role (chat)."""
        return [self.chunk(role=True)] if self.chat else []

    def piece(self, text: str, tokens: list[Token] = ()) -> bytes:
        """A piece of text, with its tokens' log-probabilities when asked for."""
        return self.chunk(text, logprobs=self.logprobs(tokens))

    def thinking(self, text: str, tokens: list[Token] = ()) -> bytes:
        """A piece of a thinking model's reasoning: llama-server's ``delta.reasoning_content``."""
        return self.chunk(reasoning=text, logprobs=self.logprobs(tokens))

    @staticmethod
    def put_thinking(answer: dict, reasoning: str) -> None:
        """A whole answer's reasoning: llama-server's ``message.reasoning_content``."""
        answer["choices"][0]["message"]["reasoning_content"] = reasoning

    def tail(self, done: Done) -> list[bytes]:
        """The closing chunk, and the usage chunk when asked for."""
        out = [self.chunk(reason=done.stop_reason, s=done.summary)]
        if self.include_usage:
            out.append(self.usage_chunk(done.summary))
        return out

    def error(self, err) -> bytes:
        """An error that ends a stream (an :class:`~localspec.server.errors.ApiError`)."""
        return sse(err.body())

    def whole(self, done: Done, tokens: list[Token] = ()) -> dict:
        return self.complete(done.text, done.stop_reason, done.summary, self.logprobs(released(tokens, done)))

    def usage_chunk(self, s: Summary) -> bytes:
        """OpenAI's ``stream_options.include_usage`` chunk: no choices, the usage (and the
        timings again, for a client that reads the last chunk only)."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return sse(self._base(obj) | {"choices": [], "usage": usage(s), "timings": timings(s)})


def sse(obj: dict, event: str | None = None) -> bytes:
    """One server-sent event: ``data:`` the object's JSON, after an ``event:`` name when given
    (Anthropic's and the Responses API's streams name theirs)."""
    data = b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    return data if event is None else f"event: {event}\n".encode() + data


def typed_sse(obj: dict) -> bytes:
    """A server-sent event named by its object's ``type`` (Anthropic's and the Responses API's)."""
    return sse(obj, obj["type"])


DONE = b"data: [DONE]\n\n"
