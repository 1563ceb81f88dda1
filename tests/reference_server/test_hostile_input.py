"""The reference server (real Laya, tiny checkpoint) under hostile clients, over a real socket.

What a public endpoint gets sent: bodies dripped byte by byte from many connections, request
heads that never finish, bodies just under and just over each advertised limit (the request
token budget included), deep nesting, lone surrogates and invalid UTF-8, huge option lists, a
million-character `instructions`, wrong and absent Content-Length, pipelined requests, clients
that vanish mid-body and mid-inference. (Floods of connections, and running out of file
descriptors, are in tests/reference_server/test_reference_hardening_connections.py.) Throughout each test a probe reads
`/livez` on a fresh connection every 100 ms; the test fails if one probe fails or is slower than
`LIVEZ_BOUND_S`, a bound generous enough for a loaded 2-core box (the measured figures, in
milliseconds, are in docs/reliability.md, from bench/load_reference_server.py).

Every response the app sends is held to `Spec.target()`. The only responses outside the spec are
uvicorn's own `400 Invalid HTTP request received.` for bytes that are not HTTP/1.1 at all (a
non-numeric or conflicting Content-Length): the app never sees those requests, so no request id
can be given; the tests check that they are 400 and that the connection is closed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

pytest.importorskip("laya", reason="needs the reference extra")

from pytest_laya import Spec  # noqa: E402
from pytest_laya.wire.requests import MAX_NESTING  # noqa: E402
from pytest_laya_reference.settings import Limits, ServerSettings  # noqa: E402
from tests.helpers.servers import PLAIN_HTTP, reference_server  # noqa: E402

LIVEZ_BOUND_S = 2.0
MAX_CONCURRENT = 8
MAX_BODY_READS = 8
BODY_TIMEOUT_S = 1.5
HEAD_TIMEOUT_S = 1.0
LIMITS = Limits()
NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
DECISION = {"state": "I was charged twice for my order.", "questions": {"refund": NOUL}}


# -- the server, the probe and a raw HTTP/1.1 client ------------------------------------------

@pytest.fixture(scope="module")
def server():
    settings = ServerSettings(max_concurrent=MAX_CONCURRENT, max_body_reads=MAX_BODY_READS,
                              body_timeout_s=BODY_TIMEOUT_S, head_timeout_s=HEAD_TIMEOUT_S)
    with reference_server(settings, device="cpu") as running:
        yield running


def admission(server) -> int:
    """Decisions the server counts as in flight (each holds an admission slot)."""
    return server.app.state.server.admission.in_flight


def body_reads(server) -> int:
    """Bodies the server is receiving that hold a body-read slot."""
    return server.app.state.server.body_reads.in_flight


class LivezProbe(threading.Thread):
    """GET /livez on a fresh connection every `interval_s`; keeps every latency and failure."""

    def __init__(self, url: str, interval_s: float = 0.1) -> None:
        super().__init__(name="livez-probe", daemon=True)
        self.url = url
        self.interval_s = interval_s
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop_event = threading.Event()

    def probe(self) -> None:
        started = time.monotonic()
        try:
            r = httpx.get(self.url + "/livez", timeout=LIVEZ_BOUND_S * 5, verify=PLAIN_HTTP)
            if r.status_code != 200 or r.json() != {"status": "ok"}:
                self.failures.append(f"{r.status_code} {r.text[:80]}")
        except httpx.HTTPError as exc:
            self.failures.append(repr(exc))
        self.latencies.append(time.monotonic() - started)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self.probe()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.probe()  # at least one probe, after the attack


LIVEZ_SEEN: list[float] = []  # every probe's latency in this module, for the summary line


@pytest.fixture(scope="module", autouse=True)
def report_livez(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if LIVEZ_SEEN and reporter is not None and capture is not None:
        ms = sorted(s * 1000 for s in LIVEZ_SEEN)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\nhostile input: /livez probed {len(ms)} times during the attacks: median "
                                f"{ms[len(ms) // 2]:.0f} ms, p99 {p99:.0f} ms, max {ms[-1]:.0f} ms "
                                f"(bound {LIVEZ_BOUND_S * 1000:.0f} ms)")


@pytest.fixture(autouse=True)
def livez_throughout(server):
    probe = LivezProbe(server.url)
    probe.start()
    yield probe
    probe.stop()
    LIVEZ_SEEN.extend(probe.latencies)
    assert probe.failures == [], f"/livez failed during the attack: {probe.failures[:3]}"
    slowest = max(probe.latencies)
    assert slowest < LIVEZ_BOUND_S, f"/livez took {slowest * 1000:.0f} ms during the attack"


@pytest.fixture(autouse=True)
def no_server_tracebacks(caplog):
    """Hostile input is the client's mistake: the server must not log it as its own failure."""
    with caplog.at_level(logging.WARNING, logger="pytest_laya_reference"):
        yield
    errors = [r for r in caplog.records if r.name.startswith("pytest_laya_reference") and r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def problem_code(self) -> str | None:
        if self.headers.get("content-type") == "application/problem+json":
            return json.loads(self.body).get("code")
        return None


def _addr(server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname, parts.port


def connect(server, timeout_s: float = 30.0) -> socket.socket:
    sock = socket.create_connection(_addr(server), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class RawReader:
    """Reads HTTP/1.1 responses off a raw socket, one after another (for pipelining)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def _take_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before {marker!r}; got {self.buffer[:200]!r}")
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def response(self) -> Reply:
        head = self._take_until(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._take_until(b"\r\n").split(b";")[0], 16)
                body += self._take(size)
                self._take(2)
                if size == 0:
                    break
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        else:  # delimited by the end of the connection (uvicorn's protocol-level 400s)
            while self._fill():
                pass
            body, self.buffer = self.buffer, b""
        return Reply(int(status_line.split()[1]), headers, body)

    def closed(self) -> bool:
        """True once the server has closed the connection (after what it has already sent)."""
        try:
            return not self.buffer and not self._fill()
        except (ConnectionResetError, TimeoutError):
            return True


def conforms(reply: Reply, method: str = "POST", path: str = "/v1/systemone") -> Reply:
    violations = Spec.target().violations(method, path, reply.status, reply.headers, reply.body)
    assert violations == [], "\n".join(map(str, violations))
    return reply


def request_bytes(body: bytes, *, path: str = "/v1/systemone", content_length: int | str | None = "auto",
                  extra: bytes = b"", close: bool = True, request_id: str | None = None) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
    if content_length == "auto":
        content_length = len(body)
    if content_length is not None:
        head += f"Content-Length: {content_length}\r\n".encode()
    if request_id:
        head += f"X-Request-Id: {request_id}\r\n".encode()
    if close:
        head += b"Connection: close\r\n"
    return head + extra + b"\r\n" + body


def send(server, data: bytes, *, timeout_s: float = 60.0) -> Reply:
    with connect(server, timeout_s) as sock:
        sock.sendall(data)
        return RawReader(sock).response()


def decide(server, body, *, path: str = "/v1/systemone") -> Reply:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return conforms(send(server, request_bytes(raw, path=path)), path=path)


def assert_refused(reply: Reply, status: int, code: str) -> None:
    assert (reply.status, reply.problem_code()) == (status, code), reply.body[:300]


# -- slow drips ------------------------------------------------------------------------------

def _drip(server, results: list, index: int, stop: threading.Event) -> None:
    """One slowloris client: headers at once, then the body one byte every 200 ms."""
    body = json.dumps(DECISION).encode()
    try:
        with connect(server) as sock:
            sock.sendall(request_bytes(body, close=False)[: -len(body)])  # keep-alive: any close is the server's
            for byte in body:
                sock.sendall(bytes([byte]))
                sock.settimeout(0.2)
                try:  # the server may answer (408 or 503) while we drip
                    results[index] = RawReader(sock).response()
                    return
                except TimeoutError:
                    pass
                if stop.is_set():
                    return
            sock.settimeout(30)
            results[index] = RawReader(sock).response()
    except OSError as exc:  # a refused-and-closed connection may reset our next write
        results[index] = exc


def test_slow_drip_bodies_cost_body_read_slots_and_never_shed_a_decision(server):
    # 16 drips re-opened after each 408 used to hold every admission slot and shed all 48 real
    # decisions sent meanwhile. Now a drip holds one of MAX_BODY_READS body-read slots (the
    # rest are refused at once and closed), and inference slots stay for bodies that arrived.
    drips = 20
    results: list = [None] * drips
    stop = threading.Event()
    threads = [threading.Thread(target=_drip, args=(server, results, i, stop), daemon=True) for i in range(drips)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # every drip has sent its headers: the first MAX_BODY_READS now hold every body-read slot
    assert body_reads(server) == MAX_BODY_READS
    served = [decide(server, DECISION) for _ in range(5)]
    assert [r.status for r in served] == [200] * 5, [r.body[:200] for r in served]
    for t in threads:
        t.join(BODY_TIMEOUT_S + 30)
    stop.set()
    replies = [r for r in results if isinstance(r, Reply)]
    assert len(replies) == drips, results
    kinds = sorted((r.status, r.problem_code()) for r in map(conforms, replies))
    assert kinds.count((408, "body_timeout")) == MAX_BODY_READS, kinds
    assert kinds.count((503, "overloaded")) == drips - MAX_BODY_READS, kinds
    assert all(r.headers["retry-after"] == "1" for r in replies if r.status == 503)
    # A drip timed out is too slow to keep: its connection ends with the 408.
    assert all(r.headers.get("connection") == "close" for r in replies if r.status == 408)
    # The slots the drips held are free again: real work is admitted.
    assert admission(server) == 0 and body_reads(server) == 0
    assert decide(server, DECISION).status == 200


def test_connections_that_never_finish_their_headers_are_closed_and_hold_no_slot(server):
    # uvicorn has no timeout for an unfinished request head; the server's head timeout closes
    # such connections, and while they wait they cost no admission slot.
    sockets = []
    try:
        for i in range(20):
            sock = connect(server)
            sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty" if i % 2 else b"")
            sockets.append(sock)
        time.sleep(0.3)
        assert admission(server) == 0 and body_reads(server) == 0
        assert decide(server, DECISION).status == 200
        deadline = time.monotonic() + HEAD_TIMEOUT_S + 10
        for sock in sockets:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            assert RawReader(sock).closed(), "a connection that never finished its head was kept open"
    finally:
        for sock in sockets:
            sock.close()


def test_a_kept_alive_connection_that_starts_a_head_and_stalls_is_closed(server):
    # After a response, the next head has the same deadline as the first one.
    body = json.dumps(DECISION).encode()
    with connect(server) as sock:
        sock.sendall(request_bytes(body, close=False))
        reader = RawReader(sock)
        assert conforms(reader.response()).status == 200
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sock.settimeout(HEAD_TIMEOUT_S + 10)
        assert reader.closed()


def test_a_request_head_that_grows_past_16_kib_is_a_protocol_400(server):
    # h11's bound on an incomplete head: a connection cannot make the server buffer a head
    # without end while it waits for the blank line.
    head = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 20_000
    with connect(server) as sock:
        sock.sendall(head)
        reader = RawReader(sock)
        reply = reader.response()
        assert reply.status == 400 and reply.headers.get("connection", "").lower() == "close"
        assert reader.closed()


# -- each limit, just under and just over ----------------------------------------------------

def _padded_to(body: dict, size: int) -> bytes:
    raw = json.dumps(body).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))  # JSON allows trailing whitespace


def _choice(options: int) -> dict:
    return {"type": "choice", "instructions": "Which topic?", "criteria": [f"topic {i}" for i in range(options)]}


LIMIT_CASES = [
    # (id, body just under or at the limit, body just over it, status and code over it, path)
    ("body-bytes", _padded_to(DECISION, LIMITS.max_body_bytes), _padded_to(DECISION, LIMITS.max_body_bytes + 1),
     (413, "too_large"), "/v1/systemone"),
    ("state-chars", {"state": "x" * LIMITS.max_state_chars, "questions": {"q": NOUL}},
     {"state": "x" * (LIMITS.max_state_chars + 1), "questions": {"q": NOUL}}, (413, "state_too_large"), "/v1/systemone"),
    ("state-object-chars", {"state": {"k": "x" * (LIMITS.max_state_chars - 9)}, "questions": {"q": NOUL}},
     {"state": {"k": "x" * (LIMITS.max_state_chars - 8)}, "questions": {"q": NOUL}}, (413, "state_too_large"),
     "/v1/systemone"),
    ("questions", {"state": "x", "questions": {f"q{i}": NOUL for i in range(LIMITS.max_questions)}},
     {"state": "x", "questions": {f"q{i}": NOUL for i in range(LIMITS.max_questions + 1)}},
     (413, "too_many_questions"), "/v1/systemone"),
    ("options", {"state": "x", "questions": {"q": _choice(LIMITS.max_options)}},
     {"state": "x", "questions": {"q": _choice(LIMITS.max_options + 1)}}, (413, "too_large"), "/v1/systemone"),
    ("batch-states", {"states": ["s"] * LIMITS.max_batch_states, "questions": {"q": NOUL}},
     {"states": ["s"] * (LIMITS.max_batch_states + 1), "questions": {"q": NOUL}}, (413, "too_large"),
     "/v1/systemone/batch"),
    # states x questions x window: 4 questions at max_len 8192 fill the budget, a fifth is over.
    ("request-tokens", {"state": "x", "questions": {f"q{i}": NOUL for i in range(LIMITS.max_request_tokens // 8192)},
                        "max_len": 8192},
     {"state": "x", "questions": {f"q{i}": NOUL for i in range(LIMITS.max_request_tokens // 8192 + 1)}, "max_len": 8192},
     (413, "too_large"), "/v1/systemone"),
    ("batch-request-tokens", {"states": ["s"] * 8, "questions": {f"q{i}": NOUL for i in range(8)}},
     {"states": ["s"] * 8, "questions": {f"q{i}": NOUL for i in range(9)}}, (413, "too_large"), "/v1/systemone/batch"),
]


@pytest.mark.parametrize(("under", "over", "refusal", "path"), [c[1:] for c in LIMIT_CASES],
                         ids=[c[0] for c in LIMIT_CASES])
def test_each_limit_admits_its_bound_and_refuses_one_more(server, under, over, refusal, path):
    assert decide(server, under, path=path).status == 200
    assert_refused(decide(server, over, path=path), *refusal)


def test_a_body_over_the_limit_is_refused_without_content_length_too(server):
    # Chunked, no Content-Length: the cap must hold while reading.
    chunk = b"x" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(LIMITS.max_body_bytes // len(chunk) + 1))
    head = (b"POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    with connect(server) as sock:
        sock.sendall(head)
        try:
            sock.sendall(chunks + b"0\r\n\r\n")
        except OSError:
            pass  # the server may answer and close before it has read everything
        assert_refused(conforms(RawReader(sock).response()), 413, "too_large")


def test_a_declared_length_over_the_limit_is_refused_before_any_body_is_sent(server):
    with connect(server) as sock:
        sock.sendall(request_bytes(b"", content_length=LIMITS.max_body_bytes + 1))
        assert_refused(conforms(RawReader(sock).response()), 413, "too_large")


# -- nesting, encodings, sizes the limits do not cover ----------------------------------------

def _nested(levels: int, inner: str = '"x"') -> str:
    """JSON arrays nested `levels` deep around `inner` (the request body is one level more)."""
    return "[" * levels + inner + "]" * levels


def test_nesting_up_to_the_bound_is_answered_and_deeper_is_400(server):
    ok = f'{{"state": {_nested(MAX_NESTING - 1)}, "questions": {{"q": {json.dumps(NOUL)}}}}}'.encode()
    assert decide(server, ok).status == 200
    for levels in (MAX_NESTING, 960, 100_000):  # 960: the depth that made jsonschema recurse into a 500
        for where in ("state", "instructions"):
            if where == "state":
                body = f'{{"state": {_nested(levels)}, "questions": {{"q": {json.dumps(NOUL)}}}}}'
            else:
                body = f'{{"state": "x", "questions": {{"q": {{"type": "noul", "instructions": {_nested(levels)}}}}}}}'
            assert_refused(decide(server, body.encode()), 400, "malformed_request")


@pytest.mark.parametrize("raw", [
    b'{"state": "\\ud800", "questions": {"q": {"type": "noul", "instructions": "?"}}}',
    b'{"state": "x", "questions": {"\\udc00": {"type": "noul", "instructions": "?"}}}',
    b'{"state": "x", "questions": {"q": {"type": "noul", "instructions": "\\udfff?"}}}',
    b'{"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": ["\\ud83d", "b"]}}}',
    b'{"state": {"\\ud800": "key"}, "questions": {"q": {"type": "noul", "instructions": "?"}}}',
    b'{"state": "\xff\xfe", "questions": {"q": {"type": "noul", "instructions": "?"}}}',
    b'{"state": "\xc0\xaf", "questions": {"q": {"type": "noul", "instructions": "?"}}}',
    b'{"state": "\xed\xa0\x80", "questions": {"q": {"type": "noul", "instructions": "?"}}}',
    b'{"state": "x", "questions": {"q": {"type": "noul", "instructions": "caf\xc3"}}}',
], ids=["state", "question-id", "instructions", "option", "state-key", "ff-fe", "overlong", "utf8-surrogate",
        "cut-multibyte"])
def test_lone_surrogates_and_invalid_utf8_are_400(server, raw):
    assert_refused(decide(server, raw), 400, "malformed_request")


def test_a_request_id_that_is_not_ascii_is_replaced_not_echoed(server):
    body = json.dumps(DECISION).encode()
    head = request_bytes(body)[: -len(body)].replace(b"Connection: close\r\n", b"Connection: close\r\nX-Request-Id: caf\xc3\xa9\r\n")
    reply = conforms(send(server, head + body))
    assert reply.status == 200 and reply.headers["x-request-id"] not in ("caf\xc3\xa9", "café")


def test_huge_option_lists(server):
    long = {"state": "x", "questions": {"q": {"type": "choice", "instructions": "Which one?",
                                              "criteria": {f"o{i}": "a long description " * 100 for i in range(100)}}}}
    reply = decide(server, long)
    assert reply.status == 200 and len(json.loads(reply.body)["answers"]["q"]["probabilities"]) == 100
    huge = decide(server, {"state": "x", "questions": {"q": _choice(10_000), "ok": NOUL}})
    assert_refused(huge, 413, "too_large")
    assert [e["question"] for e in json.loads(huge.body)["errors"]] == ["q"]
    # max_options covers choices; a score with 10,000 levels is laya's to refuse, named as such.
    levels = decide(server, {"state": "x", "questions": {"s": {"type": "score", "instructions": "How bad?",
                                                               "criteria": [f"level {i}" for i in range(10_000)]}}})
    assert_refused(levels, 422, "invalid_question")
    assert [e["question"] for e in json.loads(levels.body)["errors"]] == ["s"]


def test_a_request_asking_for_a_minute_of_inference_is_refused_at_once(server):
    # A 34 KB body, 64 questions, max_len 8192: about 64 s of inference on the tiny checkpoint.
    body = {"state": "The customer writes at length. " * 1000, "questions": {f"q{i}": NOUL for i in range(64)},
            "max_len": 8192}
    started = time.monotonic()
    reply = decide(server, body)
    assert time.monotonic() - started < LIVEZ_BOUND_S
    assert_refused(reply, 413, "too_large")
    assert "max_request_tokens" in json.loads(reply.body)["detail"]


def test_a_million_character_instructions_is_answered(server):
    body = {"state": "x", "questions": {"q": {"type": "noul", "instructions": "Is it urgent? " * 71_429}}}
    assert len(body["questions"]["q"]["instructions"]) > 1_000_000
    reply = decide(server, body)
    assert reply.status == 200 and set(json.loads(reply.body)["answers"]) == {"q"}


# -- framing: Content-Length, pipelining -----------------------------------------------------

def test_a_content_length_shorter_than_the_body_reads_only_what_it_declares(server):
    body = json.dumps(DECISION).encode()
    with connect(server) as sock:
        sock.sendall(request_bytes(body, content_length=20))
        assert_refused(conforms(RawReader(sock).response()), 400, "malformed_request")


def test_a_content_length_longer_than_the_body_times_out_and_frees_its_slot(server):
    body = json.dumps(DECISION).encode()
    with connect(server) as sock:
        sock.sendall(request_bytes(body, content_length=len(body) + 100, close=False))
        started = time.monotonic()
        reply = conforms(RawReader(sock).response())
    assert_refused(reply, 408, "body_timeout")
    assert reply.headers.get("connection") == "close"
    assert time.monotonic() - started < BODY_TIMEOUT_S + LIVEZ_BOUND_S
    assert admission(server) == 0 and body_reads(server) == 0


def test_an_absent_content_length_is_an_empty_body(server):
    # HTTP/1.1: no Content-Length and no Transfer-Encoding means no body; the bytes that follow
    # are not HTTP, so uvicorn ends the connection after answering the empty request.
    body = json.dumps(DECISION).encode()
    with connect(server) as sock:
        sock.sendall(request_bytes(body, content_length=None, close=False))
        reader = RawReader(sock)
        assert_refused(conforms(reader.response()), 400, "malformed_request")


@pytest.mark.parametrize("extra", [
    b"Content-Length: abc\r\n",
    b"Content-Length: -1\r\n",
    b"Content-Length: 1000000000000000000000000000000\r\n",
    b"Content-Length: 20\r\nContent-Length: 21\r\n",
], ids=["not-a-number", "negative", "absurd", "conflicting"])
def test_a_broken_content_length_is_a_protocol_400_and_the_connection_closes(server, extra):
    body = json.dumps(DECISION).encode()
    with connect(server) as sock:
        sock.sendall(request_bytes(body, content_length=None, extra=extra, close=False))
        reader = RawReader(sock)
        reply = reader.response()
        assert reply.status == 400 and reply.headers.get("connection", "").lower() == "close"
        assert reader.closed()
    assert decide(server, DECISION).status == 200


def test_content_length_with_chunked_transfer_encoding_is_read_as_chunked(server):
    body = json.dumps(DECISION).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    reply = send(server, request_bytes(chunked, content_length=5, extra=b"Transfer-Encoding: chunked\r\n"))
    assert conforms(reply).status == 200


def test_pipelined_requests_are_answered_in_order_each_with_its_own_id(server):
    decision = json.dumps(DECISION).encode()
    invalid = json.dumps({"state": "x", "questions": {"q": {"type": "ranking", "instructions": "?"}}}).encode()
    plan = []  # (request id, method, path, expected status)
    data = b""
    for i in range(12):
        rid = f"pipelined-{i}"
        if i % 4 == 1:
            data += f"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: {rid}\r\n\r\n".encode()
            plan.append((rid, "GET", "/livez", 200))
        elif i % 4 == 3:
            data += request_bytes(invalid, close=False, request_id=rid)
            plan.append((rid, "POST", "/v1/systemone", 422))
        else:
            data += request_bytes(decision, close=False, request_id=rid)
            plan.append((rid, "POST", "/v1/systemone", 200))
    with connect(server) as sock:
        sock.sendall(data)
        reader = RawReader(sock)
        replies = [reader.response() for _ in plan]
    for (rid, method, path, status), reply in zip(plan, replies):
        conforms(reply, method, path)
        assert (reply.headers["x-request-id"], reply.status) == (rid, status)


# -- clients that vanish -----------------------------------------------------------------------

HEAVY = {"state": "x " * 2000, "questions": {f"q{j}": _choice(LIMITS.max_options) for j in range(LIMITS.max_questions)}}


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_a_client_that_disconnects_mid_inference_costs_nothing_lasting(server, reset):
    raw = request_bytes(json.dumps(HEAVY).encode())
    for _ in range(3):
        sock = connect(server)
        if reset:  # SO_LINGER 0: close() sends RST, as a crashed client does
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(raw)
        time.sleep(0.1)  # the request is in the model now (one pass takes most of a second)
        sock.close()
    deadline = time.monotonic() + 60
    while admission(server) != 0:
        assert time.monotonic() < deadline, "a vanished client's slot was never released"
        time.sleep(0.05)
    assert decide(server, DECISION).status == 200


def test_a_client_that_disconnects_mid_body_is_not_a_server_failure(server):
    body = json.dumps(DECISION).encode()
    for _ in range(3):
        sock = connect(server)
        sock.sendall(request_bytes(body)[:-10])
        time.sleep(0.05)
        sock.close()
    deadline = time.monotonic() + 10
    while admission(server) != 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert decide(server, DECISION).status == 200


# -- memory ----------------------------------------------------------------------------------

class ServerProcess:
    """`python -m pytest_laya_reference` on the tiny checkpoint, on a free loopback port; `.url`, `.pid`."""

    def __init__(self, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYA_", "MALLOC_"))}
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest_laya_reference", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.url = ""
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if line.startswith("laya-reference-server ready at "):
                self.url = line.rsplit(" ", 1)[1].strip()
                return
        self.stop()
        raise RuntimeError(f"the reference server did not start: {line}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        return self.proc.stdout.read()


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _settled_rss(pid: int, deadline_s: float = 10.0) -> int:
    """RSS once the server has handed freed heap back (a second after its last decision)."""
    time.sleep(1.5)
    lowest = _rss_bytes(pid)
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = _rss_bytes(pid)
        if now >= lowest:
            break
        lowest = now
    return lowest


def test_memory_returns_near_its_level_after_rounds_of_large_requests():
    # The server runs as its own process, as deployed (one malloc arena, the model frozen out of
    # the collector), so its RSS is its own: in a pytest worker, RSS also counted the worker's
    # other tests and whichever of up to 8 glibc arenas per core a thread happened to get,
    # and under `pytest -n 2` a round could read 60 MiB above the last ([834, 846, 906] MiB).
    # The 10% target is measured by bench/load_reference_server.py; the bounds here are
    # generous: rounds do not accumulate memory, and what was freed is returned once idle.
    rounds = [
        [_padded_to(DECISION, LIMITS.max_body_bytes),
         {"state": "x", "questions": {"q": {"type": "noul", "instructions": "Is it urgent? " * 71_429}}},
         HEAVY,
         {"states": ["s " * 300] * LIMITS.max_batch_states, "questions": {"q": NOUL}}]
        for _ in range(3)
    ]
    paths = ["/v1/systemone"] * 3 + ["/v1/systemone/batch"]
    process = ServerProcess("--max-concurrent", str(MAX_CONCURRENT))
    try:
        decide(process, DECISION)
        idle = _settled_rss(process.pid)
        after = []
        for bodies in rounds:
            for body, path in zip(bodies, paths):
                assert decide(process, body, path=path).status == 200
            after.append(_settled_rss(process.pid))
    finally:
        log = process.stop()
    mib = 1024 * 1024
    print(f"RSS idle {idle / mib:.1f} MiB, settled after each round {[round(a / mib, 1) for a in after]} MiB")
    assert "Traceback" not in log, log[-2000:]
    # The first round warms caches (torch kernels for new shapes); later rounds must not add more.
    assert after[-1] <= after[0] + 32 * mib, f"RSS grew round after round: {[a // mib for a in after]} MiB"
    assert max(after) <= idle * 1.2, f"RSS {[a // mib for a in after]} MiB after the rounds, {idle // mib} MiB idle"
