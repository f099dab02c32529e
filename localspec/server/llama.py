"""llama-server's own objects: ``/props``, ``/slots``, ``/tokenize``, ``/detokenize`` and the
answers of its native ``/completion``, in its shapes (its field names, its ``timings``), so that
clients written for llama-server (its web UI reads ``/props``) work against ``localspec serve``.

Where llama-server has no field for something localspec does (the drafter, adaptive drafting),
it is added under a name of its own next to llama-server's (``speculative.drafter``).
"""

from __future__ import annotations

from .. import __version__
from ..engine import Done, Engine, RunSpec, StopReason
from .errors import ApiError
from .responses import released, sse, timings, token_entry

# llama.cpp's "no seed given" (LLAMA_DEFAULT_SEED)
DEFAULT_SEED = 0xFFFFFFFF

# StopReason -> llama-server's stop_type
_STOP_TYPE = {StopReason.EOG: "eos", StopReason.STOP_STRING: "word",
              StopReason.INDENT: "limit", StopReason.TIME_LIMIT: "limit", StopReason.MAX_TOKENS: "limit",
              StopReason.CONTEXT_FULL: "limit", StopReason.CANCELLED: "none"}

# The fields /tokenize and /detokenize take, with their types.
_TOKENIZE = {"content": str, "add_special": bool, "parse_special": bool, "with_pieces": bool}
_DETOKENIZE = {"tokens": list}


def params(spec: RunSpec, n_predict: int) -> dict:
    """A RunSpec as llama-server's ``params`` (``generation_settings``): its sampling fields,
    ``n_predict`` and the flat ``speculative.*`` settings.

    Args:
        spec: the run settings (the server's defaults, or one request's).
        n_predict: the most tokens asked for; -1 when the answer may fill the context.
    Returns:
        A JSON-ready dict.
    """
    s = spec.sampling
    return {
        "n_predict": n_predict,
        "seed": DEFAULT_SEED if s.seed is None else s.seed,
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "repeat_penalty": s.repeat_penalty,
        "repeat_last_n": s.repeat_last_n,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "logit_bias": s.to_dict()["logit_bias"],
        "dry_multiplier": s.dry_multiplier,
        "dry_base": s.dry_base,
        "dry_allowed_length": s.dry_allowed_length,
        "dry_penalty_last_n": s.dry_penalty_last_n,
        "dry_sequence_breakers": list(s.dry_sequence_breakers),
        "stop": list(spec.stop),
        "n_indent": spec.n_indent,
        "n_probs": spec.logprobs or 0,
        "samplers": ["penalties", "dry", "top_k", "top_p", "min_p", "temperature"],
        "speculative.n_max": spec.draft_max if spec.speculative else 0,
        "speculative.n_min": spec.draft_min if spec.speculative else 0,
        "speculative.p_min": spec.p_min if spec.p_min is not None else 0.0,
        "speculative.drafter": spec.drafter.value,
        "speculative.adaptive": spec.adaptive,
        "speculative.draft_temperature": s.draft_temperature,
    }


def slot(spec: RunSpec, n_ctx: int, *, task: int, busy: bool, n_predict: int = -1, slot_id: int = 0) -> dict:
    """A slot, as llama-server's ``/slots`` lists it (and ``/props`` its default)."""
    return {"id": slot_id, "id_task": task, "n_ctx": n_ctx, "speculative": spec.speculative, "is_processing": busy,
            "params": params(spec, n_predict)}


def props(engine: Engine, base: RunSpec, model_id: str, *, busy: bool) -> dict:
    """llama-server's ``/props``: the default generation settings, the slots (each with the
    whole ``n_ctx``: the KV cache holds slots x n_ctx), the model's path and chat template;
    ``localspec`` adds the pair, the drafters this server can run and why it has one slot
    where more were asked for (``parallel_note``)."""
    info = engine.describe()
    n_ctx = info["n_ctx"]
    out = {
        "default_generation_settings": slot(base, n_ctx, task=-1, busy=busy),
        "total_slots": info["parallel"],
        "model_alias": model_id,
        "model_path": info["target"]["path"],
        "chat_template": engine.target_model.chat_template() or "",
        "modalities": {"vision": False, "audio": False},
        "build_info": f"localspec {__version__}",
        "localspec": {"model": model_id, "target": info["target"]["model"],
                      "draft": info.get("draft", {}).get("model"), "drafter": base.drafter.value,
                      "drafters": info["drafters"], "backend": info["target"]["backend"],
                      "n_ctx_per_slot": n_ctx, "kv_tokens": n_ctx * info["parallel"]},
    }
    if info.get("parallel_note"):
        out["localspec"]["parallel_note"] = info["parallel_note"]
    return out


def _fields(body: dict, allowed: dict, route: str) -> None:
    for key, value in body.items():
        if key not in allowed:
            raise ApiError(400, f"{key} is not a field of {route} (it takes {', '.join(allowed)})", param=key)
        if not isinstance(value, allowed[key]) or (allowed[key] is not bool and isinstance(value, bool)):
            raise ApiError(400, f"{key} must be a {allowed[key].__name__}", param=key)


def tokenize(engine: Engine, body: dict) -> dict:
    """``/tokenize``: ``content`` into token ids (llama-server's defaults: no BOS, special
    tokens parsed); ``with_pieces`` gives each id with its text (or its bytes, when they are
    not UTF-8 on their own).

    Raises:
        ApiError: a field that is missing, unknown or of the wrong type (400).
    """
    _fields(body, _TOKENIZE, "/tokenize")
    if "content" not in body:
        raise ApiError(400, "content is missing", param="content")
    model = engine.target_model
    ids = model.tokenize(body["content"], add_special=body.get("add_special", False),
                         parse_special=body.get("parse_special", True))
    if not body.get("with_pieces"):
        return {"tokens": ids}
    out = []
    for t in ids:
        raw = model.piece(t)
        try:
            piece: str | list[int] = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        out.append({"id": t, "piece": piece})
    return {"tokens": out}


def detokenize(engine: Engine, body: dict) -> dict:
    """``/detokenize``: token ids into text.

    Raises:
        ApiError: ``tokens`` missing, not a list of ids, or an id outside the vocabulary (400).
    """
    _fields(body, _DETOKENIZE, "/detokenize")
    tokens = body.get("tokens")
    if tokens is None:
        raise ApiError(400, "tokens is missing", param="tokens")
    n_vocab = engine.target_model.n_vocab
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in tokens):
        raise ApiError(400, f"tokens: token ids must be in [0, {n_vocab})", param="tokens")
    return {"content": engine.target_model.detokenize(tokens)}


def stopping_word(engine: Engine, done: Done, stop: tuple[str, ...]) -> str:
    """Which stop string ended the answer ("" when none did): the one the generated tokens'
    text continues with after the answer's text."""
    if done.stop_reason is not StopReason.STOP_STRING:
        return ""
    rest = engine.target_model.detokenize(list(done.token_ids))[len(done.text):]
    return next((s for s in stop if rest.startswith(s)), next((s for s in stop if s in rest), ""))


class Native:
    """One ``/completion`` request's answer in llama-server's shape: ``content``, ``stop``,
    ``stop_type``, token counts, ``generation_settings`` and ``timings``; streamed, each event
    is ``{"content", "tokens", "stop": false}`` (the event's text and its token ids) and the last
    carries the rest (llama-server sends no ``[DONE]``). ``id_slot`` is the slot that generated it
    (``job.slot_used``); ``tokens`` of a whole answer are every generated id when
    ``return_tokens``, as llama-server's. With ``n_probs`` (``spec.logprobs``) each event, and a
    whole answer, carry ``completion_probabilities``: per token its id, text, bytes, logprob and
    ``top_logprobs``."""

    def __init__(self, engine: Engine, spec: RunSpec, model_id: str, prompt: str | list[int], n_predict: int,
                 job=None, return_tokens: bool = False, fields: list[str] = ()):
        self.engine, self.spec, self.model_id, self.n_predict = engine, spec, model_id, n_predict
        self.prompt = prompt if isinstance(prompt, str) else engine.target_model.detokenize(list(prompt))
        self.job, self.return_tokens, self.fields = job, return_tokens, fields

    def _probs(self, tokens) -> dict:
        if self.spec.logprobs is None:
            return {}
        vocab = self.engine.target_model

        def entry(i: int, lp: float) -> dict:
            return {"id": i} | token_entry(vocab, i, lp)
        return {"completion_probabilities": [
            entry(t.id, t.logprob) | {"top_logprobs": [entry(i, lp) for i, lp in t.top]} for t in tokens]}

    @property
    def slot(self) -> int:
        return self.job.slot_used if self.job is not None else 0

    end = b""   # llama-server ends a stream with its last event, no [DONE]

    def head(self) -> list[bytes]:
        return []

    def piece(self, text: str, tokens=()) -> bytes:
        return sse({"index": 0, "content": text, "tokens": [t.id for t in tokens], "stop": False,
                    "id_slot": self.slot} | self._probs(tokens))

    def tail(self, done: Done) -> list[bytes]:
        return [sse(self._kept(self.final(done, streamed=True)))]

    def error(self, err: ApiError) -> bytes:
        return sse(err.body())

    def whole(self, done: Done, tokens=()) -> dict:
        return self._kept(self.final(done) | self._probs(released(tokens, done)))

    def _kept(self, answer: dict) -> dict:
        """The ``response_fields`` of the answer, keyed by their paths (llama-server's), or all."""
        if not self.fields:
            return answer
        out = {}
        for path in self.fields:
            value, found = answer, True
            for key in path.split("/"):
                if isinstance(value, dict) and key in value:
                    value = value[key]
                else:
                    found = False
                    break
            if found:
                out[path] = value
        return out

    def final(self, done: Done, *, streamed: bool = False) -> dict:
        """The whole answer, or (``streamed``) the last event: the same fields, no text."""
        s = done.summary
        return {
            "index": 0,
            "content": "" if streamed else done.text,
            "tokens": list(done.token_ids) if self.return_tokens and not streamed else [],
            "id_slot": self.slot,
            "stop": True,
            "model": self.model_id,
            "tokens_predicted": s.n_generated,
            "tokens_evaluated": s.n_prompt,
            "generation_settings": params(self.spec, self.n_predict),
            "prompt": self.prompt,
            "has_new_line": "\n" in done.text,
            "truncated": False,
            "stop_type": _STOP_TYPE[done.stop_reason],
            "stopping_word": stopping_word(self.engine, done, self.spec.stop),
            "tokens_cached": s.n_prompt + s.n_generated,
            "timings": timings(s),
        }
