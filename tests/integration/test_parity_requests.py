"""Parity: in-process Laya, the reference server and laya-serve give the same answers.

Over the 34 varied requests of `pytest_laya.wire.samples` (English and eleven other
languages, text, JSON and conversation states, 2 to 12 options, every question type, mixed
requests) on the embedded tiny checkpoint, through the DecisionModel interface: the same chosen
option and score level for every question, and every probability, expected level and confidence
within 1e-4 of in-process Laya's. Raw-body parity on the recorded laya-serve traffic is in
tests/integration/test_reference_parity.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from pytest_laya.models import LayaModel, ServedLayaModel
from pytest_laya.wire.decision import Choice, Noul, Score
from pytest_laya.wire.questions import normalize_questions
from pytest_laya.wire.samples import VARIED_REQUESTS

laya = pytest.importorskip("laya", reason="needs the reference extra")
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def in_process():
    with LayaModel(embedded_checkpoint_dir(), device="cpu") as model:
        yield model


@pytest.fixture(scope="module")
def reference(laya_reference_server):
    with ServedLayaModel(laya_reference_server.url, model="tiny", name="reference server") as model:
        yield model


@pytest.fixture(scope="module")
def laya_serve(laya_serves):
    with ServedLayaModel(laya_serves().url, model="tiny", name="laya-serve 0.4.15") as model:
        yield model


def differences(expected, got) -> list[str]:
    """How `got` differs from `expected`, answer by answer (empty: the same within TOLERANCE)."""
    out: list[str] = []

    def close(where: str, a: float, b: float) -> None:
        if abs(a - b) > TOLERANCE:
            out.append(f"{where}: {b} vs {a}")

    if list(got.answers) != list(expected.answers):
        return [f"questions {list(got.answers)} vs {list(expected.answers)}"]
    for qid, want in expected.answers.items():
        have = got.answers[qid]
        if type(have) is not type(want):
            out.append(f"{qid}: a {have.type} answer vs a {want.type} one")
            continue
        close(f"{qid}.confidence", want.confidence, have.confidence)
        if isinstance(want, Noul):
            close(f"{qid}.p", want.p, have.p)
            continue
        if isinstance(want, Choice) and have.key != want.key:
            out.append(f"{qid}: chose {have.key!r} vs {want.key!r}")
        if isinstance(want, Score):
            if have.level != want.level:
                out.append(f"{qid}: level {have.level} vs {want.level}")
            close(f"{qid}.expected", want.expected, have.expected)
        if set(have.probabilities) != set(want.probabilities):
            out.append(f"{qid}: options {sorted(have.probabilities)} vs {sorted(want.probabilities)}")
            continue
        for option, p in want.probabilities.items():
            close(f"{qid}.p[{option}]", p, have.probabilities[option])
    if got.usage.input_tokens != expected.usage.input_tokens:
        out.append(f"input_tokens {got.usage.input_tokens} vs {expected.usage.input_tokens}")
    return out


def test_the_request_set_is_as_varied_as_parity_needs():
    assert len(VARIED_REQUESTS) >= 30 and len({r.id for r in VARIED_REQUESTS}) == len(VARIED_REQUESTS)
    languages = Counter(r.language for r in VARIED_REQUESTS)
    assert languages["en"] >= 10 and len(languages) >= 8
    asked = [q for r in VARIED_REQUESTS for q in normalize_questions(r.questions).values()]
    assert {q.type for q in asked} == {"choice", "score", "noul"}
    assert {len(q.option_keys) for q in asked if q.type == "choice"} >= set(range(2, 13))
    assert sum(1 for r in VARIED_REQUESTS if len(r.types) >= 2) >= 5
    assert {type(r.state) for r in VARIED_REQUESTS} == {str, dict, list}


@pytest.mark.parametrize("sample", VARIED_REQUESTS, ids=lambda r: r.id)
def test_in_process_laya_the_reference_server_and_laya_serve_agree(sample, in_process, reference, laya_serve):
    expected = in_process.decide(sample.state, sample.questions)
    for model in (reference, laya_serve):
        got = model.decide(sample.state, sample.questions)
        assert differences(expected, got) == [], f"{model.name} vs in-process laya on {sample.id}"


def test_in_process_laya_and_the_reference_server_name_the_same_weights(in_process, reference):
    sample = VARIED_REQUESTS[0]
    assert reference.decide(sample.state, sample.questions).model == in_process.model
