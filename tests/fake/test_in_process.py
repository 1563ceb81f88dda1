"""The fake in process: an httpx transport and an http.client/urllib/requests shim, no socket.

Both answer through `FakeLaya.exchange`, the loopback server's own path, so their answers are the
loopback server's byte for byte (request ids and timings aside). vcrpy, which the plugin's
cassettes are built on, records and replays both.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import urllib.request

import httpx
import pytest

from pytest_laya.fake import FLAVORS, IN_PROCESS_URL, FakeLaya, FakeLayaServer
from pytest_laya.fake.shim import served_hosts
from pytest_laya.specs import Spec

requests = pytest.importorskip("requests")

TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "tech": "Bugs"}}
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
BODY = {"state": "I was charged twice.", "questions": {"team": TEAM, "refund": REFUND}}
VARYING = {"x-request-id", "server-timing", "x-inference-time-ms", "connection"}


def comparable(response) -> tuple:
    body = response.json()
    if isinstance(body, dict):
        body.pop("request_id", None)
    headers = {k.lower(): v for k, v in response.headers.items() if k.lower() not in VARYING}
    return response.status_code, headers, body


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize(("path", "body"), [
    ("/v1/systemone", BODY),
    ("/v1/systemone/batch", {"states": ["a", "b"], "questions": {"refund": REFUND}}),
    ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "ranking"}}}),
    ("/v1/systemone", {"questions": {}}),
])
def test_the_transport_answers_as_the_loopback_server_does(flavor, path, body):
    with FakeLayaServer(flavor=flavor) as server:
        server.decide({"refund": 0.8})
        over_socket = httpx.post(server.url + path, json=body)
        with httpx.Client(transport=server.transport(), base_url="http://laya.invalid") as client:
            in_process = client.post(path, json=body)
        server.unpin_all()
    assert comparable(in_process) == comparable(over_socket)
    spec = Spec.target() if flavor == "target" else Spec.current()
    assert spec.violations("POST", path, in_process.status_code, in_process.headers, in_process.content) == []
    assert [call.url for call in server.calls] == [server.url + path, "http://laya.invalid" + path]


def test_the_transport_serves_async_clients_and_other_routes():
    fake = FakeLaya()
    fake.pin({"team": "tech"})

    async def main():
        async with httpx.AsyncClient(transport=fake.transport(), base_url="http://laya.invalid") as client:
            decided = await client.post("/v1/systemone", json=BODY)
            health = await client.get("/health")
            missing = await client.get("/nowhere")
        return decided, health, missing

    decided, health, missing = asyncio.run(main())
    assert decided.json()["answers"]["team"]["choice"] == "tech"
    assert health.json()["models"] == {"fake-laya": fake.served_by} and missing.status_code == 404
    assert len(fake.calls) == 1  # decisions only


def test_the_transport_checks_the_key_as_the_server_does():
    with FakeLayaServer(api_key="key-not-a-secret-01") as server:
        with httpx.Client(transport=server.transport(), base_url="http://laya.invalid") as client:
            assert client.post("/v1/systemone", json=BODY).status_code == 401
            good = client.post("/v1/systemone", json=BODY, headers={"Authorization": "Bearer key-not-a-secret-01"})
    assert good.status_code == 200
    assert [c.headers.get("authorization") for c in server.calls] == [None, "Bearer <redacted>"]


# --------------------------------------------------------------------------- the http.client shim


def post_with_http_client(url_host: str, port: int | None, body: dict) -> tuple[int, dict]:
    connection = http.client.HTTPConnection(url_host, port)
    connection.request("POST", "/v1/systemone", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = (response.status, json.loads(response.read()))
    connection.close()
    return answer


def post_with_urllib(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/v1/systemone", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return response.status, json.loads(response.read())


def test_the_shim_serves_http_client_urllib_and_requests_in_process():
    fake = FakeLaya()
    fake.pin({"team": "tech", "refund": 0.93})
    with fake.intercept() as host:
        assert host.url == IN_PROCESS_URL
        for status, body in [post_with_http_client("laya.invalid", None, BODY), post_with_urllib(host.url, BODY),
                             (lambda r: (r.status_code, r.json()))(requests.post(host.url + "/v1/systemone", json=BODY))]:
            assert status == 200 and body["answers"]["team"]["choice"] == "tech"
            assert body["answers"]["refund"]["noul"] == 0.93
        with requests.Session() as session:  # a pooled session: each answer closes, the next reconnects
            assert [session.post(host.url + "/v1/systemone", json=BODY).status_code for _ in range(3)] == [200] * 3
    assert len(fake.calls) == 6 and {c.url for c in fake.calls} == {"http://laya.invalid/v1/systemone"}
    assert served_hosts() == []


def test_the_shim_serves_only_its_host_and_undoes_its_patches():
    original = http.client.HTTPConnection.connect
    fake = FakeLaya()
    with FakeLayaServer() as loopback, fake.intercept("http://laya.test:8080") as host:
        assert http.client.HTTPConnection.connect is not original
        port = int(loopback.url.rsplit(":", 1)[1])
        assert post_with_http_client("127.0.0.1", port, BODY)[0] == 200  # a real socket, untouched
        assert requests.post(loopback.url + "/v1/systemone", json=BODY).status_code == 200
        assert post_with_urllib(host.url, BODY)[0] == 200
        with pytest.raises(ValueError, match="already served in process"):
            fake.intercept("http://laya.test:8080").__enter__()
    assert len(loopback.calls) == 2 and len(fake.calls) == 1
    assert http.client.HTTPConnection.connect is original
    with pytest.raises(ValueError, match="plain http:// URL"):
        fake.intercept("https://laya.invalid")
    with pytest.raises(ValueError, match="a base URL"):
        fake.intercept("http://laya.invalid/v1")


def test_the_shim_refuses_https_to_its_host():
    with FakeLaya().intercept("http://laya.invalid:443"):
        with pytest.raises(ConnectionError, match="speaks plain http://"):
            http.client.HTTPSConnection("laya.invalid", 443).connect()


def test_hosts_open_and_close_from_many_threads():
    fakes = [FakeLaya() for _ in range(4)]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with fakes[i].intercept(f"http://laya-{i}.invalid") as host:
                for _ in range(10):
                    assert requests.post(host.url + "/v1/systemone", json=BODY).status_code == 200
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == [] and [len(f.calls) for f in fakes] == [10] * 4 and served_hosts() == []


# --------------------------------------------------------------------------- vcrpy on top


def test_vcrpy_records_and_replays_the_in_process_fake(tmp_path):
    """The plugin's cassettes are vcrpy's: a cassette around either in-process path records the
    fake's answers, and replays them without reaching it."""
    vcr = pytest.importorskip("vcr")
    fake = FakeLaya()
    fake.pin({"team": "tech"})
    recorder = vcr.VCR(match_on=["method", "path", "body"])

    def decide_everywhere() -> list:
        with httpx.Client(transport=fake.transport(), base_url="http://laya.invalid") as client:
            via_httpx = client.post("/v1/systemone", json=BODY).json()

        async def via_async():
            async with httpx.AsyncClient(transport=fake.transport(), base_url="http://laya.invalid") as client:
                return (await client.post("/v1/systemone", json={**BODY, "state": "async"})).json()

        with fake.intercept() as host:
            via_requests = requests.post(host.url + "/v1/systemone", json={**BODY, "state": "requests"}).json()
            via_urllib = post_with_urllib(host.url, {**BODY, "state": "urllib"})[1]
        return [via_httpx, asyncio.run(via_async()), via_requests, via_urllib]

    with recorder.use_cassette(str(tmp_path / "fake.yaml"), record_mode="all") as cassette:
        recorded = decide_everywhere()
    assert len(cassette) == 4 and len(fake.calls) == 4
    with recorder.use_cassette(str(tmp_path / "fake.yaml"), record_mode="none") as cassette:
        replayed = decide_everywhere()
    assert cassette.play_count == 4 and len(fake.calls) == 4  # replay never reached the fake
    assert replayed == recorded and {r["answers"]["team"]["choice"] for r in replayed} == {"tech"}
