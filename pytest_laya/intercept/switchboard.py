"""`Switchboard`: the one object vcrpy's HTTP patches talk to, routing every request by host.

vcrpy patches httpx's transports (sync and async, MockTransport and ASGI/WSGI included),
`http.client` (and so urllib), urllib3, requests, aiohttp and others; each patched call asks a
"cassette" whether it can play a response, plays it, or appends what the network answered. The
switchboard stands in that place for a whole test and sends each request to one route:

* the test's Laya server (`LayaRoute`): answered from, or recorded into, its cassette, and
  every exchange handed to the route's observer (the spec check);
* another vcrpy cassette the test holds (pytest-recording's ``@pytest.mark.vcr``), for every
  other host, with that cassette's own rules;
* the network, untouched, or refused with `NetworkBlocked` when the run blocks it;
* another mock library, when one answers the request in memory (respx, pytest-httpx, an
  ``httpx.MockTransport`` or ASGI/WSGI app): never blocked, and a decision answer it gives is
  handed to the activation's `mocked` check (the plugin holds it to the spec).

vcrpy's httpx patches wrap whatever handler is in place when they are entered (pytest-httpx's,
when it patched first), not only httpx's own, and note which transport asks.

The patches are built once per switchboard and entered per activation, so a test pays for
switching routes, not for building vcrpy's patchers (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from pytest_laya.intercept.mocks import MOCK_HANDLER, TRANSPORT, answered_by_a_mock

__all__ = ["NetworkBlocked", "Route", "Switchboard", "answered_by_a_mock", "host_of"]


class NetworkBlocked(Exception):
    """A request to a host that is neither the test's Laya server nor allowed (``--laya-block-network``)."""

    def __init__(self, host: str, method: str, path: str) -> None:
        super().__init__(
            f"{method} {host}{path}: the network is blocked (--laya-block-network) and {host} is neither the "
            f"test's Laya server nor in allowed_hosts; add it to laya_vcr_config's allowed_hosts, or record "
            f"this host with pytest-recording's @pytest.mark.vcr")
        self.host = host


NetworkBlocked.__module__ = "pytest_laya.intercept"


@functools.lru_cache(maxsize=1024)  # a test's requests go to a few URLs, each routed by it
def host_of(uri: str) -> str:
    """``host:port`` of a URL, the port made explicit (``http://a`` is ``a:80``), lower-cased."""
    split = urlsplit(uri)
    host = (split.hostname or "").lower()
    port = split.port or (443 if split.scheme == "https" else 80)
    return f"{host}:{port}"


class Route(Protocol):
    """What the switchboard asks of the place a request is routed to (vcrpy's cassette calls)."""

    def can_play_response_for(self, request: Any) -> bool: ...

    def play_response(self, request: Any) -> Any: ...

    def append(self, request: Any, response: Any) -> None: ...


class _Network:
    """Requests that leave for the real network, unrecorded."""

    def can_play_response_for(self, request: Any) -> bool:
        return False

    def play_response(self, request: Any) -> Any:  # pragma: no cover - never asked after False
        raise AssertionError("the network route plays nothing")

    def append(self, request: Any, response: Any) -> None:
        return None


def _path_only(request: Any) -> str:
    """The request's path, its query left out: without the project's filters nothing says which part is secret."""
    split = urlsplit(request.uri)
    return (split.path or "/") + ("?…" if split.query else "")


class _Blocked(_Network):
    """Refuses every request with `NetworkBlocked`, showing its target as `shown` allows, and keeps
    the error in `refused` (a test whose code swallowed it still fails)."""

    def __init__(self, shown: Callable[[Any], str], refused: list[BaseException]) -> None:
        self.shown = shown
        self.refused = refused

    def can_play_response_for(self, request: Any) -> bool:
        error = NetworkBlocked(host_of(request.uri), request.method, self.shown(request))
        self.refused.append(error)
        raise error


class _OuterCassette:
    """Another vcrpy cassette (pytest-recording's), with the rules it would apply itself."""

    def __init__(self, cassette: Any) -> None:
        self.cassette = cassette

    def can_play_response_for(self, request: Any) -> bool:
        from vcr.errors import CannotOverwriteExistingCassetteException

        if self.cassette.can_play_response_for(request):
            return True
        if self.cassette.write_protected and self.cassette.filter_request(request):
            raise CannotOverwriteExistingCassetteException(cassette=self.cassette, failed_request=request)
        return False

    def play_response(self, request: Any) -> Any:
        return self.cassette.play_response(request)

    def append(self, request: Any, response: Any) -> None:
        self.cassette.append(request, response)


_NETWORK = _Network()

#: Client libraries vcrpy patches and the kit's own transports do not: once one is loaded (or
#: vcrpy, which loads them), requests are routed through vcrpy's patches.
_ONLY_VCRPY_PATCHES = ("vcr", "aiohttp", "tornado", "httplib2", "botocore", "boto3", "httpx2", "httpx_curl_cffi",
                       "pyreqwest")

class _Mocked(_Network):
    """A request another mock library answers: it goes through, and its answer is handed to `check`."""

    def __init__(self, check: Callable[[Any, Any], None] | None) -> None:
        self.check = check

    def append(self, request: Any, response: Any) -> None:
        if self.check is not None:
            self.check(request, response)


class Switchboard:
    """Routes each intercepted request to the active test's Laya route, an outer cassette, or the network.

    `laya` routes claim requests (`claims(request)`); everything else goes to `outer` (a vcrpy
    cassette) when there is one, else to the network, unless `block_network` refuses hosts not
    in `allowed_hosts`. Thread-safe for requests from any thread. Activations nest (a test's
    Laya server and its `laya_fake_server` are both routed): an inner one adds its Laya routes,
    tried first, and its settings, until it ends.
    """

    #: vcrpy names its per-cassette connection subclasses after this, and reads these two.
    _path = "pytest-laya"
    skip_patchers: tuple[str, ...] = ()

    @property
    def custom_patches(self) -> tuple[Any, ...]:
        return vcr_response_fixes()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._patchers: list[Any] | None = None
        self._depth = 0
        self.laya: Sequence[Any] = ()
        self.outer: _OuterCassette | None = None
        self.block_network = False
        self.allowed_hosts: frozenset[str] = frozenset()
        self.ignored_hosts: frozenset[str] = frozenset()
        self._blocked = _Blocked(_path_only, [])
        self._mocked = _Mocked(None)
        self._last: tuple[Any, Route] | None = None
        #: Whether requests are routed by the kit's own transports (`intercept.native`) rather than
        #: vcrpy's patches: while every route answers from the kit's replay cassette (`_native_ok`).
        self.native = False

    # -- activation

    @contextlib.contextmanager
    def active(self, laya: Sequence[Any], *, outer: Any = None, block_network: bool = False,
               allowed_hosts: Sequence[str] = (), ignored_hosts: Sequence[str] = (),
               shown: Callable[[Any], str] | None = None,
               refused: list[BaseException] | None = None,
               mocked: Callable[[Any, Any], None] | None = None) -> Iterator[Switchboard]:
        """Route through `laya` (and `outer`) until the block ends; the HTTP patches are in place meanwhile.

        A blocked request's `NetworkBlocked` shows its path and query as `shown(request)` gives
        them (by default the path alone) and is appended to `refused`. `mocked(request, response)`
        sees each answer another mock library gave (`answered_by_a_mock`).
        """
        with self._lock:
            self._depth += 1
            outermost = self._depth == 1
        saved = (self.laya, self.outer, self.block_network, self.allowed_hosts, self.ignored_hosts, self._blocked,
                 self._mocked)
        self.laya = (*laya, *(() if outermost else self.laya))
        self._last = None
        if outer is not None or outermost:
            self.outer = _OuterCassette(outer) if outer is not None else None
        self.block_network = block_network
        self.allowed_hosts = frozenset(_normal_host(h) for h in allowed_hosts)
        self.ignored_hosts = frozenset(_normal_host(h) for h in ignored_hosts)
        self._blocked = _Blocked(shown or _path_only, refused if refused is not None else [])
        self._mocked = _Mocked(mocked) if mocked is not None or outermost else self._mocked
        entered: list[Any] = []
        was_native = self.native
        try:
            if outermost or was_native:
                self.native = self._native_ok()
                if self.native:
                    from pytest_laya.intercept import native

                    native.install(self)
                else:
                    self._enter_patches(entered)
            yield self
        finally:
            (self.laya, self.outer, self.block_network, self.allowed_hosts, self.ignored_hosts,
             self._blocked, self._mocked) = saved if not outermost else ((), None, False, frozenset(), frozenset(),
                                                                         saved[5], _Mocked(None))
            self._last = None
            try:
                _undo(entered)
            finally:
                self.native = was_native and not outermost
                with self._lock:
                    self._depth -= 1

    def _enter_patches(self, entered: list[Any]) -> None:
        for patcher in self._built():
            patcher.__enter__()
            entered.append(patcher)

    def _native_ok(self) -> bool:
        """Whether the kit's own transports can route this activation as vcrpy's patches would: every
        Laya route answers from the kit's replay cassette over plain http, nothing needs vcrpy (no
        pytest-recording cassette, no blocked network, no client library only vcrpy patches), and
        httpx's handlers are the kit's or httpx's own (not a mock library's, patched over them)."""
        if self.outer is not None or self.block_network:
            return False
        if not all(getattr(getattr(route, "cassette", None), "laya_native", False) and getattr(route, "plain_http", False)
                   for route in self.laya):
            return False
        if any(name in sys.modules for name in _ONLY_VCRPY_PATCHES):
            return False
        import httpx

        from pytest_laya.intercept import native

        return all(native.ours(cls, name) or getattr(cls.__dict__.get(name), "__module__", "").split(".")[0] == "httpx"
                   for cls, name in ((httpx.HTTPTransport, "handle_request"),
                                     (httpx.AsyncHTTPTransport, "handle_async_request"),
                                     (httpx.MockTransport, "handle_request"),
                                     (httpx.MockTransport, "handle_async_request")))

    def claims_host(self, host: str) -> bool:
        """Whether a Laya route claims requests to `host` (``host:port``) whatever they ask."""
        if host in self.ignored_hosts:
            return False
        return any(route.catch_all or host in route.hosts for route in self.laya)

    def _built(self) -> list[Any]:
        if self._patchers is None:
            from vcr.patch import CassettePatcherBuilder

            from pytest_laya.intercept import httpx_originals

            httpx_originals.restore()  # vcrpy may have been loaded under a test's mock library

            self._patchers = [_attribute_patch(p, self) for p in CassettePatcherBuilder(self).build()]
        return self._patchers

    # -- routing

    def _route(self, request: Any) -> Route:
        # vcrpy asks twice about the same request object (can play? then play): decide once.
        last = self._last
        if last is not None and last[0] is request:
            route: Route = last[1]
            return route
        route = self._decide(request)
        self._last = (request, route)
        return route

    def laya_route_of(self, request: Any, host: str | None = None) -> Any:
        """The Laya route that claims `request` (to `host`, ``host:port``, its URL's unless given),
        tried before any other route; None if none does."""
        host = host_of(request.uri) if host is None else host
        if host not in self.ignored_hosts:
            for route in self.laya:
                if route.claims(request, host):
                    return route
        return None

    def _decide(self, request: Any) -> Route:
        host = host_of(request.uri)
        claimed: Route | None = self.laya_route_of(request, host)
        if claimed is not None:
            return claimed
        if self.outer is not None:
            return self.outer
        if answered_by_a_mock():
            return self._mocked
        if self.block_network and not _allowed(host, self.allowed_hosts):
            return self._blocked
        return _NETWORK

    # -- vcrpy's cassette protocol

    @property
    def write_protected(self) -> bool:
        # Each route refuses what may not reach the network in can_play_response_for itself.
        return False

    def filter_request(self, request: Any) -> Any:
        return request

    def can_play_response_for(self, request: Any) -> bool:
        return self._route(request).can_play_response_for(request)

    def play_response(self, request: Any) -> Any:
        return self._route(request).play_response(request)

    def append(self, request: Any, response: Any) -> None:
        self._route(request).append(request, response)

    def find_requests_with_most_matches(self, request: Any) -> list[Any]:  # aiohttp's stub asks on a miss
        return []


class _AttributePatch:
    """One of vcrpy's ``mock.patch.object(target, name, new)``, entered and undone as
    `unittest.mock` does it, at a fraction of the cost (vcrpy's patches use no spec, autospec or
    created attribute, so none of that machinery is needed). A test enters some 40 of these."""

    __slots__ = ("target", "attribute", "new", "_saved")

    def __init__(self, target: Any, attribute: str, new: Any) -> None:
        self.target, self.attribute, self.new = target, attribute, new
        self._saved: list[tuple[Any, bool]] = []

    def __enter__(self) -> Any:
        target, name = self.target, self.attribute
        try:
            original, local = target.__dict__[name], True
        except (AttributeError, KeyError):
            original, local = getattr(target, name), False  # AttributeError as mock raises it
        new = self._new(original)
        setattr(target, name, new)
        self._saved.append((original, local))
        return new

    def _new(self, current: Any) -> Any:
        return self.new

    def __exit__(self, *exc_info: Any) -> None:
        original, local = self._saved.pop()
        if local:
            setattr(self.target, self.attribute, original)
        else:  # the attribute was inherited: remove ours, as mock does
            delattr(self.target, self.attribute)
            if not hasattr(self.target, self.attribute):
                setattr(self.target, self.attribute, original)


def _undo(entered: list[Any]) -> None:
    """Exit `entered` last first; every one is undone even if another raises (the first error is raised)."""
    error: BaseException | None = None
    for patcher in reversed(entered):
        try:
            patcher.__exit__(None, None, None)
        except BaseException as exc:  # noqa: BLE001 - undo the rest, then raise
            error = error or exc
    if error is not None:
        raise error


class _HttpxPatch(_AttributePatch):
    """vcrpy's patch of an httpx transport's handler, entered around the handler in place then
    (a mock library's, such as pytest-httpx's, when it patched first; httpx's own otherwise),
    noting which transport asks and whether a mock library's handler answers."""

    __slots__ = ("switchboard", "library")

    def __init__(self, target: Any, attribute: str, new: Any, switchboard: Any, library: Any) -> None:
        super().__init__(target, attribute, new)
        self.switchboard = switchboard
        self.library = library

    def _new(self, current: Any) -> Any:
        mock_handler = getattr(current, "__module__", "").split(".")[0] not in ("httpx", "httpx2", "pytest_laya")
        if mock_handler:
            from vcr.stubs import httpx_stubs

            wrap = httpx_stubs.vcr_handle_async_request if self.attribute == "handle_async_request" \
                else httpx_stubs.vcr_handle_request
            stub = wrap(self.switchboard, current, self.library)
        else:
            stub = self.new

        def chosen(request: Any) -> tuple[Any, bool]:
            # A Laya server's own requests go past the mock library in every mode (its route
            # answers, records or forwards them), as they do in replay, where the route answers first.
            if mock_handler and self.switchboard.claims_host(host_of(str(request.url))):
                return self.new, False
            return stub, mock_handler

        if self.attribute == "handle_async_request":
            async def handle_async_request(transport: Any, request: Any) -> Any:
                handler, mocked = chosen(request)
                tokens = TRANSPORT.set(transport), MOCK_HANDLER.set(mocked)
                try:
                    return await handler(transport, request)
                finally:
                    MOCK_HANDLER.reset(tokens[1])
                    TRANSPORT.reset(tokens[0])
            return handle_async_request

        def handle_request(transport: Any, request: Any) -> Any:
            handler, mocked = chosen(request)
            tokens = TRANSPORT.set(transport), MOCK_HANDLER.set(mocked)
            try:
                return handler(transport, request)
            finally:
                MOCK_HANDLER.reset(tokens[1])
                TRANSPORT.reset(tokens[0])
        return handle_request


def _attribute_patch(patcher: Any, switchboard: Any = None) -> Any:
    """`patcher` as an `_AttributePatch` when it is a plain ``mock.patch.object`` (an `_HttpxPatch`
    for an httpx transport's handler), else itself."""
    from unittest import mock

    plain = (type(patcher) is mock._patch and patcher.new is not mock.DEFAULT and not patcher.create
             and patcher.spec is None and patcher.spec_set is None and patcher.autospec is None
             and patcher.new_callable is None and not patcher.kwargs and not patcher.additional_patchers
             and patcher.attribute_name is None)
    if not plain:
        return patcher
    target = patcher.getter()
    library = sys.modules.get(getattr(target, "__module__", "").split(".")[0])
    if (switchboard is not None and isinstance(target, type) and library is not None
            and library.__name__ in ("httpx", "httpx2") and patcher.attribute in ("handle_request", "handle_async_request")):
        return _HttpxPatch(target, patcher.attribute, patcher.new, switchboard, library)
    return _AttributePatch(target, patcher.attribute, patcher.new)


def _exit_without_swallowing(self: Any, *exc_info: Any) -> None:
    self.close()


def vcr_response_fixes() -> tuple[Any, ...]:
    """Patches for vcrpy's played http.client response (`vcr.stubs.VCRHTTPResponse`).

    Its ``close()`` returns True, and `io.IOBase.__exit__` returns what ``close()`` returns, so an
    exception raised inside ``with urllib.request.urlopen(...) as response:`` -- a failed assert
    included -- vanished. The response here closes and lets it through.
    """
    from vcr.stubs import VCRHTTPResponse

    return ((VCRHTTPResponse, "__exit__", _exit_without_swallowing),)


def _normal_host(host: str) -> str:
    host = host.strip().lower()
    if "://" in host:
        return host_of(host)
    return host


def _allowed(host: str, allowed: frozenset[str]) -> bool:
    """`host` (``name:port``) is allowed by an entry naming it with or without the port."""
    name = host.rpartition(":")[0]
    return host in allowed or name in allowed
