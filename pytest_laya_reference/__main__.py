"""`python -m pytest_laya_reference` / `laya-reference-server`: serve real Laya per the target spec.

With no `--checkpoint` it serves the embedded tiny checkpoint, so nothing reaches the network.
The URL is printed on one line once every checkpoint is loaded and warm; `/livez` answers before
that, and `/readyz` says when it is time.
"""

from __future__ import annotations

import argparse
import os
import sys

from .settings import Limits, ServerSettings, check_api_key

__all__ = ["main", "missing_modules", "parse_checkpoints", "fit_fd_limit"]

#: What the server imports from the reference extra (pytest-laya[reference]), checked before any
#: of it loads, so a core install gets one line saying what to install, not a traceback.
EXTRA_MODULES = ("starlette", "uvicorn", "laya", "torch")
INSTALL_EXTRA = "pip install 'pytest-laya[reference]'"

#: Descriptors kept for everything but client connections: the listener, the event loop, log
#: files, checkpoint files, torch's and the threads' own (an idle server holds about 10).
FD_RESERVE = 128
DEFAULT_MAX_CONNECTIONS = 1024


def fit_fd_limit(max_connections: int | None) -> tuple[int, str | None]:
    """The connection cap to serve with, raising the soft RLIMIT_NOFILE if it must.

    An explicit cap that cannot fit below the hard limit is an error (ValueError); the default
    one is lowered to fit, with a note to print. Where there is no `resource` module (Windows),
    the cap is taken as given.
    """
    wanted = DEFAULT_MAX_CONNECTIONS if max_connections is None else max_connections
    try:
        import resource
    except ImportError:
        return wanted, None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = hard if hard != resource.RLIM_INFINITY else wanted + FD_RESERVE
    needed = wanted + FD_RESERVE
    if needed > ceiling:
        if max_connections is not None:
            raise ValueError(f"--max-connections {max_connections} needs {needed} file descriptors and this process "
                             f"may open {ceiling} (ulimit -n); lower it or raise the limit")
        fitted = ceiling - FD_RESERVE
        if fitted < 16:
            raise ValueError(f"this process may open only {ceiling} file descriptors (ulimit -n); the server "
                             f"needs at least {16 + FD_RESERVE}")
        wanted, needed = fitted, ceiling
        note = f"--max-connections is {fitted}, lowered from {DEFAULT_MAX_CONNECTIONS} to fit ulimit -n {ceiling}"
    else:
        note = None
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return wanted, note


def parse_checkpoints(values: list[str]) -> dict[str, str]:
    """`[NAME=]DIR_OR_HUB_ID` entries as {name: source}; a bare entry is named after its last part."""
    checkpoints: dict[str, str] = {}
    for value in values:
        name, sep, source = value.partition("=")
        if not sep:
            source = value
            name = value.rstrip("/").rsplit("/", 1)[-1]
        if not name or not source:
            raise argparse.ArgumentTypeError(f"--checkpoint {value!r}: use DIR, HUB_ID or NAME=DIR")
        if name in checkpoints:
            raise argparse.ArgumentTypeError(f"--checkpoint: the name {name!r} is given twice; use NAME=DIR")
        checkpoints[name] = source
    return checkpoints


def missing_modules() -> list[str]:
    """The reference extra's modules this Python cannot import (found without importing them)."""
    import importlib.util

    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]


def _env_switch(name: str) -> bool:
    """A `LAYA_*` switch read as laya-serve reads it: on for 1, true, yes or on (any case)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="laya-reference-server", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (default 8000)")
    p.add_argument("--checkpoint", action="append", default=[], metavar="[NAME=]DIR_OR_HUB_ID",
                   help="a checkpoint to serve; repeat for several (default: the embedded tiny checkpoint)")
    p.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda:0 (default: laya's choice)")
    p.add_argument("--api-key", default=None, help="require this bearer token (default: LAYA_API_KEY)")
    p.add_argument("--max-concurrent", type=int, default=16,
                   help="decisions in inference at once (their body read) before 503 overloaded (default 16)")
    p.add_argument("--max-body-reads", type=int, default=32,
                   help="request bodies being received at once (those that did not come with their head) "
                        "before 503 overloaded (default 32)")
    p.add_argument("--body-timeout", type=float, default=10.0,
                   help="seconds a request may take to send its body before 408 (default 10)")
    p.add_argument("--max-connections", type=int, default=None,
                   help=f"connections open at once; at the cap the one longest waiting for a request head is "
                        f"closed (default {DEFAULT_MAX_CONNECTIONS}, lowered to fit ulimit -n)")
    p.add_argument("--head-timeout", type=float, default=10.0,
                   help="seconds a connection may take to send a whole request head (default 10)")
    p.add_argument("--keep-alive-timeout", type=float, default=5.0,
                   help="seconds an idle keep-alive connection is kept after a response (default 5)")
    p.add_argument("--max-request-tokens", type=int, default=None,
                   help="tokens of inference one request may ask for: states x questions x token window "
                        "(default 32768, 64 questions at laya's default window of 512)")
    p.add_argument("--max-inflight-tokens", type=int, default=None,
                   help="tokens of inference in flight at once, all requests together, before 503 overloaded "
                        "(default: 4 x --max-request-tokens)")
    p.add_argument("--max-batch", type=int, default=16,
                   help="requests per batch; the engine packs a batch's rows into forward passes of about "
                        "2,048 tokens (default 16)")
    p.add_argument("--batch-window-ms", type=float, default=0.0,
                   help="how long an idle server's first request waits for company (default 0: under load, "
                        "requests that queue while a pass runs share the next one anyway)")
    p.add_argument("--busy-window-ms", type=float, default=3.0,
                   help="how long a request waits for company while another batch runs (default 3)")
    p.add_argument("--passes", type=int, default=2,
                   help="batches run at once, each on its own thread, their forward passes sharing the "
                        "cores (default 2)")
    p.add_argument("--jev-strict", action="store_true", default=None,
                   help="answer with Jev's field set only, plus latency_ms (default: LAYA_JEV_STRICT, as laya-serve)")
    p.add_argument("--show-checkpoint", action="store_true", help="print the embedded checkpoint's directory and exit")
    return p


def _check_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Counts at least 1, timeouts over 0, a window not negative, a port that exists."""
    for name, value in (("--max-concurrent", args.max_concurrent), ("--max-batch", args.max_batch),
                        ("--passes", args.passes), ("--max-body-reads", args.max_body_reads),
                        ("--max-connections", args.max_connections), ("--max-request-tokens", args.max_request_tokens),
                        ("--max-inflight-tokens", args.max_inflight_tokens)):
        if value is not None and value < 1:
            parser.error(f"{name} must be at least 1")
    for name, seconds in (("--body-timeout", args.body_timeout), ("--head-timeout", args.head_timeout),
                          ("--keep-alive-timeout", args.keep_alive_timeout)):
        if not seconds > 0:
            parser.error(f"{name} must be more than 0 seconds")
    if args.batch_window_ms < 0 or args.busy_window_ms < 0 or not 0 <= args.port <= 65535:
        parser.error("--batch-window-ms and --busy-window-ms must be >= 0 and --port in 0..65535")


def _api_key(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The key from the flag, else ``LAYA_API_KEY``, checked.

    An empty key (flag or environment) would serve without authentication, silently; a key
    with surrounding whitespace could never be sent. Both are refused, and the message never
    shows the key.
    """
    api_key: str | None
    if args.api_key is not None:
        api_key, origin = str(args.api_key), "--api-key"
    else:
        api_key, origin = os.environ.get("LAYA_API_KEY"), "LAYA_API_KEY"
    if api_key is not None:
        try:
            check_api_key(api_key)
        except ValueError as exc:
            parser.error(f"{origin}: {exc}")
    return api_key


def _settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ServerSettings:
    """The server's settings from the command line (a usage error where they do not fit)."""
    api_key = _api_key(parser, args)
    try:
        max_connections, note = fit_fd_limit(args.max_connections)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    if note:
        print(f"laya-reference-server: note: {note}", file=sys.stderr, flush=True)
    limits = Limits() if args.max_request_tokens is None else Limits(max_request_tokens=args.max_request_tokens)
    try:
        return ServerSettings(api_key=api_key, max_concurrent=args.max_concurrent, max_batch=args.max_batch,
                              batch_window_ms=args.batch_window_ms, busy_window_ms=args.busy_window_ms,
                              passes=args.passes,
                              max_body_reads=args.max_body_reads, body_timeout_s=args.body_timeout,
                              max_connections=max_connections, head_timeout_s=args.head_timeout,
                              keep_alive_timeout_s=args.keep_alive_timeout, limits=limits,
                              max_inflight_tokens=args.max_inflight_tokens,
                              jev_strict=args.jev_strict or _env_switch("LAYA_JEV_STRICT"))
    except ValueError as exc:
        parser.error(str(exc).replace("max_inflight_tokens", "--max-inflight-tokens"))


def _serve(parser: argparse.ArgumentParser, args: argparse.Namespace, checkpoints: dict[str, str],
           settings: ServerSettings) -> int:
    """Listen, load in the background, serve until stopped; 1 when loading failed."""
    from .app import create_app
    from .engine import LayaEngine
    from .heap import freeze_loaded_objects
    from .serving import HardenedServer, listen_tcp, uvicorn_config

    try:
        sock = listen_tcp(args.host, args.port)
    except OSError as exc:
        parser.error(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"

    def announce() -> None:
        freeze_loaded_objects()
        print(f"laya-reference-server ready at {url}", flush=True)

    try:
        engine = LayaEngine(checkpoints, device=args.device, passes=args.passes)
    except ValueError as exc:  # a name laya cannot register (it lower-cases and resolves aliases)
        sock.close()
        parser.error(f"--checkpoint: {exc}")
    failures: list[BaseException] = []

    def give_up(exc: BaseException) -> None:
        failures.append(exc)
        print(f"laya-reference-server: error: loading the checkpoints failed: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)
        server.should_exit = True

    app = create_app(engine, settings, on_ready=announce, on_load_failure=give_up)
    server = HardenedServer(uvicorn_config(app, settings), settings)
    server.run(sockets=[sock])
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    from .cores import bound_openmp_spinning
    from .heap import cap_malloc_arenas, keep_freed_heap

    cap_malloc_arenas()  # before any thread exists; see pytest_laya_reference.heap
    keep_freed_heap()
    bound_openmp_spinning()  # before torch loads; see pytest_laya_reference.cores
    parser = _parser()
    args = parser.parse_args(argv)
    from .tiny_checkpoint import embedded_checkpoint_dir

    if args.show_checkpoint:
        print(embedded_checkpoint_dir())
        return 0
    missing = missing_modules()
    if missing:
        parser.exit(2, f"laya-reference-server: error: the reference server needs the reference extra, and "
                       f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: {INSTALL_EXTRA} "
                       f"(in a checkout: pip install -e '.[reference]'; on a machine without a GPU, "
                       f"pip install torch==2.13.0 first)\n")
    _check_numbers(parser, args)
    try:
        checkpoints = parse_checkpoints(args.checkpoint) if args.checkpoint else {"tiny": str(embedded_checkpoint_dir())}
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    return _serve(parser, args, checkpoints, _settings(parser, args))


if __name__ == "__main__":
    sys.exit(main())
