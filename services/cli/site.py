"""`rote site serve`: the demo site on its own, for trying rote by hand (with
`rote model serve` as the offline model)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from services.cli.common import port
from services.dev.demo.site import DemoSite


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("site", help="the local demo site rote's demo uses")
    actions = parser.add_subparsers(dest="site_command", metavar="ACTION", required=True)
    serve = actions.add_parser("serve", help="serve it until Ctrl-C")
    serve.add_argument("--port", type=port, default=8000, help="port (default 8000; 0: any free)")
    serve.add_argument("--layout", choices=["v1", "v2"], default="v1")
    serve.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with DemoSite(layout=args.layout, port=args.port) as site:
            print(
                f"demo site at {site.url} (layout {site.layout}); change it with "
                f"curl -X POST '{site.url}/_admin?layout=v2&edition=1'",
                flush=True,
            )
            stop.wait()
    except OSError as exc:  # the port is taken, or not ours to take
        print(f"rote: cannot listen on port {args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
