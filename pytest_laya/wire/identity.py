"""Which weights answered a decision: the `served_by` object, and a local checkpoint's revision."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_laya.wire.answer_rules import shown
from pytest_laya.wire.errors import LayaCallError

__all__ = ["ServedIdentity", "parse_served_by", "local_checkpoint_revision"]


@dataclass(frozen=True)
class ServedIdentity:
    """Which weights answered: checkpoint, revision, and how they ran.

    `source` says where the kit learnt it: ``served_by`` (the response itself), ``health``
    (the server's /health entry for the routed model), ``routing`` (only the repo is known) or
    ``in_process`` (the weights answered in this process: `pytest_laya.models.LayaModel`).
    """

    checkpoint: str
    revision: str | None = None
    device: str | None = None
    weights_dtype: str | None = None
    compiled: bool | None = None
    source: str = "served_by"

    @property
    def model(self) -> str:
        """`checkpoint@revision`, with ``unknown`` for a revision nobody reported."""
        return f"{self.checkpoint}@{self.revision or 'unknown'}"


def parse_served_by(raw: Any) -> ServedIdentity | None:
    """The target spec's `served_by` object, or None when the server sent none."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("checkpoint"), str) or not raw["checkpoint"]:
        raise LayaCallError(f"served_by must be an object naming a checkpoint, got {shown(raw)}", code="bad_response")
    compiled = raw.get("compiled")
    return ServedIdentity(
        checkpoint=raw["checkpoint"],
        revision=raw.get("revision") if isinstance(raw.get("revision"), str) else None,
        device=raw.get("device") if isinstance(raw.get("device"), str) else None,
        weights_dtype=raw.get("weights_dtype") if isinstance(raw.get("weights_dtype"), str) else None,
        compiled=compiled if isinstance(compiled, bool) else None,
        source="served_by",
    )


def local_checkpoint_revision(directory: str | os.PathLike[str]) -> str:
    """The revision of a local checkpoint: ``"sha256:"`` + the hex digest of its model.safetensors.

    A local directory has no hub commit, so the weights' own bytes name it. In-process models
    and the reference server both use this one definition, so the same weights carry the same
    identity wherever they answer.
    """
    digest = hashlib.sha256()
    with open(os.path.join(directory, "model.safetensors"), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()
