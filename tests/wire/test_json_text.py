"""Canonical JSON (pytest_laya.wire.json_text): one text for equal values, whatever their spelling."""

from __future__ import annotations

import json

from pytest_laya.wire.json_text import canonical_json


def test_equal_values_have_one_text_whatever_their_key_order_spacing_or_escapes():
    a = json.loads('{"b": [1, 2], "a": "caf\\u00e9"}')
    b = json.loads('{"a":"café","b":[1,2]}')
    assert canonical_json(a) == canonical_json(b) == '{"a":"café","b":[1,2]}'


def test_a_value_json_cannot_hold_is_written_as_its_text():
    assert canonical_json({"when": {1}}) == '{"when":"{1}"}'
