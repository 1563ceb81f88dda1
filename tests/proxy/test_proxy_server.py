"""The proxy's HTTP server under real clients, over real loopback sockets: keep-alive, chunked
bodies, gzip, 32 clients at once, slow and vanishing clients, and the reference server's limits."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_laya.cassettes import laya_vcr
from pytest_laya.faults.loopback import closed_loopback_url
from pytest_laya.intercept import LayaRoute
from pytest_laya.proxy import IncomingRequest, ProxyLimits, ProxyServer, Reply, RouteTarget, Upstream

WAIT_S = 10.0  # a bound on waiting for what must happen, never a measurement


def echo(request: IncomingRequest) -> Reply:
    body = json.dumps({"method": request.method, "target": request.target, "length": len(request.body),
                       "body": request.body.decode("latin-1")[:100]}).encode()
    return Reply(200, [("Content-Type", "application/json")], body)


@contextlib.contextmanager
def proxy(target=echo, **limits):
    server = ProxyServer(target=target, limits=ProxyLimits(**limits)).start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: ProxyServer) -> socket.socket:
    host, port = server.server_address[:2]
    sock = socket.create_connection((host, port), timeout=WAIT_S)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closes `sock` (read until EOF or a reset, within WAIT_S)."""
    sock.settimeout(WAIT_S)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_keep_alive_serves_many_requests_on_one_connection():
    with proxy() as server, connect(server) as sock:
        for n in range(3):
            sock.sendall(f"POST /v1/systemone?n={n} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode())
            status, headers, body = read_response(sock)
            assert status == 200 and json.loads(body)["target"] == f"/v1/systemone?n={n}"
            assert "connection" not in headers  # kept open
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status, headers, _ = read_response(sock)
        assert status == 200 and headers["connection"] == "close"
        assert closed_by_peer(sock)


def test_a_chunked_body_arrives_whole():
    with proxy() as server, connect(server) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5;ext=1\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n")
        status, _, body = read_response(sock)
        assert status == 200 and json.loads(body)["body"] == '{"a": 1}'


@pytest.mark.parametrize("request_bytes, status", [
    (b"POST / HTTP/1.1\r\nContent-Length: 2000\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"100\r\n" + b"x" * 256 + b"\r\n" * 1 + b"400\r\n", 413),
    (b"GET / HTTP/1.1\r\nX-Big: " + b"y" * 3000 + b"\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(20)) + b"\r\n", 431),
    (b"NONSENSE\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
])
def test_the_limits_answer_a_problem_and_close(request_bytes, status):
    with proxy(max_body_bytes=1024, max_head_bytes=2048, max_headers=10) as server, connect(server) as sock:
        sock.sendall(request_bytes)
        got, headers, body = read_response(sock)
        assert got == status
        assert headers["content-type"] == "application/problem+json" and json.loads(body)["status"] == status
        assert closed_by_peer(sock)


def test_an_idle_kept_alive_connection_is_closed():
    with proxy(keep_alive_timeout_s=0.2) as server, connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert read_response(sock)[0] == 200
        assert closed_by_peer(sock)  # then nothing: closed after keep_alive_timeout_s


def test_a_slow_head_and_a_slow_body_are_cut_off():
    with proxy(head_timeout_s=0.2, body_timeout_s=0.2) as server:
        with connect(server) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nX-Slow: ")  # and never the rest
            assert closed_by_peer(sock)
        with connect(server) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345")
            assert read_response(sock)[0] == 408


def wait_until(condition) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_vanishing_clients_cost_nothing_and_the_proxy_goes_on():
    with proxy() as server:
        for sent in (b"POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\nhalf", b"GET / HT", b""):
            sock = connect(server)
            sock.sendall(sent)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()  # a reset
        assert wait_until(lambda: server.open_connections == 0)
        with connect(server) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert read_response(sock)[0] == 200


def test_thirty_two_clients_are_served_at_once():
    clients = 32
    together = threading.Barrier(clients, timeout=6 * WAIT_S)  # generous: 32 threads on a busy machine

    def target(request: IncomingRequest) -> Reply:
        together.wait()  # breaks unless all 32 requests are in the proxy at the same time
        return echo(request)

    results: list[int] = []
    with proxy(target) as server:
        host, port = server.server_address[:2]

        def client(n: int) -> None:
            connection = http.client.HTTPConnection(host, port, timeout=6 * WAIT_S)
            connection.request("POST", f"/v1/systemone?client={n}", body=b"{}")
            response = connection.getresponse()
            response.read()
            results.append(response.status)
            connection.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(6 * WAIT_S)
    assert results == [200] * clients


def test_connections_over_the_cap_are_closed_at_once():
    with proxy(max_connections=2) as server:
        held = [connect(server), connect(server)]
        assert wait_until(lambda: server.open_connections == 2)
        with connect(server) as extra:
            assert closed_by_peer(extra)
        for sock in held:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert read_response(sock)[0] == 200
            sock.close()


def test_no_test_routed_and_a_broken_target_are_problems():
    def broken(request: IncomingRequest) -> Reply:
        raise RuntimeError("a bug")

    with proxy(ProxyServer.no_target) as server, connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        status, _, body = read_response(sock)
        assert status == 503 and json.loads(body)["code"] == "no_route"
        server.target = broken
        sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
        status, _, body = read_response(sock)
        assert status == 500 and json.loads(body)["code"] == "proxy_error"


def test_the_proxy_binds_loopback_only_unless_told():
    with pytest.raises(ValueError, match="loopback"):
        ProxyServer("0.0.0.0")


ANSWER = {"model": "m", "answers": {"refund": {"type": "noul", "noul": 0.9, "confidence": 0.9}},
          "usage": {"input_tokens": 1, "output_tokens": 0}}


class _Gzipping(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = gzip.compress(json.dumps(ANSWER).encode())
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def gzipping_upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gzipping)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def capture_route() -> LayaRoute:
    handle = laya_vcr(record=True, cassette_dir=None, api_key=None, strict=False).open("<capture>")
    handle.discard()
    return LayaRoute(handle.cassette, kind="record")


def test_a_gzipped_answer_reaches_the_client_as_sent_and_the_route_reads_it_decoded(gzipping_upstream):
    route = capture_route()
    upstream = Upstream(gzipping_upstream)
    with proxy(RouteTarget(route, upstream=upstream, origin=gzipping_upstream)) as server, connect(server) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nAccept-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}")
        status, headers, body = read_response(sock)
    upstream.close()
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(body)) == ANSWER
    [exchange] = route.exchanges
    assert json.loads(exchange.body) == ANSWER
    assert route.calls[0].status == 200


def test_an_unreachable_upstream_is_a_bad_gateway_problem():
    route = capture_route()
    upstream = Upstream(closed_loopback_url())
    with proxy(RouteTarget(route, upstream=upstream, origin="http://unused")) as server, connect(server) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        status, _, body = read_response(sock)
    upstream.close()
    assert status == 502 and json.loads(body)["code"] == "backend_unavailable"
    assert route.exchanges == []  # nothing answered, nothing recorded
