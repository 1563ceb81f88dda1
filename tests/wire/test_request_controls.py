"""laya's request controls (`max_len`, `head_max_len`, `min_confidence`, `task`, `lang`,
`lang_guess`): honoured as laya-serve 0.4.15 honours them, or refused, never dropped.

`laya.RemoteRouter` sends them in the body. The reference server passes the first three to laya
and must then answer exactly what laya-serve answers on the same checkpoint (compared live,
probabilities within 1e-4); the routing three it cannot honour, so it refuses them. Bad values get
a 422 `invalid_request` naming the field, from the reference server and from the fake alike.
Every reference response is held to the target spec, every laya-serve one to the current spec.
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit

import httpx
import pytest

from pytest_laya import Spec
from pytest_laya.fake import FakeLaya
from pytest_laya.wire.problems import Problem as RequestRefusal
from pytest_laya.wire.requests import MAX_TOKEN_BUDGET, MIN_CONFIDENCE_BUCKETS, request_controls

laya = pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
from laya.mcp.remote import RemoteError, RemoteRouter  # noqa: E402

from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402
from tests.helpers.servers import plain_http  # noqa: E402

TOLERANCE = 1e-4
# About 900 tokens: past the tiny checkpoint's own 512-token window, so every window changes it.
LONG = " ".join(["I was charged twice for my order and want a refund."] * 60)
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": "Bugs"}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "refund": {"type": "noul", "instructions": "Refund?"},
}
HONOURED = {
    "max_len-64": {"max_len": 64},
    "max_len-600": {"max_len": 600},
    "head_max_len-16": {"head_max_len": 16},
    "min_confidence-0.5": {"min_confidence": 0.5},
    "min_confidence-map": {"min_confidence": {"choice:2": 0.9, "default": 0.1}},
    "all-three": {"max_len": 256, "head_max_len": 32, "min_confidence": 0.45},
}
# (controls, the fields the problem must name); laya-serve refuses each of these too.
BAD = {
    "max_len-string": ({"max_len": "64"}, ["max_len"]),
    "max_len-zero": ({"max_len": 0}, ["max_len"]),
    "max_len-over-budget": ({"max_len": MAX_TOKEN_BUDGET + 1}, ["max_len"]),
    "max_len-bool": ({"max_len": True}, ["max_len"]),
    "max_len-fraction": ({"max_len": 64.5}, ["max_len"]),
    "head_max_len-negative": ({"head_max_len": -1}, ["head_max_len"]),
    "min_confidence-over-1": ({"min_confidence": 2}, ["min_confidence"]),
    "min_confidence-string": ({"min_confidence": "0.5"}, ["min_confidence"]),
    "min_confidence-bool": ({"min_confidence": True}, ["min_confidence"]),
    "min_confidence-empty-map": ({"min_confidence": {}}, ["min_confidence"]),
    "min_confidence-unknown-bucket": ({"min_confidence": {"choice:7": 0.5}}, ["min_confidence"]),
    "min_confidence-map-over-1": ({"min_confidence": {"default": 1.5}}, ["min_confidence"]),
    "lang-not-a-string": ({"lang": 5}, ["lang"]),
    "several": ({"max_len": 0, "min_confidence": -1, "head_max_len": "x"}, ["max_len", "head_max_len", "min_confidence"]),
}
# laya's routing controls: laya-serve routes on them (200); the reference server refuses them.
ROUTING = {"task": "tiny", "lang": "de", "lang_guess": "de"}


@pytest.fixture(scope="module")
def laya_serve(laya_serves):
    return laya_serves()


@pytest.fixture(scope="module")
def in_process():
    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


def post(url: str, body: dict, *, spec: Spec, path: str = "/v1/systemone") -> httpx.Response:
    response = plain_http("POST", url + path, json=body, timeout=60)
    violations = spec.violations("POST", urlsplit(str(response.request.url)).path, response.status_code,
                                 response.headers, response.content)
    assert violations == [], "\n".join(map(str, violations))
    return response


def ours(server, body: dict, path: str = "/v1/systemone") -> httpx.Response:
    return post(server.url, body, spec=Spec.target(), path=path)


def theirs(server, body: dict, path: str = "/v1/systemone") -> httpx.Response:
    return post(server.url, {**body, "model": "tiny"}, spec=Spec.current(), path=path)


def assert_close(got, expected, where: str = "") -> None:
    """Equal, numbers within TOLERANCE, at every level (answers, gate fields, usage)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), f"{where}: {got} vs {expected}"
        for key in expected:
            assert_close(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, float) and not isinstance(got, bool):
        assert isinstance(got, (int, float)) and math.isclose(got, expected, abs_tol=TOLERANCE), f"{where}: {got} vs {expected}"
    else:
        assert got == expected, f"{where}: {got!r} vs {expected!r}"


def laya_fields(answers: dict) -> dict:
    return {qid: {k: v for k, v in a.items() if k != "x_jev_confidence"} for qid, a in answers.items()}


# -- honoured: the same answers as laya-serve ---------------------------------------------------

@pytest.mark.parametrize("name", HONOURED)
def test_each_control_changes_answers_exactly_as_laya_serve(laya_reference_server, laya_serve, name):
    body = {"state": LONG, "questions": QUESTIONS, **HONOURED[name]}
    plain = ours(laya_reference_server, {"state": LONG, "questions": QUESTIONS}).json()
    got = ours(laya_reference_server, body)
    expected = theirs(laya_serve, body)
    assert got.status_code == expected.status_code == 200, got.text
    assert_close(got.json()["answers"], expected.json()["answers"], "answers")
    assert_close(got.json()["usage"], expected.json()["usage"], "usage")
    # The control did something: dropping it would have given the plain answers.
    assert (got.json()["answers"], got.json()["usage"]) != (plain["answers"], plain["usage"])


def test_the_gate_reports_on_every_answer(laya_reference_server):
    answers = ours(laya_reference_server, {"state": LONG, "questions": QUESTIONS, "min_confidence": 1.0}).json()["answers"]
    assert {a["abstention"] for a in answers.values()} == {"abstained"}
    assert all(a["low_confidence"] is True and a["abstention_threshold"] == 1.0 for a in answers.values())
    ungated = ours(laya_reference_server, {"state": LONG, "questions": QUESTIONS}).json()["answers"]
    assert not any({"abstention", "abstention_threshold", "low_confidence"} & set(a) for a in ungated.values())


def test_batch_controls_apply_to_every_state_as_laya_serve(laya_reference_server, laya_serve):
    body = {"states": [LONG, "Short one."], "questions": QUESTIONS, "max_len": 64, "min_confidence": 0.6}
    got = ours(laya_reference_server, body, "/v1/systemone/batch").json()["results"]
    expected = theirs(laya_serve, body, "/v1/systemone/batch").json()["results"]
    assert len(got) == len(expected) == 2
    for mine, laya_serves in zip(got, expected):
        assert_close(mine["answers"], laya_serves["answers"], "answers")
        assert_close(mine["usage"], laya_serves["usage"], "usage")


def test_a_window_too_small_for_the_options_is_laya_serves_refusal(laya_reference_server, laya_serve):
    body = {"state": LONG, "questions": QUESTIONS, "max_len": 8}
    refused = ours(laya_reference_server, body)
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_question"
    detail = refused.json()["errors"][0]["detail"]
    assert refused.json()["errors"][0]["question"] == "team" and "max_len=8" in detail
    laya_serves = theirs(laya_serve, body)
    assert laya_serves.status_code == 422 and laya_serves.json()["detail"] == detail


@pytest.mark.parametrize("options", [{"max_len": 64}, {"head_max_len": 16}, {"min_confidence": 0.5},
                                     {"min_confidence": {"choice:2": 0.9, "default": 0.1}},
                                     {"max_len": 256, "head_max_len": 32, "min_confidence": 0.45}],
                         ids=lambda o: ",".join(o))
def test_remote_router_with_options_gets_laya_in_process_answers(laya_reference_server, in_process, options):
    remote = RemoteRouter(laya_reference_server.url, timeout=60).predict(LONG, QUESTIONS, **options)
    local = in_process.predict(LONG, QUESTIONS, **options)
    assert laya_fields(remote["answers"]) == local["answers"]
    assert remote["usage"] == local["usage"]


# -- refused: a problem naming the field --------------------------------------------------------

@pytest.mark.parametrize("name", BAD)
def test_a_bad_control_is_invalid_request_naming_it(laya_reference_server, laya_serve, name):
    controls, fields = BAD[name]
    body = {"state": "Any state.", "questions": QUESTIONS, **controls}
    refused = ours(laya_reference_server, body)
    problem = refused.json()
    assert refused.status_code == 422 and problem["code"] == "invalid_request", refused.text
    assert [e["pointer"] for e in problem["errors"]] == [f"/{field}" for field in fields]
    assert all(field in e["detail"] for field, e in zip(fields, problem["errors"]))
    assert theirs(laya_serve, body).status_code == 422  # laya-serve refuses the same value


@pytest.mark.parametrize("control", ROUTING)
def test_a_routing_control_is_refused_with_what_to_send_instead(laya_reference_server, laya_serve, control):
    body = {"state": "Any state.", "questions": QUESTIONS, control: ROUTING[control]}
    problem = ours(laya_reference_server, body).json()
    assert problem["code"] == "invalid_request" and problem["errors"][0]["pointer"] == f"/{control}"
    assert "'model'" in problem["detail"] and "GET /health" in problem["detail"]
    # laya-serve routes on it (all its names point at the same checkpoint here).
    laya_serves = post(laya_serve.url, body, spec=Spec.current()).json()
    assert control.replace("_", "") in laya_serves["routing"]["reason"].replace("_", "")
    # Null means not set, as laya reads it.
    assert ours(laya_reference_server, {**body, control: None}).status_code == 200


def test_remote_router_sees_the_refusals_as_invalid_request(laya_reference_server):
    router = RemoteRouter(laya_reference_server.url, timeout=60)
    for options, field in [({"max_len": 0}, "max_len"), ({"min_confidence": 1.5}, "min_confidence"),
                           ({"lang": "de"}, "lang"), ({"task": "tiny"}, "task"), ({"lang_guess": "de"}, "lang_guess")]:
        with pytest.raises(RemoteError) as info:
            router.predict("Any state.", QUESTIONS, **options)
        assert info.value.code == "invalid_request" and field in info.value.message, options


# -- one rule: laya's, shared with the fake ------------------------------------------------------

MIN_CONFIDENCE_VALUES = [0, 0.0, 1, 0.5, 1.0, -0.01, 1.01, True, False, "0.5", float("inf"), [0.5], {},
                         {"default": 0.3}, {"choice:2": 0.9, "score:11+": 0.1, "noul:2": 0}, {"choice:7": 0.5},
                         {"default": True}, {"default": 2}, {"Choice:2": 0.5}, {"default\n": 0.5}]


@pytest.mark.parametrize("value", MIN_CONFIDENCE_VALUES, ids=repr)
def test_min_confidence_is_checked_by_laya_serves_rule(value):
    from laya.confidence import check_min_confidence

    try:
        laya_says = check_min_confidence(value)
    except (ValueError, TypeError):
        laya_says = None
    try:
        ours_says = request_controls({"min_confidence": value}).min_confidence
    except RequestRefusal:
        ours_says = None
    assert ours_says == laya_says


@pytest.mark.parametrize("value", [1, 64, MAX_TOKEN_BUDGET, MAX_TOKEN_BUDGET + 1, 0, -3, 64.0, True, "64", None])
def test_token_windows_are_checked_by_laya_serves_rule(value):
    from fastapi import HTTPException
    from laya.serve import DEFAULT_MAX_TOKEN_BUDGET, _validate_budget_param

    assert MAX_TOKEN_BUDGET == DEFAULT_MAX_TOKEN_BUDGET
    for name in ("max_len", "head_max_len"):
        try:
            laya_says = _validate_budget_param({name: value}, name, DEFAULT_MAX_TOKEN_BUDGET)
        except HTTPException:
            laya_says = "refused"
        try:
            ours_says = getattr(request_controls({name: value}), name)
        except RequestRefusal:
            ours_says = "refused"
        assert ours_says == laya_says


def test_the_buckets_are_lays():
    from laya.confidence import DEFAULT_BUCKET_KEY, bucket_keys

    assert MIN_CONFIDENCE_BUCKETS == bucket_keys() | {DEFAULT_BUCKET_KEY}
    enum = Spec.target().document["components"]["schemas"]["MinConfidence"]["oneOf"][2]["propertyNames"]["enum"]
    assert set(enum) == MIN_CONFIDENCE_BUCKETS


FAKE_BODIES = {**{name: controls for name, (controls, _) in BAD.items()},
               **{name: {key: value} for key, value in ROUTING.items() for name in [f"routing-{key}"]},
               **HONOURED}


@pytest.mark.parametrize("name", FAKE_BODIES)
def test_the_fake_accepts_and_refuses_as_the_reference_server(laya_reference_server, name):
    body = {"state": "Any state.", "questions": QUESTIONS, **FAKE_BODIES[name]}
    reference = ours(laya_reference_server, body)
    status, headers, fake = FakeLaya(model="tiny").answer(body)
    assert Spec.target().violations("POST", "/v1/systemone", status, headers, fake) == []
    assert status == reference.status_code
    if status != 200:
        assert {k: fake[k] for k in ("code", "detail", "errors")} == {k: reference.json()[k] for k in ("code", "detail", "errors")}


def test_the_fake_gates_its_answers_and_has_no_token_window():
    fake = FakeLaya(model="tiny")
    _, _, gated = fake.answer({"state": LONG, "questions": QUESTIONS, "min_confidence": {"choice:2": 1.0, "default": 0.0}})
    answers = gated["answers"]
    assert answers["team"]["abstention"] == "abstained" and answers["team"]["low_confidence"] is True
    assert answers["urgency"]["abstention"] == answers["refund"]["abstention"] == "passed"
    assert [answers[q]["abstention_threshold"] for q in QUESTIONS] == [1.0, 0.0, 0.0]
    # docs/fake.md: max_len and head_max_len are validated, then have no effect.
    _, _, plain = fake.answer({"state": LONG, "questions": QUESTIONS})
    _, _, windowed = fake.answer({"state": LONG, "questions": QUESTIONS, "max_len": 64, "head_max_len": 16})
    assert windowed == plain
