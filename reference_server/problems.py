"""RFC 9457 problem responses with the target spec's stable codes.

Every refusal the server makes is a `Problem` raised where it is detected and rendered in one
place, so the status, the code and the problem `type` can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Problem", "STATUS_OF", "TITLES"]

STATUS_OF: dict[str, int] = {
    "malformed_request": 400,
    "unauthorized": 401,
    "body_timeout": 408,
    "too_large": 413,
    "too_many_questions": 413,
    "state_too_large": 413,
    "unsupported_media_type": 415,
    "invalid_question": 422,
    "unknown_model": 422,
    "inference_failed": 500,
    "backend_unavailable": 502,
    "overloaded": 503,
    "not_ready": 503,
    "backend_timeout": 504,
}

TITLES: dict[str, str] = {
    "malformed_request": "Malformed request",
    "unauthorized": "Unauthorized",
    "body_timeout": "Request body timeout",
    "too_large": "Request body too large",
    "too_many_questions": "Too many questions",
    "state_too_large": "State too large",
    "unsupported_media_type": "Unsupported media type",
    "invalid_question": "Invalid question",
    "unknown_model": "Unknown model",
    "inference_failed": "Inference failed",
    "backend_unavailable": "Backend unavailable",
    "overloaded": "Overloaded",
    "not_ready": "Not ready",
    "backend_timeout": "Backend timeout",
}


class Problem(Exception):
    """A refusal: raised by validation, admission or inference, rendered by the app."""

    def __init__(
        self,
        code: str,
        detail: str | None = None,
        *,
        errors: Sequence[Mapping[str, Any]] = (),
        retry_after_s: int | None = None,
    ) -> None:
        if code not in STATUS_OF:
            raise ValueError(f"unknown problem code {code!r}")
        super().__init__(detail or TITLES[code])
        self.code = code
        self.status = STATUS_OF[code]
        self.detail = detail
        self.errors = list(errors)
        self.retry_after_s = retry_after_s

    def body(self, request_id: str | None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": f"/problems/{self.code}",
            "title": TITLES[self.code],
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
        headers = {}
        if self.retry_after_s is not None:
            headers["Retry-After"] = str(self.retry_after_s)
        if self.code == "unauthorized":
            headers["WWW-Authenticate"] = "Bearer"
        return headers
