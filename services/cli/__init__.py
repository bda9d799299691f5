"""The `rote` command: one module per sub-command, registered here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from services import __version__
from services.cli import bench, demo, executors, infra, model, schema, site, status, up

# Each module adds its parser with `register(subparsers)` and sets `func`.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    up.register,
    demo.register,
    bench.register,
    status.register,
    executors.register,
    schema.register,
    model.register,
    site.register,
    infra.register,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rote",
        description="Turn recurring LLM agent tasks into replayable executors.",
    )
    parser.add_argument("--version", action="version", version=f"rote {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in COMMANDS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    code = args.func(args)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
