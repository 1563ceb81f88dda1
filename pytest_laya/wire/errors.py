"""The two errors a caller of served Laya has to tell apart.

A `LayaConfigError` means the caller must change something before trying again (a URL, a key,
a question, a model name); a `LayaCallError` means this call failed and another may not. Both
carry a stable `code` that tests and retry logic can branch on, and never the API key.
"""

from __future__ import annotations

__all__ = ["LayaError", "LayaConfigError", "LayaCallError"]


class LayaError(Exception):
    """Base of every error pytest-laya raises about a served-Laya call.

    `code` is pytest-laya's own stable code (see docs/client.md); `server_code` and
    `server_detail` are what the server said, when it said anything.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        request_id: str | None = None,
        server_code: str | None = None,
        server_detail: str | None = None,
        url: str | None = None,
    ) -> None:
        self.summary = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.server_code = server_code
        self.server_detail = server_detail
        self.url = url
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [self.summary]
        said = []
        if self.status is not None:
            said.append(f"HTTP {self.status}")
        if self.server_code:
            said.append(f"server code {self.server_code!r}")
        if self.server_detail:
            said.append(f"detail: {self.server_detail}")
        if said:
            parts.append("(" + ", ".join(said) + ")")
        if self.request_id:
            parts.append(f"[request id {self.request_id}]")
        parts.append(f"[{self.code}]")
        return " ".join(parts)

    def with_context(
        self,
        *,
        status: int | None = None,
        request_id: str | None = None,
        url: str | None = None,
    ) -> LayaError:
        """Fill in what the raiser did not know (the wire layer knows no request id)."""
        if status is not None and self.status is None:
            self.status = status
        if request_id is not None and self.request_id is None:
            self.request_id = request_id
        if url is not None and self.url is None:
            self.url = url
        self.args = (self._render(),)
        return self


class LayaConfigError(LayaError):
    """The caller's setup is wrong: retrying the same call will fail the same way."""


class LayaCallError(LayaError):
    """This call failed (transport, server or a bad answer); the setup may be fine."""
