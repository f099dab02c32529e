"""Errors as the OpenAI API words them: ``{"error": {"message", "type", "param", "code"}}``.

Every failure a client can see goes through :class:`ApiError`, so no route ever answers with
a traceback or an HTML page.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          429: "rate_limit_error", 500: "server_error", 502: "server_error", 503: "server_error"}


class ApiError(Exception):
    """A failure answered with ``status`` and an OpenAI-style error object."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def outcome(self) -> str:
        """The label this failure is counted under in ``localspec_requests_total``."""
        return {401: "unauthorized", 429: "queue_full", 503: "shutdown"}.get(
            self.status, "error" if self.status >= 500 else "bad_request")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)
