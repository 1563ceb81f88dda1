"""JSON Pointers (RFC 6901), the one way violations, problems and diffs name a place."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["escape", "join", "pointer", "question_pointer"]


def escape(token: Any) -> str:
    """One reference token: ``~`` becomes ``~0`` and ``/`` becomes ``~1``."""
    return str(token).replace("~", "~0").replace("/", "~1")


def join(parent: str, token: Any) -> str:
    """`parent` with one more token, e.g. ``join("/answers", "a/b")`` is ``/answers/a~1b``."""
    return f"{parent}/{escape(token)}"


def pointer(tokens: Iterable[Any]) -> str:
    """The pointer of a path of keys and indices; the empty path is the whole document, ``""``."""
    return "".join("/" + escape(token) for token in tokens)


def question_pointer(question_id: str) -> str:
    """Where question `question_id` sits in a decision request: ``/questions/<id>``."""
    return join("/questions", question_id)
