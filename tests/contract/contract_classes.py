"""The base of this project's own DecisionModelContract subclasses: its two fixtures from two
class attributes, so a subclass names its model and scripted factory instead of repeating the
fixture pair (a downstream suite writes the pair itself, as docs/contracts.md shows)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pytest

from pytest_laya.contract import DecisionModelContract


class ContractWith(DecisionModelContract):
    """`decision_model` is a fresh `model()` per test, unless a subclass gives its own fixture (for
    a model over a server or a shared checkpoint); `scripted_decision_model` is `scripted`.

    Not collected itself (no ``Test`` prefix). Both attributes are read from the class, so a
    function given as either is never bound as a method."""

    model: ClassVar[Callable[[], Any]]
    scripted: ClassVar[Callable[[Mapping[str, Any]], Any]]

    @pytest.fixture
    def decision_model(self) -> Any:
        return type(self).model()

    @pytest.fixture
    def scripted_decision_model(self) -> Callable[[Mapping[str, Any]], Any]:
        return type(self).scripted
