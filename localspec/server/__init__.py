"""``localspec serve``: an OpenAI-compatible HTTP server over one :class:`~localspec.engine.Engine`.

Small modules, one job each: :mod:`.errors` (OpenAI-style error objects), :mod:`.translate`
(request body -> prompt tokens and a :class:`~localspec.engine.RunSpec`), :mod:`.scheduler`
(the one engine, a bounded first-come-first-served queue, cancellation), :mod:`.metrics`
(Prometheus), :mod:`.live` (a UI-free snapshot for the app), :mod:`.responses` (response and
chunk objects with ``usage`` and ``timings``), :mod:`.llama` (llama-server's own objects:
/props, /slots, /tokenize, /detokenize, /completion), :mod:`.infill` (fill-in-the-middle
prompts), :mod:`.tools` (tool calls and JSON mode), the other APIs read into chat requests and
answered in their own shapes (:mod:`.responses_api`: OpenAI's Responses; :mod:`.anthropic`:
Anthropic's Messages; :mod:`.ollama`: Ollama's), :mod:`.app` (the Starlette routes and CORS)
and :mod:`.runner` (uvicorn, sockets and signals).
"""

from .runner import Server, ServerOptions

__all__ = ["Server", "ServerOptions"]
