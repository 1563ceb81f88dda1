"""Layer 2: the two OpenAPI 3.1 documents, validation against them, and conformance tallies.

`Spec.current()` is what today's servers send; `Spec.target()` what a served Laya should send.
`Spec.violations(...)` lists every way a response breaks one (empty means it conforms);
`Conformance` counts every exchange against both. Imports the wire layer only.
"""

from __future__ import annotations

from pytest_laya.specs.conformance import SPECS, Conformance, SpecViolationError
from pytest_laya.specs.spec import CURRENT_SPEC_FILE, TARGET_SPEC_FILE, Operation, Spec, SpecError, Violation, Violations

__all__ = [
    "CURRENT_SPEC_FILE",
    "SPECS",
    "TARGET_SPEC_FILE",
    "Conformance",
    "Operation",
    "Spec",
    "SpecError",
    "SpecViolationError",
    "Violation",
    "Violations",
]
