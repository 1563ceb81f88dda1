"""The served client on recorded real traffic, replayed through `httpx.MockTransport`."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from pytest_laya import AsyncServedLayaClient, Choice, LayaCallError, LayaConfigError, ServedLayaClient
from tests.helpers.recorded import recordings

BY_NAME = {r.id: r for r in recordings()}
# unknown_model is answered by another model than the one asked for: see its own test.
DECISIONS = [r for r in recordings() if r.status == 200 and r.path == "/v1/systemone" and r.request
             and r.case != "unknown_model"]


def replay(*responses, health=None, seen=None):
    """A transport answering decisions with the next (status, headers, body), the last one
    repeating, and /health with `health` (or 404)."""
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.path == "/health":
            status, headers, body = health or (404, {"content-type": "application/json"}, {"detail": "Not Found"})
        else:
            status, headers, body = queue.pop(0) if len(queue) > 1 else queue[0]
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return httpx.Response(status, headers=headers, content=content)

    return handler


def answer_of(rec):
    return (rec.status, {"content-type": rec.content_type}, rec.body)


@pytest.mark.parametrize("rec", DECISIONS, ids=lambda r: r.id)
def test_every_recorded_answer_becomes_a_decision(rec):
    request = rec.request
    transport = httpx.MockTransport(replay(answer_of(rec)))
    with ServedLayaClient("http://laya.test", model=request.get("model"), transport=transport) as client:
        decision = client.decide(request["state"], request["questions"], allow_truncation=True)
    assert list(decision.answers) == list(request["questions"])
    for qid, answer in decision.answers.items():
        raw = rec.body["answers"][qid]
        assert answer.type == raw["type"]
        if isinstance(answer, Choice):
            assert answer.key == raw["choice"] and dict(answer.probabilities) == raw["probabilities"]
    assert decision.usage.input_tokens == rec.body["usage"]["input_tokens"]


def test_identity_comes_from_health_when_the_answer_has_no_served_by():
    noul, health = BY_NAME["system1/worker.noul.json"], BY_NAME["system1/worker.health.json"]
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(replay(answer_of(noul), health=answer_of(health), seen=seen))
    with ServedLayaClient("http://laya.test", model="english", transport=transport) as client:
        decision = client.decide(noul.request["state"], noul.request["questions"])
        again = client.decide(noul.request["state"], noul.request["questions"])
    assert decision.model == "convaiinnovations/laya@55cf4c4ebb4ebe31b2550e8bdf3bd21b99753851"
    assert decision.provenance.served_by is None
    assert again.model == decision.model
    # /health is read once and trusted for 30 s, not once per decision.
    assert [r.url.path for r in seen] == ["/v1/systemone", "/health", "/v1/systemone"]


def test_identity_falls_back_to_routing_repo_with_unknown_revision():
    rec = BY_NAME["system1/laya-serve.noul.json"]
    health = BY_NAME["system1/laya-serve.health.json"]
    transport = httpx.MockTransport(replay(answer_of(rec), health=answer_of(health)))
    with ServedLayaClient("http://laya.test", model="english", transport=transport) as client:
        decision = client.decide(rec.request["state"], rec.request["questions"])
    assert decision.model == "convaiinnovations/laya@unknown"


def test_served_by_in_the_answer_wins_and_no_health_read_is_made():
    rec = BY_NAME["system1/laya-serve.noul.json"]
    body = dict(rec.body, served_by={"checkpoint": "laya-tiny", "revision": "sha256:abc", "device": "cpu",
                                     "weights_dtype": "float32", "compiled": False})
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(replay((200, {"content-type": "application/json"}, body), seen=seen))
    with ServedLayaClient("http://laya.test", model="english", transport=transport) as client:
        decision = client.decide(rec.request["state"], rec.request["questions"])
        assert client.identity().model == "laya-tiny@sha256:abc"
    assert decision.model == "laya-tiny@sha256:abc"
    assert decision.provenance.served_by.device == "cpu"
    assert [r.url.path for r in seen] == ["/v1/systemone"]


@pytest.mark.parametrize(
    ("name", "error", "code", "status", "detail"),
    [
        ("system1/worker.unauthorized.json", LayaConfigError, "unauthorized", 401, "invalid or missing bearer token"),
        ("system1/laya-serve.invalid_question.json", LayaCallError, "rejected", 422, "unknown type 'bogus'"),
        ("system1/frontend.too_many_questions.json", LayaCallError, "rejected", 413, "too many questions"),
        ("system1/worker.malformed_json.json", LayaCallError, "rejected", 400, "must be valid JSON"),
        ("system1/frontend-down.unreachable.json", LayaCallError, "unavailable", 502, "backend unavailable"),
        ("laya-serve-0.4.15/overload.yaml", LayaCallError, "unavailable", 503, "server busy"),
        ("laya-serve-0.4.15/state_too_large.yaml", LayaCallError, "rejected", 413, "state too large"),
    ],
)
def test_recorded_errors_map_to_stable_codes_with_the_servers_words(name, error, code, status, detail):
    rec = BY_NAME[name]
    headers = {"content-type": rec.content_type, **({"retry-after": "30"} if status == 503 else {})}
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(replay((rec.status, headers, rec.body), seen=seen))
    with ServedLayaClient("http://laya.test", transport=transport, timeout_s=2) as client:
        with pytest.raises(error) as info:
            client.decide("state", {"q": {"type": "noul", "instructions": "?"}})
    err = info.value
    assert (err.code, err.status) == (code, status)
    assert detail in str(err) and err.request_id in str(err)
    assert err.request_id == seen[0].headers["x-request-id"]
    # 502 is retried once with the same request id; a 503 whose Retry-After exceeds the deadline is not.
    assert len(seen) == (2 if status == 502 else 1)
    assert {r.headers["x-request-id"] for r in seen} == {err.request_id}


def test_a_server_that_ignored_the_requested_model_is_a_config_error():
    rec = BY_NAME["laya-serve-0.4.15/unknown_model.yaml"]
    transport = httpx.MockTransport(replay(answer_of(rec)))
    with ServedLayaClient("http://laya.test", model="no-such-model", transport=transport) as client:
        with pytest.raises(LayaConfigError, match="routed to 'english'") as info:
            client.decide(rec.request["state"], rec.request["questions"])
    assert info.value.code == "model_ignored"


def test_a_filled_token_window_is_a_config_error_unless_allowed():
    rec = BY_NAME["laya-serve-0.4.15/long_state.yaml"]
    transport = httpx.MockTransport(replay(answer_of(rec)))
    with ServedLayaClient("http://laya.test", model="tiny", transport=transport) as client:
        with pytest.raises(LayaConfigError, match="token window") as info:
            client.decide(rec.request["state"], rec.request["questions"])
        assert info.value.code == "token_window_full"
        assert client.decide(rec.request["state"], rec.request["questions"], allow_truncation=True).usage.truncated


def test_requests_carry_the_protocol_headers_and_the_body_servers_expect():
    rec = BY_NAME["system1/laya-serve.combined.json"]
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(replay(answer_of(rec), seen=seen))
    with ServedLayaClient("http://laya.test/", model="english", api_key="sk-canary-123", transport=transport) as client:
        client.decide(rec.request["state"], rec.request["questions"], request_id="my-id-1")
        assert "sk-canary-123" not in repr(client)
    sent = seen[0]
    assert sent.url == "http://laya.test/v1/systemone"
    assert json.loads(sent.content) == rec.request
    assert sent.headers["authorization"] == "Bearer sk-canary-123"
    assert sent.headers["x-request-id"] == "my-id-1"
    assert sent.headers["content-type"] == "application/json"
    assert len(sent.headers["traceparent"].split("-")) == 4


def test_the_api_key_never_reaches_an_error_message():
    transport = httpx.MockTransport(replay((401, {"content-type": "application/json"}, {"detail": "nope"})))
    with ServedLayaClient("http://laya.test", api_key="sk-canary-123", transport=transport) as client:
        with pytest.raises(LayaConfigError) as info:
            client.decide("s", {"q": {"type": "noul", "instructions": "?"}})
    assert "sk-canary-123" not in str(info.value) and "sk-canary-123" not in repr(info.value.__dict__)


@pytest.mark.parametrize(
    ("status", "headers", "body", "message"),
    [
        (200, {"content-type": "text/html"}, "<html>", "expected application/json"),
        (200, {"content-type": "application/json"}, '{"answers": {', "not valid JSON"),
        (200, {"content-type": "application/json"}, "[1, 2]", "must be a JSON object"),
        (200, {"content-type": "application/json"}, '{"answers": {}, "usage": {"input_tokens": 1}}', "no answer for"),
    ],
)
def test_unreadable_answers_are_call_errors(status, headers, body, message):
    transport = httpx.MockTransport(replay((status, headers, body)))
    with ServedLayaClient("http://laya.test", transport=transport) as client:
        with pytest.raises(LayaCallError, match=message):
            client.decide("s", {"q": {"type": "noul", "instructions": "?"}})


def test_health_and_identity():
    health = BY_NAME["system1/worker.health.json"]
    transport = httpx.MockTransport(replay(answer_of(health), health=answer_of(health)))
    with ServedLayaClient("http://laya.test", model="english", transport=transport) as client:
        doc = client.health()
        identity = client.identity()
    assert doc.ready is True and doc.loaded == ["english"]
    assert identity.source == "health" and identity.weights_dtype == "torch.float16" and identity.compiled is True


def test_health_reads_carry_the_key_and_a_request_id_and_an_explicit_read_is_remembered():
    # A keyed server answers /health only with the key; logs pair the identity read with its
    # decision by the request id.
    noul, health = BY_NAME["system1/worker.noul.json"], BY_NAME["system1/worker.health.json"]
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(replay(answer_of(noul), health=answer_of(health), seen=seen))
    with ServedLayaClient("http://laya.test", model="english", api_key="sk-health-key", transport=transport) as client:
        client.decide(noul.request["state"], noul.request["questions"], request_id="decision-1")
    decided, identity_read = seen
    assert identity_read.method == "GET" and identity_read.url.path == "/health"
    assert identity_read.headers["authorization"] == decided.headers["authorization"] == "Bearer sk-health-key"
    assert identity_read.headers["x-request-id"] == decided.headers["x-request-id"] == "decision-1"

    seen.clear()
    with ServedLayaClient("http://laya.test", model="english", api_key="sk-health-key", transport=transport) as client:
        client.health()
        decision = client.decide(noul.request["state"], noul.request["questions"])
    assert [r.url.path for r in seen] == ["/health", "/v1/systemone"]  # the explicit read served the identity
    assert seen[0].method == "GET" and seen[0].headers["authorization"] == "Bearer sk-health-key"
    assert seen[0].headers.get("x-request-id")
    assert decision.model == "convaiinnovations/laya@55cf4c4ebb4ebe31b2550e8bdf3bd21b99753851"


async def test_async_client_gives_the_same_decision_as_the_sync_one():
    rec = BY_NAME["system1/frontend.combined.json"]
    health = BY_NAME["system1/frontend.health.json"]
    sync = ServedLayaClient("http://laya.test", model="english", transport=httpx.MockTransport(replay(answer_of(rec), health=answer_of(health))))
    expected = sync.decide(rec.request["state"], rec.request["questions"], request_id="same")
    async with AsyncServedLayaClient("http://laya.test", model="english",
                                     transport=httpx.MockTransport(replay(answer_of(rec), health=answer_of(health)))) as client:
        got = await client.decide(rec.request["state"], rec.request["questions"], request_id="same")
    assert got.answers == expected.answers and got.usage == expected.usage and got.model == expected.model
    assert got.provenance.request_id == expected.provenance.request_id == "same"


@pytest.mark.parametrize("health, words", [
    ((200, {"content-type": "text/html"}, "<html>proxy login</html>"), "GET /health did not return a JSON health document"),
    ((404, {"content-type": "application/json"}, {"detail": "Not Found"}), "GET /health did not return a JSON health document"),
])
def test_an_explicit_health_read_of_something_else_is_a_bad_response(health, words):
    transport = httpx.MockTransport(replay(answer_of(BY_NAME["system1/worker.noul.json"]), health=health))
    with ServedLayaClient("http://laya.test", model="english", transport=transport) as client:
        with pytest.raises(LayaCallError, match=words) as raised:
            client.health()
    assert (raised.value.code, raised.value.status) == ("bad_response", health[0])


def test_a_model_named_in_the_call_is_the_one_asked_for():
    noul = BY_NAME["system1/worker.noul.json"]
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(replay(answer_of(noul), health=answer_of(BY_NAME["system1/worker.health.json"]), seen=seen))
    with ServedLayaClient("http://laya.test", model="default-model", transport=transport) as client:
        decision = client.decide(noul.request["state"], noul.request["questions"], model="english")
    assert json.loads(seen[0].content)["model"] == "english" and decision.answers


def test_every_exchange_is_observed_with_its_elapsed_time():
    noul = BY_NAME["system1/worker.noul.json"]
    slow = replay(answer_of(noul), health=answer_of(BY_NAME["system1/worker.health.json"]))

    def handler(request: httpx.Request) -> httpx.Response:
        time.sleep(0.2 if request.url.path != "/health" else 0.0)
        return slow(request)

    observed = []
    with ServedLayaClient("http://laya.test", model="english", transport=httpx.MockTransport(handler),
                          on_exchange=observed.append) as client:
        started = time.monotonic()
        client.decide(noul.request["state"], noul.request["questions"])
        total = time.monotonic() - started
    decision = next(x for x in observed if x.path == "/v1/systemone")
    assert 0.2 <= decision.elapsed_s <= total and decision.status == 200 and decision.method == "POST"
    # What was sent comes with what came back: an observer (the spec check, a recorder) sees both.
    sent = json.loads(decision.request_body)
    assert (sent["state"], sent["questions"]) == (noul.request["state"], noul.request["questions"])
    assert [x.request_body for x in observed if x.path == "/health"] == [None]
