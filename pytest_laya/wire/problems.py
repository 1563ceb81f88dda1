"""Refusals on the wire: the target's RFC 9457 problems (`Problem`), and reading what any server said.

Peers answer errors in at least six shapes (`{"detail"}`, `{"detail": [...]}`,
`{"error": {...}}`, `{"error": "..."}`, problem+json, plain text). Clients must read the status
first and then whatever code or message exists; this module is that one reading.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Problem", "ServerError", "printable", "read_server_error", "PROBLEM_MEDIA_TYPE", "PROBLEM_STATUS", "PROBLEM_TITLES"]

PROBLEM_MEDIA_TYPE = "application/problem+json"

# The target spec's stable problem codes, the status each is sent with, and its title: one
# table for every server the kit has (the reference server and the fake).
PROBLEM_STATUS: dict[str, int] = {
    "malformed_request": 400,
    "unauthorized": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "body_timeout": 408,
    "too_large": 413,
    "too_many_questions": 413,
    "state_too_large": 413,
    "unsupported_media_type": 415,
    "invalid_question": 422,
    "invalid_request": 422,
    "unknown_model": 422,
    "inference_failed": 500,
    "backend_unavailable": 502,
    "overloaded": 503,
    "not_ready": 503,
    "backend_timeout": 504,
}

PROBLEM_TITLES: dict[str, str] = {
    "malformed_request": "Malformed request",
    "unauthorized": "Unauthorized",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "body_timeout": "Request body timeout",
    "too_large": "Request body too large",
    "too_many_questions": "Too many questions",
    "state_too_large": "State too large",
    "unsupported_media_type": "Unsupported media type",
    "invalid_question": "Invalid question",
    "invalid_request": "Invalid request",
    "unknown_model": "Unknown model",
    "inference_failed": "Inference failed",
    "backend_unavailable": "Backend unavailable",
    "overloaded": "Overloaded",
    "not_ready": "Not ready",
    "backend_timeout": "Backend timeout",
}

_MAX_DETAIL = 500


@dataclass(frozen=True)
class ServerError:
    """The server's own words about a failed request, normalised."""

    status: int
    code: str | None = None
    detail: str | None = None
    # RFC 9457 `errors[]` from the target spec: one entry per invalid question or field.
    errors: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


def printable(text: str) -> str:
    """A server's text as a message shows it: control and other unprintable characters escaped
    (``\\x00``, ``\\x1b``, ``\\n``), so a server's bytes never reach a terminal raw."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = printable(" ".join(text.split()))
    return text[:_MAX_DETAIL] + ("..." if len(text) > _MAX_DETAIL else "")


def read_server_error(status: int, content_type: str | None, body: bytes | str | Any) -> ServerError:
    """Whatever code and message `body` carries; never raises on a body it cannot read."""
    media = (content_type or "").split(";")[0].strip().lower()
    parsed: Any = body
    if isinstance(body, (bytes, bytearray)):
        body = bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            parsed = json.loads(body) if body.strip() else None
        except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
            return ServerError(status=status, detail=_text(body) or None)
    if not isinstance(parsed, Mapping):
        return ServerError(status=status, detail=_text(parsed))
    if media == "application/problem+json" or ("title" in parsed and "status" in parsed):
        errors = parsed.get("errors")
        return ServerError(
            status=status,
            code=parsed.get("code") if isinstance(parsed.get("code"), str) else None,
            detail=_text(parsed.get("detail") or parsed.get("title")),
            errors=tuple(e for e in errors if isinstance(e, Mapping)) if isinstance(errors, list) else (),
        )
    if "detail" in parsed:
        return ServerError(status=status, detail=_text(parsed["detail"]))
    error = parsed.get("error")
    if isinstance(error, Mapping):
        code = error.get("code") if isinstance(error.get("code"), str) else None
        message = error.get("message") or error.get("detail")
        if error.get("field"):
            message = f"{error['field']}: {message}"
        return ServerError(status=status, code=code, detail=_text(message))
    if error is not None:
        return ServerError(status=status, detail=_text(error))
    return ServerError(status=status, code=parsed.get("code") if isinstance(parsed.get("code"), str) else None,
                       detail=_text(parsed.get("message") or parsed))


class Problem(Exception):
    """A refusal in the target spec's terms: a stable `code`, its `status`, a detail, `errors[]`.

    Raised where a refusal is found (request validation, admission, inference) and rendered as
    one RFC 9457 document by `document()`, so the status, code, title and type never disagree.
    """

    def __init__(
        self,
        code: str,
        detail: str | None = None,
        *,
        errors: Sequence[Mapping[str, Any]] = (),
        retry_after_s: int | None = None,
    ) -> None:
        if code not in PROBLEM_STATUS:
            raise ValueError(f"unknown problem code {code!r}; use one of {', '.join(PROBLEM_STATUS)}")
        super().__init__(detail or PROBLEM_TITLES[code])
        self.code = code
        self.status = PROBLEM_STATUS[code]
        self.detail = detail
        self.errors = [dict(e) for e in errors]
        self.retry_after_s = retry_after_s

    def document(self, request_id: str | None = None) -> dict[str, Any]:
        """The problem+json body."""
        doc: dict[str, Any] = {
            "type": f"/problems/{self.code}",
            "title": PROBLEM_TITLES[self.code],
            "status": self.status,
            "code": self.code,
        }
        if self.detail:
            doc["detail"] = self.detail
        if self.errors:
            doc["errors"] = self.errors
        if request_id:
            doc["request_id"] = request_id
        return doc

    def headers(self) -> dict[str, str]:
        """The headers this problem needs besides Content-Type and X-Request-Id."""
        headers = {}
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(self.retry_after_s)
        if self.code == "unauthorized":
            headers["WWW-Authenticate"] = "Bearer"
        return headers
