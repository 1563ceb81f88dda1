"""`python -m reference_server` / `laya-reference-server`: serve real Laya per the target spec.

With no `--checkpoint` it serves the embedded tiny checkpoint, so nothing reaches the network.
The URL is printed on one line once every checkpoint is loaded and warm; `/livez` answers before
that, and `/readyz` says when it is time.
"""

from __future__ import annotations

import argparse
import os
import sys

from .settings import ServerSettings

__all__ = ["main", "parse_checkpoints"]


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
    p.add_argument("--max-concurrent", type=int, default=16, help="decisions in flight before 503 overloaded")
    p.add_argument("--max-batch", type=int, default=16, help="requests per batched forward pass")
    p.add_argument("--batch-window-ms", type=float, default=0.0,
                   help="how long an idle server's first request waits for company (default 0: under load, "
                        "requests that queue while a pass runs share the next one anyway)")
    p.add_argument("--passes", type=int, default=2,
                   help="batches run at once, each on its own thread; the automatic torch thread count "
                        "is shared among them (default 2)")
    p.add_argument("--jev-strict", action="store_true", default=None,
                   help="answer with Jev's field set only, plus latency_ms (default: LAYA_JEV_STRICT, as laya-serve)")
    p.add_argument("--show-checkpoint", action="store_true", help="print the embedded checkpoint's directory and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    from .heap import cap_malloc_arenas, freeze_loaded_objects

    cap_malloc_arenas()  # before any thread exists; see reference_server.heap
    parser = _parser()
    args = parser.parse_args(argv)
    from .tiny_checkpoint import embedded_checkpoint_dir

    if args.show_checkpoint:
        print(embedded_checkpoint_dir())
        return 0
    for name, value in (("--max-concurrent", args.max_concurrent), ("--max-batch", args.max_batch),
                        ("--passes", args.passes)):
        if value < 1:
            parser.error(f"{name} must be at least 1")
    if args.batch_window_ms < 0 or not 0 <= args.port <= 65535:
        parser.error("--batch-window-ms must be >= 0 and --port in 0..65535")
    try:
        checkpoints = parse_checkpoints(args.checkpoint) if args.checkpoint else {"tiny": str(embedded_checkpoint_dir())}
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    api_key = args.api_key or os.environ.get("LAYA_API_KEY") or None
    jev_strict = args.jev_strict or _env_switch("LAYA_JEV_STRICT")
    settings = ServerSettings(api_key=api_key, max_concurrent=args.max_concurrent, max_batch=args.max_batch,
                              batch_window_ms=args.batch_window_ms, passes=args.passes, jev_strict=jev_strict)

    import uvicorn

    from .app import create_app
    from .engine import LayaEngine

    from .serving import listen_tcp

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
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    server.run(sockets=[sock])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
