"""`TextEnum`: a str enum shown as its value (Python 3.11's ``StrEnum``, for 3.10 too).

A member is its value (``SpecName.TARGET == "target"``; f-strings, ``str()`` and ``%s`` show
``target``), so settings read from the command line compare and print as they did; write
``.value`` where a plain ``str`` must be stored (YAML, execnet).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TextEnum"]


class TextEnum(str, Enum):
    """A str enum shown as its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """Every member's value, in declaration order (the command line's choices)."""
        return tuple(str(member.value) for member in cls)
