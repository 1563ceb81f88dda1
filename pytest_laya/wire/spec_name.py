"""`SpecName`: which spec responses are held to, ``auto`` or one of the two documents."""

from __future__ import annotations

from pytest_laya.wire.text_enum import TextEnum

__all__ = ["SpecName"]


class SpecName(TextEnum):
    """``--laya-spec``, a cassette's recorded spec, a server's claim: ``auto`` (what the server
    claims) or one of the two spec documents."""

    AUTO = "auto"
    CURRENT = "current"
    TARGET = "target"

    @property
    def is_document(self) -> bool:
        """Whether this names one of the two spec documents (not ``auto``)."""
        return self is not SpecName.AUTO

    @classmethod
    def document(cls, value: object) -> SpecName | None:
        """`value` (a setting, a cassette's provenance, a /health ``spec``) as CURRENT or TARGET;
        None for ``auto``, None or anything else."""
        for member in (cls.CURRENT, cls.TARGET):
            if value == member.value:
                return member
        return None
