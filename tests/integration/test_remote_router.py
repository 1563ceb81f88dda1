"""laya's own HTTP client, `laya.RemoteRouter` (laya 0.4.15), against the reference server.

Nobody here wrote RemoteRouter, so it is the honest test of compatibility: pointed at the
reference server it must get the same answers as laya in process, see the same checkpoints
loaded, and turn refusals into its own error codes, as it does against laya-serve.
"""

from __future__ import annotations

import pytest

from pytest_laya.wire.samples import VARIED_REQUESTS

laya = pytest.importorskip("laya", reason="needs the reference extra")
from laya.confidence import jev_confidence  # noqa: E402
from laya.mcp.remote import RemoteError, RemoteRouter  # noqa: E402

from pytest_laya.servers import wait_ready
from pytest_laya.wire.identity import local_checkpoint_revision  # noqa: E402
from pytest_laya_reference.app import create_app  # noqa: E402
from pytest_laya_reference.serving import ServerThread  # noqa: E402
from pytest_laya_reference.settings import ServerSettings  # noqa: E402
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402
from tests.helpers.scripted_engine import ScriptedEngine  # noqa: E402

KEY = "sk-remote-router-canary"
QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": "Bugs"}}}


@pytest.fixture(scope="module")
def in_process():
    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


@pytest.fixture(scope="module")
def router(laya_reference_server):
    return RemoteRouter(laya_reference_server.url, timeout=60)




def laya_fields(answers: dict) -> dict:
    """An answer set without the wire-only `x_jev_confidence`, which laya adds only when serving."""
    return {qid: {k: v for k, v in a.items() if k != "x_jev_confidence"} for qid, a in answers.items()}


@pytest.mark.parametrize("sample", VARIED_REQUESTS, ids=lambda r: r.id)
def test_remote_router_gets_the_answers_of_laya_in_process(router, in_process, sample):
    remote = router.predict(sample.state, sample.body()["questions"])
    local = in_process.predict(sample.state, sample.body()["questions"])
    assert laya_fields(remote["answers"]) == local["answers"]
    assert remote["usage"] == local["usage"]


def test_wire_confidence_is_laya_serves(router):
    answers = router.predict("The app crashes when I pay.", QUESTIONS)["answers"]
    assert answers["team"]["x_jev_confidence"] == round(jev_confidence(laya_fields(answers)["team"]), 4)


def test_predict_batch_answers_each_request_in_order(router, in_process):
    samples = VARIED_REQUESTS[:5]
    results = router.predict_batch([sample.body() for sample in samples])
    assert [laya_fields(r["answers"]) for r in results] == [
        in_process.predict(s.state, s.body()["questions"])["answers"] for s in samples]


def test_remote_router_sees_the_loaded_checkpoint_and_its_revision(router):
    assert router.loaded == ["tiny"]
    assert router.loaded_revisions == {"tiny": local_checkpoint_revision(str(embedded_checkpoint_dir()))}
    assert router.health()["status"] == "ok"


def test_refusals_become_remote_router_error_codes(router):
    cases = {
        "no questions": ({}, None),
        "an unknown question type": ({"q": {"type": "essay", "instructions": "Write."}}, None),
        "a model not served": (QUESTIONS, "no-such-model"),
    }
    for what, (questions, model) in cases.items():
        with pytest.raises(RemoteError) as info:
            router.predict("Any state.", questions, model=model)
        assert info.value.code == "invalid_request", what
        # The problem's `detail` reaches the RemoteRouter user as the message.
        assert info.value.message and info.value.message != "Unprocessable Entity", what


def test_a_wrong_key_is_remote_router_unauthorized_and_never_shows_the_key():
    with ServerThread(create_app(ScriptedEngine(), ServerSettings(api_key=KEY))) as server:
        wait_ready(server.url)
        with pytest.raises(RemoteError) as info:
            RemoteRouter(server.url, api_key="sk-wrong-canary").predict("Any state.", QUESTIONS)
        assert info.value.code == "unauthorized" and KEY not in str(info.value)
        assert RemoteRouter(server.url, api_key=KEY).predict("Any state.", QUESTIONS)["answers"]["team"]["choice"]
        assert RemoteRouter(server.url).loaded == []  # no token: /health is liveness only, as laya-serve's
