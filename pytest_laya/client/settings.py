"""Client settings from arguments and `LAYA_SERVED_*` variables, checked once, up front.

Arguments win over the environment; an empty variable counts as unset (CI systems export empty
strings for undefined secrets). A bad value is a `LayaConfigError` naming the variable, raised
when the client is built rather than on its first call.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pytest_laya.client.secret import Secret, key_problem
from pytest_laya.wire.errors import LayaConfigError
from pytest_laya.wire.redaction import MASK
from pytest_laya.wire.urls import RedactedUrl, redact_url, split_authority, strip_userinfo

__all__ = ["ClientSettings", "DEFAULT_TIMEOUT_S", "base_url"]

DEFAULT_TIMEOUT_S = 5.0


class _Environment:
    """The variables settings come from; its repr is not the environment's (which holds the key)."""

    __slots__ = ("_environ",)

    def __init__(self, environ: Mapping[str, str] | None) -> None:
        self._environ = os.environ if environ is None else environ

    def get(self, name: str) -> str | None:
        return self._environ.get(name)

    def __repr__(self) -> str:
        return "<environment>"


def _env(environ: _Environment, name: str) -> str | None:
    value = environ.get(name)
    return value if value not in (None, "") else None


#: The routes the client appends to a base URL: a URL ending in one would ask /v1/systemone/v1/systemone.
_ROUTES = ("/v1/systemone/batch", "/v1/systemone", "/health")


def _url_problem(url: str) -> str | None:
    """Why the client cannot use `url` ('' when it is not http(s) at all), or None.

    A separate frame that returns rather than raises: its locals (the split URL, with any
    password in it) are gone before the error is raised.
    """
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return "it contains whitespace or a control character (a newline left by a file or a variable?)"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port that is not a number in 0..65535
    except ValueError:
        return "its host or port cannot be read"
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    if not parts.hostname:
        return "it has no host"
    if port == 0:
        return "port 0 is not a port a server listens on"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "a base URL has no query string or fragment (the client adds /v1/systemone and /health)"
    route = next((r for r in _ROUTES if parts.path.rstrip("/").endswith(r)), None)
    if route is not None:
        return f"it ends in {route}, which the client adds itself: drop it and give the server's base URL"
    import httpx

    try:
        httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        return "httpx cannot parse it"
    return None


def base_url(url: object, source: str) -> str:
    """`url` as a server's base URL, or a `LayaConfigError` naming `source` (where it was given)."""
    return _check_url(url, source)


#: Base URLs already found usable: a client built per test (`laya_client`) checks its URL once.
_GOOD_URLS: set[str] = set()
_GOOD_URLS_MAX = 256


def _check_url(url: object, source: str) -> str:
    url = RedactedUrl.wrap(url)  # no frame shows a password in it
    example = "an http(s) URL such as http://127.0.0.1:8000"
    if not isinstance(url, str):
        raise LayaConfigError(f"{source} must be {example}, got a {type(url).__name__}", code="bad_setting")
    plain = url + ""  # the str itself, not the wrapper
    problem = None if plain in _GOOD_URLS else _url_problem(url)
    if problem is None and "@" not in plain and len(_GOOD_URLS) < _GOOD_URLS_MAX:
        _GOOD_URLS.add(plain)  # no password in it (no "@"), and a base URL has no query to hold a secret
    if problem is not None:
        raise LayaConfigError(f"{source} must be {example}, got {redact_url(url)!r}" + (f": {problem}" if problem else ""),
                              code="bad_setting")
    return RedactedUrl(url.rstrip("/"))


def _check_timeout(value: object, source: str) -> float:
    try:
        timeout = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise LayaConfigError(f"{source} must be a number of seconds, got {value!r}", code="bad_setting") from None
    if not math.isfinite(timeout) or timeout <= 0:
        raise LayaConfigError(f"{source} must be a positive number of seconds, got {value!r}", code="bad_setting")
    return timeout


def _check_key(key: Secret | None, source: str) -> Secret | None:
    if key is not None:
        problem = key_problem(key)
        if problem is not None:
            raise LayaConfigError(f"the API key from {source} {problem}: fix the key (it is not shown here)",
                                  code="bad_setting")
    return key


def _check_model(model: object, source: str) -> str | None:
    if model is not None and not isinstance(model, str):
        raise LayaConfigError(f"{source} must be a model name (a str), got a {type(model).__name__}", code="bad_setting")
    return model


@dataclass(frozen=True, repr=False)
class ClientSettings:
    """Where and how to call a served Laya.

    `api_key` is a `Secret` (a str passed here is wrapped in one), so neither `repr`, a message
    nor a traceback's locals show it; `repr` redacts a password in `url` as well.
    """

    url: str
    model: str | None = None
    api_key: Secret | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", RedactedUrl.wrap(self.url))
        try:
            key = Secret.wrap(self.api_key)
        except TypeError as exc:
            raise LayaConfigError(str(exc), code="bad_setting") from None
        object.__setattr__(self, "api_key", _check_key(key, "api_key"))

    def __repr__(self) -> str:
        key = f", api_key={MASK}" if self.api_key else ""
        return f"ClientSettings(url={redact_url(self.url)!r}, model={self.model!r}{key}, timeout_s={self.timeout_s:g})"

    # Worked out once: a client reads both on every request (the settings are frozen).
    @functools.cached_property
    def request_url(self) -> str:
        """`url` without its user:password part, which the client sends as an Authorization header."""
        return strip_userinfo(self.url)

    @functools.cached_property
    def shown_url(self) -> str:
        """`url` as every message, provenance and exchange shows it (`redact_url`)."""
        return redact_url(self.url)

    def scrub(self, text: str) -> str:
        """`text` with the API key and any password from `url` replaced by ``***``."""
        secrets = [self.api_key.reveal()] if self.api_key else []
        head, userinfo, host, rest = split_authority(self.url)
        if userinfo:
            secrets.append(userinfo[:-1])
            secrets += [part for part in userinfo[:-1].split(":", 1) if len(part) >= 4]
        for secret in sorted(secrets, key=len, reverse=True):
            if secret:
                text = text.replace(secret, MASK)
        return text

    @classmethod
    def resolve(
        cls,
        url: str | None = None,
        *,
        model: str | None = None,
        api_key: str | Secret | None = None,
        timeout_s: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ClientSettings:
        # The key and the URL are wrapped before anything can raise, so no traceback's locals
        # (--showlocals, an error tracker) show the key or a password in the URL.
        url = RedactedUrl.wrap(url)  # type: ignore[assignment]
        try:
            api_key = Secret.wrap(api_key)
        except TypeError as exc:
            raise LayaConfigError(str(exc), code="bad_setting") from None
        env, environ = _Environment(environ), None  # no local holds the mapping (it may hold the key)
        if url is not None:
            url = _check_url(url, "url")
        elif _env(env, "LAYA_SERVED_URL"):
            url = _check_url(_env(env, "LAYA_SERVED_URL"), "LAYA_SERVED_URL")
        else:
            raise LayaConfigError(
                "no server URL: pass url=... or set LAYA_SERVED_URL (e.g. http://127.0.0.1:8000)",
                code="missing_url",
            )
        if model is None:
            model = _check_model(_env(env, "LAYA_SERVED_MODEL"), "LAYA_SERVED_MODEL")
        else:
            model = _check_model(model, "model")
        if api_key is not None:
            api_key = _check_key(api_key, "api_key")
        else:
            api_key = _check_key(Secret.wrap(_env(env, "LAYA_SERVED_API_KEY")), "LAYA_SERVED_API_KEY")
        if timeout_s is not None:
            timeout = _check_timeout(timeout_s, "timeout_s")
        elif _env(env, "LAYA_SERVED_TIMEOUT_S"):
            timeout = _check_timeout(_env(env, "LAYA_SERVED_TIMEOUT_S"), "LAYA_SERVED_TIMEOUT_S")
        else:
            timeout = DEFAULT_TIMEOUT_S
        return cls(url=url, model=model, api_key=api_key, timeout_s=timeout)
