"""The properties' example counts: one count for every ordinary run, ten times it under
LAYA_PROPERTIES=thorough, and a misspelt value is an error, not the ordinary count
(tests/helpers/properties.py, docs/testing.md)."""

from __future__ import annotations

import pytest

from tests.helpers import properties


def test_thorough_draws_ten_times_the_ordinary_count(monkeypatch):
    monkeypatch.delenv("LAYA_PROPERTIES", raising=False)
    assert properties._factor() == 1
    monkeypatch.setenv("LAYA_PROPERTIES", "thorough")
    assert properties._factor() == 10


def test_a_misspelt_profile_is_an_error_that_names_the_choices(monkeypatch):
    monkeypatch.setenv("LAYA_PROPERTIES", "thourough")
    with pytest.raises(RuntimeError, match="LAYA_PROPERTIES='thourough': set it to 'thorough', or leave it unset"):
        properties._factor()

