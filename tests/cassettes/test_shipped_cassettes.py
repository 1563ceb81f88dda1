"""The cassettes shipped in cassettes/: safe, secret-free, true to their spec and to their server.

What most users run against is these files, so every one is checked: it loads with a safe YAML
loader, no key used while recording appears in it, every response meets the spec of the server
kind it came from, and replaying a decision through the client gives what the live server
answers now (the reference server and laya-serve are started here). Then the two checks that
keep them honest over time: `--laya-mode=verify` over the whole recording suite against live
servers, and re-recording the reference cassettes leaves every byte as it is.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus, urlsplit

import httpx
import pytest
import yaml

from pytest_laya import LayaCallError, LayaConfigError, ServedLayaClient, Spec
from pytest_laya.cassettes import REDACTED, use_cassette
from pytest_laya.servers import REPLAY_URL
from pytest_laya.wire.decision import Choice, Noul, Score

ROOT = Path(__file__).resolve().parents[2]
CASSETTES = ROOT / "cassettes"
RECORDING = CASSETTES / "recording"
sys.path.insert(0, str(RECORDING))

from recording_cases import (  # noqa: E402
    LAYA_SERVE,
    LAYA_SERVE_STRICT,
    MODEL,
    REFERENCE,
    SPEC_OF,
    WRONG_KEY,
    cases_for,
    decision_cases,
)
from recording_servers import RUNNING_SERVERS, SERVER_KEY  # noqa: E402

SHIPPED = sorted(p for p in CASSETTES.rglob("*.yaml") if RECORDING not in p.parents)
SYSTEM1_KINDS = ("worker", "frontend", "frontend-down", "laya-serve-0.3.20")
TOLERANCE = 1e-4


def ids(paths):
    return [str(p.relative_to(CASSETTES)) for p in paths]


def load(path: Path) -> dict:
    return yaml.load(path.read_bytes(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def provenance(path: Path) -> dict:
    return load(path)["metadata"]["pytest_laya"]


def spec_for(server: str) -> Spec:
    return Spec.target() if SPEC_OF.get(server) == "target" else Spec.current()


def test_every_case_has_its_cassette_and_nothing_else_is_shipped():
    expected = {f"{kind}/{case.name}.yaml" for kind in (REFERENCE, LAYA_SERVE, LAYA_SERVE_STRICT)
                for case in cases_for(kind)}
    expected |= {f"system1/{p.relative_to(CASSETTES / 'system1')}" for p in (CASSETTES / "system1").rglob("*.yaml")}
    assert set(ids(SHIPPED)) == expected
    assert {p.parent.name for p in (CASSETTES / "system1").rglob("*.yaml")} == set(SYSTEM1_KINDS)


@pytest.mark.parametrize("path", SHIPPED, ids=ids(SHIPPED))
def test_loads_with_a_safe_loader_and_says_where_it_came_from(path):
    data = load(path)  # a python/object tag would raise here
    assert data["version"] == 1 and data["interactions"]
    meta = data["metadata"]["pytest_laya"]
    kind = path.parent.name
    assert meta["server"] == kind and meta["spec"] == SPEC_OF.get(kind, "current")
    assert meta["format"] == 1 and meta["recorded"]
    with use_cassette(path, record=False, strict=False) as cassette:  # the cassette layer's own checked loading
        assert cassette.interactions == len(data["interactions"])


def secret_spellings(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1],
            secret.encode("utf-8").hex()}


@pytest.mark.parametrize("path", SHIPPED, ids=ids(SHIPPED))
def test_no_key_used_while_recording_appears(path):
    text = path.read_text(encoding="utf-8")
    for secret in (SERVER_KEY, WRONG_KEY):
        for spelling in secret_spellings(secret):
            assert spelling not in text
        assert secret.split("-")[-1] not in text  # not even the canary's random tail
    for interaction in load(path)["interactions"]:
        for value in interaction["request"]["headers"].get("authorization", []):
            assert value == f"Bearer {REDACTED}"


def test_the_keyed_cassettes_did_send_a_key():
    # The scrub test above means something only if keys were really sent while recording.
    for kind in (REFERENCE, LAYA_SERVE):
        text = (CASSETTES / kind / "keyed_choice.yaml").read_text()
        assert f"Bearer {REDACTED}" in text
        assert f"Bearer {REDACTED}" in (CASSETTES / kind / "wrong_bearer.yaml").read_text()


@pytest.mark.parametrize("path", SHIPPED, ids=ids(SHIPPED))
def test_every_response_meets_the_spec_of_its_server_kind(path):
    spec = spec_for(provenance(path)["server"])
    for number, interaction in enumerate(load(path)["interactions"], start=1):
        request, response = interaction["request"], interaction["response"]
        headers = [(name, value) for name, values in response["headers"].items() for value in values]
        body = response["body"]["string"]
        violations = spec.violations(request["method"], urlsplit(request["uri"]).path, response["status"]["code"],
                                     headers, body.encode("utf-8") if isinstance(body, str) else body)
        assert violations == [], f"interaction {number}: " + "; ".join(map(str, violations))


# -- the converted system1 cassettes ----------------------------------------------------------

def converter():
    spec = importlib.util.spec_from_file_location("convert_system1_recordings",
                                                  ROOT / "scripts" / "convert_system1_recordings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_system1_cassettes_are_what_the_converter_makes_of_the_recordings():
    made = converter().convert(ROOT / "tests" / "data" / "system1")
    shipped = {p.relative_to(CASSETTES / "system1"): p.read_text(encoding="utf-8")
               for p in (CASSETTES / "system1").rglob("*.yaml")}
    assert sorted(made) == sorted(shipped)
    for relpath, text in made.items():
        assert shipped[relpath] == text, f"cassettes/system1/{relpath} differs: run scripts/convert_system1_recordings.py"


SYSTEM1 = sorted((CASSETTES / "system1").rglob("*.yaml"))


@pytest.mark.parametrize("path", SYSTEM1, ids=ids(SYSTEM1))
def test_system1_bodies_are_the_recorded_ones(path):
    meta = provenance(path)
    for interaction in load(path)["interactions"]:
        is_identity_read = interaction["request"]["uri"].endswith("/health") and "health_from" in meta
        source = json.loads((ROOT / meta["health_from" if is_identity_read else "converted_from"]).read_text("utf-8"))
        response = interaction["response"]
        body = response["body"]["string"]
        assert response["status"]["code"] == source["status"]
        assert response["headers"]["content-type"] == [source["content_type"]]
        if isinstance(source["body"], str):
            assert body == source["body"]
        else:  # the same JSON, as the FastAPI server wrote it: compact, key order kept
            assert json.loads(body) == source["body"]
            assert list(json.loads(body)) == list(source["body"])
            assert body == json.dumps(source["body"], ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("path", [p for p in SYSTEM1 if "answers" in p.read_text()],
                         ids=lambda p: str(p.relative_to(CASSETTES)))
def test_system1_decisions_replay_through_the_client(path):
    interaction = load(path)["interactions"][0]
    sent = json.loads(interaction["request"]["body"])
    recorded = json.loads(interaction["response"]["body"]["string"])
    with use_cassette(path, record=False, strict=False):
        with ServedLayaClient(REPLAY_URL, model=sent.get("model")) as client:
            decision = client.decide(sent["state"], sent["questions"])
    for qid, answer in decision.answers.items():
        raw = recorded["answers"][qid]
        if isinstance(answer, Noul):
            assert answer.p == raw["noul"]
        else:
            assert {str(k): v for k, v in answer.probabilities.items()} == raw["probabilities"]


@pytest.mark.parametrize(("path", "error", "code", "status"), [
    ("worker/unauthorized.yaml", LayaConfigError, "unauthorized", 401),
    ("frontend-down/unreachable.yaml", LayaCallError, "unavailable", 502),
    ("frontend/too_many_questions.yaml", LayaCallError, "rejected", 413),
])
def test_system1_refusals_replay_as_the_clients_errors(path, error, code, status):
    sent = json.loads(load(CASSETTES / "system1" / path)["interactions"][0]["request"]["body"])
    with use_cassette(CASSETTES / "system1" / path, record=False):
        with ServedLayaClient(REPLAY_URL, model="english") as client:
            with pytest.raises(error) as info:
                client.decide(sent["state"], sent["questions"])
    assert (info.value.code, info.value.status) == (code, status)


# -- replayed decisions against the live servers they came from -------------------------------

@pytest.fixture(scope="module")
def live_servers(laya_serves, request):
    """The servers the decision cassettes came from, in the configurations they were recorded in
    (recording_servers starts laya-serve and the reference server so), shared with other modules:
    laya-serve's (`laya_serves`), the open reference server (the plugin's `laya_reference_server`)
    and the keyed one (`keyed_reference_server`, tests/conftest.py)."""
    pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
    from recording_servers import RunningServer

    def get(kind: str, config: str):
        if kind != REFERENCE:
            return laya_serves(jev_strict=kind == LAYA_SERVE_STRICT, api_key=SERVER_KEY if config == "keyed" else None)
        keyed = config == "keyed"
        server = request.getfixturevalue("keyed_reference_server" if keyed else "laya_reference_server")
        return RunningServer(url=server.url, api_key=SERVER_KEY if keyed else None)

    return get


def same_number(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.0, abs_tol=TOLERANCE)


def assert_same_decision(replayed, live):
    assert list(replayed.answers) == list(live.answers)
    for qid, mine in replayed.answers.items():
        theirs = live.answers[qid]
        assert type(mine) is type(theirs), qid
        if mine.confidence is None or theirs.confidence is None:  # a strict noul answer has none
            assert mine.confidence is theirs.confidence is None, qid
        else:
            assert same_number(mine.confidence, theirs.confidence), qid
        if isinstance(mine, Noul):
            assert same_number(mine.p, theirs.p), qid
            continue
        assert list(mine.probabilities) == list(theirs.probabilities), qid
        assert all(same_number(mine.probabilities[k], theirs.probabilities[k]) for k in mine.probabilities), qid
        if isinstance(mine, Choice):
            assert mine.key == theirs.key, qid
        if isinstance(mine, Score):
            assert mine.level == theirs.level and same_number(mine.expected, theirs.expected), qid
    assert replayed.usage == live.usage
    assert replayed.model == live.model


DECISIONS = [(kind, case) for kind in (REFERENCE, LAYA_SERVE, LAYA_SERVE_STRICT) for case in decision_cases(kind)]


@pytest.mark.parametrize(("kind", "case"), DECISIONS, ids=[f"{k}/{c.name}" for k, c in DECISIONS])
def test_replaying_a_decision_gives_what_the_live_server_answers(kind, case, live_servers):
    server = live_servers(kind, case.server)
    asked = case.decide
    with use_cassette(CASSETTES / kind / f"{case.name}.yaml", record=False):
        with ServedLayaClient(REPLAY_URL, model=MODEL, api_key=server.api_key) as client:
            replayed = client.decide(asked.state, dict(asked.questions), allow_truncation=asked.allow_truncation)
    with ServedLayaClient(server.url, model=MODEL, api_key=server.api_key) as client:
        live = client.decide(asked.state, dict(asked.questions), allow_truncation=asked.allow_truncation)
    assert_same_decision(replayed, live)


def test_a_replayed_refusal_is_the_live_one(live_servers):
    server = live_servers(REFERENCE, "keyed")
    path = CASSETTES / REFERENCE / "wrong_bearer.yaml"
    recorded = load(path)["interactions"][0]["response"]
    live = httpx.post(server.url + "/v1/systemone", content=load(path)["interactions"][0]["request"]["body"],
                      headers={"Content-Type": "application/json", "Authorization": f"Bearer {WRONG_KEY}"})
    assert live.status_code == recorded["status"]["code"] == 401
    assert json.loads(recorded["body"]["string"])["code"] == live.json()["code"] == "unauthorized"


# -- they stay true: verify, and re-recording changes nothing --------------------------------

def run_recording_suite(pytester, monkeypatch, target: Path, *args: str, env: dict[str, str] | None = None):
    """pytest on (part of) the recording suite, from the repository root, as cassettes/README.md says.

    In process (tests/helpers/pytester_runs.py): a new interpreter would import torch, laya and
    the reference server again and warm its first engine, about 4 s of CPU a run.
    """
    for name in [name for name in os.environ if name.startswith(("LAYA_", "PYTEST_"))]:
        monkeypatch.delenv(name)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    return pytester.runpytest(str(target.relative_to(ROOT)), *args)


def test_verify_passes_against_the_reference_and_laya_serve_servers(laya_serves, pytester, monkeypatch, request):
    pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
    # The open and keyed servers are the suite's shared ones (verify ignores what a laya-serve has
    # loaded since; six starts are 20-25 s of CPU); the busy and warming ones start fresh.
    running = {f"{kind}/{config}": laya_serves(jev_strict=kind == LAYA_SERVE_STRICT,
                                               api_key=SERVER_KEY if config == "keyed" else None).url
               for kind in (LAYA_SERVE, LAYA_SERVE_STRICT) for config in ("open", "keyed")}
    running[f"{REFERENCE}/open"] = request.getfixturevalue("laya_reference_server").url
    running[f"{REFERENCE}/keyed"] = request.getfixturevalue("keyed_reference_server").url
    result = run_recording_suite(pytester, monkeypatch, RECORDING, "--laya-mode=verify", "-q",
                                 env={RUNNING_SERVERS: json.dumps(running)})
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out[-6000:]
    assert f"verify: {len(SHIPPED) - len(SYSTEM1)} cassettes," in out and " 0 cassettes drifted" in out


def test_re_recording_the_reference_cassettes_changes_nothing(tmp_path, pytester, monkeypatch):
    pytest.importorskip("laya", reason="needs the reference extra (laya[serve])")
    shutil.copytree(CASSETTES / REFERENCE, tmp_path / REFERENCE)
    result = run_recording_suite(pytester, monkeypatch, RECORDING / "test_record_reference.py", "--laya-record",
                                 f"--laya-cassette-dir={tmp_path}", "-q")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out[-6000:]
    count = len(cases_for(REFERENCE))
    assert f"cassettes: {count} unchanged (file untouched)" in out, out[-3000:]
    for shipped in sorted((CASSETTES / REFERENCE).glob("*.yaml")):
        assert (tmp_path / REFERENCE / shipped.name).read_bytes() == shipped.read_bytes(), shipped.name


def test_running_servers_are_used_by_verify_only(monkeypatch):
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("recording_conftest", RECORDING / "conftest.py")
    assert spec is not None and spec.loader is not None
    recording_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recording_conftest)
    monkeypatch.setenv(RUNNING_SERVERS, json.dumps({
        f"{LAYA_SERVE}/open": "http://127.0.0.1:1", f"{LAYA_SERVE}/keyed": "http://127.0.0.1:2",
        f"{LAYA_SERVE_STRICT}/open": "http://127.0.0.1:3", f"{REFERENCE}/open": "http://127.0.0.1:4"}))

    def configured(mode):
        return SimpleNamespace(inipath=RECORDING / "pytest.ini", option=SimpleNamespace(laya_cassette_dir=None),
                               getoption=lambda name: mode)

    recording_conftest.pytest_configure(configured("verify"))
    for mode in (None, "record", "live"):  # --laya-record leaves --laya-mode unset
        with pytest.raises(pytest.UsageError, match=f"{RUNNING_SERVERS} is for --laya-mode=verify only"):
            recording_conftest.pytest_configure(configured(mode))
    running = recording_conftest._running(LAYA_SERVE)
    assert {c: (s.url, s.api_key) for c, s in running.items()} == {
        "open": ("http://127.0.0.1:1", None), "keyed": ("http://127.0.0.1:2", SERVER_KEY)}
    assert {c: (s.url, s.api_key) for c, s in recording_conftest._running(REFERENCE).items()} == {
        "open": ("http://127.0.0.1:4", None)}
