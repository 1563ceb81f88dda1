"""Choice questions whose list criteria are numbers or booleans (`"criteria": [7, 8, 9]`).

laya keys their probabilities by the label's JSON spelling ("8") but answers `choice` with the
label itself (8): laya-serve 0.4.15 sends that on the wire (checked live here), and in-process
laya returns it. The kit reads such a choice as its key; the reference server and the target
spec answer the key ("8") in both places.
"""

from __future__ import annotations

import json

import httpx
import pytest

from pytest_laya import Choice, LayaCallError, ServedLayaClient, Spec
from pytest_laya.fake import LAYA_SERVE, FakeLaya
from pytest_laya.wire.decision import parse_answers
from pytest_laya.wire.questions import normalize_questions, option_key

STATE = "I was charged twice for my order."
LABELS = {"ints": [7, 8, 9], "bools": [True, False], "floats": [1.5, 2.0, 3], "mixed": ["seven", 8]}
QUESTIONS = {name: {"type": "choice", "instructions": "Which one?", "criteria": labels} for name, labels in LABELS.items()}
# What laya-serve 0.4.15 sent for NUMERIC on the tiny checkpoint (body and headers as received;
# test_laya_serve_sends_the_label_and_the_client_reads_it checks it still does).
LAYA_SERVE_BODY = (
    b'{"model":"laya-rl-agent","answers":{"n":{"type":"choice","choice":7,"probabilities":{"7":0.3798,"8":0.3109,'
    b'"9":0.3093},"confidence":0.0043,"answer_confidence":0.3798,"action":{"act_probability":0.9521},'
    b'"x_jev_confidence":0.0697}},"usage":{"input_tokens":34,"output_tokens":0,"state_tokens":9,'
    b'"state_tokens_dropped":0,"truncated":false,"truncated_questions":[]},"routing":{"model":"tiny",'
    b'"repo":"./tiny","reason":"explicit model=\'tiny\'","detection":null,"workflow":null}}'
)
LAYA_SERVE_HEADERS = {"server": "uvicorn", "server-timing": "inference;dur=77.43", "x-inference-time-ms": "77.43",
                      "content-type": "application/json"}
LAYA_SERVE_ANSWER = json.loads(LAYA_SERVE_BODY)
NUMERIC = {"n": {"type": "choice", "instructions": "Which one?", "criteria": [7, 8, 9]}}


def answered(choice, criteria=(7, 8, 9)):
    asked = normalize_questions({"n": {"type": "choice", "instructions": "Which one?", "criteria": list(criteria)}})
    keys = [option_key(label) for label in criteria]
    probabilities = {key: round(1 / len(keys), 4) for key in keys}
    probabilities[keys[0]] = round(1 - sum(probabilities[k] for k in keys[1:]), 4)
    return parse_answers({"n": {"type": "choice", "choice": choice, "probabilities": probabilities,
                                "confidence": 0.1}}, asked)["n"]


# -- the answer rule ---------------------------------------------------------------------------

@pytest.mark.parametrize(("criteria", "choice", "key"), [
    ((7, 8, 9), 8, "8"), ((7, 8, 9), "8", "8"), ((True, False), True, "true"), ((1.5, 2.0, 3), 2.0, "2.0"),
    (("seven", 8), 8, "8"),
])
def test_a_choice_that_is_an_offered_number_or_bool_label_is_read_as_its_key(criteria, choice, key):
    assert answered(choice, criteria).key == key


@pytest.mark.parametrize(("criteria", "choice"), [
    ((7, 8, 9), 10),              # not offered
    (("7", "8"), 7),              # the label offered is the string "7", not the number
    ((7, 8, 9), 8.0),             # 8.0 is keyed "8.0": another label
    ((1, 0), True),               # true is not 1
    ((7, 8, 9), None),
])
def test_any_other_non_string_choice_is_a_bad_answer(criteria, choice):
    with pytest.raises(LayaCallError) as info:
        answered(choice, criteria)
    assert info.value.code == "bad_answer"


def test_a_dict_of_options_keeps_string_choices_only():
    asked = normalize_questions({"n": {"type": "choice", "instructions": "?", "criteria": {"7": "seven", "8": "eight"}}})
    with pytest.raises(LayaCallError):
        parse_answers({"n": {"type": "choice", "choice": 8, "probabilities": {"7": 0.5, "8": 0.5}, "confidence": 0.1}}, asked)


def test_the_recorded_shape_meets_the_current_spec_and_not_the_target():
    assert Spec.current().violations("POST", "/v1/systemone", 200, LAYA_SERVE_HEADERS, LAYA_SERVE_BODY) == []
    broken = Spec.target().violations("POST", "/v1/systemone", 200, LAYA_SERVE_HEADERS, LAYA_SERVE_BODY)
    assert any(v.where == "/body/answers/n/choice" for v in broken)


def test_the_served_client_reads_laya_serves_answer():
    def laya_serve(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/systemone":
            return httpx.Response(200, headers=LAYA_SERVE_HEADERS, content=LAYA_SERVE_BODY)
        return httpx.Response(404, json={"detail": "Not Found"})

    with ServedLayaClient("http://laya.test", model="tiny", transport=httpx.MockTransport(laya_serve)) as client:
        decision = client.decide(STATE, NUMERIC)
    assert decision["n"] == Choice(key="7", probabilities={"7": 0.3798, "8": 0.3109, "9": 0.3093}, confidence=0.0043)


def test_the_fake_speaks_each_flavor():
    _, headers, laya_serves = FakeLaya(model="tiny", flavor=LAYA_SERVE).answer({"state": STATE, "questions": QUESTIONS})
    assert Spec.current().violations("POST", "/v1/systemone", 200, headers, laya_serves) == []
    _, headers, target = FakeLaya(model="tiny").answer({"state": STATE, "questions": QUESTIONS})
    assert Spec.target().violations("POST", "/v1/systemone", 200, headers, target) == []
    for name, labels in LABELS.items():
        key = target["answers"][name]["choice"]
        assert type(key) is str and key in target["answers"][name]["probabilities"]
        echoed = laya_serves["answers"][name]["choice"]
        assert option_key(echoed) == key and echoed in labels  # the label itself, as laya-serve sends it


# -- real laya ---------------------------------------------------------------------------------

laya = pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
from pytest_laya.models import LayaModel  # noqa: E402
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402


@pytest.fixture(scope="module")
def in_process():
    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


def test_laya_model_reads_in_process_laya(in_process):
    raw = in_process.predict(STATE, QUESTIONS)["answers"]
    with LayaModel(embedded_checkpoint_dir(), agent=in_process) as model:
        decision = model.decide(STATE, QUESTIONS)
    for name in LABELS:
        assert decision[name].key == option_key(raw[name]["choice"])
        assert dict(decision[name].probabilities) == {option_key(k): p for k, p in raw[name]["probabilities"].items()}


def test_laya_serve_sends_the_label_and_the_client_reads_it(laya_serves):
    seen = []
    laya_serve = laya_serves()
    raw = httpx.post(laya_serve.url + "/v1/systemone", json={"state": STATE, "questions": NUMERIC, "model": "tiny"},
                     timeout=60).json()
    # A generous deadline: the shared laya-serve's decisions took over the default 5 s on a 2-core
    # box under a load of 24; the deadline is not what this test checks.
    with ServedLayaClient(laya_serve.url, model="tiny", on_exchange=seen.append, timeout_s=60) as client:
        decision = client.decide(STATE, QUESTIONS)
    # The shape LAYA_SERVE_BODY records: the label itself as `choice`, string keys; the same numbers.
    recorded = LAYA_SERVE_ANSWER["answers"]["n"]
    assert raw["answers"]["n"]["choice"] == recorded["choice"] and type(raw["answers"]["n"]["choice"]) is int
    assert raw["answers"]["n"]["probabilities"] == pytest.approx(recorded["probabilities"], abs=1e-4)
    assert raw["usage"] == LAYA_SERVE_ANSWER["usage"]
    for x in seen:
        assert Spec.current().violations(x.method, x.path, x.status, x.headers, x.body) == []
    answers = json.loads(next(x.body for x in seen if x.path == "/v1/systemone"))["answers"]
    for name in LABELS:
        assert decision[name].key == option_key(answers[name]["choice"])


def test_the_reference_server_answers_string_keys(laya_reference_server, in_process):
    response = httpx.post(laya_reference_server.url + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS}, timeout=60)
    assert response.status_code == 200, response.text
    assert Spec.target().violations("POST", "/v1/systemone", 200, response.headers, response.content) == []
    raw = in_process.predict(STATE, QUESTIONS)["answers"]
    for name in LABELS:
        answer = response.json()["answers"][name]
        assert answer["choice"] == option_key(raw[name]["choice"])
        assert answer["probabilities"] == pytest.approx({option_key(k): p for k, p in raw[name]["probabilities"].items()}, abs=1e-4)
    with ServedLayaClient(laya_reference_server.url, model="tiny") as client:
        decision = client.decide(STATE, NUMERIC)
    assert decision["n"].key == option_key(in_process.predict(STATE, NUMERIC)["answers"]["n"]["choice"])


def test_labels_that_spell_the_same_key_are_refused(laya_reference_server):
    response = httpx.post(laya_reference_server.url + "/v1/systemone",
                          json={"state": STATE, "questions": {"n": {"type": "choice", "instructions": "?", "criteria": ["7", 7]}}},
                          timeout=60)
    assert response.status_code == 422 and response.json()["code"] == "invalid_question"
    assert "repeats option 0" in response.json()["errors"][0]["detail"]
