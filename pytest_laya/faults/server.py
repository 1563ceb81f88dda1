"""`ScriptedServer`: a real loopback HTTP/1.1 server whose every request consumes a script action.

Connection handling runs on daemon threads (one acceptor plus one per connection), so it works
the same from synchronous tests and from async tests whose event loop owns the main thread.
Every wait is bounded, and `stop()` closes every socket and joins every thread.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
import traceback
from collections import deque

from pytest_laya.faults._http11 import BadRequest, ConnectionDone, ParsedRequest, RawConnection, ReceivedRequest, RequestReader
from pytest_laya.faults.actions import Action, DefaultAction, Delay, Handler, Refuse, Respond
from pytest_laya.faults.loopback import check_loopback_host

__all__ = [
    "ScriptedServer",
]


# How often blocked threads wake up to look at the stop flag.  Small, so stop() is quick.
_POLL_S = 0.05


class ScriptedServer:
    """An HTTP/1.1 server on a loopback port that answers requests by following a script.

    Use it as a context manager (``with ScriptedServer(Respond(200, {...})) as server:``)
    and point the client at :attr:`url`.  Each request consumes the next script action;
    :meth:`enqueue` appends more.  When the script is empty, ``default`` answers (an
    action, or a function of the request); without one, a 500 whose body says
    "scripted server: script exhausted".

    Requests are parsed properly (request line, headers, Content-Length or chunked body,
    ``Expect: 100-continue``), recorded in :attr:`requests`, and served with keep-alive
    unless the client asks to close; responses to faults carry ``Connection: close``.

    Limitations, on purpose: one script shared by all connections, consumed in arrival
    order (concurrent requests race for actions); no TLS, no HTTP/2, no pipelining
    guarantees beyond sequential keep-alive.  ``port`` can be fixed, but 0 (a free port
    chosen by the kernel) avoids collisions between tests.
    """

    def __init__(
        self,
        *script: Action,
        default: DefaultAction = None,
        host: str = "127.0.0.1",
        port: int = 0,
        idle_timeout_s: float = 60.0,
        request_timeout_s: float = 10.0,
        stop_timeout_s: float = 1.0,
        max_body_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self._host, self._family = check_loopback_host(host)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535, got {port!r}")
        for action in script:
            self._check_script_action(action)
        if default is None or isinstance(default, Action):
            if isinstance(default, Refuse):
                raise ValueError("default cannot be Refuse: Refuse is a script step, not an answer")
            self._default: Action | None = default
        elif callable(default):
            self._default = Handler(default)
        else:
            raise TypeError(f"default must be an Action, a callable or None, got {default!r}")
        self._port = port
        self.idle_timeout_s = idle_timeout_s
        self.request_timeout_s = request_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.max_body_bytes = max_body_bytes

        #: Every request received, in arrival order (appended under the server lock).
        self.requests: list[ReceivedRequest] = []
        #: Exceptions raised by Handler functions, and internal errors (e.g. a failed re-bind).
        self.errors: list[BaseException] = []

        self._cond = threading.Condition(threading.Lock())
        self._script: deque[Action] = deque(script)
        self._stopping = threading.Event()
        self._started = False
        self._stopped = False
        self._listener: socket.socket | None = None
        self._retired: list[socket.socket] = []  # shut down, waiting for the acceptor to close
        self._reopen_at: float | None = None  # when a refused listener binds again
        self._down = False  # in a Refuse window (or about to be)
        self._pending_triggers = 0  # requests holding a Refuse that applies after their response
        self._conns: set[RawConnection] = set()
        self._threads: set[threading.Thread] = set()
        self._acceptor: threading.Thread | None = None
        self._conn_ids = itertools.count(1)

    # ----------------------------------------------------------------- public API

    @property
    def host(self) -> str:
        """The loopback address the server binds."""
        return self._host

    @property
    def port(self) -> int:
        """The bound port (known after :meth:`start` when constructed with port 0)."""
        if self._port == 0:
            raise RuntimeError("ScriptedServer has no port yet: call start() (or use it as a context manager)")
        return self._port

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        host = f"[{self._host}]" if self._family == socket.AF_INET6 else self._host
        return f"http://{host}:{self.port}"

    @property
    def pending(self) -> int:
        """Script actions not yet consumed."""
        with self._cond:
            return len(self._script)

    @property
    def listening(self) -> bool:
        """False while a :class:`Refuse` window is in effect (or before start / after stop)."""
        with self._cond:
            return self._listener is not None

    def enqueue(self, *actions: Action) -> None:
        """Append actions to the script (a Refuse reaching the head applies at once)."""
        for action in actions:
            self._check_script_action(action)
        with self._cond:
            self._script.extend(actions)
            if self._started and not self._stopped:
                self._apply_head_refuse_locked()
            self._cond.notify_all()

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` requests were received; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, _POLL_S))
            return True

    def start(self) -> ScriptedServer:
        """Bind, listen and start the acceptor thread.  Idempotent while running."""
        with self._cond:
            if self._stopped:
                raise RuntimeError("a stopped ScriptedServer cannot be restarted; create a new one")
            if self._started:
                return self
            listener = self._bind()
            self._port = listener.getsockname()[1]
            self._listener = listener
            self._started = True
            self._apply_head_refuse_locked()
            self._acceptor = threading.Thread(
                target=self._accept_loop, name=f"scripted-server-acceptor:{self._port}", daemon=True
            )
            self._acceptor.start()
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and join every thread (about 1 s at most).

        Idempotent.  A Handler function blocked forever cannot be interrupted; its daemon
        thread is left behind after ``stop_timeout_s`` rather than hanging the test.
        """
        with self._cond:
            if not self._started or self._stopped:
                return  # never started (start() still allowed) or already stopped
            self._stopped = True
            self._stopping.set()
            self._retire_listener_locked()
            conns = list(self._conns)
            threads = list(self._threads)
            self._cond.notify_all()
        for conn in conns:
            conn.shutdown()
        deadline = time.monotonic() + self.stop_timeout_s
        me = threading.current_thread()
        for thread in [self._acceptor, *threads]:
            if thread is not None and thread is not me:
                thread.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            if self._acceptor is None or not self._acceptor.is_alive():
                self._close_retired_locked()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._port else "unbound"
        state = "stopped" if self._stopped else "running" if self._started else "new"
        return f"<ScriptedServer {where} {state} pending={self.pending} requests={len(self.requests)}>"

    # ----------------------------------------------------------------- listener and Refuse

    @staticmethod
    def _check_script_action(action: object) -> None:
        if not isinstance(action, Action):
            raise TypeError(f"script items must be Action instances, got {action!r}")

    def _bind(self) -> socket.socket:
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR: re-binding the same port after Refuse must not trip over the
            # TIME_WAIT entries of connections this server closed.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(128)
            sock.settimeout(_POLL_S)
        except BaseException:
            sock.close()
            raise
        return sock

    def _retire_listener_locked(self) -> None:
        """Stop listening *now*.

        shutdown() takes the socket out of the kernel's listening table at once (new
        connects get RST, i.e. ECONNREFUSED) and wakes the acceptor; the acceptor thread
        itself then closes it, so no file descriptor is closed under a blocked accept().
        """
        listener = self._listener
        if listener is None:
            return
        self._listener = None
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            # Platforms that cannot shut down a listening socket: close it right away.
            listener.close()
            return
        self._retired.append(listener)

    def _close_retired_locked(self) -> None:
        while self._retired:
            self._retired.pop().close()

    def _pop_refuses_locked(self) -> float | None:
        """Pop consecutive Refuse actions at the head of the script; their total for_s."""
        total: float | None = None
        while self._script and isinstance(self._script[0], Refuse):
            refuse = self._script.popleft()
            assert isinstance(refuse, Refuse)
            total = (total or 0.0) + refuse.for_s
        return total

    def _begin_outage_locked(self, exclude: RawConnection | None) -> None:
        """Close the listener and idle connections; busy ones close after their response."""
        self._down = True
        self._retire_listener_locked()
        for conn in self._conns:
            if conn is exclude or conn.busy:
                conn.closing = True
            else:
                conn.shutdown()
        self._cond.notify_all()

    def _apply_head_refuse_locked(self) -> None:
        """A Refuse at the head with nothing to wait for takes effect immediately."""
        if self._down or self._pending_triggers:
            return  # the reopen step looks at the head again before listening
        for_s = self._pop_refuses_locked()
        if for_s is not None:
            self._begin_outage_locked(exclude=None)
            self._reopen_at = time.monotonic() + for_s

    def _reopen_locked(self) -> None:
        """End of a Refuse window: bind the same port again (unless another Refuse is next)."""
        more = self._pop_refuses_locked()
        if more is not None:
            self._reopen_at = time.monotonic() + more
            return
        assert self._reopen_at is not None
        try:
            listener = self._bind()
        except OSError as exc:
            # The port can be taken briefly by another socket; keep trying for 2 s.
            if time.monotonic() - self._reopen_at > 2.0:
                self.errors.append(exc)
                self._reopen_at = None  # give up: connections stay refused, loudly
            else:
                self._cond.wait(0.02)
            return
        self._listener = listener
        self._reopen_at = None
        self._down = False
        self._cond.notify_all()

    def _accept_loop(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._cond:
                    self._close_retired_locked()
                    listener = self._listener
                    if listener is None:
                        now = time.monotonic()
                        if self._reopen_at is not None and now >= self._reopen_at:
                            self._reopen_locked()
                        else:
                            wait = _POLL_S if self._reopen_at is None else self._reopen_at - now
                            self._cond.wait(min(_POLL_S, max(wait, 0.0)))
                        continue
                try:
                    sock, _addr = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    # Shut down under us (Refuse or stop), or a transient error (EMFILE).
                    if not self._stopping.is_set() and self._listener is listener:
                        self._stopping.wait(_POLL_S)
                    continue
                self._adopt(sock, listener)
        except BaseException as exc:  # pragma: no cover - a bug; keep it visible
            with self._cond:
                self.errors.append(exc)
        finally:
            with self._cond:
                self._close_retired_locked()

    def _adopt(self, sock: socket.socket, listener: socket.socket) -> None:
        with self._cond:
            conn = RawConnection(sock, next(self._conn_ids), stopping=self._stopping, lock=self._cond,
                                 send_timeout_s=self.request_timeout_s)
            if self._stopping.is_set() or self._listener is not listener:
                conn.abort()  # accepted in the instant the server went down
                return
            sock.settimeout(_POLL_S)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            thread = threading.Thread(
                target=self._serve, args=(conn,), name=f"scripted-server-conn:{self._port}#{conn.id}", daemon=True
            )
            conn.thread = thread
            self._conns.add(conn)
            self._threads.add(thread)
            thread.start()

    # ----------------------------------------------------------------- connections

    def _serve(self, conn: RawConnection) -> None:
        reader = RequestReader(conn, idle_timeout_s=self.idle_timeout_s, request_timeout_s=self.request_timeout_s,
                               max_body_bytes=self.max_body_bytes)
        try:
            while not self._stopping.is_set():
                try:
                    parsed = reader.read_request()
                except BadRequest as bad:
                    _error_response(bad.status, f"scripted server: {bad}").perform(
                        conn, keep_alive=False, head_only=False)
                    break
                if parsed is None:
                    break
                with self._cond:
                    self.requests.append(parsed.request)
                    self._cond.notify_all()
                if not self._handle(conn, parsed):
                    break
                conn.busy = False
                if conn.closing:
                    break
        except ConnectionDone:
            pass
        except Exception as exc:  # a bug in this module: record it, never kill the test run
            with self._cond:
                self.errors.append(exc)
        finally:
            conn.close_gracefully()
            with self._cond:
                self._conns.discard(conn)
                self._threads.discard(threading.current_thread())

    def _take(self, request: ReceivedRequest) -> tuple[Action, float | None]:
        """The action for this request, and the for_s of a Refuse that follows it."""
        with self._cond:
            if self._script:
                action = self._script.popleft()
            elif self._default is not None:
                action = self._default
            else:
                action = _error_response(
                    500,
                    f"scripted server: script exhausted (no action left for {request.method} {request.path}); "
                    "enqueue more actions or pass default=",
                )
            refuse_for = self._pop_refuses_locked()
            if refuse_for is not None:
                self._pending_triggers += 1
            return action, refuse_for

    def _handle(self, conn: RawConnection, parsed: ParsedRequest) -> bool:
        """Answer one request; True when the connection may serve another."""
        request = parsed.request
        action, refuse_for = self._take(request)
        try:
            resolved = self._resolve(action, request)
            if refuse_for is not None:
                with self._cond:
                    self._begin_outage_locked(exclude=conn)
            keep = resolved.perform(conn, keep_alive=parsed.keep_alive and not conn.closing,
                                    head_only=request.method == "HEAD")
        finally:
            if refuse_for is not None:
                conn.close_gracefully()
                with self._cond:
                    self._pending_triggers -= 1
                    self._down = True
                    if self._listener is not None:  # stop() raced us; nothing to refuse
                        self._retire_listener_locked()
                    self._reopen_at = time.monotonic() + refuse_for
                    self._cond.notify_all()
        return keep and refuse_for is None

    def _resolve(self, action: Action, request: ReceivedRequest) -> Action:
        """Run Handlers and Delays until an action that produces bytes (or a reset) remains."""
        for _ in range(100):
            if isinstance(action, Handler):
                try:
                    result = action.fn(request)
                except Exception as exc:
                    with self._cond:
                        self.errors.append(exc)
                    return _error_response(
                        500, "scripted server: Handler raised\n" + "".join(traceback.format_exception(exc))
                    )
                if not isinstance(result, Action):
                    return _error_response(500, f"scripted server: Handler returned {result!r}, not an Action")
                action = result
            elif isinstance(action, Delay):
                if self._stopping.wait(action.seconds):
                    raise ConnectionDone
                action = action.then
            elif isinstance(action, Refuse):
                return _error_response(
                    500, "scripted server: a Handler returned Refuse; Refuse belongs in the script"
                )
            else:
                return action
        return _error_response(500, "scripted server: Handler/Delay nesting is more than 100 deep")


def _error_response(status: int, text: str) -> Respond:
    return Respond(status, text)
