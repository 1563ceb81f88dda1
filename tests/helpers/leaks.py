"""Whether a secret shows in text, in the spellings a request or a log can carry it."""

from __future__ import annotations

import base64
from urllib.parse import quote

#: A secret whose '/', '+' and '=' (as in base64-style keys) make its URL-encoded forms differ
#: from the raw one, so a leak in any spelling shows.
URL_UNSAFE_CANARY = "sk-canary/7f3a+9c2e=5b1d4e60"


def spellings(secret: str) -> list[str]:
    """The secret raw, percent-encoded and base64-encoded."""
    return [secret, quote(secret), base64.b64encode(secret.encode()).decode()]


def assert_hidden(text: str, *secrets: str) -> None:
    """Fail naming the spelling, with the text, when any secret shows in it in any spelling."""
    for secret in secrets:
        for spelling in spellings(secret):
            assert spelling not in text, f"{spelling} leaked:\n{text}"
