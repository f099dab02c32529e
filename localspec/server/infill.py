"""Fill-in-the-middle prompts: the text before a gap and after it, in the model's own FIM
tokens, as llama-server builds them for ``/infill`` (and OpenAI's ``suffix`` on
``/v1/completions``): ``[extra context] <FIM_PRE> prefix prompt <FIM_SUF> suffix <FIM_MID>``,
the model's answer being what goes in the gap.

Extra context (other files) comes first, in the repository pattern when the model has its
tokens (``<FIM_REP>myproject\\n<FIM_SEP>name\\ntext...<FIM_SEP>filename\\n``), else each chunk
after a plain-text separator. Long inputs are cut as llama-server cuts them: the prefix keeps
its last three quarters of a batch of tokens, the suffix its first quarter, the extra context
what the context has room for.
"""

from __future__ import annotations

from .errors import ApiError

_BATCH = 2048                         # llama-server's default batch: the prefix and suffix budget
_SNIPPET = "\n\n--- snippet ---\n\n"   # llama-server's chunk separator without repository tokens


def check_model(model) -> None:
    """Raises: ApiError (400): the model has no fill-in-the-middle tokens."""
    missing = [name for name in ("pre", "suf", "mid") if model.fim[name] is None]
    if missing:
        raise ApiError(400, f"this model cannot fill in the middle: its vocabulary has no FIM "
                            f"{'/'.join(missing)} token (use a code model with FIM, e.g. Qwen2.5-Coder)",
                       code="not_supported")


def request_prompt(model, body: dict, n_ctx: int, n_predict: int) -> list[int]:
    """The prompt of an ``/infill`` request (llama-server's ``input_prefix``, ``input_suffix``,
    ``input_extra``, ``prompt``).

    Raises:
        ApiError: a field missing or of the wrong type, or a model without FIM tokens (400).
    """
    for key in ("input_prefix", "input_suffix"):
        if not isinstance(body.get(key), str):
            raise ApiError(400, f"{key} is required, a string", param=key)
    if not isinstance(body.get("prompt", ""), str):
        raise ApiError(400, "prompt must be a string (the text the answer starts with)", param="prompt")
    return fim_prompt(model, body["input_prefix"], body["input_suffix"], prompt=body.get("prompt", ""),
                      extra=extra_chunks(body.get("input_extra")), n_ctx=n_ctx, n_predict=n_predict)


def extra_chunks(value) -> list[dict]:
    """``input_extra``: a list of ``{"filename": str, "text": str}`` (filename optional).

    Raises:
        ApiError: anything else (400).
    """
    if value is None:
        return []
    if not isinstance(value, list) or not all(
            isinstance(c, dict) and isinstance(c.get("text"), str) and isinstance(c.get("filename", ""), str)
            for c in value):
        raise ApiError(400, 'input_extra must be a list of {"filename": string, "text": string}',
                       param="input_extra")
    return value


def fim_prompt(model, prefix: str, suffix: str, *, prompt: str = "", extra: list[dict] = (),
               n_ctx: int, n_predict: int = 0) -> list[int]:
    """The prompt tokens for filling the gap between ``prefix`` and ``suffix`` (``prompt``: text
    the answer starts with, after the prefix; ``extra``: other files, see :func:`extra_chunks`)."""
    check_model(model)
    fim = model.fim

    def tok(text: str) -> list[int]:
        return model.tokenize(text, add_special=False, parse_special=False) if text else []

    batch = min(_BATCH, max(n_ctx // 2, 8))
    before, after, lead = tok(prefix), tok(suffix), tok(prompt)
    before = before[len(before) - min(len(before), 3 * (batch // 4)):]
    after = after[:min(len(after), max(0, batch // 4 - (2 + len(lead))))]
    context: list[int] = []
    if fim["rep"] is not None:
        context += [fim["rep"]] + tok("myproject\n")
    for chunk in extra:
        if fim["sep"] is not None:
            context += [fim["sep"]] + tok(chunk.get("filename", "tmp") + "\n")
        else:
            context += tok(_SNIPPET)
        context += tok(chunk["text"])
    if fim["sep"] is not None:
        context += [fim["sep"]] + tok("filename\n")
    n_predict = n_predict if isinstance(n_predict, int) and n_predict > 0 else 0   # (-1: none asked)
    room = min(max(0, n_ctx - batch - 2 * n_predict), len(context))
    out = [model.bos] if model.add_bos and model.bos >= 0 else []
    out += context[len(context) - room:] if room else []
    return out + [fim["pre"]] + before + lead + [fim["suf"]] + after + [fim["mid"]]
