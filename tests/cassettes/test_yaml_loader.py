"""The cassette YAML loader gives exactly what vcrpy's safe cassette loader gives, or its error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vcr.serializers.yamlserializer import _CassetteLoader

from pytest_laya.cassettes import yaml_loader
from tests.helpers.properties import example_count

ROOT = Path(__file__).resolve().parents[2]
CASSETTES = sorted(p for d in ("cassettes", "examples", "tests/data") for p in (ROOT / d).rglob("*.yaml"))


def reference(text):
    return yaml.load(text, Loader=_CassetteLoader)


def outcome(load, text):
    """(the data, or the error's type and message)."""
    try:
        return "data", load(text)
    except Exception as exc:  # noqa: BLE001 - compared as they are
        return type(exc).__name__, str(exc)


def test_every_cassette_in_the_repository_loads_the_same():
    assert len(CASSETTES) > 30
    for path in CASSETTES:
        text = path.read_text(encoding="utf-8")
        assert outcome(yaml_loader.load, text) == outcome(reference, text), path


CASES = {
    "scalars": "a: 1\nb: 1.5\nc: true\nd: null\ne: ~\nf: 0x1F\ng: 1e3\nh: .inf\ni: 'quoted 1'\nj: \"2\"\nk: 2001-12-14\nl: plain text\n",
    "empty-and-blank": "a: ''\nb:\nc: []\nd: {}\n",
    "non-specific-tag": "a: ! 12\nb: !!str 12\nc: !!int '12'\n",
    "binary": "a: !!binary aGVsbG8=\n",
    "vcrpy-python-tags": "a: !!python/tuple [1, 2]\nb: !!python/str x\nc: !!python/unicode y\n",
    "code-tag": "a: !!python/object/apply:os.system ['true']\n",
    "unknown-tag": "a: !custom 1\n",
    "merge-key": "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n",
    "unhashable-key": "? [1, 2]\n: value\n",
    "aliases-shared": "a: &x [1, {k: v}]\nb: *x\nc: *x\n",
    "recursive-alias": "a: &x [1, *x]\n",
    "duplicate-keys": "a: 1\na: 2\n",
    "several-documents": "a: 1\n---\nb: 2\n",
    "empty": "",
    "only-a-comment": "# nothing\n",
    "broken": "a: [1, 2\n",
    "tab-indented": "a:\n\tb: 1\n",
    "folded-quoted": "a: 'one\n  two\n\n  three'\nb: \"esc\\u00e9\\n\"\n",
    "block-scalars": "a: |\n  line\n  line2\nb: >\n  folded\n  text\n",
    "top-level-list": "- 1\n- a\n",
    "deep": "a: " + "[" * 200 + "]" * 200 + "\n",
    # hand edits of the block layout (read directly, or left to libyaml when unsure)
    "quoted-under-indented": "a:\n  body: 'abc\ndef'\n",
    "quoted-folding-edges": "a: 'one\n  two\n\n  three\n\n\n  four  \n  '\nb: '\n  x'\nc: '\n\n  '\n",
    "quoted-escape-at-break": "a: 'it''\n  s'\nb: ''''\nc: ''\n",
    "quoted-spaces-at-breaks": "a: 'one  \n  two  \n  three  '\nb: '  x \n y'\n",
    "quoted-document-marker": "a: 'x\n--- y'\n",
    "after-closing-quote": "a: 'x' y\n",
    "control-character": "a: b\x07c\n",
    "crlf": "a: 1\r\nb: 2\r\n",
    "key-too-long": "k" * 1100 + ": 1\n",
    "indicator-first": "a: %x\nb: @x\n",
    "plain-forms": "a: 1:30\nb: yes\nc: off\nd: 2001-12-14 21:59:43.10 -5\ne: b  c\nf: ~\ng: 0o17\nh: 017\ni: +1\nj: -.5\n",
    "plain-with-quote": "a: it's\n",
    "value-tag": "a: =\n",
    "blank-line-between": "a: 1\n\nb: 2\n",
    "plain-over-lines": "a: one\n  two\n",
    "colon-at-end": "a: b:\n",
    "key-with-space": "a b: 1\n",
    "sequence-of-mappings": "- a: 1\n  b: []\n- c\n",
    "sequence-in-sequence": "- - x\n",
    "empty-dash": "-\n  a: 1\n",
    "indented-document": "  a: 1\n",
    "sequence-then-deeper-key": "a:\n- 1\n  b: 2\n",
    "double-quoted-escapes": 'a: "x\\/y"\nb: "\\x41\\u00e9\\U0001F600"\nc: "\\N\\_\\L\\P\\e\\0\\t\\""\n',
    "double-quoted-bad-escapes": 'a: "x\\\'y"\n',
    "double-quoted-surrogate": 'a: "\\ud800"\n',
    "double-quoted-unknown-escape": 'a: "x\\q"\n',
    "double-quoted-escaped-breaks": 'a: "x\\\n  y"\nb: "x\\\n\n  y"\nc: "x \\ \n  y"\nd: "one\n\n  two  \n  "\n',
    "double-quoted-unclosed": 'a: "x\n',
    "sequence-same-indent": "a:\n- 1\n- '2'\nb: x\nc:\n  - {}\n",
}


@pytest.mark.parametrize("name", CASES)
def test_each_yaml_construct_loads_the_same_or_fails_the_same(name):
    text = CASES[name]
    got, want = outcome(yaml_loader.load, text), outcome(reference, text)
    if name == "recursive-alias":  # a list holding itself: compare the shape
        assert got[0] == want[0] == "data" and got[1]["a"][1] is got[1]["a"]
        return
    assert got == want


def test_an_alias_bomb_is_built_as_shared_objects_not_expanded():
    text = "l0: &l0 [" + ", ".join(['"lol"'] * 9) + "]\n"
    text += "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 9))
    data = yaml_loader.load(text)
    assert data["l8"][0] is data["l8"][1] is data["l7"]


_SCALARS = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
                     st.text(max_size=30), st.sampled_from(["yes", "No", "0o17", "1_000", "~", "2001-01-01", ".NaN"]))
_DATA = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4), max_leaves=20)


@settings(max_examples=example_count(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_DATA, style=st.sampled_from([None, True, False]))
def test_any_dumped_data_loads_the_same(data, style):
    text = yaml.safe_dump({"x": data}, default_flow_style=style, allow_unicode=True)
    assert outcome(yaml_loader.load, text) == outcome(reference, text)


# Every character UTF-8 can write: all but the surrogates (Cs). Not codec="utf-8", which is the same
# set but has hypothesis encode all 1.1M code points to find it (2 s of CPU in a fresh checkout).
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=120) | st.sampled_from(
    ["", " ", "'", "''", "a: b", "#x", "x #y", "- x", "yes", "null", "1", "0x1F", "1:30", "2001-01-01", "--- x",
     "a\n\nb", "  lead", "trail  ", "x" * 200 + " " + "y" * 50, "*/*", "{}", "[]", "é", "\t", "\r\n"])


@settings(max_examples=example_count(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies=st.lists(st.tuples(_TEXT, _TEXT), min_size=1, max_size=3),
       headers=st.dictionaries(st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True), st.lists(_TEXT, min_size=1, max_size=2),
                               max_size=3),
       meta=st.dictionaries(st.text(max_size=6), _TEXT | st.integers() | st.booleans() | st.none(), max_size=3))
def test_any_cassette_vcrpy_writes_loads_the_same(bodies, headers, meta):
    from vcr.serializers import yamlserializer

    data = {"interactions": [
        {"request": {"body": request, "headers": headers, "method": "POST", "uri": "http://laya.invalid/v1/systemone"},
         "response": {"body": {"string": response}, "headers": headers, "status": {"code": 200, "message": "OK"}}}
        for request, response in bodies], "metadata": {"pytest_laya": meta}, "version": 1}
    text = yamlserializer.serialize(data)
    assert outcome(yaml_loader.load, text) == outcome(reference, text) == ("data", data)
