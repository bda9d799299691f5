"""`rote model serve [--port P]`: the offline stand-in model (not Claude) over the
Anthropic Messages API, for the demo and for running rote without an API key."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from services.cli.common import load_settings, port
from services.dev.standin.server import StandinServer

DEFAULT_PORT = 8765


def register(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser("model", help="model helpers (the offline stand-in model)")
    model_sub = model.add_subparsers(dest="model_command", metavar="COMMAND")
    serve = model_sub.add_parser(
        "serve",
        help="serve the stand-in model (a scripted agent, not Claude) on the Messages API",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)"
    )
    serve.add_argument(
        "--api-key", default=None, help="require this key (default: accept any request)"
    )
    serve.set_defaults(func=run_serve)
    model.set_defaults(func=lambda args: (model.print_help(), 2)[1])


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_serve(args: argparse.Namespace) -> int:
    load_settings()
    standin = StandinServer(args.host, args.port, api_key=args.api_key)
    signal.signal(signal.SIGTERM, _stop)
    try:
        standin.start()
    except OSError as exc:
        print(f"rote: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    print(
        f"rote stand-in model (a scripted agent, NOT Claude) on {standin.url}\n"
        f"  use it with: ANTHROPIC_BASE_URL={standin.url}",
        flush=True,
    )
    try:
        while True:
            signal.pause()  # the server runs on its own thread; wait for SIGINT/SIGTERM
    except KeyboardInterrupt:
        pass
    finally:
        standin.stop()
    return 0
