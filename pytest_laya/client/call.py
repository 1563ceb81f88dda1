"""One decision's request and the reading of its answer: the policy both clients share, no I/O.

What a request is, which responses are answers, which errors they map to, and how the identity
of the weights is worked out, live here once; only the I/O differs between the sync and async
clients.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_laya.client.policy import Deadline, Retry, RetryPolicy, TransportFailure
from pytest_laya.client.secret import BearerAuth
from pytest_laya.client.settings import ClientSettings
from pytest_laya.wire.content_coding import ACCEPT_ENCODING, BodyDecoder, BodyTooLarge, UndecodableBody
from pytest_laya.wire.decision import Decision, Provenance, parse_answers, parse_usage
from pytest_laya.wire.errors import LayaCallError, LayaConfigError, LayaError
from pytest_laya.wire.headers import REQUEST_ID_HEADER, is_valid_request_id, new_request_id, new_traceparent, parse_server_timing
from pytest_laya.wire.health import Health
from pytest_laya.wire.identity import ServedIdentity, parse_served_by
from pytest_laya.wire.problems import ServerError, read_server_error
from pytest_laya.wire.questions import AskedQuestion, Questions, normalize_questions

__all__ = [
    "DecisionCall",
    "IDENTITY_TTL_S",
    "MAX_RESPONSE_BYTES",
    "request_auth",
    "request_headers",
]


# How long a /health identity is trusted before it is read again.
IDENTITY_TTL_S = 30.0


# The most a response body may hold, decoded (checked as it is decoded: see `decoding`).
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


_JSON_MEDIA = ("application/json", "application/problem+json")


_USER_AGENT = "pytest-laya"


@dataclass
class Attempt:
    """What one attempt produced: a whole response, or how the transport failed."""

    status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    body: bytes = b""
    failure: TransportFailure | None = None
    cause: BaseException | None = None
    oversized: bool = False
    # Why the body could not be decoded (an unknown or broken Content-Encoding), if it could not.
    undecodable: str | None = None


class BodyCollector:
    """A response body for both clients' read loops: raw bytes in, decoded with a cap that holds.

    The loop feeds `response.iter_raw()` chunks to `add` while `reading`, and stops when `add`
    says False (over `MAX_RESPONSE_BYTES` decoded, or undecodable). `check` runs between
    decoding steps, so a deadline ends a long decode too. A response that httpx has already
    read (a `MockTransport` handler's `httpx.Response(content=...)`) is taken as it is.
    """

    def __init__(self, response: httpx.Response, check: Callable[[], None] = lambda: None) -> None:
        self._response = response
        self._oversized = False
        self._problem: str | None = None
        self._decoded_by_httpx = response.is_stream_consumed
        encoding = None if self._decoded_by_httpx else response.headers.get("content-encoding")
        try:
            self._decoder: BodyDecoder | None = BodyDecoder(encoding, MAX_RESPONSE_BYTES, check)
        except UndecodableBody as exc:
            self._decoder, self._problem = None, str(exc)

    @property
    def reading(self) -> bool:
        """Whether the loop should read raw chunks (False: nothing to read, or nothing wanted)."""
        return self._decoder is not None and not self._decoded_by_httpx and not self._stopped

    @property
    def _stopped(self) -> bool:
        return self._oversized or self._problem is not None

    def add(self, chunk: bytes) -> bool:
        """Decode `chunk`; False once the body is over the cap or undecodable (stop reading)."""
        assert self._decoder is not None
        try:
            self._decoder.feed(chunk)
        except BodyTooLarge:
            self._oversized = True
        except UndecodableBody as exc:
            self._problem = str(exc)
        return not self._stopped

    def into(self, attempt: Attempt) -> None:
        response = self._response
        if self._decoded_by_httpx and self._decoder is not None:
            self.add(response.content)
        if self._decoder is not None and not self._stopped:
            try:
                self._decoder.finish()
            except BodyTooLarge:
                self._oversized = True
            except UndecodableBody as exc:
                self._problem = str(exc)
        attempt.status, attempt.headers = response.status_code, response.headers
        attempt.body = self._decoder.body() if self._decoder is not None and not self._stopped else b""
        attempt.oversized, attempt.undecodable = self._oversized, self._problem


def load_json(body: bytes) -> tuple[Any, str | None]:
    """(value, None), or (None, why not): never raises, whatever the body (deep nesting included)."""
    try:
        return json.loads(body), None
    except RecursionError:
        return None, "it nests too deeply to parse"
    except ValueError as exc:
        return None, str(exc)


def server_said(status: int, headers: httpx.Headers, body: bytes) -> ServerError:
    """What an error response says, or nothing: reading it never raises."""
    try:
        return read_server_error(status, headers.get("content-type"), body)
    except Exception:  # a body nested too deeply, or one no reader foresaw: the status still counts
        return ServerError(status=status)


def media_type(headers: httpx.Headers) -> str:
    return str(headers.get("content-type", "")).split(";")[0].strip().lower()


def is_json_media(media: str) -> bool:
    return media in _JSON_MEDIA or media.endswith("+json")


class IdentityCache:
    """`/health` identities, trusted for `IDENTITY_TTL_S`; shared rules, no I/O."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._health: Health | None = None
        self._read_at = -float("inf")

    def fresh(self) -> Health | None:
        if self._clock() - self._read_at < IDENTITY_TTL_S:
            return self._health
        return None

    def store(self, health: Health | None) -> None:
        # A failed read is remembered too, so a server without /health is not asked per call.
        self._health = health
        self._read_at = self._clock()


class DecisionCall:
    """One decision's request and the reading of its answer, independent of sync or async."""

    def __init__(
        self,
        settings: ClientSettings,
        state: Any,
        questions: Questions,
        *,
        model: str | None,
        request_id: str | None,
        allow_truncation: bool,
    ) -> None:
        self.settings = settings
        self.asked: dict[str, AskedQuestion] = normalize_questions(questions)
        self.model = model if model is not None else settings.model
        if request_id is not None and not is_valid_request_id(request_id):
            raise LayaConfigError(
                "request_id must be 1-128 visible ASCII characters (no spaces)", code="bad_setting"
            )
        self.request_id = request_id or new_request_id()
        self.allow_truncation = allow_truncation
        payload: dict[str, Any] = {"state": state, "questions": {q.id: dict(q.wire) for q in self.asked.values()}}
        if self.model is not None:
            payload["model"] = self.model
        try:
            self.body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise LayaConfigError(f"the state and questions must be JSON-serializable: {exc}", code="bad_setting") from None
        self.headers = request_headers(self.request_id)

    def error(self, error: LayaError, status: int | None = None) -> LayaError:
        return error.with_context(status=status, request_id=self.request_id, url=self.settings.shown_url)

    def failure_error(self, attempt: Attempt, attempts: int) -> LayaError:
        kind = attempt.failure
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        url = self.settings.shown_url
        setup = tls_error(kind, url, self.settings.scrub(str(attempt.cause))) if kind else None
        if setup is not None:
            return self.error(setup)
        if kind is TransportFailure.TIMED_OUT:
            message = f"no complete answer from {url} within the {self.settings.timeout_s:g}s deadline{tried}"
        elif kind is TransportFailure.REFUSED:
            message = f"could not connect to {url}{tried}: is the server running?"
        else:
            message = f"the connection to {url} dropped before a complete response{tried}"
        cause = attempt.cause
        if cause is not None and kind is not TransportFailure.TIMED_OUT:
            # httpx's message can quote what was sent (a header value): the key is scrubbed out.
            said = self.settings.scrub(str(cause))
            message += f" ({type(cause).__name__}: {said})" if said else f" ({type(cause).__name__})"
        return self.error(LayaCallError(message, code=kind.value if kind else "connection_dropped"))

    def response_error(self, attempt: Attempt, attempts: int) -> LayaError:
        status = attempt.status or 0
        said = server_said(status, attempt.headers, attempt.body)
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        said_code, said_detail = said.code, said.detail
        if status == 401:
            hint = ("the API key was refused: check --laya-api-key / LAYA_SERVED_API_KEY"
                    if self.settings.api_key else "the server needs an API key: pass api_key=... or set LAYA_SERVED_API_KEY")
            return self.error(LayaConfigError(hint, code="unauthorized", status=status, server_code=said_code,
                                              server_detail=said_detail))
        if status in (502, 503, 504):
            message, code = f"the server is unavailable{tried}", "unavailable"
        elif status >= 500:
            message, code = "the server failed to answer", "server_error"
        else:
            message, code = "the server rejected the request", "rejected"
        return self.error(LayaCallError(message, code=code, status=status, server_code=said_code,
                                        server_detail=said_detail))

    def read_answer(self, attempt: Attempt) -> tuple[dict[str, Any], Decision]:
        """Turn a 200 into a Decision (identity still to be filled), or raise."""
        if attempt.oversized:
            coded = attempt.headers.get("content-encoding")
            raise self.error(LayaCallError(
                f"response body larger than the client's cap of {MAX_RESPONSE_BYTES} bytes"
                + (f" once decoded (Content-Encoding: {coded})" if coded else "")
                + "; reading stopped there", code="bad_response"), 200)
        if attempt.undecodable is not None:
            raise self.error(LayaCallError(f"HTTP 200 body cannot be decoded: {attempt.undecodable}", code="bad_response"), 200)
        media = media_type(attempt.headers)
        if not is_json_media(media):
            raise self.error(LayaCallError(f"HTTP 200 with Content-Type {media or 'missing'!r}, expected application/json",
                                           code="bad_response"), 200)
        body, problem = load_json(attempt.body)
        if problem is not None:
            raise self.error(LayaCallError(f"HTTP 200 body is not valid JSON ({problem})", code="bad_response"), 200)
        if not isinstance(body, dict):
            raise self.error(LayaCallError(f"HTTP 200 body must be a JSON object, got {type(body).__name__}",
                                           code="bad_response"), 200)
        try:
            answers = parse_answers(body.get("answers"), self.asked)
            usage = parse_usage(body.get("usage"))
            served_by = parse_served_by(body.get("served_by"))
        except LayaError as exc:
            raise self.error(exc, 200) from None
        except (ArithmeticError, LookupError, TypeError, ValueError, RecursionError) as exc:
            # The rules are meant to refuse every malformed answer first; should one slip past
            # them, the caller still gets the documented error, not a raw one.
            raise self.error(LayaCallError(f"the answer could not be read ({type(exc).__name__})",
                                           code="bad_answer"), 200) from exc
        routing = body.get("routing") if isinstance(body.get("routing"), Mapping) else None
        routed = routing.get("model") if routing else None
        if self.model is not None and isinstance(routed, str) and routed != self.model:
            raise self.error(LayaConfigError(
                f"asked for model {self.model!r} but the server routed to {routed!r}: it does not serve that name"
                " (check LAYA_SERVED_MODEL / model=...)", code="model_ignored"), 200)
        if usage.truncated and not self.allow_truncation:
            raise self.error(LayaConfigError(
                "the server cut the input to fit its token window: shorten the state or questions,"
                " or pass allow_truncation=True", code="token_window_full"), 200)
        provenance = Provenance(
            url=self.settings.shown_url,
            request_id=attempt.headers.get(REQUEST_ID_HEADER) or self.request_id,
            served_by=served_by,
            server_timing=parse_server_timing(attempt.headers.get("server-timing")),
            routing=routing,
        )
        decision = Decision(answers=answers, usage=usage, model=served_by.model if served_by else None, provenance=provenance)
        return body, decision

    def conclude(self, attempt: Attempt, attempts: int) -> tuple[dict[str, Any], Decision]:
        """The last attempt's outcome: a Decision (identity still to fill in), or the error."""
        if attempt.failure is not None:
            raise self.failure_error(attempt, attempts)
        if attempt.status != 200:
            raise self.response_error(attempt, attempts)
        return self.read_answer(attempt)

    def next_step(self, attempt: Attempt, number: int, deadline: Deadline, policy: RetryPolicy) -> Retry | None:
        if attempt.failure is not None:
            return policy.after_failure(attempt.failure, number, deadline)
        return policy.after_response(attempt.status or 0, attempt.headers, number, deadline)


def request_headers(request_id: str) -> dict[str, str]:
    """A request's headers, without credentials: `request_auth` adds those as httpx sends it.

    So no dict in any frame a traceback prints (``--showlocals``) holds the key.
    """
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, application/problem+json",
        # Only what the client decodes itself, with its cap (see `decoding`).
        "Accept-Encoding": ACCEPT_ENCODING,
        "User-Agent": _USER_AGENT,
        REQUEST_ID_HEADER: request_id,
        # W3C trace context: one trace per decision, so a retry shows as the same operation.
        "traceparent": new_traceparent(),
    }


def request_auth(settings: ClientSettings) -> httpx.Auth | None:
    """`Authorization: Bearer` for the API key; else Basic for a user:password in the URL; else None."""
    if settings.api_key:
        return BearerAuth(settings.api_key)
    if settings.request_url != settings.url:
        url = httpx.URL(settings.url)
        return httpx.BasicAuth(url.username, url.password)
    return None


def with_identity(decision: Decision, identity: ServedIdentity | None) -> Decision:
    if identity is None:
        return decision
    return Decision(answers=decision.answers, usage=decision.usage, model=identity.model, provenance=decision.provenance)


def routing_identity(body: Mapping[str, Any]) -> ServedIdentity | None:
    routing = body.get("routing")
    repo = routing.get("repo") if isinstance(routing, Mapping) else None
    return ServedIdentity(checkpoint=repo, source="routing") if isinstance(repo, str) and repo else None


def health_from(attempt: Attempt) -> Health | None:
    if attempt.status != 200 or attempt.oversized or attempt.undecodable or not is_json_media(media_type(attempt.headers)):
        return None
    raw, _problem = load_json(attempt.body)
    return Health(raw) if isinstance(raw, dict) else None


def routed_names(body: Mapping[str, Any], model: str | None) -> tuple[str | None, str | None]:
    found = body.get("routing")
    routing: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    routed = routing.get("model") if isinstance(routing.get("model"), str) else model
    repo = routing.get("repo") if isinstance(routing.get("repo"), str) else None
    return routed, repo


def untrusted_certificate(url: str, said: str) -> LayaConfigError:
    """A TLS handshake that refused the server's certificate: retrying cannot help, the CA bundle can."""
    return LayaConfigError(f"the TLS certificate of {url} is not trusted ({said}): set SSL_CERT_FILE (or SSL_CERT_DIR)"
                           " to the CA bundle that signed it", code=TransportFailure.UNTRUSTED.value, url=url)


def tls_failed(url: str, said: str) -> LayaConfigError:
    """A TLS handshake that failed before any certificate: most often https:// to a plain-HTTP port."""
    plain = "http://" + url[len("https://"):] if url.startswith("https://") else None
    hint = f": if the server speaks plain HTTP, use {plain}" if plain else ""
    return LayaConfigError(f"the TLS handshake with {url} failed ({said}){hint}", code=TransportFailure.TLS_FAILED.value,
                           url=url)


def tls_error(kind: TransportFailure, url: str, said: str) -> LayaConfigError | None:
    """The setup error for a TLS failure (`UNTRUSTED`, `TLS_FAILED`), else None."""
    if kind is TransportFailure.UNTRUSTED:
        return untrusted_certificate(url, said)
    if kind is TransportFailure.TLS_FAILED:
        return tls_failed(url, said)
    return None


def classify_failure(exc: httpx.TransportError) -> TransportFailure:
    if isinstance(exc, httpx.TimeoutException):
        return TransportFailure.TIMED_OUT
    if isinstance(exc, httpx.ConnectError):
        if _caused_by(exc, ssl.SSLCertVerificationError):
            return TransportFailure.UNTRUSTED
        return TransportFailure.TLS_FAILED if _caused_by(exc, ssl.SSLError) else TransportFailure.REFUSED
    return TransportFailure.DROPPED


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    # httpx re-raises httpcore's exception `from` it; httpcore raises its own while handling the
    # socket's, which is then only the context.
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
