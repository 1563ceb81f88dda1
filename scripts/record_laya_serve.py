"""Record what laya's own server (laya-serve 0.4.15) answers, on the shipped tiny checkpoint.

Why: the specs, validator and fakes in this project must agree with the real server, and the
real server can be started here only on the tiny checkpoint. Each case becomes one JSON file in
the same format as the system1 recordings (``status``, ``content_type``, ``body``, ``request``)
plus ``method``, ``path``, ``response_headers`` and, where the case set any, ``request_headers``.

Three servers are started through `pytest_laya.servers.laya_serve.LayaServeProcess`, all on 127.0.0.1:
one without an API key, one with ``test-key-not-a-secret-0000`` (the auth cases) and one with
``LAYA_MAX_CONCURRENT=1`` (the overload case). Bodies are recorded as received; only the values
of ``server-timing`` and ``x-inference-time-ms`` change between runs. An Authorization value is
never written: it is recorded as ``Bearer <redacted>``.

Usage (from the repository root)::

    .venv/bin/python scripts/record_laya_serve.py [--out tests/data/laya-serve-0.4.15]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pathlib
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from pytest_laya.servers.laya_serve import HOST, LayaServeProcess  # noqa: E402
from reference_server.tiny_checkpoint import embedded_checkpoint_dir  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "data" / "laya-serve-0.4.15"
PREFIX = "laya-serve."
API_KEY = "test-key-not-a-secret-0000"
WRONG_KEY = "wrong-key-not-a-secret-0000"
REDACTED_BEARER = "Bearer <redacted>"
#: Response headers whose values are timings, different on every run.
VOLATILE_HEADERS = ("server-timing", "x-inference-time-ms")
TIMEOUT_S = 60.0

# ------------------------------------------------------------------------------------ requests

STATE = "I was charged twice for my order. Please refund the duplicate today."
STATE_GERMAN = ("Ich wurde für meine Bestellung zweimal belastet. Bitte erstatten Sie den doppelten "
                "Betrag noch heute, sonst kündige ich mein Abonnement.")
STATE_TECHNICAL = "The app crashes every time I open the invoice page since yesterday's update."

DEPARTMENT = {
    "type": "choice",
    "instructions": "Which team should handle this?",
    "criteria": {
        "billing": "Charges and refunds",
        "technical": "Software problems",
        "shipping": "Deliveries and returns",
    },
}
URGENCY = {
    "type": "score",
    "instructions": "How urgent is the request?",
    "criteria": ["Not urgent", "Needs attention soon", "Needs attention immediately"],
}
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}

TWELVE_TEAMS = {
    "billing": "Charges, invoices and refunds",
    "technical": "Software problems and errors",
    "shipping": "Deliveries and tracking",
    "returns": "Returns and exchanges",
    "account": "Login, password and profile",
    "security": "Fraud and compromised accounts",
    "sales": "New purchases and quotes",
    "privacy": "Personal data requests",
    "accessibility": "Accessibility problems",
    "partnerships": "Resellers and partners",
    "feedback": "Suggestions and complaints",
    "other": "Anything else",
}


def _long_state(min_chars: int) -> str:
    """A support thread of numbered messages, at least `min_chars` long (deterministic)."""
    lines = (
        "Customer: I was charged twice for order {n:04d} and the second charge is still pending.",
        "Agent: Thanks for reaching out. I can see two payments for order {n:04d}; let me check.",
        "Customer: It has been three days and my bank says the money has left my account.",
        "Agent: I have escalated the duplicate charge on order {n:04d} to our billing team.",
    )
    parts: List[str] = []
    n = 0
    while sum(len(p) + 1 for p in parts) < min_chars:
        parts.append(lines[n % len(lines)].format(n=1000 + n // len(lines)))
        n += 1
    return "\n".join(parts)


def _exactly(chars: int) -> str:
    """A realistic state of exactly `chars` characters."""
    text = _long_state(chars)
    return text[:chars]


def _request(questions: Mapping[str, Any], state: Any = STATE, model: Optional[str] = "tiny") -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if state is not None:
        body["state"] = state
    body["questions"] = dict(questions)
    return body


# ------------------------------------------------------------------------------------ cases

@dataclasses.dataclass(frozen=True)
class Case:
    """One recorded exchange. `json_body` is sent as JSON; `raw_body` as bytes, unparsed."""

    name: str
    method: str = "POST"
    path: str = "/v1/systemone"
    json_body: Any = None
    raw_body: Optional[bytes] = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Store the JSON request in the file (false only for bodies too big to keep).
    store_request: bool = True


def _auth(key: str) -> Dict[str, str]:
    return {"Authorization": "Bearer " + key}


def open_cases() -> List[Case]:
    """Cases for the server without an API key, in recording order."""
    department_2 = dict(DEPARTMENT, criteria={"billing": "Charges and refunds",
                                              "technical": "Software problems"})
    department_12 = dict(DEPARTMENT, criteria=TWELVE_TEAMS)
    combined = {"department": DEPARTMENT, "urgency": URGENCY, "refund": REFUND}
    big_state = _exactly(2 * 1024 * 1024 + 4096)
    return [
        Case("health", method="GET", path="/health"),
        Case("choice", json_body=_request({"department": DEPARTMENT})),
        Case("score", json_body=_request({"urgency": URGENCY})),
        Case("noul", json_body=_request({"refund": REFUND})),
        Case("combined", json_body=_request(combined)),
        Case("batch", path="/v1/systemone/batch",
             json_body={"model": "tiny", "states": [STATE, STATE_TECHNICAL], "questions": combined}),
        Case("long_state", json_body=_request(combined, state=_long_state(10_000))),
        Case("non_english_state", json_body=_request(combined, state=STATE_GERMAN)),
        Case("options_2", json_body=_request({"department": department_2})),
        Case("options_12", json_body=_request({"department": department_12})),
        Case("malformed_json",
             raw_body=('{"model": "tiny", "state": "%s", "questions": {"refund": ' % STATE).encode(),
             headers={"Content-Type": "application/json"}),
        Case("no_questions", json_body={"model": "tiny", "state": STATE}),
        Case("no_state", json_body=_request({"refund": REFUND}, state=None)),
        Case("invalid_question",
             json_body=_request({"department": {"type": "ranking", "instructions": "Which team?",
                                                "criteria": {"billing": "Charges", "technical": "Bugs"}}})),
        Case("several_invalid_questions",
             json_body=_request({
                 "department": {"type": "ranking", "instructions": "Which team should handle this?",
                                "criteria": {"billing": "Charges", "technical": "Bugs"}},
                 "urgency": {"type": "score", "instructions": "How urgent is the request?"},
             })),
        Case("choice_without_criteria",
             json_body=_request({"department": {"type": "choice",
                                                "instructions": "Which team should handle this?"}})),
        Case("too_many_questions",
             json_body=_request({"q%02d" % i: {"type": "noul",
                                               "instructions": "Does the message mention topic %d?" % i}
                                 for i in range(65)})),
        Case("state_too_large", json_body=_request({"refund": REFUND}, state=_exactly(50_001))),
        Case("body_too_large", json_body=_request({"refund": REFUND}, state=big_state), store_request=False),
        Case("wrong_media_type",
             raw_body=json.dumps(_request({"refund": REFUND})).encode(),
             headers={"Content-Type": "text/plain"}),
        Case("unknown_model", json_body=_request({"department": DEPARTMENT}, model="no-such-model")),
        Case("not_found", method="GET", path="/nope"),
        Case("method_not_allowed", method="GET", path="/v1/systemone"),
    ]


def keyed_cases() -> List[Case]:
    """Cases for the server started with `API_KEY`."""
    choice = _request({"department": DEPARTMENT})
    return [
        Case("health_with_key_no_token", method="GET", path="/health"),
        Case("health_with_key_token", method="GET", path="/health", headers=_auth(API_KEY)),
        Case("missing_bearer", json_body=choice),
        Case("wrong_bearer", json_body=choice, headers=_auth(WRONG_KEY)),
    ]


# ------------------------------------------------------------------------------------ recording

def _media_type(response: httpx.Response) -> Optional[str]:
    value = response.headers.get("content-type")
    return value.split(";")[0].strip().lower() if value else None


def _body(response: httpx.Response) -> Any:
    """Parsed JSON when the server said JSON and it parses; the text otherwise."""
    if _media_type(response) == "application/json":
        try:
            return response.json()
        except ValueError:
            pass
    return response.text


def _response_headers(response: httpx.Response) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for name, value in response.headers.multi_items():
        name = name.lower()
        if name == "date":
            continue
        out[name] = value if name not in out else out[name] + ", " + value
    return out


def _request_headers(headers: Mapping[str, str]) -> Dict[str, str]:
    return {name.lower(): (REDACTED_BEARER if name.lower() == "authorization" else value)
            for name, value in headers.items()}


def _record(case: Case, response: httpx.Response) -> Dict[str, Any]:
    record: Dict[str, Any] = {
        "status": response.status_code,
        "content_type": _media_type(response),
        "body": _body(response),
    }
    if case.json_body is not None:
        if case.store_request:
            record["request"] = case.json_body
        else:
            sent = json.dumps(case.json_body).encode()
            record["request_omitted"] = {
                "reason": "valid JSON body too large to store",
                "bytes": len(sent),
                "sha256": hashlib.sha256(sent).hexdigest(),
                "keys": sorted(case.json_body),
            }
    elif case.raw_body is not None:
        text = case.raw_body.decode("utf-8")
        try:
            record["request"] = json.loads(text)
        except ValueError:
            record["request_raw"] = text
    record["method"] = case.method
    record["path"] = case.path
    record["response_headers"] = _response_headers(response)
    if case.headers:
        record["request_headers"] = _request_headers(case.headers)
    return record


def _send(client: httpx.Client, case: Case) -> httpx.Response:
    if case.json_body is not None:
        # Serialised here, not with httpx's json=, so the stored size matches what was sent.
        content = json.dumps(case.json_body).encode()
        headers = {"Content-Type": "application/json", **case.headers}
        return client.request(case.method, case.path, content=content, headers=headers)
    return client.request(case.method, case.path, content=case.raw_body, headers=dict(case.headers))


def run_cases(server: LayaServeProcess, cases: List[Case]) -> Dict[str, Dict[str, Any]]:
    out = {}
    with httpx.Client(base_url=server.url, timeout=TIMEOUT_S, trust_env=False) as client:
        for case in cases:
            out[case.name] = _record(case, _send(client, case))
    return out


def record_overload(server: LayaServeProcess) -> Dict[str, Any]:
    """503 from a server with LAYA_MAX_CONCURRENT=1 whose only slot a slow upload holds.

    The slow request is a raw socket that sends its headers, a Content-Length and half the body.
    The server admits it before reading the body, so the slot stays taken until the body read
    times out (10 s); the recorded request is sent while it is held. A 200 means the slow request
    had not been admitted yet, so the normal one is retried a few times.
    """
    case = Case("overload", json_body=_request({"department": DEPARTMENT}))
    payload = json.dumps(case.json_body).encode()
    head = ("POST /v1/systemone HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (HOST, server.port, len(payload))).encode()
    with socket.create_connection((HOST, server.port), timeout=10) as slow:
        slow.sendall(head + payload[: len(payload) // 2])
        with httpx.Client(base_url=server.url, timeout=TIMEOUT_S, trust_env=False) as client:
            for _ in range(20):
                time.sleep(0.1)
                response = _send(client, case)
                if response.status_code == 503:
                    return _record(case, response)
    raise RuntimeError("could not saturate the server; last answer %d %s"
                       % (response.status_code, response.text))


def write_records(out: pathlib.Path, records: Dict[str, Dict[str, Any]]) -> List[pathlib.Path]:
    """Write one file per case and remove recordings of cases that no longer exist."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in sorted(records):
        path = out / ("%s%s.json" % (PREFIX, name))
        path.write_text(json.dumps(records[name], indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    for stale in sorted(set(out.glob(PREFIX + "*.json")) - set(written)):
        stale.unlink()
    return written


def record_all(checkpoint: pathlib.Path) -> Dict[str, Dict[str, Any]]:
    records: Dict[str, Dict[str, Any]] = {}
    runs: List[tuple[Dict[str, Any], Callable[[LayaServeProcess], Dict[str, Dict[str, Any]]]]] = [
        ({}, lambda s: run_cases(s, open_cases())),
        ({"api_key": API_KEY}, lambda s: run_cases(s, keyed_cases())),
        ({"max_concurrent": 1}, lambda s: {"overload": record_overload(s)}),
    ]
    for options, record in runs:
        with LayaServeProcess(checkpoint, **options) as server:
            records.update(record(server))
    return records


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT,
                        help="directory for the recordings (default: %(default)s)")
    parser.add_argument("--checkpoint", type=pathlib.Path, default=embedded_checkpoint_dir(),
                        help="checkpoint directory to serve (default: the shipped tiny one)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    records = record_all(args.checkpoint)
    for path in write_records(args.out, records):
        print("%3d  %s" % (records[path.name[len(PREFIX):-len(".json")]]["status"], path))
    print("recorded %d cases in %.1f s" % (len(records), time.monotonic() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
