"""A server's URL as the kit shows and sends it: split by plain string rules, never raising.

`redact_url` is how every message, log line, provenance and report shows a URL; `RedactedUrl`
keeps a URL's password out of a traceback's locals; `strip_userinfo` is what is sent (the
user:password part goes in an Authorization header instead).
"""

from __future__ import annotations

import re

from pytest_laya.wire.redaction import MASK

__all__ = ["RedactedUrl", "redact_url", "split_authority", "strip_userinfo"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def split_authority(url: str) -> tuple[str, str, str, str]:
    """(scheme://, userinfo@ or '', host[:port], rest) by plain string rules; never raises."""
    scheme = _SCHEME.match(url)
    head = scheme.group(0) if scheme else ""
    tail = url[len(head):]
    end = min((i for i in (tail.find(c) for c in "/?#") if i >= 0), default=len(tail))
    authority, rest = tail[:end], tail[end:]
    at = authority.rfind("@")
    return head, authority[:at + 1], authority[at + 1:], rest


def redact_url(url: str) -> str:
    """`url` with any user:password part and any query replaced by ``***``; never raises.

    For every message, log line, provenance and report: a password in ``http://user:pw@host``
    or a token in ``?key=...`` never leaves the process through what the kit prints.
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    head, userinfo, host, rest = split_authority(url)
    if "?" in rest:
        path, _, query = rest.partition("?")
        fragment = query.partition("#")[2]
        rest = path + f"?{MASK}" + ("#" + fragment if fragment else "")
    return head + (f"{MASK}@" if userinfo else "") + host + rest


class RedactedUrl(str):
    """A URL (a real `str`) whose repr is `redact_url`'s: a password in it stays out of any
    traceback's locals (`--showlocals`, error trackers), as the key does in a `Secret`."""

    __slots__ = ()

    @classmethod
    def wrap(cls, url: object) -> object:
        return cls(url) if isinstance(url, str) and not isinstance(url, cls) else url

    def __repr__(self) -> str:
        return repr(redact_url(str(self)))


def strip_userinfo(url: str) -> str:
    """`url` without its user:password part (the client sends those as an Authorization header)."""
    head, _userinfo, host, rest = split_authority(url)
    return head + host + rest
