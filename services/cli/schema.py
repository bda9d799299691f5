"""`rote schema [DIR]`: write the JSON Schema of every contract."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contracts.catalog import json_schemas
from services.cli.common import data_dir_problem, write_files


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("schema", help="write the JSON Schema of every contract")
    parser.add_argument(
        "dir", nargs="?", default="schema", help="output directory (default: ./schema)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    problem = data_dir_problem(out, "the output directory")
    if problem:
        print(f"rote: {problem}", file=sys.stderr)
        return 2
    schemas = json_schemas()
    files = {
        f"{name}.json": json.dumps(schema, indent=2, sort_keys=True) + "\n"
        for name, schema in schemas.items()
    }
    if problem := write_files(out, files):
        print(f"rote: {problem}", file=sys.stderr)
        return 1
    print(f"wrote {len(schemas)} schemas to {out}")
    return 0
