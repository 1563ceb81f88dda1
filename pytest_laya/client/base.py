"""What the sync and async clients share beyond one call: settings, policy, identity, observers."""

from __future__ import annotations

import functools
import ipaddress
import os
import ssl
import sys
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from pytest_laya.client.call import (
    MAX_RESPONSE_BYTES,
    Attempt,
    DecisionCall,
    IdentityCache,
    request_auth,
    routed_names,
    routing_identity,
    server_said,
    tls_error,
    with_identity,
)
from pytest_laya.client.policy import Deadline, RetryPolicy
from pytest_laya.client.secret import Secret
from pytest_laya.client.settings import ClientSettings
from pytest_laya.wire.decision import Decision
from pytest_laya.wire.errors import LayaCallError, LayaConfigError, LayaError
from pytest_laya.wire.exchange import Exchange
from pytest_laya.wire.health import Health
from pytest_laya.wire.identity import ServedIdentity
from pytest_laya.wire.questions import Questions
from pytest_laya.wire.redaction import MASK
from pytest_laya.wire.routes import HEALTH_PATH


def ssl_context() -> ssl.SSLContext:
    """What httpx trusts: certifi's CA bundle, or the one SSL_CERT_FILE / SSL_CERT_DIR names now."""
    return _ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _ssl_context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    # httpx reads the CA bundle for every new client (about 19 ms); one context per setting serves
    # them all, so a suite that builds a client per test pays it once, and a test that sets
    # SSL_CERT_FILE gets its own. httpx reads the same two variables: the arguments are the key.
    return httpx.create_ssl_context()


@functools.cache
def _no_tls_needed() -> ssl.SSLContext:
    """The context of a plain-http client's own transport, which never opens TLS: it sends only to
    its http:// base URL and follows no redirect. It trusts no certificate (verification stays
    required), so if it were ever used it would refuse, never accept; loading the CA bundle
    instead cost the first client of every process about 35 ms of CPU (~0.1 ms a test over 300)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def loopback_direct(url: str) -> dict[str, None]:
    """httpx ``mounts`` that send loopback requests straight to the server, whatever HTTP_PROXY,
    HTTPS_PROXY or ALL_PROXY say (other hosts follow them and NO_PROXY, as in httpx).

    The kit's fake and reference servers listen on loopback, which a proxy on another machine
    cannot reach; Go's net/http makes the same exception. `localhost`, 127.0.0.1 and ::1 always,
    and `url`'s own host when it is another loopback address (all of 127.0.0.0/8 is): httpx's
    mount patterns name hosts, not networks.
    """
    mounts: dict[str, None] = {"all://localhost": None, "all://127.0.0.1": None, "all://[::1]": None}
    try:
        host = httpx.URL(url).host
        loopback = ipaddress.ip_address(host).is_loopback
    except (httpx.InvalidURL, ValueError):  # not a URL (the request says so), or a name, not an address
        host, loopback = "", False
    if loopback:
        mounts[f"all://[{host}]" if ":" in host else f"all://{host}"] = None
    return mounts


def direct_client(url: str) -> httpx.Client:
    """``httpx.Client(verify=ssl_context(), mounts=loopback_direct(url))``, the same client with the
    environment's proxies read once per their values rather than once per client.

    httpx reads them on every ``httpx.Client()`` (urllib's ``getproxies()``: every variable of the
    environment decoded, each proxy URL and mount pattern parsed), most of what building a client
    costs; a suite building one per test (`laya_client`) paid it per test. The client is what httpx
    builds: its own transport, one transport per proxy, the same mounts in the same order.
    """
    if not sys.platform.startswith("linux"):  # elsewhere urllib also asks the system's settings
        return httpx.Client(verify=ssl_context(), mounts=loopback_direct(url))
    plan = _mount_plan(url, _proxy_environment())
    direct = _no_tls_needed() if url.startswith("http://") else ssl_context()
    client = httpx.Client(transport=httpx.HTTPTransport(verify=direct))
    # A proxy may be reached over TLS (an https:// proxy URL): its transport trusts what httpx would.
    client._mounts = {pattern: None if proxy is None else httpx.HTTPTransport(verify=ssl_context(), proxy=proxy)
                      for pattern, proxy in plan}
    return client


def _proxy_environment() -> tuple[tuple[bytes, bytes], ...]:
    """All of the environment urllib's ``getproxies_environment()`` reads on Linux: the ``*_proxy``
    variables (any case) and whether ``REQUEST_METHOD`` is set (a CGI script ignores HTTP_PROXY)."""
    # CPython keeps the variables as bytes in a plain dict under both mappings: read it directly,
    # not through the mapping's per-item decoding (most of what this read cost, per client).
    data = getattr(os.environb, "_data", None)
    variables = data if isinstance(data, dict) else os.environb
    found = tuple((name, value) for name, value in variables.items() if name[-6:].lower() == b"_proxy")
    return (*found, (b"REQUEST_METHOD", b"set" if b"REQUEST_METHOD" in variables else b""))


@functools.lru_cache(maxsize=32)
def _mount_plan(url: str, environment: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[Any, httpx.Proxy | None], ...]:
    """(pattern, proxy or None) of each mount httpx gives ``httpx.Client(mounts=loopback_direct(url))``
    in `environment` (read from os.environ, which it describes), in httpx's order."""
    from httpx._utils import URLPattern, get_environment_proxies

    del environment  # the cache key
    plan: dict[Any, httpx.Proxy | None] = {
        URLPattern(key): None if proxy is None else httpx.Proxy(url=proxy) for key, proxy in get_environment_proxies().items()
    }
    plan.update({URLPattern(key): None for key in loopback_direct(url)})
    return tuple(sorted(plan.items()))


class ClientBase:
    def __init__(
        self,
        url: str | None,
        *,
        model: str | None,
        api_key: str | Secret | None,
        timeout_s: float | None,
        on_exchange: Callable[[Exchange], None] | None,
        policy: RetryPolicy | None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = ClientSettings.resolve(url, model=model, api_key=api_key, timeout_s=timeout_s, environ=environ)
        # The credentials go into the request inside httpx's auth flow, never into a headers dict.
        self._auth = request_auth(self.settings)
        self.policy = policy or RetryPolicy()
        self._on_exchange = on_exchange
        self._identities = IdentityCache()
        self._last_identity: ServedIdentity | None = None

    @property
    def url(self) -> str:
        return self.settings.url

    def __repr__(self) -> str:
        if "settings" not in self.__dict__:  # a traceback from inside __init__ prints it too
            return f"<{type(self).__name__}, not configured>"
        key = f", api_key={MASK}" if self.settings.api_key else ""
        settings = self.settings
        return (f"{type(self).__name__}({settings.shown_url!r}, model={settings.model!r}{key}, "
                f"timeout_s={settings.timeout_s:g})")

    def _observe(self, method: str, path: str, attempt: Attempt, request_body: bytes | None, elapsed: float) -> None:
        if self._on_exchange is not None and attempt.status is not None:
            self._on_exchange(Exchange(method=method, url=self.settings.shown_url + path, path=path, status=attempt.status,
                                       headers=attempt.headers, body=attempt.body, request_body=request_body,
                                       elapsed_s=elapsed))

    def _health_error(self, attempt: Attempt) -> LayaError:
        url = self.settings.shown_url
        setup = tls_error(attempt.failure, url, self.settings.scrub(str(attempt.cause))) if attempt.failure else None
        if setup is not None:
            return setup
        if attempt.failure is not None:
            call = LayaCallError(f"GET {HEALTH_PATH} on {url} failed: {attempt.failure.value}",
                                 code=attempt.failure.value, url=url)
            return call
        said = server_said(attempt.status or 0, attempt.headers, attempt.body)
        if attempt.status == 401:
            return LayaConfigError("the server refused the API key for /health", code="unauthorized", status=401,
                                   server_code=said.code, server_detail=said.detail, url=url)
        why = (f": larger than {MAX_RESPONSE_BYTES} bytes" if attempt.oversized
               else f": {attempt.undecodable}" if attempt.undecodable else "")
        return LayaCallError(f"GET {HEALTH_PATH} did not return a JSON health document{why}", code="bad_response",
                             status=attempt.status, server_code=said.code, server_detail=said.detail, url=url)

    def _begin(self, state: Any, questions: Questions, model: str | None, request_id: str | None,
               allow_truncation: bool) -> tuple[DecisionCall, Deadline]:
        call = DecisionCall(self.settings, state, questions, model=model, request_id=request_id,
                             allow_truncation=allow_truncation)
        return call, Deadline(self.settings.timeout_s)

    def _health_to_read(self, decision: Decision, deadline: Deadline) -> tuple[Health | None, bool]:
        """(cached health, whether /health must be read now) for a decision's identity."""
        if decision.provenance.served_by is not None:
            return None, False
        health = self._identities.fresh()
        return health, health is None and not deadline.expired()

    def _identity_after(self, call: DecisionCall, body: Mapping[str, Any], decision: Decision,
                        health: Health | None) -> Decision:
        if decision.provenance.served_by is not None:
            identity: ServedIdentity | None = decision.provenance.served_by
        else:
            routed, repo = routed_names(body, call.model)
            identity = (health.identity_for(routed, repo=repo) if health else None) or routing_identity(body)
        if identity is not None:
            self._last_identity = identity
        return with_identity(decision, identity)

    def _known_identity(self) -> ServedIdentity | None:
        """The identity a response itself reported; nothing on the server can say more."""
        last = self._last_identity
        return last if last is not None and last.source == "served_by" else None

    def _identity_from(self, health: Health) -> ServedIdentity | None:
        return health.identity_for(self.settings.model) or self._last_identity
