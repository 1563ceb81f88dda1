"""The reference server's HTTP surface over a real loopback socket, every response checked
against the target spec. Inference is scripted here; real Laya answers are in
tests/integration/test_reference_parity.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from pytest_laya import Spec
from pytest_laya.servers import wait_ready
from pytest_laya_reference.app import create_app
from pytest_laya_reference.serving import ServerThread
from pytest_laya_reference.settings import Limits, ServerSettings
from tests.helpers.scripted_engine import ScriptedEngine
from tests.helpers.servers import plain_http

KEY = "sk-reference-canary-42"
STATE = "I was charged twice for my order. Please refund the duplicate today."
QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": "Bugs"}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "refund": {"type": "noul", "instructions": "Refund?"},
}
BODY = {"state": STATE, "questions": QUESTIONS}


def conforms(response: httpx.Response) -> httpx.Response:
    """Every response of the reference server must meet the target spec, errors included."""
    path = urlsplit(str(response.request.url)).path
    violations = Spec.target().violations(response.request.method, path, response.status_code,
                                          response.headers, response.content)
    assert violations == [], "\n".join(map(str, violations))
    return response




def serve(engine=None, **settings):
    engine = engine or ScriptedEngine()
    server = ServerThread(create_app(engine, ServerSettings(**settings))).start()
    if engine.ready_gate is None:
        wait_ready(server.url)
    return server


@pytest.fixture(scope="module")
def plain():
    with serve() as server:
        yield server


@pytest.fixture(scope="module")
def keyed():
    with serve(api_key=KEY) as server:
        yield server


def post(url, body=None, *, content=None, headers=None, path="/v1/systemone"):
    return plain_http("POST", url + path, json=body if content is None else None, content=content, headers=headers, timeout=10)


# -- answers ------------------------------------------------------------------------------

def test_a_decision_names_its_weights_and_timing(plain):
    r = conforms(post(plain.url, BODY))
    body = r.json()
    assert r.status_code == 200 and list(body["answers"]) == list(QUESTIONS)
    assert body["model"] == "scripted" == body["served_by"]["checkpoint"]
    assert set(body["served_by"]) == {"checkpoint", "revision", "device", "weights_dtype", "compiled"}
    timing = r.headers["server-timing"]
    assert "queue;dur=" in timing and "infer;dur=" in timing


def test_request_ids_are_echoed_or_generated(plain):
    echoed = conforms(post(plain.url, BODY, headers={"X-Request-Id": "abc-123"}))
    assert echoed.headers["x-request-id"] == "abc-123"
    generated = conforms(post(plain.url, BODY))
    assert 1 <= len(generated.headers["x-request-id"]) <= 128
    invalid = conforms(post(plain.url, BODY, headers={"X-Request-Id": "x" * 129}))
    assert invalid.headers["x-request-id"] != "x" * 129
    missing = plain_http("GET", plain.url + "/nowhere")
    assert missing.status_code == 404 and missing.headers["x-request-id"]


def test_traceparent_continues_the_callers_trace(plain):
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    r = conforms(post(plain.url, BODY, headers={"traceparent": parent}))
    version, trace, span, flags = r.headers["traceparent"].split("-")
    assert (version, trace, flags) == ("00", "4bf92f3577b34da6a3ce929d0e0e4736", "01") and span != "00f067aa0ba902b7"


def test_a_later_traceparent_version_is_continued_by_its_first_four_fields(plain):
    # W3C Trace Context 4.3: parse a higher version's trace id, parent id and sampled flag.
    r = conforms(post(plain.url, BODY, headers={"traceparent": "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next"}))
    version, trace, _, flags = r.headers["traceparent"].split("-")
    assert (version, trace, flags) == ("00", "4bf92f3577b34da6a3ce929d0e0e4736", "01")


@pytest.mark.parametrize("header", [
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   # all-zero parent id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   # version ff is never valid
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  # version 00 has nothing after its flags
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",   # upper-case hex
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    # a short trace id
], ids=["zero-trace", "zero-parent", "version-ff", "00-with-suffix", "upper-case", "short"])
def test_an_invalid_traceparent_starts_no_continued_trace(plain, header):
    # W3C: the receiver of an invalid traceparent starts a new trace; it must not join this one.
    r = conforms(post(plain.url, BODY, headers={"traceparent": header}))
    assert r.status_code == 200 and "traceparent" not in r.headers


def test_two_traceparent_headers_are_invalid(plain):
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    r = conforms(plain_http("POST", plain.url + "/v1/systemone", json=BODY,
                            headers=[("traceparent", parent), ("traceparent", parent)]))
    assert r.status_code == 200 and "traceparent" not in r.headers


# -- paths and methods the spec does not have -----------------------------------------------

def _problem(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status and r.headers["content-type"] == "application/problem+json", r.text
    problem = r.json()
    assert Spec.target().schema_violations("#/components/schemas/Problem", problem) == []
    assert (problem["status"], problem["code"], problem["type"]) == (status, code, f"/problems/{code}")
    assert problem["request_id"] == r.headers["x-request-id"]
    return problem


@pytest.mark.parametrize("path", ["/v1/systemone/", "/health/", "/livez/", "/nowhere", "/v1", "/"])
def test_an_unknown_path_is_a_problem_404_and_never_a_redirect(plain, path):
    # Starlette's trailing-slash redirect answered 307 with a Location built from the client's
    # Host header; the server now answers every path itself.
    for method in ("GET", "POST"):
        r = plain_http(method, plain.url + path, json=BODY, headers={"Host": "attacker.example"},
                          follow_redirects=False)
        problem = _problem(r, 404, "not_found")
        assert "location" not in r.headers and "attacker" not in r.text
        if path.endswith("/") and path != "/":
            assert problem["detail"] == f"paths take no trailing slash: use {path.rstrip('/')}"


@pytest.mark.parametrize(("method", "path", "allow"), [("GET", "/v1/systemone", "POST"),
                                                       ("PUT", "/v1/systemone/batch", "POST"),
                                                       ("POST", "/livez", "GET, HEAD"),
                                                       ("DELETE", "/health", "GET, HEAD")])
def test_a_wrong_method_is_a_problem_405_with_allow(plain, method, path, allow):
    r = plain_http(method, plain.url + path)
    _problem(r, 405, "method_not_allowed")
    assert set(r.headers["allow"].split(", ")) == set(allow.split(", "))


def test_batch_answers_every_state_in_order(plain):
    r = conforms(post(plain.url, {"states": ["one", "two", "three"], "questions": QUESTIONS}, path="/v1/systemone/batch"))
    body = r.json()
    assert len(body["results"]) == 3 and body["served_by"]["checkpoint"] == "scripted"
    assert body["total_usage"]["input_tokens"] == sum(x["usage"]["input_tokens"] for x in body["results"])


def test_probes(plain):
    assert conforms(plain_http("GET", plain.url + "/livez")).json() == {"status": "ok"}
    health = conforms(plain_http("GET", plain.url + "/health")).json()
    assert health["ready"] is True and health["models"]["tiny"]["checkpoint"] == "scripted"
    assert health["limits"] == Limits().to_json()
    assert conforms(plain_http("GET", plain.url + "/readyz")).json() == health


def test_every_response_claims_the_target_spec(plain, keyed):
    # The claim the server contract and the plugin read (pytest_laya.servers.claimed_spec_of).
    responses = [post(plain.url, BODY), plain_http("GET", plain.url + "/health"), plain_http("GET", plain.url + "/livez"),
                 plain_http("GET", plain.url + "/nowhere"), post(plain.url, content=b"{", headers={"Content-Type": "application/json"}),
                 post(keyed.url, BODY), plain_http("GET", keyed.url + "/health")]
    assert [r.headers.get("laya-spec") for r in responses] == ["target"] * len(responses)
    assert plain_http("GET", plain.url + "/health").json()["spec"] == "target"
    assert "spec" not in plain_http("GET", keyed.url + "/health").json()  # liveness only, without the token


# -- refusals -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("content", "code", "status"),
    [
        (b'{"state": "x", "questions": ', "malformed_request", 400),
        (b'[1, 2]', "malformed_request", 400),
        (b'{"questions": {"q": {"type": "noul", "instructions": "?"}}}', "malformed_request", 400),
        (b'{"state": "x"}', "malformed_request", 400),
        (b'{"state": "x", "questions": {}}', "malformed_request", 400),
        (b'{"state": "\\ud800", "questions": {"q": {"type": "noul", "instructions": "?"}}}', "malformed_request", 400),
        (b'{"state": NaN, "questions": {"q": {"type": "noul", "instructions": "?"}}}', "malformed_request", 400),
        (b"[" * 100_000 + b"]" * 100_000, "malformed_request", 400),
        (json.dumps({"state": "x" * 50_001, "questions": QUESTIONS}).encode(), "state_too_large", 413),
        (json.dumps({"state": "x", "questions": {f"q{i}": QUESTIONS["refund"] for i in range(65)}}).encode(), "too_many_questions", 413),
        (json.dumps({"state": "x", "questions": QUESTIONS, "model": "klingon"}).encode(), "unknown_model", 422),
        (json.dumps({"state": "x", "questions": {"q": {"type": "choice", "instructions": "?",
                                                       "criteria": [f"o{i}" for i in range(101)]}}}).encode(), "too_large", 413),
    ],
)
def test_bad_requests_get_the_documented_problem(plain, content, code, status):
    r = conforms(post(plain.url, content=content, headers={"Content-Type": "application/json"}))
    assert (r.status_code, r.json()["code"]) == (status, code)
    assert r.headers["content-type"] == "application/problem+json"


def test_every_invalid_question_is_named(plain):
    questions = {
        "ok": QUESTIONS["refund"],
        "bad_type": {"type": "ranking", "instructions": "?"},
        "no_criteria": {"type": "choice", "instructions": "Which?"},
        "repeated": {"type": "choice", "instructions": "Which?", "criteria": ["a", "a"]},
    }
    r = conforms(post(plain.url, {"state": "x", "questions": questions}))
    problem = r.json()
    assert (r.status_code, problem["code"]) == (422, "invalid_question")
    assert [e["question"] for e in problem["errors"]] == ["bad_type", "no_criteria", "repeated"]
    assert problem["errors"][0]["pointer"] == "/questions/bad_type/type"


def test_wrong_media_type_is_415(plain):
    r = conforms(post(plain.url, content=json.dumps(BODY).encode(), headers={"Content-Type": "text/plain"}))
    assert (r.status_code, r.json()["code"]) == (415, "unsupported_media_type")


def test_body_over_the_limit_is_refused_before_it_is_read(plain):
    big = b'{"state": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    r = conforms(post(plain.url, content=big, headers={"Content-Type": "application/json"}))
    assert (r.status_code, r.json()["code"]) == (413, "too_large")

    def chunks():  # no Content-Length: the cap must hold while reading
        for _ in range(40):
            yield b"x" * 65536

    r = conforms(post(plain.url, content=chunks(), headers={"Content-Type": "application/json"}))
    assert (r.status_code, r.json()["code"]) == (413, "too_large")


def test_the_request_token_budget_is_advertised_and_holds(plain):
    # 64 questions at max_len 8192 asked for a minute of inference on the tiny checkpoint.
    budget = conforms(plain_http("GET", plain.url + "/health")).json()["limits"]["max_request_tokens"]
    assert budget == Limits().max_request_tokens == 64 * 512
    noul = QUESTIONS["refund"]
    at_the_bound = {"state": "x", "questions": {f"q{i}": noul for i in range(budget // 8192)}, "max_len": 8192}
    assert conforms(post(plain.url, at_the_bound)).status_code == 200
    expensive = {"state": "x" * 30_000, "questions": {f"q{i}": noul for i in range(64)}, "max_len": 8192}
    r = conforms(post(plain.url, expensive))
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    detail = r.json()["detail"]
    assert "max_request_tokens" in detail and str(budget) in detail and "524288" in detail
    assert r.json()["errors"][0]["pointer"] == "/max_len"
    # The default window counts too: a batch of 64 states with 64 questions is 64 times the budget.
    batch = {"states": ["s"] * 64, "questions": {f"q{i}": noul for i in range(64)}}
    r = conforms(post(plain.url, batch, path="/v1/systemone/batch"))
    assert (r.status_code, r.json()["code"]) == (413, "too_large") and r.json()["errors"][0]["pointer"] == "/questions"
    # Every request the other limits admit at the default window still fits.
    widest = {"state": "x", "questions": {f"q{i}": noul for i in range(64)}}
    assert conforms(post(plain.url, widest)).status_code == 200


# -- authentication -----------------------------------------------------------------------

@pytest.mark.parametrize("auth", [None, "Bearer wrong", "Bearer " + KEY + "x", "Basic " + KEY, "Bearer s\u00e9cret"])
def test_bad_tokens_are_401_without_detail(keyed, auth):
    headers = {"Authorization": auth} if auth else {}
    r = conforms(post(keyed.url, BODY, headers={k: v.encode("utf-8") for k, v in headers.items()}))
    problem = r.json()
    assert (r.status_code, problem["code"]) == (401, "unauthorized") and r.headers["www-authenticate"] == "Bearer"
    assert KEY not in r.text and "wrong" not in r.text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR", "Bearer "])
def test_the_bearer_scheme_is_case_insensitive(keyed, scheme):
    # RFC 9110 section 11.1: the auth scheme is case-insensitive, and 1*SP separates it from the token.
    r = conforms(post(keyed.url, BODY, headers={"Authorization": f"{scheme} {KEY}"}))
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("headers", [
    [("Authorization", "Bearer " + KEY), ("Authorization", "Bearer " + KEY)],
    [("Authorization", "Bearer" + KEY)],
    [("Authorization", "Bearer\t" + KEY)],
    [("Authorization", KEY)],
], ids=["two-headers", "no-space", "tab", "no-scheme"])
def test_a_token_not_sent_as_one_bearer_credential_is_401(keyed, headers):
    r = conforms(plain_http("POST", keyed.url + "/v1/systemone", json=BODY, headers=headers))
    assert (r.status_code, r.json()["code"]) == (401, "unauthorized")


@pytest.mark.parametrize("key", ["", " ", "  sk-surrounded-key", "sk-surrounded-key\n", "sk inner space", "sk-caf\u00e9"],
                         ids=["empty", "blank", "leading", "trailing-newline", "inner-space", "non-ascii"])
def test_a_key_no_client_could_send_is_refused_by_the_settings(key):
    with pytest.raises(ValueError) as refused:
        ServerSettings(api_key=key)
    assert key.strip() == "" or key.strip() not in str(refused.value)


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LAYA_")} | (env or {})
    return subprocess.run([sys.executable, "-m", "pytest_laya_reference", "--port", "0", *args], capture_output=True,
                          text=True, timeout=60, env=environment)


@pytest.mark.parametrize(("args", "env", "origin"), [
    (["--api-key", ""], {}, "--api-key"),
    (["--api-key", " sk-whitespace-canary "], {}, "--api-key"),
    ([], {"LAYA_API_KEY": ""}, "LAYA_API_KEY"),
    ([], {"LAYA_API_KEY": "sk-whitespace-canary\n"}, "LAYA_API_KEY"),
    (["--api-key", ""], {"LAYA_API_KEY": "sk-fine-key"}, "--api-key"),
], ids=["empty-flag", "whitespace-flag", "empty-env", "whitespace-env", "empty-flag-over-env"])
def test_the_command_line_refuses_to_start_with_a_key_that_opens_or_locks_it(args, env, origin):
    # `--api-key ''` used to serve without authentication, silently.
    result = _cli(*args, env=env)
    assert result.returncode == 2 and "ready at" not in result.stdout
    assert f"error: {origin}: the API key" in result.stderr
    assert "sk-whitespace-canary" not in result.stderr + result.stdout


def test_health_shows_liveness_only_without_the_token(keyed):
    assert conforms(plain_http("GET", keyed.url + "/health")).json() == {"status": "ok"}
    assert conforms(plain_http("GET", keyed.url + "/readyz")).json() == {"status": "ok"}
    full = conforms(plain_http("GET", keyed.url + "/health", headers={"Authorization": "Bearer " + KEY})).json()
    assert full["ready"] is True
    assert conforms(post(keyed.url, BODY, headers={"Authorization": "Bearer " + KEY})).status_code == 200


# -- lifecycle and load -------------------------------------------------------------------

def test_not_ready_until_the_engine_is_warm_while_livez_answers():
    gate = threading.Event()
    with serve(ScriptedEngine(ready_gate=gate)) as server:
        assert conforms(plain_http("GET", server.url + "/livez")).status_code == 200
        r = conforms(plain_http("GET", server.url + "/readyz"))
        assert (r.status_code, r.json()["code"]) == (503, "not_ready") and r.headers["retry-after"] == "1"
        r = conforms(post(server.url, BODY))
        assert (r.status_code, r.json()["code"]) == (503, "not_ready")
        assert conforms(plain_http("GET", server.url + "/health")).json()["ready"] is False
        gate.set()
        wait_ready(server.url)
        assert conforms(post(server.url, BODY)).status_code == 200


def test_inference_failure_is_500_with_the_cause_only_in_the_log(caplog):
    with serve(ScriptedEngine(fail_with=RuntimeError("CUDA OOM at /secret/path"))) as server:
        r = conforms(post(server.url, BODY))
    assert (r.status_code, r.json()["code"]) == (500, "inference_failed")
    assert "secret" not in r.text
    assert any("secret" in (rec.exc_text or "") or "secret" in str(rec.exc_info) for rec in caplog.records)


def _slow_upload(url: str) -> socket.socket:
    """Open a request that is still uploading: headers and half a body, then nothing."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"state\": ")
    return sock


def _read_response(sock: socket.socket) -> str:
    """One whole HTTP response from a raw socket (headers and body may arrive apart)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b""
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode("latin-1")


def _one_write(url: str, body: dict = BODY) -> str:
    """A decision sent as one write of head and body, as most clients send a small one."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
        return _read_response(sock)


def test_beyond_max_concurrent_is_503_overloaded_at_once():
    with serve(ScriptedEngine(delay_s=1.0), max_concurrent=1) as server:
        busy = threading.Thread(target=post, args=(server.url, BODY))
        busy.start()
        try:
            time.sleep(0.3)  # the first decision is in inference and holds the only slot
            started = time.monotonic()
            r = conforms(post(server.url, BODY))
            assert time.monotonic() - started < 1.0
            assert (r.status_code, r.json()["code"]) == (503, "overloaded") and r.headers["retry-after"] == "1"
            assert r.json()["detail"] == "1 requests in flight; retry after 1 s"
        finally:
            busy.join()
        assert conforms(post(server.url, BODY)).status_code == 200


def test_tokens_of_inference_in_flight_are_bounded_across_requests():
    # Each request within the per-request budget, the work queued behind the forward passes is
    # bounded too: 16 requests of 4 questions at max_len 8192 are 16 x 7 s of inference on the
    # tiny checkpoint. In flight, all requests together are bounded.
    noul = QUESTIONS["refund"]
    wide = {"state": "x", "questions": {f"q{i}": noul for i in range(4)}, "max_len": 8192}  # 32,768 tokens
    with serve(ScriptedEngine(delay_s=1.5), max_inflight_tokens=40_000) as server:
        assert server.app.state.server.tokens.limit == 40_000
        first = threading.Thread(target=post, args=(server.url, wide))
        first.start()
        try:
            time.sleep(0.3)  # the first holds 32,768 of the 40,000 tokens
            r = conforms(post(server.url, wide))
            assert (r.status_code, r.json()["code"]) == (503, "overloaded") and r.headers["retry-after"] == "1"
            assert r.json()["detail"] == "32768 tokens of inference in flight (at most 40000); retry after 1 s"
            assert conforms(post(server.url, BODY)).status_code == 200  # 3 x 512 tokens still fit
        finally:
            first.join()
        assert conforms(post(server.url, wide)).status_code == 200
    # By default, 4 requests at the per-request budget; 16 of 12 questions at the default window.
    assert ServerSettings().inflight_tokens == 4 * Limits().max_request_tokens >= 16 * 12 * 512
    with pytest.raises(ValueError, match="max_inflight_tokens"):
        ServerSettings(max_inflight_tokens=Limits().max_request_tokens - 1)


def test_a_slow_upload_holds_a_body_read_slot_not_an_inference_slot():
    # 16 slow uploads used to hold every inference slot; now each holds one of max_body_reads.
    with serve(max_concurrent=1, max_body_reads=1) as server:
        holder = _slow_upload(server.url)
        try:
            time.sleep(0.2)
            # A decision whose body came with its head needs no body-read slot, and the one
            # inference slot is free: it is served.
            assert " 200 " in _one_write(server.url).split("\r\n", 1)[0]
            # A second slow upload finds the body-read budget spent: refused at once.
            second = _slow_upload(server.url)
            try:
                second.settimeout(5)
                reply = _read_response(second)
            finally:
                second.close()
            head, _, problem = reply.partition("\r\n\r\n")
            assert " 503 " in head.split("\r\n", 1)[0]
            assert json.loads(problem)["detail"] == "1 request bodies being received; retry after 1 s"
        finally:
            holder.close()
        time.sleep(0.2)
        assert conforms(post(server.url, BODY)).status_code == 200


def test_a_body_that_arrives_too_slowly_is_408_and_frees_its_slot():
    with serve(max_concurrent=1, max_body_reads=1, body_timeout_s=0.3) as server:
        holder = _slow_upload(server.url)
        try:
            holder.settimeout(5)
            reply = _read_response(holder)
        finally:
            holder.close()
        status_line, _, rest = reply.partition("\r\n")
        assert " 408 " in status_line and "body_timeout" in rest and "connection: close" in rest.lower()
        assert conforms(post(server.url, BODY)).status_code == 200
        assert server.app.state.server.body_reads.in_flight == 0


def test_livez_does_not_wait_for_inference():
    # Inference holds the only pass for 3 s; /livez must not wait for it. The bound leaves room
    # for a loaded box; the milliseconds it takes are measured by bench/load_reference_server.py.
    with serve(ScriptedEngine(delay_s=3.0), passes=1) as server:
        busy = threading.Thread(target=post, args=(server.url, BODY))
        busy.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert plain_http("GET", server.url + "/livez").status_code == 200
        elapsed = time.monotonic() - started
        busy.join()
    assert elapsed < 1.0


def test_concurrent_requests_share_forward_passes():
    engine = ScriptedEngine(delay_s=0.05)
    with serve(engine, batch_window_ms=20, max_batch=16) as server:
        threads = [threading.Thread(target=post, args=(server.url, BODY)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sum(engine.calls) >= 8 and len(engine.calls) < 8


def test_a_batch_over_the_state_limit_is_413(plain):
    r = conforms(post(plain.url, {"states": ["s"] * 65, "questions": QUESTIONS}, path="/v1/systemone/batch"))
    assert (r.status_code, r.json()["code"]) == (413, "too_large")
    r = conforms(post(plain.url, {"states": [], "questions": QUESTIONS}, path="/v1/systemone/batch"))
    assert (r.status_code, r.json()["code"]) == (400, "malformed_request")


@pytest.mark.parametrize("absent", [("starlette",), ("starlette", "uvicorn", "laya", "torch")])
def test_without_the_reference_extra_the_server_says_what_to_install(absent):
    # A core install: the extra's modules cannot be imported (as if never installed).
    code = (f"import sys\nfor name in {absent!r}:\n    sys.modules[name] = None\n"
            "from pytest_laya_reference.__main__ import main\nsys.exit(main(['--port', '0']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert f"{', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not installed" in done.stderr
    assert "pip install 'pytest-laya[reference]'" in done.stderr
