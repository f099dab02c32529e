"""The HTTP routes (Starlette) and the layers around them: CORS, API key, body limit, no tracebacks.

Requests are turned into jobs on the event loop (parsing, chat template, tokenizing: fast,
and in arrival order); generation happens on the scheduler's worker thread. Besides the
OpenAI routes, llama-server's own are served in its shapes (:mod:`.llama`): ``/props``,
``/slots``, ``/tokenize``, ``/detokenize``, the native ``/completion`` (also ``/completions``)
and ``/infill``; OpenAI's Responses API (:mod:`.responses_api`): ``/v1/responses`` and
``/v1/responses/input_tokens``; Anthropic's Messages API (:mod:`.anthropic`):
``/v1/messages`` and ``/v1/messages/count_tokens``; and Ollama's API (:mod:`.ollama`):
``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``, ``/api/ps``, ``/api/version``.
Like llama-server, the chat route, the model list and the Responses API answer without the
``/v1`` too, and the API key may come as ``Authorization: Bearer KEY`` or ``x-api-key``.

A request may name any ``model``: the loaded pair answers it, and the response names the real
model (``strict_model`` makes another name a 404 instead).

CORS: browsers let a page call this server only when it answers with CORS headers. By default
only pages served from this machine (``http://localhost:*``, ``http://127.0.0.1:*``,
``http://[::1]:*``, as Ollama does) get them: any web page a user visits could otherwise make
their browser use the model (and read its answers) through a server on loopback. ``cors``
adds origins, ``"*"`` allows any.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..chat.fit import answer_room, fit_conversation
from ..chat.reasoning import prompt_opens_thinking
from ..engine import Done, Engine, RunSpec, StopReason, Token
from ..engine.template import chat_tokens
from ..errors import ContextOverflow, LocalspecError
from . import anthropic, infill, llama, ollama, responses_api, tools, translate
from .errors import ApiError
from .live import LiveState
from .metrics import Metrics
from .responses import Shape
from .scheduler import Channel, Job, Scheduler
from .thinking import ThinkingShape

log = logging.getLogger("localspec.server")

_ENDPOINTS = {"/v1/chat/completions": "chat", "/chat/completions": "chat", "/v1/completions": "completions",
              "/completion": "completion", "/completions": "completion", "/infill": "infill",
              "/v1/messages": "messages", "/v1/responses": "responses", "/responses": "responses",
              "/api/chat": "ollama", "/api/generate": "ollama"}

# Origins allowed without --cors: pages served from this machine, any port.
LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"

# Routes that need no API key (liveness probes).
_OPEN = ("/health", "/v1/health")


@dataclass
class ServerContext:
    """Everything the routes use."""

    engine: Engine
    scheduler: Scheduler
    metrics: Metrics
    live: LiveState
    model_id: str
    base: RunSpec                   # the server's defaults: drafter, tuned drafting settings
    api_key: str | None = None
    max_body: int = 8 << 20
    strict_model: bool = False      # True: a request naming another model is a 404
    cors: tuple[str, ...] = ()      # origins allowed besides loopback ones; "*": any
    template_variables: dict | None = None   # the chat template's variables by default (--no-think, ...)
    started: int = field(default_factory=lambda: int(time.time()))

    def refused(self, endpoint: str, error: ApiError) -> Response:
        self.metrics.request(endpoint, error.outcome)
        self.live.refused(error.outcome)
        return _render(endpoint)(error)


def build_app(ctx: ServerContext):
    """The ASGI application: the routes inside :class:`Guard`, inside :class:`Cors`."""

    async def health(request: Request) -> Response:
        closing = ctx.scheduler.closing
        return JSONResponse({"status": "shutting down" if closing else "ok", "queue_depth": ctx.scheduler.depth,
                             "generating": ctx.scheduler.busy}, status_code=503 if closing else 200)

    def model_card() -> dict:
        """The served pair: its id, and the target and draft (files and models) in ``meta``."""
        info = ctx.engine.describe()
        draft = info.get("draft", {})
        return {"id": ctx.model_id, "object": "model", "created": ctx.started, "owned_by": "localspec",
                "meta": {"target": info["target"]["model"], "draft": draft.get("model"),
                         "target_file": info["target"]["path"], "draft_file": draft.get("path"),
                         "drafter": ctx.base.drafter.value, "drafters": info["drafters"], "n_ctx": info["n_ctx"]}}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model(request: Request) -> Response:
        name = request.path_params["name"]
        if name != ctx.model_id and ctx.strict_model:
            raise _unknown_model(name, ctx.model_id)
        return JSONResponse(model_card())

    async def props(request: Request) -> Response:
        return JSONResponse(llama.props(ctx.engine, ctx.base, ctx.model_id, busy=ctx.scheduler.busy))

    async def slots(request: Request) -> Response:
        n_ctx = ctx.engine.target_ctx.n_ctx
        return JSONResponse([llama.slot(job.spec if job is not None else ctx.base, n_ctx,
                                        task=int(job.id) if job else -1, busy=job is not None,
                                        n_predict=job.spec.max_tokens if job else -1, slot_id=i)
                             for i, job in enumerate(ctx.scheduler.slot_jobs())])

    async def tokenize(request: Request) -> Response:
        return await _utility(ctx, request, llama.tokenize)

    async def detokenize(request: Request) -> Response:
        return await _utility(ctx, request, llama.detokenize)

    async def completion(request: Request) -> Response:
        return await _generate(ctx, request, "completion")

    async def infill(request: Request) -> Response:
        return await _generate(ctx, request, "infill")

    async def metrics(request: Request) -> Response:
        return Response(ctx.metrics.render(), headers={"Content-Type": ctx.metrics.content_type})

    async def chat(request: Request) -> Response:
        return await _generate(ctx, request, "chat")

    async def completions(request: Request) -> Response:
        return await _generate(ctx, request, "completions")

    async def messages(request: Request) -> Response:
        return await _generate(ctx, request, "messages")

    async def count_tokens(request: Request) -> Response:
        return await _count(ctx, request, lambda body: anthropic.to_chat(body, count=True), {},
                            anthropic.error_response)

    async def responses(request: Request) -> Response:
        return await _generate(ctx, request, "responses")

    async def ollama_chat(request: Request) -> Response:
        return await _generate(ctx, request, "ollama_chat")

    async def ollama_generate(request: Request) -> Response:
        return await _generate(ctx, request, "ollama_generate")

    async def ollama_tags(request: Request) -> Response:
        return JSONResponse(ollama.tags(ctx.engine, ctx.model_id, ctx.started))

    async def ollama_show(request: Request) -> Response:
        try:
            name = translate.parse_json(await _read_body(request, ctx.max_body)).get("model")
            if ctx.strict_model and name not in (None, "", ctx.model_id):
                raise _unknown_model(name, ctx.model_id)
        except ApiError as err:
            return ollama.error_response(err)
        return JSONResponse(ollama.show(ctx.engine, ctx.model_id))

    async def ollama_ps(request: Request) -> Response:
        return JSONResponse(ollama.ps(ctx.engine, ctx.model_id))

    async def ollama_version(request: Request) -> Response:
        return JSONResponse(ollama.version())

    async def input_tokens(request: Request) -> Response:
        return await _count(ctx, request, responses_api.to_chat, {"object": "response.input_tokens"},
                            ApiError.response)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}").response()

    async def api_error(request: Request, exc: ApiError) -> Response:
        return exc.response()

    async def server_error(request: Request, exc: Exception) -> Response:
        return ApiError(500, f"internal error: {type(exc).__name__}").response()

    app = Starlette(routes=[
        Route("/health", health),
        Route("/v1/health", health),
        Route("/v1/models", models),
        Route("/models", models),
        Route("/v1/models/{name:path}", model),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/completion", completion, methods=["POST"]),
        Route("/completions", completion, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/responses", responses, methods=["POST"]),
        Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
        Route("/responses/input_tokens", input_tokens, methods=["POST"]),
        Route("/api/chat", ollama_chat, methods=["POST"]),
        Route("/api/generate", ollama_generate, methods=["POST"]),
        Route("/api/tags", ollama_tags),
        Route("/api/show", ollama_show, methods=["POST"]),
        Route("/api/ps", ollama_ps),
        Route("/api/version", ollama_version),
        Route("/infill", infill, methods=["POST"]),
        Route("/props", props),
        Route("/slots", slots),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/metrics", metrics),
    ], exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: server_error})
    return Cors(Guard(app, ctx), ctx.cors)


class Cors(CORSMiddleware):
    """Starlette's CORS middleware, outermost (a browser's preflight carries no API key):
    loopback origins always, ``origins`` on top (``"*"``: any; a page of a listed origin may
    also reach this server on a private address). A preflight from an origin not allowed is
    refused with a 403 and no CORS headers, so the browser blocks the request."""

    def __init__(self, app, origins: tuple[str, ...] = ()):
        any_origin = "*" in origins
        super().__init__(app, allow_origins=["*"] if any_origin else list(origins),
                         allow_origin_regex=None if any_origin else LOOPBACK_ORIGINS,
                         allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"],
                         allow_private_network=bool(origins), expose_headers=["Retry-After"], max_age=600)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            preflight = scope["method"] == "OPTIONS" and "access-control-request-method" in headers
            if origin is not None and not preflight and not self.is_allowed_origin(origin):
                return await self.app(scope, receive, send)   # answered, but with no CORS headers at all
        await super().__call__(scope, receive, send)

    def preflight_response(self, request_headers: Headers) -> Response:
        origin = request_headers["origin"]
        if not self.is_allowed_origin(origin):
            return ApiError(403, f"origin {origin} may not call this server (start it with --cors {origin} to "
                                 "allow it)", code="origin_not_allowed").response()
        return super().preflight_response(request_headers)


class Guard:
    """The layer inside :class:`Cors`: the API key (``Authorization: Bearer KEY``, or
    ``x-api-key: KEY`` as Anthropic's clients send it) on every route but /health and
    /v1/health, and the last word on failures, so that no traceback reaches a client or the log."""

    def __init__(self, app, ctx: ServerContext):
        self.app, self.ctx = app, ctx
        self._key = ctx.api_key.encode() if ctx.api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self._key is not None and scope["path"] not in _OPEN:
            headers = dict(scope["headers"])
            scheme, _, key = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer":
                key = headers.get(b"x-api-key", b"")
            if not hmac.compare_digest(key.strip(), self._key):
                err = ApiError(401, "missing or wrong API key: send Authorization: Bearer KEY (or x-api-key: KEY)",
                               code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
                path = scope["path"]
                endpoint = _ENDPOINTS.get(path)
                style = ("messages" if path.startswith("/v1/messages")
                         else "ollama" if path.startswith("/api/") else None)   # (the error's shape)
                response = self.ctx.refused(endpoint, err) if endpoint else _render(style)(err)
                return await response(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            pass
        except Exception as exc:   # already answered with a 500 by the app's handler
            log.error("%s %s failed: %s: %s", scope.get("method"), scope["path"], type(exc).__name__, exc)


def _render(endpoint: str | None):
    """How an endpoint words an error response: Anthropic's shape on /v1/messages, Ollama's on
    /api/..., else OpenAI's."""
    return {"messages": anthropic.error_response, "ollama": ollama.error_response}.get(endpoint, ApiError.response)


def _unknown_model(name, served: str) -> ApiError:
    return ApiError(404, f"model {name!r} is not served here (this server serves {served!r})",
                    param="model", code="model_not_found")


async def _read_body(request: Request, limit: int) -> bytes:
    size = request.headers.get("content-length", "")
    if size.isdigit() and int(size) > limit:
        raise ApiError(413, f"the request body is {size} bytes; the limit is {limit}", code="body_too_large")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise ApiError(413, f"the request body is over the limit of {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def _prompt(ctx: ServerContext, body: dict, kind: str, plan: tools.Plan, fit: bool = False) -> list[int]:
    """The prompt's tokens; ``fit``: a chat that outgrows the context loses its oldest turns
    (:mod:`..chat.fit`), as Ollama's ``/api/chat`` does, rather than being refused."""
    engine = ctx.engine
    n_ctx = engine.target_ctx.n_ctx
    if kind == "chat":
        variables = (ctx.template_variables or {}) | (translate.template_variables(body) or {}) or None

        def render(msgs: list[dict]) -> list[int]:
            return chat_tokens(engine.target_model, msgs, plan.tools, variables)

        try:
            if fit:
                return fit_conversation(render, plan.messages, n_ctx, answer_room(n_ctx, body.get("max_tokens"))).tokens
            return render(plan.messages)
        except ContextOverflow as exc:
            raise ApiError(400, str(exc), param="messages", code="context_length_exceeded") from None
        except LocalspecError as exc:
            raise translate.template_error(exc) from None
    if kind == "infill":
        return infill.request_prompt(engine.target_model, body, n_ctx, translate.n_predict(body))
    prompt = translate.completion_prompt(body)
    if body.get("suffix"):      # OpenAI's insertion: the answer goes between prompt and suffix
        if not isinstance(prompt, str):
            raise ApiError(400, "a suffix needs the prompt as text, not token ids", param="prompt")
        return infill.fim_prompt(engine.target_model, prompt, body["suffix"], n_ctx=n_ctx)
    if isinstance(prompt, str):
        return engine.tokenize(prompt)
    n_vocab = engine.target_model.n_vocab
    if any(not 0 <= t < n_vocab for t in prompt):
        raise ApiError(400, f"prompt: token ids must be in [0, {n_vocab})", param="prompt")
    return list(prompt)


async def _count(ctx: ServerContext, request: Request, to_chat, fields: dict, render) -> Response:
    """The token count of the prompt a request would be answered with: ``{"input_tokens": N}``
    and ``fields``; ``to_chat`` reads the request into a chat request, ``render`` words an error."""
    try:
        chat = to_chat(translate.parse_json(await _read_body(request, ctx.max_body)))
        plan = tools.plan(chat, ctx.engine.target_model.chat_template(), chat=True)
        return JSONResponse(fields | {"input_tokens": len(_prompt(ctx, chat, "chat", plan))})
    except ApiError as err:
        return render(err)


async def _utility(ctx: ServerContext, request: Request, answer) -> Response:
    """A route that reads a JSON body and answers at once (/tokenize, /detokenize)."""
    try:
        body = translate.parse_json(await _read_body(request, ctx.max_body))
        return JSONResponse(answer(ctx.engine, body))
    except ApiError as err:
        return err.response()


async def _generate(ctx: ServerContext, request: Request, kind: str) -> Response:
    """Parse, queue, and answer one chat, text or llama-server completion, or one in the
    Responses, Messages or Ollama APIs (each read into a chat or text completion), streamed or
    whole. ``kind``: the route's ("ollama_chat", "ollama_generate" or the metrics label)."""
    endpoint = "ollama" if kind.startswith("ollama") else kind
    ollama_chat = kind == "ollama_chat"
    try:
        body = translate.parse_json(await _read_body(request, ctx.max_body))
        echo = body
        if kind == "messages":
            body, kind = anthropic.to_chat(body), "chat"
        elif kind == "responses":
            body, kind = responses_api.to_chat(body), "chat"
        elif endpoint == "ollama":
            if ollama.loading(body, ollama_chat):
                return JSONResponse(ollama.loaded(body.get("model") or ctx.model_id, ollama_chat))
            kind, body = ("chat", ollama.chat_request(body)) if ollama_chat else ollama.generate_request(body)
        translate.check_request(body, kind)
        name = body.get("model")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "model must be a string", param="model")
        if ctx.strict_model and name not in (None, "", ctx.model_id):
            raise _unknown_model(name, ctx.model_id)
        plan = tools.plan(body, ctx.engine.target_model.chat_template(), chat=kind == "chat")
        prompt = _prompt(ctx, body, kind, plan, fit=ollama_chat)
        reasoning = kind == "chat" and translate.reasoning_apart(body)
        opened = reasoning and prompt_opens_thinking(ctx.engine.target_model, prompt)
        n_logprobs = translate.logprobs(body, kind)
        if n_logprobs is not None and plan.calls is not None:
            raise ApiError(400, "logprobs do not come with tools here: leave one out", param="logprobs")
        spec = translate.run_spec(body, ctx.base, len(prompt), ctx.engine.target_ctx.n_ctx, ctx.engine.drafters,
                                  n_logprobs, kind)
        spec = tools.constrain(spec, plan, ctx.engine.target_model)
        fields = translate.response_fields(body) if kind in translate.NATIVE else []
        stream = bool(body.get("stream"))
        job = Job(endpoint, prompt, spec, Channel(asyncio.get_running_loop()), stream=stream,
                  cache_prompt=translate.cache_prompt(body), slot=translate.id_slot(body, ctx.engine.parallel),
                  tokens=(stream and kind in translate.NATIVE) or n_logprobs is not None)
        ctx.scheduler.submit(job)
    except ApiError as err:
        return ctx.refused(endpoint, err)
    if endpoint == "messages":
        shape = anthropic.MessageShape(job.id, ctx.model_id, len(prompt), plan.calls,
                                       lambda done: llama.stopping_word(ctx.engine, done, spec.stop))
    elif endpoint == "responses":
        shape = responses_api.ResponseShape(job.id, ctx.model_id, echo, plan.calls)
    elif endpoint == "ollama":
        shape = ollama.OllamaShape(echo.get("model") or ctx.model_id, ollama_chat, plan.calls)
    elif kind in translate.NATIVE:
        shape = llama.Native(ctx.engine, spec, ctx.model_id, translate.completion_prompt(body) if kind == "completion"
                             else prompt, translate.n_predict(body), job, bool(body.get("return_tokens")), fields)
    else:
        shape = Shape(kind, job.id, ctx.model_id, translate.include_usage(body),
                      ctx.engine.target_model if n_logprobs is not None else None)
        if plan.calls is not None:
            shape = tools.CallShape(shape, plan.calls)
    if reasoning:              # (a chat answer: each API words a thinking model's reasoning)
        shape = ThinkingShape(shape, opened)
    if stream:
        media = ollama.OllamaShape.media_type if endpoint == "ollama" else "text/event-stream"
        return StreamingResponse(_stream(ctx, job, shape), media_type=media,
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await _whole(ctx, request, job, shape, _render(endpoint))


def _shutdown_error(done: Done) -> ApiError:
    return ApiError(503, f"the server is shutting down: the generation was stopped after "
                         f"{done.summary.n_generated} tokens", code="shutting_down")


async def _whole(ctx: ServerContext, request: Request, job: Job, shape, render) -> Response:
    """Wait for the answer, cancelling the job if the client goes away first; ``render``
    words an error response."""
    result = asyncio.ensure_future(_collect(job))
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not result.done():
            ctx.scheduler.cancel(job, "cancelled")
            return Response(status_code=499)   # nobody is listening
        tokens, item = result.result()
        if isinstance(item, ApiError):
            return render(item)
        if item.stop_reason is StopReason.CANCELLED and job.cancel_reason == "shutdown":
            return render(_shutdown_error(item))
        return JSONResponse(shape.whole(item, tokens))
    finally:
        for task in (result, gone):
            task.cancel()


async def _collect(job: Job) -> tuple[list[Token], object]:
    """The job's Token events (when it sends them) and its last item (a Done or an ApiError)."""
    tokens: list[Token] = []
    while True:
        items = await job.channel.get()
        if type(items[-1]) is not Token:
            tokens.extend(items[:-1])
            return tokens, items[-1]
        tokens.extend(items)


async def _disconnect(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _stream(ctx: ServerContext, job: Job, shape):
    """Server-sent events: the role, text as it comes (several tokens per event when the client
    reads slower than the engine writes), the closing chunk with the timings (and the usage
    chunk when asked for), [DONE]; ``shape`` (a :class:`Shape`, or llama-server's
    :class:`llama.Native`) words each event.

    Starlette cancels this generator when the client disconnects; ``finally`` then cancels the
    job, which the engine notices at its next round."""
    finished = False
    try:
        for event in shape.head():
            yield event
        tokens: list[Token] = []    # the tokens of the text not yet sent (when the job sends them)
        while True:
            texts: list[str] = []
            for item in await job.channel.get():
                kind = type(item)
                if kind is str:
                    texts.append(item)
                    continue
                if kind is Token:
                    texts.append(item.text)
                    tokens.append(item)
                    continue
                text = "".join(texts)
                if text:
                    yield shape.piece(text, tokens)
                finished = True
                if isinstance(item, ApiError):
                    yield shape.error(item)
                elif item.stop_reason is StopReason.CANCELLED and job.cancel_reason == "shutdown":
                    yield shape.error(_shutdown_error(item))
                else:
                    for event in shape.tail(item):
                        yield event
                if shape.end:
                    yield shape.end
                return
            text = "".join(texts)
            if text:              # (tokens whose text is held back go with the text that follows)
                yield shape.piece(text, tokens)
                tokens = []
    finally:
        if not finished:
            ctx.scheduler.cancel(job, "cancelled")
