"""The served client over HTTPS, against a loopback TLS server with a test CA.

Served Laya often sits behind a TLS proxy with a company CA. The client trusts what httpx trusts
(certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``); the TLS handshake counts against the
deadline like every other socket operation. The certificates are in tests/data/tls (``make.sh``
there regenerates them).
"""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pytest_laya import LayaCallError, LayaConfigError, ServedLayaClient
from tests.client.test_client_faults import ANSWER, DEADLINE_S, SLACK_S, decide
from tests.client.test_client_stalled_sockets import decide_within
from tests.helpers.pytester_runs import run
from tests.helpers.servers import silent_server

TLS = Path(__file__).parents[1] / "data" / "tls"


class _HttpsServer(ThreadingHTTPServer):
    """Counts the connections it accepts, handshakes that fail included.

    Each handshake runs in its connection's thread with a time limit, never in the accept loop:
    a client that stalls or breaks its side of the handshake cannot stop the server from
    shutting down (the test then fails instead of hanging in its teardown).
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answering)
        self.connections = 0
        self.paths: list[str] = []
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(TLS / "server.pem", TLS / "server.key")

    def get_request(self):  # type: ignore[no-untyped-def]
        self.connections += 1
        return super().get_request()

    def finish_request(self, request, client_address):  # type: ignore[no-untyped-def]
        request.settimeout(5)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except OSError:  # ssl.SSLError included: the client refused the certificate, or stalled
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            tls.close()


class _Answering(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_server() -> Iterator[_HttpsServer]:
    """A loopback HTTPS server answering every POST, with a certificate signed by the test CA."""
    server = _HttpsServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A loopback port that accepts connections and never says a word (no TLS handshake)."""
    with silent_server() as port:
        yield f"https://127.0.0.1:{port}"


@pytest.fixture
def only_certifi(monkeypatch) -> None:
    """Neither SSL_CERT_FILE nor SSL_CERT_DIR set: the client trusts certifi's bundle alone."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


def url_of(server: _HttpsServer) -> str:
    return f"https://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(params=["sync", "async"])
def kind(request):
    return request.param


def test_a_decision_over_https_when_the_servers_ca_is_trusted(kind, https_server, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))
    decision, _ = decide(kind, url_of(https_server))
    assert not isinstance(decision, Exception), decision
    assert decision.answers["refund"].p == 0.9 and https_server.paths == ["/v1/systemone"]


def test_an_untrusted_certificate_is_a_config_error_that_says_what_to_do(kind, https_server, only_certifi):
    error, _ = decide(kind, url_of(https_server))
    # Retrying cannot make the certificate trusted: one attempt, and the way to trust it.
    assert isinstance(error, LayaConfigError), error
    assert error.code == "untrusted_certificate"
    assert "certificate verify failed" in str(error) and "SSL_CERT_FILE" in str(error)
    assert https_server.connections == 1 and https_server.paths == []


def test_trust_follows_ssl_cert_file_as_it_is_when_a_client_is_built(kind, https_server, only_certifi, monkeypatch):
    # The CA bundle is read once per setting, not once per process: a test that sets
    # SSL_CERT_FILE (or clears it) changes what the next client trusts.
    url = url_of(https_server)
    assert isinstance(decide(kind, url)[0], LayaConfigError)
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))
    assert not isinstance(decide(kind, url)[0], Exception)
    monkeypatch.delenv("SSL_CERT_FILE")
    assert isinstance(decide(kind, url)[0], LayaConfigError)


def test_a_tls_handshake_that_never_answers_ends_at_the_deadline(kind, silent_listener):
    error, elapsed = decide_within(kind, silent_listener)
    assert isinstance(error, LayaCallError) and error.code == "deadline_exceeded", error
    assert DEADLINE_S * 0.9 <= elapsed < DEADLINE_S + SLACK_S


def test_an_explicit_health_read_of_an_untrusted_server_says_what_to_do(https_server, only_certifi):
    with ServedLayaClient(url_of(https_server), timeout_s=DEADLINE_S) as client, pytest.raises(LayaConfigError) as caught:
        client.health()
    assert caught.value.code == "untrusted_certificate" and "SSL_CERT_FILE" in str(caught.value)


def test_a_run_against_an_untrusted_server_stops_at_once_saying_what_to_do(pytester, https_server, only_certifi,
                                                                           monkeypatch):
    # The plugin's start-up read of /health: the server is there, the client will not talk to it.
    pytester.makepyfile(test_it="def test_it(laya_client):\n    pass\n")
    result = run(pytester, "--laya-mode=live", f"--laya-url={url_of(https_server)}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--laya-url https://127.0.0.1:*: the TLS certificate of https://127.0.0.1:* is not trusted (*): set "
                                 "SSL_CERT_FILE (or SSL_CERT_DIR) to the CA bundle that signed it*"])
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))
    run(pytester, "--laya-mode=live", f"--laya-url={url_of(https_server)}").assert_outcomes(passed=1)


def test_https_to_a_plain_http_server_says_to_use_http_not_that_it_is_down(kind):
    # The TLS handshake got an HTTP answer: the server runs; the URL's scheme is wrong. Not retried.
    from pytest_laya.fake import FakeLayaServer

    with FakeLayaServer() as fake:
        port = fake.url.rsplit(":", 1)[1]
        error, _ = decide(kind, f"https://127.0.0.1:{port}")
        assert len(fake.calls) == 0
    assert isinstance(error, LayaConfigError), error
    assert error.code == "tls_handshake_failed"
    assert f"if the server speaks plain HTTP, use http://127.0.0.1:{port}" in str(error)
    assert "is the server running" not in str(error)


def test_a_run_with_https_to_a_plain_http_server_stops_at_once_saying_so(pytester):
    from pytest_laya.fake import FakeLayaServer

    pytester.makepyfile(test_it="def test_it(laya_client):\n    pass\n")
    with FakeLayaServer() as fake:
        url = fake.url.replace("http://", "https://")
        result = run(pytester, "--laya-mode=live", f"--laya-url={url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --laya-url {url}: the TLS handshake with {url} failed (*): if the server "
                                 f"speaks plain HTTP, use {fake.url}*"])
