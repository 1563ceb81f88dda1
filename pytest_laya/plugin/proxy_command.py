"""``python -m pytest_laya proxy``: the recording proxy on its own, for docker-compose set-ups and
test suites in other languages.

    python -m pytest_laya proxy --port N --cassettes DIR --mode replay|record|live [--upstream URL]
        [--record[=all|missing|new_episodes]]

replay answers from every cassette under DIR (`CassetteLibrary`, matched by method, path, query
and body), with no upstream; record forwards to ``--upstream`` and writes what it saw to
``DIR/<--cassette>.yaml`` atomically after every exchange, in the plugin's record modes
(``--record``, `RecordMode`: the whole file, only a missing one, or appended to); live forwards. Every exchange goes
through a `LayaRoute` observed by the plugin's own spec check (`SpecCheck`), so the conformance
table printed when the proxy stops is the plugin's. It listens on loopback unless ``--host``
says otherwise, prints one ready line, and stops cleanly on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from pytest_laya.route.modes import Mode, RecordMode, RouteKind
from pytest_laya.wire.spec_name import SpecName

__all__ = ["add_proxy_parser", "main"]

MODES = tuple(mode.value for mode in (Mode.REPLAY, Mode.RECORD, Mode.LIVE))
#: The proxy's spelling of the plugin's --laya-record.
RECORD_OPTION = "--record"
#: How many exchanges a long-running proxy keeps in memory (the recording itself aside).
KEPT_EXCHANGES = 100


def add_proxy_parser(commands: Any) -> argparse.ArgumentParser:
    proxy: argparse.ArgumentParser = commands.add_parser(
        "proxy", help="a recording proxy for services outside pytest (docs/proxy.md)",
        description="Serve Laya cassettes over HTTP (replay), record through to a server (record), or forward and "
                    "check (live), for services in any process or language.")
    proxy.add_argument("--port", type=int, default=0, help="the port to listen on (default 0: a free one, printed)")
    proxy.add_argument("--host", default="127.0.0.1",
                       help="the address to listen on (default 127.0.0.1; 0.0.0.0 inside a container)")
    proxy.add_argument("--cassettes", required=True, metavar="DIR", help="the cassette directory")
    proxy.add_argument("--mode", choices=MODES, default=None,
                       help="replay (the default), record (the default with --record) or live")
    proxy.add_argument(RECORD_OPTION, nargs="?", const=RecordMode.ALL.value, default=None, type=_record_mode,
                       metavar="|".join(RecordMode.values()),
                       help="record mode, for the cassette DIR/NAME.yaml: " + "; ".join(
                           f"{mode.flag_of(RECORD_OPTION)} to {mode.does}" for mode in RecordMode)
                       + " (as the plugin's --laya-record; --mode record alone is --record)")
    proxy.add_argument("--upstream", metavar="URL", help="the Laya server to forward to (record, live)")
    proxy.add_argument("--cassette", default="proxy", metavar="NAME",
                       help="record: the cassette written under DIR (default proxy, i.e. DIR/proxy.yaml)")
    proxy.add_argument("--spec", choices=SpecName.values(), default=SpecName.AUTO.value,
                       help="the spec every response is held to (default auto: the one the server claims)")
    proxy.add_argument("--conformance", choices=("enforce", "report"), default="enforce",
                       help="enforce: a response that breaks its spec is answered as a spec_violation problem "
                            "(default); report: passed on and listed when the proxy stops")
    return proxy


def _record_mode(value: str) -> RecordMode:
    try:
        return RecordMode.parse(value, option=RECORD_OPTION)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settle_mode(options: argparse.Namespace) -> str | None:
    """``--record`` alone means ``--mode record``; with another mode it is a usage error."""
    if options.mode is None:
        options.mode = Mode.RECORD.value if options.record is not None else Mode.REPLAY.value
    if options.record is not None and not Mode(options.mode).records:
        return f"{RECORD_OPTION} is for --mode record (it says what of DIR/NAME.yaml is recorded); --mode " \
               f"{options.mode} records nothing"
    if Mode(options.mode).records and options.record is None:
        options.record = RecordMode.ALL
    return None


def _problem(options: argparse.Namespace) -> str | None:
    from pytest_laya.proxy.upstream import Upstream

    settled = _settle_mode(options)
    if settled:
        return settled
    replays = Mode(options.mode).replays
    if replays and options.upstream:
        return "--upstream is for --mode record or live; replay answers from the cassettes alone"
    if not replays:
        if not options.upstream:
            return f"--mode {options.mode} needs --upstream URL (the Laya server to forward to)"
        try:
            Upstream(options.upstream).close()
        except ValueError as exc:
            return str(exc)
    if not 0 <= options.port <= 65535:
        return f"--port must be 0 to 65535, got {options.port}"
    if replays and not Path(options.cassettes).is_dir():
        return f"--cassettes {options.cassettes} is not a directory (replay serves the cassettes under it)"
    if "/" in options.cassette or "\\" in options.cassette or options.cassette in ("", ".", ".."):
        return f"--cassette is a file name under DIR, not a path: {options.cassette!r}"
    return None


class _Standalone:
    """The standalone proxy's route, spec check and target, built from the command's options."""

    def __init__(self, options: argparse.Namespace) -> None:
        from pytest_laya.cassettes import laya_vcr
        from pytest_laya.intercept import LayaRoute
        from pytest_laya.plugin.cassette_fixture import broken_cassette, plays_recorded, recording_into
        from pytest_laya.plugin.routes import TestRoute
        from pytest_laya.plugin.run import LayaRun
        from pytest_laya.proxy import CassetteLibrary, RouteTarget, Upstream
        from pytest_laya.route.spec_check import SpecCheck
        from pytest_laya.servers.handle import REPLAY_URL, ServerHandle, ServerKind
        from pytest_laya.wire.urls import redact_url

        self.mode = Mode(options.mode)
        directory = Path(options.cassettes)
        path = directory / f"{options.cassette}.yaml"
        #: How a recording proxy records (None: it does not); a cassette --record=missing finds is replayed.
        self.record_mode: RecordMode | None = options.record if self.mode.records else None
        self.replays_cassette = plays_recorded(self.record_mode, path)
        spec = SpecName.document(options.spec)
        self.run = LayaRun(mode=self.mode, url=options.upstream, api_key=None, spec=spec, cassette_dir=directory,
                           strict=False, report=None, checkpoint=None, conformance_mode=options.conformance)
        self.lock = threading.Lock()
        self.library = None
        self.handle = None
        #: The recording's last outcome (`CassetteHandle.outcome`), and how many appended interactions it holds.
        self.outcome: str | None = None
        self.saved_new = self.tried_new = 0
        #: Why appending was refused (another server's answers), once it was.
        self.refused: str | None = None
        if self.mode.replays or self.replays_cassette:
            self.library = CassetteLibrary(directory, files=[path] if self.replays_cassette else None)
            server = ServerHandle(url=REPLAY_URL, kind=ServerKind.REPLAY, spec=(spec or SpecName.AUTO).value,
                                  label=f"replay of {path if self.replays_cassette else directory}")
            cassette: Any = self.library
            held = self.library.interactions
            self.what = (f"replaying {path} ({held} interactions; {RecordMode.MISSING.flag_of(RECORD_OPTION)} "
                         f"records only a cassette that is missing)" if self.replays_cassette else
                         f"{held} interactions from {len(self.library.handles)} cassettes under {directory}")
        else:
            record = self.mode.records
            record_as = recording_into(self.record_mode, path)
            appends = record_as is not True
            broken = broken_cassette(path) if record and not appends and path.is_file() else None
            self.handle = laya_vcr(record=record_as, cassette_dir=None, api_key=None, strict=False,
                                   record_hint="--mode record").open(path if record else "<capture>")
            if not record:
                self.handle.discard()
            server = ServerHandle(url=options.upstream, kind=ServerKind.LIVE, spec=(spec or SpecName.AUTO).value,
                                  label=f"{self.mode} {redact_url(options.upstream)}")
            cassette = self.handle.cassette
            doing = (f"appending to {path} ({self.handle.interactions} interactions held)" if appends else
                     f"replacing {path}, which cannot be read ({broken})" if broken else f"recording into {path}")
            self.what = f"forwarding to {redact_url(options.upstream)}" + (f", {doing}" if record else "")
        recording = self.handle.path if self.handle is not None and self.mode.records else None
        kind = RouteKind.REPLAY if self.mode.replays or self.replays_cassette else RouteKind.RECORD
        self.route = TestRoute(nodeid="proxy", server=server, kind=kind,
                               handle=self.handle, cassette_path=recording)
        self.check = SpecCheck(self.run, self.route)
        self.route.laya = LayaRoute(cassette, kind=kind.value, catch_all=True,
                                    observer=self.check, redact=self.handle.redact if self.handle else str)
        self.upstream = Upstream(options.upstream) if options.upstream and not self.replays_cassette else None
        self.target = RouteTarget(self.route.laya, upstream=self.upstream, origin=server.url)

    def __call__(self, request: Any) -> Any:
        reply = self.target(request)
        laya = self.route.laya
        assert laya is not None
        with self.lock:
            # A long-running proxy keeps the recording, and a bounded tail of everything else.
            for kept in (laya.exchanges, laya.calls, laya.errors, self.route.violations):
                del kept[:-KEPT_EXCHANGES]
            if not self.mode.records and self.handle is not None:  # live: nothing kept
                self.handle.cassette.data.clear()
            elif self.mode.records and self.handle is not None and self.handle.cassette.data:
                refused = self._save()
                if refused is not None:
                    return refused
        return reply

    def _save(self) -> Any:
        """Write the recording (atomic: the file is always whole); appending, only when this exchange
        added to it, so a played one leaves the file untouched. The refusal to append another server's
        answers, as the service's answer (None when saved)."""
        from pytest_laya.cassettes.errors import CassetteError
        from pytest_laya.cassettes.provenance import recorded_identity
        from pytest_laya.proxy.http_server import problem_reply

        handle = self.handle
        assert handle is not None
        if handle.appends:
            new = len(handle.cassette.laya_new_interactions())
            if new == self.tried_new:  # played: nothing to write (nor to refuse)
                return None
            self.tried_new = new
        handle.set_provenance(server=self.route.server.label, spec=self.check.claimed or "current",
                              identity=recorded_identity(handle, None, None))
        try:
            self.outcome = handle.finish(failed=False)
        except CassetteError as exc:
            if self.refused is None:
                sys.stderr.write(f"python -m pytest_laya proxy: {exc}\n")
                sys.stderr.flush()
            self.refused = str(exc)
            return problem_reply(500, "cassette_not_appended", "Cassette not appended", handle.redact(str(exc)))
        if handle.appends:
            self.saved_new = new
        return None

    @property
    def shown_mode(self) -> str:
        """The ready line's mode: ``record`` with its record mode (``replay`` what --record=missing found)."""
        if self.record_mode in (None, RecordMode.ALL):
            return str(self.mode)
        return f"{self.mode} ({self.record_mode.flag_of(RECORD_OPTION)})"

    def close(self) -> None:
        if self.upstream is not None:
            self.upstream.close()

    def summary(self, out: TextIO) -> None:
        from pytest_laya.plugin.run import counted_as
        from pytest_laya.plugin.summary import CASSETTE_WORDS

        run = self.run
        out.write(f"pytest-laya proxy stopped ({self.mode}): {len(self.route.laya.exchanges if self.route.laya else [])}"
                  f" recent exchanges kept; servers: "
                  f"{', '.join(f'{k} ({v} spec)' for k, v in run.servers.items()) or 'none'}\n")
        if self.handle is not None and self.mode.records:
            outcome = ("refused: " + self.refused if self.refused else
                       f"{self.saved_new} interaction(s) appended" if self.saved_new else
                       CASSETTE_WORDS.get(counted_as(self.outcome or ""), "nothing new recorded, the file untouched"))
            out.write(f"cassette {self.handle.path}: {outcome}\n")
        for section, lines in run.notes.items():
            out.write(f"{section}:\n")
            for line in lines:
                out.write(f"  {line}\n")
        rows = run.conformance.rows() if run.conformance else []
        if rows:
            out.write("conformance (each server's responses, against each spec):\n")
        for row in rows:
            out.write(f"  {row['server']:<40} {row['spec']:<8} operations {row['operations_met']}/"
                      f"{row['operations_seen']}, headers {row['headers_met']}/{row['headers_seen']}, "
                      f"{row['violations']} violations in {row['exchanges']} responses\n")
        if self.route.violations:
            out.write(f"spec violations (the last {min(len(self.route.violations), KEPT_EXCHANGES)}):\n")
            for violation in self.route.violations:
                out.write(f"  {violation.splitlines()[0]}\n")
        out.flush()


def main(options: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the proxy until SIGTERM or Ctrl-C; 0 when it stopped cleanly, 2 on a usage error."""
    from pytest_laya.proxy import ProxyServer

    out = out or sys.stdout
    problem = _problem(options)
    if problem:
        sys.stderr.write(f"python -m pytest_laya proxy: {problem}\n")
        return 2
    standalone = _Standalone(options)
    try:
        server = ProxyServer(options.host, options.port, target=standalone, loopback_only=options.host == "127.0.0.1")
    except OSError as exc:
        sys.stderr.write(f"python -m pytest_laya proxy: cannot listen on {options.host}:{options.port}: {exc}\n")
        return 2
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    server.start()
    out.write(f"pytest-laya proxy: {standalone.shown_mode} on {server.url} ({standalone.what}); stop with Ctrl-C or SIGTERM\n")
    out.flush()
    try:
        while not stopping.wait(0.5):
            pass
    finally:
        server.stop()
        standalone.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        standalone.summary(out)
    return 0
