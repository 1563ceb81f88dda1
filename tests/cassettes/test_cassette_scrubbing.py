"""What a recorded cassette holds: no secret in any spelling, no value that changes every call.

Each test records through the kit's vcrpy cassette with an `httpx.MockTransport` as the server,
so a response can be anything a real one can (a reason phrase, repeated headers, a compressed
body), and then reads the file back: what a reviewer of the cassette, or a leak scanner, sees.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from urllib.parse import quote, quote_plus, unquote

import httpx
import pytest
import yaml

from pytest_laya.cassettes import (
    RECORDED_REQUEST_ID,
    RECORDED_TRACEPARENT,
    REDACTED,
    CassetteError,
    laya_vcr,
    use_cassette,
)
from pytest_laya.cassettes.config import CassetteConfig
from pytest_laya.cassettes.scrub import Scrubber
from pytest_laya.faults import Respond, ScriptedServer

KEY = "sk-canary-scrub-5150"
URL = "http://laya.test/v1/systemone"
RECORDED_TRACE = RECORDED_TRACEPARENT.split("-")[1]


def answer(body: bytes | str = b"{}", *, status: int = 200, headers=(), reason: bytes | None = None):
    """A MockTransport handler answering every request the same way."""
    content = body.encode() if isinstance(body, str) else body

    def handle(request: httpx.Request) -> httpx.Response:
        extensions = {"reason_phrase": reason} if reason is not None else {}
        return httpx.Response(status, headers=list(headers), content=content, extensions=extensions)
    return handle


def record(tmp_path, handler, *requests: httpx.Request, api_key: str | None = KEY, **config) -> list[dict]:
    """Record `requests` answered by `handler`; the stored interactions as plain data."""
    path = tmp_path / "c.yaml"
    vcr = laya_vcr(record=True, cassette_dir=None, api_key=api_key, config=CassetteConfig.from_mapping(config or None))
    with vcr.cassette(path), httpx.Client(transport=httpx.MockTransport(handler)) as http:
        for request in requests:
            http.send(request)
    return yaml.safe_load(path.read_text())["interactions"]


def post(body: bytes | str = b"{}", *, url: str = URL, headers=None) -> httpx.Request:
    content = body.encode() if isinstance(body, str) else body
    return httpx.Request("POST", url, content=content, headers={"content-type": "application/json", **(headers or {})})


def stored_body(interaction: dict, side: str = "response") -> str:
    body = interaction[side]["body"]
    body = body["string"] if isinstance(body, dict) else body
    return body.decode() if isinstance(body, bytes) else body


# --------------------------------------------------------------------------- values that change every call

def test_durations_and_machine_paths_in_a_body_are_stored_normalised(tmp_path):
    # Only the places the specs name: members no spec names (duration_ms, elapsed_ms) and text
    # that merely mentions a name are stored as they came.
    body = ('{"latency_ms": 12.5, "duration_ms":3, "elapsed_ms" : -1e3, "timing": {"queue": 1.5, "total":2},'
            ' "routing": {"repo": "/home/me/ckpt/tiny/", "checkpoint": "C:\\\\models\\\\tiny", "local_dir": "/"},'
            ' "model_dir": "relative/x", "checkpoint_dir": "/srv/laya-X", "text": "latency_ms 5"}')
    [stored] = record(tmp_path, answer(body), post())
    assert stored_body(stored) == (
        '{"latency_ms": 0, "duration_ms":3, "elapsed_ms" : -1e3, "timing": {"queue": 0, "total":0},'
        ' "routing": {"repo": "<local>/tiny", "checkpoint": "<local>/tiny", "local_dir": "<local>"},'
        ' "model_dir": "relative/x", "checkpoint_dir": "<local>/laya-X", "text": "latency_ms 5"}')


def test_a_body_with_nothing_to_scrub_is_stored_byte_for_byte(tmp_path):
    body = '{"a" : 1,"b":[ 2 ],  "c": "\\u00e9"}'
    [stored] = record(tmp_path, answer(body), post(body))
    assert stored_body(stored) == body
    assert stored_body(stored, "request") == body


# --------------------------------------------------------------------------- secrets, in every spelling

ODD_KEY = 'sk-odd/key+with space"q'


def test_every_spelling_of_the_key_in_a_text_body_is_redacted(tmp_path):
    spellings = [ODD_KEY, quote(ODD_KEY, safe=""), quote_plus(ODD_KEY), json.dumps(ODD_KEY)[1:-1]]
    body = " | ".join(spellings)
    [stored] = record(tmp_path, answer(body, headers=[("content-type", "text/plain")]), post(), api_key=ODD_KEY)
    assert stored_body(stored) == REDACTED


@pytest.mark.parametrize("body", [
    '{"note": "\\u0073k-canary-scrub-5150", "text": "café"}',  # in a value
    '{"seen": [1, "key \\u0073k-canary-scrub-5150 used"], "text": "café"}',  # in a list
])
def test_a_key_hidden_by_json_escapes_is_redacted(tmp_path, body):
    [stored] = record(tmp_path, answer(body), post())
    text = stored_body(stored)
    assert KEY not in json.dumps(json.loads(text), ensure_ascii=False) and REDACTED in text
    assert json.loads(text)["text"] == "café" and "café" in text  # written again as UTF-8 JSON, not escaped


def test_a_member_name_is_never_scrubbed(tmp_path):
    # A member name is a question id, an option name or a spec's key: the user's data, never a
    # place a server puts a credential. Scrubbing looks at values only.
    body = '{"answers": {"sk-canary-scrub-5150": {"type": "noul", "noul": 0.25}}}'
    [stored] = record(tmp_path, answer(body), post())
    assert stored_body(stored) == body


def test_a_secret_inside_a_longer_one_leaves_nothing_of_the_longer_one(tmp_path):
    inner, outer = "b-secret-value", "a-b-secret-value"
    [stored] = record(tmp_path, answer(f"token {outer}", headers=[("content-type", "text/plain")]),
                      post(headers={"x-token": outer}), api_key=inner, filter_headers=["x-token"])
    assert stored_body(stored) == REDACTED  # the whole value: nothing around the secret is kept


@pytest.mark.parametrize(("credential", "stored_as", "learned"), [
    ("Bearer 12345678", f"Bearer {REDACTED}", True),  # 8 characters: learnt, scrubbed everywhere
    ("Bearer 1234567", f"Bearer {REDACTED}", False),  # shorter: scrubbed from the header only
    ("sk-bare-token-1234", REDACTED, True),  # no scheme: the whole value is the credential
    ("Digest username=someone-long, response=abcdefgh1234", f"Digest {REDACTED}", True),
])
def test_an_authorization_header_is_redacted_and_a_long_credential_scrubbed_everywhere(tmp_path, credential,
                                                                                        stored_as, learned):
    value = credential.partition(" ")[2] or credential
    echo = answer(f"you sent {value}", headers=[("content-type", "text/plain")])
    [stored] = record(tmp_path, echo, post(headers={"authorization": credential}), api_key=None)
    assert stored["request"]["headers"]["authorization"] == [stored_as]
    assert stored_body(stored) == (REDACTED if learned else f"you sent {value}")


@pytest.mark.parametrize("spelled", [
    re.sub(r"%[0-9A-F]{2}", lambda escape: escape.group(0).lower(), quote(ODD_KEY, safe="")),  # lower-case escapes
    quote(ODD_KEY, safe="/"),  # the slash left as it is
])
def test_a_key_in_the_url_is_redacted_however_it_was_percent_encoded(tmp_path, spelled):
    # The last parameter's value holds an `=` before the key: the name ends at the first one.
    url = f"http://laya.test/v1/tenants/{spelled}/systemone?tenant={spelled}&{spelled}=1&note=key={spelled}"
    [stored] = record(tmp_path, answer(), post(url=url), api_key=ODD_KEY)
    path, _, query = stored["request"]["uri"].partition("?")
    assert unquote(path) == f"http://laya.invalid/{REDACTED}"  # the key's "/" spans segments: the path is the value
    assert [part.partition("=")[::2] for part in query.split("&")] == [("tenant", quote_plus(REDACTED)),
                                                                       (quote_plus(REDACTED), "1"),
                                                                       ("note", quote_plus(REDACTED))]


def test_a_url_without_a_secret_is_stored_as_it_was_spelt(tmp_path):
    # Decoding and re-encoding is only for a secret hiding behind an escape; any other URL keeps
    # its spelling, so the cassette shows what the client sent (`%7E`, `a=1=2` and all).
    url = "http://laya.test/v1/team%7Ebilling/systemone?filter=a%3Db=c&x=%7E"
    [stored] = record(tmp_path, answer(), post(url=url), api_key=ODD_KEY)
    assert stored["request"]["uri"] == "http://laya.invalid/v1/team%7Ebilling/systemone?filter=a%3Db=c&x=%7E"


def test_a_key_in_the_reason_phrase_is_redacted(tmp_path):
    [stored] = record(tmp_path, answer(b"", status=401, reason=f"Unauthorized {KEY}".encode()), post())
    assert stored["response"]["status"] == {"code": 401, "message": REDACTED}


# --------------------------------------------------------------------------- a project's own filters

def test_filtered_request_headers_are_dropped_replaced_or_computed_and_their_values_scrubbed(tmp_path):
    seen = []

    def computed(key, value, request):
        seen.append((key, value, request.method))
        return f"<{key}>"

    headers = {"x-api-token": "token-value-1", "x-tenant": "tenant-value-2", "x-session": "session-value-3"}
    echo = answer(" ".join(headers.values()), headers=[("content-type", "text/plain")])
    [stored] = record(tmp_path, echo, post(headers=headers), api_key=None,
                      filter_headers=["X-Api-Token", ("x-tenant", "<tenant>"), ("x-session", computed)])
    kept = stored["request"]["headers"]
    assert "x-api-token" not in kept and kept["x-tenant"] == ["<tenant>"] and kept["x-session"] == ["<x-session>"]
    assert seen[0] == ("x-session", "session-value-3", "POST")  # then once per later pass, with "<x-session>"
    assert stored_body(stored) == REDACTED


def test_a_filter_on_authorization_drops_it_instead_of_storing_its_scheme(tmp_path):
    # Unfiltered, Authorization is stored as "Bearer <redacted>"; a project that filters it gets none.
    [stored] = record(tmp_path, answer(), post(headers={"Authorization": f"Bearer {KEY}"}), filter_headers=["authorization"])
    assert "authorization" not in stored["request"]["headers"]
    [unfiltered] = record(tmp_path, answer(), post(headers={"Authorization": f"Bearer {KEY}"}))
    assert unfiltered["request"]["headers"]["authorization"] == [f"Bearer {REDACTED}"]


def test_filtered_response_headers_are_dropped_replaced_or_computed_and_their_values_scrubbed(tmp_path):
    seen = []

    def computed(key, values, request):
        seen.append((key, values, request))
        return "<computed>"

    sent = [("X-Session", "session-value-1"), ("X-Tenant", "tenant-value-2"), ("X-Shard", "shard-value-3"),
            ("Content-Type", "text/plain")]
    body = "session-value-1 tenant-value-2 shard-value-3"
    [stored] = record(tmp_path, answer(body, headers=sent), post(), api_key=None,
                      filter_headers=["x-session", ("x-tenant", "<tenant>"), ("x-shard", computed)])
    headers = stored["response"]["headers"]
    assert headers == {"x-tenant": ["<tenant>"], "x-shard": ["<computed>"], "content-type": ["text/plain"],
                       "content-length": [str(len(stored_body(stored)))]}
    assert seen == [("x-shard", ["shard-value-3"], None)]
    assert stored_body(stored) == REDACTED


def test_filtered_query_parameters_are_dropped_replaced_or_computed_in_any_encoding(tmp_path):
    seen = []

    def computed(key, value, request):
        seen.append((key, value, request.method))
        return f"<{key}>"

    url = (URL + "?keep=1&api%5Fkey=sk%2Dquery%2D12345&tenant=tenant+value+2&session=session-value-3"
           "&sig=abc=defghijk&echo=sk-query-12345")
    [stored] = record(tmp_path, answer(), post(url=url), api_key=None,
                      filter_query_parameters=["api_key", ("tenant", "<tenant>"), ("session", computed), "sig"])
    assert stored["request"]["uri"] == (
        f"http://laya.invalid/v1/systemone?keep=1&tenant=%3Ctenant%3E&session=%3Csession%3E&echo={REDACTED}")
    assert seen[0] == ("session", "session-value-3", "POST")


def test_a_key_in_the_path_or_a_parameter_name_is_redacted_however_it_was_encoded(tmp_path):
    url = f"http://laya.test/v1/{quote(KEY, safe='')}/x?{quote_plus(KEY)}=1&b={KEY.replace('-', '%2D')}"
    [stored] = record(tmp_path, answer(), post(url=url))
    uri = unquote(stored["request"]["uri"])
    assert "canary" not in uri and uri.count(REDACTED) == 3, uri


def test_filtered_form_fields_are_dropped_replaced_or_computed(tmp_path):
    seen = []

    def computed(key, value, request):
        seen.append((key, value, request.method))
        return "<computed>"

    # A value may hold an unencoded `=`: the name ends at the first one.
    form = "keep=1&password=pass=value-1&tenant=tenant+value&session=session-value-3"
    request = httpx.Request("POST", URL, content=form.encode(), headers={"content-type": "application/x-www-form-urlencoded"})
    echo = answer("pass=value-1 session-value-3", headers=[("content-type", "text/plain")])
    [stored] = record(tmp_path, echo, request, api_key=None,
                      filter_post_data_parameters=["password", ("tenant", "<t>"), ("session", computed)])
    assert stored_body(stored, "request") == "keep=1&tenant=%3Ct%3E&session=%3Ccomputed%3E"
    assert seen[0] == ("session", "session-value-3", "POST")
    assert stored_body(stored) == REDACTED


DOCUMENT = {
    "token": "top-level-token-1",
    "meta": {"tenant_token": "tenant-token-2", "to/ken": "slashed-token-3", "ti~ck": "tilde-token-4",
             "deep": {"inner": "deep-token-5"}},
    "items": [{"secret": "item-token-6"}],
    "state": "abc",
}


@pytest.mark.parametrize(("filters", "expected"), [
    # A name is a top-level member; a JSON pointer any member, with ~1 for / and ~0 for ~.
    (["token"], {("token",): None}),
    (["/meta/tenant_token"], {("meta", "tenant_token"): None}),
    ([("/meta/to~1ken", "<r>")], {("meta", "to/ken"): "<r>"}),
    ([("/meta/ti~0ck", "<r>")], {("meta", "ti~ck"): "<r>"}),
    (["/meta/deep/inner"], {("meta", "deep", "inner"): None}),
    (["/items/0/secret"], {("items", 0, "secret"): None}),
    ([("token", "<top>"), "/meta/tenant_token"], {("token",): "<top>", ("meta", "tenant_token"): None}),
])
def test_filtered_json_members_are_dropped_or_replaced(tmp_path, filters, expected):
    body = json.dumps(DOCUMENT, indent=1)
    [stored] = record(tmp_path, answer(), post(body), api_key=None, filter_post_data_parameters=filters)
    document = json.loads(stored_body(stored, "request"))
    want = json.loads(json.dumps(DOCUMENT))
    for where, value in expected.items():
        *parents, last = where
        parent = want
        for token in parents:
            parent = parent[token]
        if value is None:
            del parent[last]
        else:
            parent[last] = value
    assert document == want


def test_a_json_body_with_a_filtered_member_is_stored_compact_with_its_text_as_written(tmp_path):
    body = json.dumps({"password": "pass-value-1", "note": "café ☕"}, indent=2, ensure_ascii=False)
    [stored] = record(tmp_path, answer(), post(body), api_key=None, filter_post_data_parameters=["password"])
    assert stored_body(stored, "request") == '{"note":"café ☕"}'


def test_a_json_body_sent_without_a_content_type_is_filtered_too(tmp_path):
    request = httpx.Request("POST", URL, content=json.dumps({"password": "pass-value-1", "a": 1}).encode())
    assert "content-type" not in request.headers
    [stored] = record(tmp_path, answer(), request, api_key=None, filter_post_data_parameters=["password"])
    assert json.loads(stored_body(stored, "request")) == {"a": 1}


@pytest.mark.parametrize("pointer", ["/absent", "/meta/absent/x", "/items/1/secret", "/items/x/secret",
                                     "/state/a", "/token/x", "missing"])
def test_a_filter_that_matches_nothing_leaves_the_body_as_it_was(tmp_path, pointer):
    body = json.dumps(DOCUMENT, indent=1)
    [stored] = record(tmp_path, answer(), post(body), api_key=None, filter_post_data_parameters=[pointer])
    assert stored_body(stored, "request") == body


def test_a_computed_json_member_sees_its_name_and_value_and_its_value_is_scrubbed_everywhere(tmp_path):
    seen = []

    def computed(key, value, request):
        seen.append((key, value, request.method))
        return "<computed>"

    echo = answer("slashed-token-3 top-level-token-1", headers=[("content-type", "text/plain")])
    document = {**DOCUMENT, "a/b~c": "plain-name-7"}  # a top-level name (no leading /) is given as it is
    [stored] = record(tmp_path, echo, post(json.dumps(document)), api_key=None,
                      filter_post_data_parameters=[("/meta/to~1ken", computed), ("token", computed), ("a/b~c", computed)])
    assert seen[:3] == [("to~1ken", "slashed-token-3", "POST"), ("token", "top-level-token-1", "POST"),
                        ("a/b~c", "plain-name-7", "POST")]
    assert json.loads(stored_body(stored, "request"))["meta"]["to/ken"] == "<computed>"
    assert stored_body(stored) == REDACTED


# --------------------------------------------------------------------------- compressed answers

def test_a_compressed_answer_is_stored_decoded(tmp_path):
    body = json.dumps({"answers": {"q": {"noul": 0.5}}}).encode()
    stacked = gzip.compress(zlib.compress(body))
    sent = [("Content-Type", "application/json"), ("Content-Encoding", "deflate"), ("Content-Encoding", "gzip")]
    [stored] = record(tmp_path, answer(stacked, headers=sent), post())
    assert stored_body(stored).encode() == body
    assert stored["response"]["headers"] == {"content-type": ["application/json"], "content-length": [str(len(body))]}
    path = tmp_path / "c.yaml"
    with use_cassette(path, record=False), httpx.Client() as http:
        assert http.post(URL, content=b"{}", headers={"content-type": "application/json"}).json() == json.loads(body)


def test_a_compression_bomb_is_refused_while_recording(tmp_path):
    bomb = gzip.compress(b"0" * (9 << 20))
    with pytest.raises(CassetteError, match=r"^the response body decodes to more than 8388608 bytes "
                                            r"\(Content-Encoding: gzip\); it was not recorded$"):
        record(tmp_path, answer(bomb, headers=[("Content-Encoding", "gzip")]), post())


def test_an_undecodable_answer_is_refused_while_recording(tmp_path):
    # Over a socket: httpx's MockTransport would decode the body itself first.
    garbled = Respond(200, b"not gzip at all", headers={"Content-Encoding": "gzip"})
    with ScriptedServer(default=garbled).start() as server, use_cassette(tmp_path / "c.yaml", record=True):
        with httpx.Client() as http, pytest.raises(CassetteError, match=r"^the response body cannot be recorded: \S"):
            http.get(server.url + "/health")


# --------------------------------------------------------------------------- request ids and trace ids

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("request_headers", "response_headers", "body", "stored"), [
    # The client's id echoed in the body only (the server sent no X-Request-Id header).
    ({"x-request-id": "req-12345678"}, [], '{"request_id": "req-12345678"}', f'{{"request_id": "{RECORDED_REQUEST_ID}"}}'),
    # An id the server assigned.
    ({}, [("X-Request-Id", "srv-87654321")], '{"instance": "/requests/srv-87654321"}',
     f'{{"instance": "/requests/{RECORDED_REQUEST_ID}"}}'),
    # An id of exactly 8 characters is replaced; a shorter one could be any text, and is left alone.
    ({"x-request-id": "abcdefgh"}, [], '{"id": "abcdefgh"}', f'{{"id": "{RECORDED_REQUEST_ID}"}}'),
    ({"x-request-id": "abcdefg"}, [], '{"id": "abcdefg"}', '{"id": "abcdefg"}'),
    # Overlapping ids: the longer one first, so nothing of it is left.
    ({"x-request-id": "x-1234567890"}, [("X-Request-Id", "a-x-1234567890")], '{"id": "a-x-1234567890"}',
     f'{{"id": "{RECORDED_REQUEST_ID}"}}'),
    # Trace ids, the client's and one the server started.
    ({"traceparent": TRACEPARENT}, [], '{"trace": "4bf92f3577b34da6a3ce929d0e0e4736"}', f'{{"trace": "{RECORDED_TRACE}"}}'),
    ({}, [("traceparent", "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01")],
     '{"trace": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}', f'{{"trace": "{RECORDED_TRACE}"}}'),
    ({"traceparent": "not a trace context"}, [], '{"trace": "not a trace context"}', '{"trace": "not a trace context"}'),
])
def test_ids_a_server_echoes_in_its_body_are_stored_as_the_recorded_ones(tmp_path, request_headers, response_headers,
                                                                         body, stored):
    [interaction] = record(tmp_path, answer(body, headers=response_headers), post(headers=request_headers))
    assert stored_body(interaction) == stored


@pytest.mark.parametrize("sent", [[("X-Request-Id", "srv-87654321")], [("traceparent", TRACEPARENT)]])
def test_replay_echoes_the_new_request_id_and_trace_id(tmp_path, sent):
    record(tmp_path, answer(b"{}", headers=sent), post())
    with use_cassette(tmp_path / "c.yaml", record=False), httpx.Client() as http:
        mine = "00-11111111111111111111111111111111-2222222222222222-01"
        response = http.post(URL, content=b"{}", headers={"x-request-id": "mine-123456", "traceparent": mine})
    if sent[0][0] == "X-Request-Id":
        assert response.headers["x-request-id"] == "mine-123456"
    else:  # the caller's trace, the recorded span
        assert response.headers["traceparent"] == f"00-11111111111111111111111111111111-{RECORDED_TRACEPARENT.split('-')[2]}-01"


# --------------------------------------------------------------------------- a request as a message shows it

def scrubber(**config) -> Scrubber:
    return Scrubber(KEY, learn=True, config=CassetteConfig.from_mapping(config or None))


def escaped(text: str) -> str:
    """Every character percent-encoded: a spelling no scrubber form is, found only by decoding."""
    return "".join(f"%{byte:02X}" for byte in text.encode())


def test_a_shown_target_is_the_path_and_query_as_sent_when_nothing_hides_in_them():
    shown = scrubber(filter_query_parameters=["tenant_key"]).shown_target
    assert shown("http://laya.test/v1/systemone") == "/v1/systemone"
    assert shown("http://laya.test") == "/"
    assert shown("http://laya.test/v1/team%7Ebilling?x=%7E&y=a%3Db=c&flag") == "/v1/team%7Ebilling?x=%7E&y=a%3Db=c&flag"


def test_a_shown_target_hides_the_filtered_parameters_and_the_secrets_of_the_requests_headers():
    token, credential, tenant = "tenant-token-9a0c6f37", "cred-4b1f9e22aa", "tk-0a9b8c7d6e"
    shown = scrubber(filter_query_parameters=["tenant_key"], filter_headers=["x-tenant-token"]).shown_target(
        f"http://laya.test/v1/{token}/{credential}/{tenant}?tenant%5Fkey={tenant}&q={token}&n=1",
        {"X-Tenant-Token": [token], "Authorization": f"Bearer {credential}", "User-Agent": "svc/1.0"})
    assert shown == f"/v1/{REDACTED}/{REDACTED}/{REDACTED}?tenant%5Fkey={REDACTED}&q={REDACTED}&n=1"


@pytest.mark.parametrize("headers", [{"authorization": "cred-bare-7c2d4e"}, {"AUTHORIZATION": ["cred-bare-7c2d4e"]}],
                         ids=["a plain value", "a list of values"])
def test_a_shown_target_hides_an_authorization_header_without_a_scheme(headers):
    # Some gateways take the key bare; any header name case, any value shape (vcrpy's lists, dicts' strings).
    assert scrubber().shown_target("http://laya.test/v1/cred-bare-7c2d4e/x", headers) == f"/v1/{REDACTED}/x"


def test_a_shown_target_decodes_what_hides_a_secret_behind_escapes():
    shown = scrubber().shown_target(f"http://laya.test/v1/{escaped(KEY)}/systemone?note=a%20b&k={escaped(KEY)}")
    assert shown == f"/v1/{REDACTED}/systemone?note=a b&k={REDACTED}"


def test_a_filters_own_replacement_is_never_learnt_as_a_secret():
    # An interaction is scrubbed more than once (recorded, loaded, matched): a later pass reads the
    # replacement where the secret was, and must leave it as the project wrote it.
    s = scrubber(filter_query_parameters=[("tenant_key", "TENANT-PLACEHOLDER")],
                 filter_headers=[("x-token", "TOKEN-PLACEHOLDER"), ("x-dropped", None)],
                 filter_post_data_parameters=[("password", "PASSWORD-PLACEHOLDER")])
    placed = "/TENANT-PLACEHOLDER/TOKEN-PLACEHOLDER/PASSWORD-PLACEHOLDER"
    assert s.shown_target(f"http://laya.test{placed}?tenant_key=TENANT-PLACEHOLDER",
                          {"x-token": "TOKEN-PLACEHOLDER"}) == f"{placed}?tenant_key={REDACTED}"
    s.keep_secret("PASSWORD-PLACEHOLDER")
    assert s.text(placed) == placed
