"""RFC 9457 problem responses with the target spec's stable codes.

Every refusal the server makes is a `Problem` raised where it is detected and rendered in one
place, so the status, the code and the problem `type` can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_laya.problems import PROBLEM_STATUS, PROBLEM_TITLES

__all__ = ["Problem", "STATUS_OF", "TITLES"]

# The target spec's codes for a path or method it does not have. The kit's shared table
# (pytest_laya.problems) is the one source; until it carries these two, they are added here.
_ROUTING_STATUS = {"not_found": 404, "method_not_allowed": 405}
_ROUTING_TITLES = {"not_found": "Not found", "method_not_allowed": "Method not allowed"}
STATUS_OF: dict[str, int] = {**_ROUTING_STATUS, **PROBLEM_STATUS}
TITLES: dict[str, str] = {**_ROUTING_TITLES, **PROBLEM_TITLES}


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
