"""The /health document of every server the kit knows, and the identity it reveals.

laya-serve 0.3.20 says only what is loaded; system1-omni's worker adds a `models` map with
checkpoint and revision; laya-serve 0.4.15 has `revisions` and `checkpoint_devices`; the target
spec has `models` and `limits`. `Health.identity_for` reads whichever is there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.identity import ServedIdentity
from pytest_laya.wire.spec_name import SpecName

__all__ = ["Health"]


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Health:
    """A parsed health document; `raw` keeps every field the server sent."""

    raw: Mapping[str, Any]

    @property
    def status(self) -> str | None:
        return _str(self.raw.get("status"))

    @property
    def ready(self) -> bool | None:
        """True/False when the server says; None for servers that do not report readiness."""
        ready = self.raw.get("ready")
        return ready if isinstance(ready, bool) else None

    @property
    def loaded(self) -> list[str]:
        loaded = self.raw.get("loaded")
        if isinstance(loaded, list):
            return [name for name in loaded if isinstance(name, str)]
        models = self.raw.get("models")
        return list(models) if isinstance(models, Mapping) else []

    @property
    def spec(self) -> str | None:
        """The spec the server says it implements (``"spec"``: ``current`` or ``target``), if any."""
        named = SpecName.document(self.raw.get("spec"))
        return named.value if named is not None else None

    @property
    def limits(self) -> Mapping[str, Any]:
        limits = self.raw.get("limits")
        return limits if isinstance(limits, Mapping) else {}

    def identity_for(self, model: str | None, *, repo: str | None = None) -> ServedIdentity | None:
        """The identity of `model` (a routed name such as ``english``), if this document has it.

        `repo` is the response's `routing.repo`, used where /health gives a revision but no
        checkpoint (laya-serve 0.4.15).
        """
        models = self.raw.get("models")
        if model is None and isinstance(models, Mapping) and len(models) == 1:
            model = next(iter(models))
        if model is None:
            return None
        entry = models.get(model) if isinstance(models, Mapping) else None
        compile_info = self.raw.get("compile")
        if isinstance(entry, Mapping) and _str(entry.get("checkpoint")):
            compiled = entry.get("compiled")
            if not isinstance(compiled, bool) and isinstance(compile_info, Mapping):
                compiled = compile_info.get("enabled") if isinstance(compile_info.get("enabled"), bool) else None
            return ServedIdentity(
                checkpoint=entry["checkpoint"],
                revision=_str(entry.get("revision")),
                device=_str(entry.get("device")),
                weights_dtype=_str(entry.get("weights_dtype")),
                compiled=compiled if isinstance(compiled, bool) else None,
                source="health",
            )
        revisions = self.raw.get("revisions")
        if repo and isinstance(revisions, Mapping) and _str(revisions.get(model)):
            devices = self.raw.get("checkpoint_devices")
            return ServedIdentity(
                checkpoint=repo,
                revision=revisions[model],
                device=_str(devices.get(model)) if isinstance(devices, Mapping) else None,
                source="health",
            )
        return None
