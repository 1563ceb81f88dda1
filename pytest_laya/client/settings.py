"""Client settings from arguments and `LAYA_SERVED_*` variables, checked once, up front.

Arguments win over the environment; an empty variable counts as unset (CI systems export empty
strings for undefined secrets). A bad value is a `LayaConfigError` naming the variable, raised
when the client is built rather than on its first call.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pytest_laya.wire.errors import LayaConfigError

__all__ = ["ClientSettings", "DEFAULT_TIMEOUT_S", "redact_url"]

DEFAULT_TIMEOUT_S = 5.0


def _env(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    return value if value not in (None, "") else None


def redact_url(url: str) -> str:
    """`url` with any user:password part replaced, for messages and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=f"***@{host}").geturl()


def _check_url(url: str, source: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LayaConfigError(
            f"{source} must be an http(s) URL such as http://127.0.0.1:8000, got {redact_url(url)!r}",
            code="bad_setting",
        )
    return url.rstrip("/")


def _check_timeout(value: object, source: str) -> float:
    try:
        timeout = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LayaConfigError(f"{source} must be a number of seconds, got {value!r}", code="bad_setting") from None
    if not math.isfinite(timeout) or timeout <= 0:
        raise LayaConfigError(f"{source} must be a positive number of seconds, got {value!r}", code="bad_setting")
    return timeout


@dataclass(frozen=True)
class ClientSettings:
    """Where and how to call a served Laya. `api_key` never appears in `repr`."""

    url: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def resolve(
        cls,
        url: str | None = None,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> "ClientSettings":
        env = os.environ if environ is None else environ
        if url is not None:
            url = _check_url(url, "url")
        elif _env(env, "LAYA_SERVED_URL"):
            url = _check_url(_env(env, "LAYA_SERVED_URL"), "LAYA_SERVED_URL")  # type: ignore[arg-type]
        else:
            raise LayaConfigError(
                "no server URL: pass url=... or set LAYA_SERVED_URL (e.g. http://127.0.0.1:8000)",
                code="missing_url",
            )
        if model is None:
            model = _env(env, "LAYA_SERVED_MODEL")
        if api_key is None:
            api_key = _env(env, "LAYA_SERVED_API_KEY")
        if timeout_s is not None:
            timeout = _check_timeout(timeout_s, "timeout_s")
        elif _env(env, "LAYA_SERVED_TIMEOUT_S"):
            timeout = _check_timeout(_env(env, "LAYA_SERVED_TIMEOUT_S"), "LAYA_SERVED_TIMEOUT_S")
        else:
            timeout = DEFAULT_TIMEOUT_S
        return cls(url=url, model=model, api_key=api_key, timeout_s=timeout)
