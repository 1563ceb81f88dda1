"""Real Laya behind the reference server: its answers equal in-process laya and laya-serve 0.4.15.

Runs the embedded tiny checkpoint over a real loopback socket; every response is checked
against the target spec.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys

import httpx
import pytest

from pytest_laya import ServedLayaClient, Spec
from pytest_laya.wire.samples import VARIED_REQUESTS
from tests.helpers.engine_passes import watch_passes
from tests.helpers.recorded import LAYA_SERVE, recordings

laya = pytest.importorskip("laya", reason="needs the reference extra")
from pytest_laya_reference.settings import ServerSettings  # noqa: E402
from pytest_laya_reference.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402
from tests.helpers.servers import plain_http, reference_server  # noqa: E402

TOLERANCE = 1e-4
RECORDED = [r for r in recordings(LAYA_SERVE) if r.status == 200 and r.path == "/v1/systemone" and r.request
            and r.request.get("model") == "tiny"]
# The shared varied set's first four (tests/integration/test_parity_requests.py runs all of it, three ways).
REQUESTS = [sample.body() for sample in VARIED_REQUESTS[:4]]


def conforming(response: httpx.Response, path: str) -> dict:
    violations = Spec.target().violations(response.request.method, path, response.status_code, response.headers, response.content)
    assert violations == [], "\n".join(map(str, violations))
    assert response.status_code == 200, response.text
    return response.json()


def numbers(answers: dict) -> dict:
    """Every probability-like number of an answer set, keyed by where it is."""
    out = {}
    for qid, a in answers.items():
        for key in ("noul", "score", "confidence"):
            if key in a:
                out[f"{qid}.{key}"] = a[key]
        for option, p in a.get("probabilities", {}).items():
            out[f"{qid}.p[{option}]"] = p
        if "choice" in a:
            out[f"{qid}.choice"] = a["choice"]
    return out


def assert_same(got: dict, expected: dict) -> None:
    g, e = numbers(got), numbers(expected)
    assert g.keys() == e.keys()
    for key in e:
        if isinstance(e[key], str):
            assert g[key] == e[key], key
        else:
            assert abs(g[key] - e[key]) <= TOLERANCE, f"{key}: {g[key]} vs {e[key]}"


@pytest.fixture(scope="module")
def reference():
    with reference_server(ServerSettings(batch_window_ms=20), device="cpu") as server:
        yield server


@pytest.fixture(scope="module")
def in_process():
    return laya.load(str(embedded_checkpoint_dir()), device="cpu")


@pytest.mark.parametrize("rec", RECORDED, ids=lambda r: r.id)
def test_answers_equal_what_laya_serve_recorded(reference, rec):
    body = conforming(plain_http("POST", reference.url + "/v1/systemone", json=rec.request, timeout=30), "/v1/systemone")
    assert_same(body["answers"], rec.body["answers"])
    assert body["usage"]["input_tokens"] == rec.body["usage"]["input_tokens"]


@pytest.mark.parametrize("request_body", REQUESTS, ids=range(len(REQUESTS)))
def test_answers_equal_in_process_predict(reference, in_process, request_body):
    body = conforming(plain_http("POST", reference.url + "/v1/systemone", json=request_body, timeout=30), "/v1/systemone")
    assert_same(body["answers"], in_process.predict(request_body["state"], request_body["questions"])["answers"])


def test_answers_equal_live_laya_serve_on_the_same_bytes(reference, laya_serves):
    laya_serve = laya_serves()
    for request_body in REQUESTS:
        theirs = plain_http("POST", laya_serve.url + "/v1/systemone", json={**request_body, "model": "tiny"}, timeout=30).json()
        ours = conforming(plain_http("POST", reference.url + "/v1/systemone", json=request_body, timeout=30), "/v1/systemone")
        assert_same(ours["answers"], theirs["answers"])


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(reference):
    singles = [conforming(plain_http("POST", reference.url + "/v1/systemone", json=r, timeout=30), "/v1/systemone") for r in REQUESTS]
    many = REQUESTS * 4
    with concurrent.futures.ThreadPoolExecutor(len(many)) as pool:
        replies = list(pool.map(lambda r: plain_http("POST", reference.url + "/v1/systemone", json=r, timeout=30), many))
    for i, reply in enumerate(replies):
        assert_same(conforming(reply, "/v1/systemone")["answers"], singles[i % len(REQUESTS)]["answers"])
    batch = conforming(plain_http("POST", reference.url + "/v1/systemone/batch",
                                  json={"states": [REQUESTS[0]["state"], REQUESTS[1]["state"]],
                                        "questions": REQUESTS[0]["questions"]}, timeout=30), "/v1/systemone/batch")
    assert_same(batch["results"][0]["answers"], singles[0]["answers"])


def test_concurrent_requests_with_different_question_sets_share_forward_passes(monkeypatch):
    """Issue 18: requests asking different questions share passes, each answer still its own."""
    bodies = [sample.body() for sample in VARIED_REQUESTS[:12]]
    assert len({repr(b["questions"]) for b in bodies}) == 12
    settings = ServerSettings(batch_window_ms=500, passes=1, max_batch=16)
    with reference_server(settings, device="cpu") as server:
        url = server.url + "/v1/systemone"
        singles = [conforming(plain_http("POST", url, json=b, timeout=30), "/v1/systemone") for b in bodies]
        rows: list[int] = []
        watch_passes(server.app.state.server.engine, "tiny", monkeypatch,
                     lambda batch: rows.append(int(batch["input_ids"].shape[0])))
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            replies = list(pool.map(lambda b: plain_http("POST", url, json=b, timeout=30), bodies))
    for reply, single in zip(replies, singles):
        body = conforming(reply, "/v1/systemone")
        assert_same(body["answers"], single["answers"])
        assert body["usage"] == single["usage"]
    assert sum(rows) == sum(len(b["questions"]) for b in bodies)
    assert len(rows) < len(bodies), rows  # laya's own path: one pass per question set, 12


def test_identity_is_the_real_checkpoint(reference):
    import hashlib

    digest = hashlib.sha256((embedded_checkpoint_dir() / "model.safetensors").read_bytes()).hexdigest()
    with ServedLayaClient(reference.url, model="tiny") as client:
        decision = client.decide(REQUESTS[0]["state"], REQUESTS[0]["questions"])
        health = client.health()
    assert decision.model == f"tiny@sha256:{digest}"
    assert decision.provenance.served_by.device == "cpu" and decision.provenance.served_by.weights_dtype == "float32"
    assert health.raw["models"]["tiny"]["revision"] == f"sha256:{digest}"
    assert set(decision.provenance.server_timing) == {"queue", "infer"}


def test_the_command_line_serves_the_embedded_checkpoint():
    shown = subprocess.run([sys.executable, "-m", "pytest_laya_reference", "--show-checkpoint"], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == str(embedded_checkpoint_dir())
    proc = subprocess.Popen([sys.executable, "-m", "pytest_laya_reference", "--port", "0", "--api-key", "sk-cli-canary"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("laya-reference-server ready at http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[-1]
        assert plain_http("GET", url + "/livez").json() == {"status": "ok"}
        assert plain_http("POST", url + "/v1/systemone", json=REQUESTS[0], timeout=30).status_code == 401
        ok = plain_http("POST", url + "/v1/systemone", json=REQUESTS[0], headers={"Authorization": "Bearer sk-cli-canary"}, timeout=30)
        assert ok.status_code == 200
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "sk-cli-canary" not in (out or "")


def test_bad_command_lines_are_usage_errors():
    for args in (["--max-concurrent", "0"], ["--checkpoint", "a=x", "--checkpoint", "a=y"], ["--port", "70000"]):
        result = subprocess.run([sys.executable, "-m", "pytest_laya_reference", *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "laya-reference-server: error:" in result.stderr, args


def test_a_checkpoint_that_cannot_load_ends_the_server_with_one_clear_line(tmp_path):
    missing = tmp_path / "no-such-checkpoint"
    result = subprocess.run([sys.executable, "-m", "pytest_laya_reference", "--port", "0", "--checkpoint", str(missing)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "laya-reference-server: error: loading the checkpoints failed" in result.stderr
    assert str(missing) in result.stderr and "ready at" not in result.stdout
