"""`rote schema [DIR]`: write the JSON Schema of every contract."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from contracts.catalog import json_schemas


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("schema", help="write the JSON Schema of every contract")
    parser.add_argument(
        "dir", nargs="?", default="schema", help="output directory (default: ./schema)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    schemas = json_schemas()
    for name, schema in schemas.items():
        (out / f"{name}.json").write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(schemas)} schemas to {out}")
    return 0
