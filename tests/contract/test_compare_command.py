"""``python -m pytest_laya compare A B`` (pytest_laya.suites.compare) against loopback stubs.

A fair stub (the fake) against itself finds no difference; against a stub whose first option
always wins it finds the flips and exits 1; a cassette directory answers with its recordings;
expected labels give accuracy and the Brier score, gated by --min-accuracy; --out keeps every
decision. Runs in process (`main`), over real loopback sockets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_laya.__main__ import main
from pytest_laya.fake import FakeLayaServer
from pytest_laya.faults import ReceivedRequest, Respond, ScriptedServer
from pytest_laya.suites.compare import PROBES


def _first_option_wins(fake: FakeLayaServer):
    def respond(request: ReceivedRequest) -> Respond:
        response = fake.normal_response(request)
        if response.status != 200 or request.path != "/v1/systemone":
            return response
        body = json.loads(response.payload)
        for answer in body["answers"].values():
            if answer["type"] == "choice":
                keys = list(answer["probabilities"])
                answer["probabilities"] = {k: 0.9 if i == 0 else round(0.1 / (len(keys) - 1), 4)
                                           for i, k in enumerate(keys)}
                answer["choice"] = keys[0]
        return Respond(response.status, body, headers=response.headers)
    return respond


def test_two_fair_servers_are_the_same(capsys, tmp_path):
    out = tmp_path / "decisions.json"
    with FakeLayaServer() as a, FakeLayaServer() as b:
        code = main(["compare", a.url, b.url, "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    answers = sum(len(questions) for _, questions in PROBES)
    assert f"agreement: {answers} of {answers} answers decided the same (100%)" in printed
    assert "largest probability deviation: 0.000000; tolerance 0.0001" in printed
    assert "A: p50 " in printed and "B: p50 " in printed and "result: the same within the tolerance" in printed
    written = json.loads(out.read_text())
    assert len(written["decisions"]) == answers and written["problems"] == [] and written["agreement"] == 1.0
    assert {"case", "question", "a", "b", "deviation", "flipped", "score_shift"} <= set(written["decisions"][0])


def test_a_biased_server_is_told_from_a_fair_one(capsys):
    with FakeLayaServer() as fair, ScriptedServer(default=_first_option_wins(FakeLayaServer())) as biased:
        code = main(["compare", fair.url, biased.url])
    printed = capsys.readouterr().out
    assert code == 1
    assert "FLIP" in printed and "result: DIFFERENT: " in printed
    assert "is past the tolerance 0.0001" in printed.splitlines()[-1]


def test_labels_give_accuracy_and_brier_and_gate_on_accuracy(capsys, tmp_path):
    team = {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "technical"]}
    refund = {"type": "noul", "instructions": "Refund?"}
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps({"id": f"c{i}", "state": f"message {i}", "questions": {"team": team, "refund": refund},
                                           "expected": {"team": "billing", "refund": True}}) for i in range(4)) + "\n")
    with FakeLayaServer() as a, FakeLayaServer() as b:
        code = main(["compare", a.url, b.url, "--cases", str(cases)])
        gated = capsys.readouterr().out
        strict = main(["compare", a.url, b.url, "--cases", str(cases), "--min-accuracy", "1.01"])
    assert code == 0
    assert "A: p50 " in gated and "labelled answers" in gated and "accuracy " in gated and "Brier " in gated
    assert "c0    team" in gated or "c0  team" in gated
    assert strict == 1
    assert "accuracy" in capsys.readouterr().out.splitlines()[-1]


def _cassette(directory: Path, url: str, state: Any, questions: dict[str, Any]) -> None:
    """One recorded decision, as vcrpy writes it."""
    import yaml

    sent = json.dumps({"state": state, "questions": questions})
    got = httpx.post(url + "/v1/systemone", content=sent, headers={"Content-Type": "application/json"})
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "one.yaml").write_text(yaml.safe_dump({"interactions": [{
        "request": {"body": sent, "headers": {}, "method": "POST", "uri": "http://laya.invalid/v1/systemone"},
        "response": {"body": {"string": got.text}, "headers": {}, "status": {"code": 200, "message": "OK"}},
    }], "version": 1}))


def test_a_cassette_directory_answers_its_recorded_decisions(capsys, tmp_path):
    state, questions = PROBES[0]
    with FakeLayaServer() as recorder:
        _cassette(tmp_path / "cassettes", recorder.url, state, dict(questions))
    with FakeLayaServer() as live:
        code = main(["compare", live.url, str(tmp_path / "cassettes")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"agreement: {len(questions)} of {len(questions)}" in printed and "one.yaml#1" in printed
    assert "B: no latency (recorded answers)" in printed


@pytest.mark.parametrize(("argv", "words"), [
    (["compare", "nowhere", "http://127.0.0.1:9"], "'nowhere' is neither a URL (http://...), laya:PATH nor a cassette directory"),
    (["compare", "http://127.0.0.1:9", "http://127.0.0.1:9", "--tolerance", "-1"], "--tolerance must be a number >= 0"),
])
def test_bad_sides_are_one_line_and_status_2(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_a_bad_cases_line_is_named(capsys, tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"state": "s", "questions": {"r": {"type": "noul", "instructions": "R?"}}}\nnot json\n')
    with FakeLayaServer() as a:
        assert main(["compare", a.url, a.url, "--cases", str(cases)]) == 2
    assert f"--cases {cases} line 2: not JSON" in capsys.readouterr().err
