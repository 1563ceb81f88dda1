"""`Secret`: an API key that no repr, str, f-string or traceback (`--showlocals`) can print.

The plain key is held in one place, a `Secret`, and leaves it only where the `Authorization`
header is built, inside httpx's request flow (`BearerAuth`). Every frame the kit owns holds the
`Secret` instead of the string, so a traceback printed with `--showlocals` shows ``Secret('***')``.
"""

from __future__ import annotations

import hmac
from collections.abc import Generator

import httpx

from pytest_laya.wire.redaction import MASK

__all__ = ["BearerAuth", "Secret", "key_problem", "revealed"]


class Secret:
    """A string that shows as ``Secret('***')``; `reveal()` is the only way to read it."""

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a Secret holds a str, got {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    @classmethod
    def wrap(cls, value: str | Secret | None) -> Secret | None:
        """`value` as a Secret (None and the empty string are no key); never raises on a str."""
        if value is None or isinstance(value, Secret):
            return value or None
        if isinstance(value, str):
            return cls(value) if value else None
        raise TypeError(f"api_key must be a str, got {type(value).__name__}")

    def reveal(self) -> str:
        return self._value

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Secret is immutable")

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode("utf-8"), other._value.encode("utf-8"))

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> str | tuple[object, ...]:
        # Pickling (multiprocessing, xdist) would write the plain key to a pipe or a file.
        raise TypeError("a Secret cannot be pickled")


_NAMES = {"\n": "a line feed", "\r": "a carriage return", "\t": "a tab", " ": "a space"}


def revealed(key: str | Secret | None) -> str | None:
    """The plain text of a key given as a `Secret` or a str, for where it must be used (sent,
    exported, scrubbed); None for no key."""
    secret = Secret.wrap(key)
    return secret.reveal() if secret else None


def key_problem(key: Secret) -> str | None:
    """Why `key` cannot go in an `Authorization: Bearer` header, never quoting it; None if it can.

    A bearer token is visible ASCII (RFC 6750's token68 is a subset): whitespace (a newline left
    by reading a secret file), control characters and non-ASCII characters cannot be sent.
    """
    size = len(key._value)
    for position, char in enumerate(key._value):
        where = "at the end" if position == size - 1 else "at the start" if position == 0 else f"at position {position + 1}"
        if char.isspace():
            name = _NAMES.get(char, "whitespace")
            hint = " (read the secret file with .strip())" if position in (0, size - 1) else ""
            return f"contains {name} {where}{hint}; an API key has no whitespace"
        if not char.isascii():
            return f"contains a non-ASCII character {where}; an API key is visible ASCII"
        if not char.isprintable():
            return f"contains a control character {where}; an API key is visible ASCII"
    return None


class BearerAuth(httpx.Auth):
    """Adds ``Authorization: Bearer <key>`` as httpx sends the request, and only then."""

    def __init__(self, key: Secret) -> None:
        self._key = key

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = "Bearer " + self._key.reveal()
        yield request

    def __repr__(self) -> str:
        return f"BearerAuth(Secret({MASK!r}))"
