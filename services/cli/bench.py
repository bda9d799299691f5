"""`rote bench`: every benchmark in services/dev/bench, one JSON document and one table.

The benchmarks ship with rote (services/dev/bench, beside the demo sites and the
stand-in model they drive), so this runs from an installed package as from a checkout.
The cost, drift and overhead targets are ratios of two things measured in the same run
(a replay vs a full run on the same page state, a replayed step vs a raw NATS round
trip), so they hold on any machine that is not starved. The throughput (runs/s), health
rebuild (ms) and browser acquire (ms) targets are absolute thresholds: they depend on
the machine, which the JSON records. With several sections, each runs in a fresh
interpreter: what one leaves behind (a heap, browser processes, threads) must not weigh
on the next one's timings.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from services.cli.common import data_dir_problem, load_settings
from services.dev.bench import harness

SECTIONS = ["cost", "drift", "overhead", "journal", "throughput", "health", "browser"]
# The names the JSON and the table give two sections work with --only too.
ALIASES = {"executor_health": "health", "browser_acquire": "browser"}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="run the benchmarks (JSON and a table)")
    parser.add_argument("--quick", action="store_true", help="small sizes for CI (< 2 minutes)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS + list(ALIASES),
        metavar="SECTION",
        help=f"some of: {SECTIONS}",
    )
    parser.add_argument("--output", help="write the JSON here (default: print it)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a target is missed (default: report only)"
    )
    parser.set_defaults(func=run)


def section_names(only: list[str] | None) -> list[str]:
    """The sections to run, each once, by their --only names or aliases."""
    return list(dict.fromkeys(ALIASES.get(name, name) for name in only or SECTIONS))


def _in_own_process(name: str, quick: bool) -> harness.Section:
    """Run one section as `rote bench --only NAME` in a child and read its JSON back."""
    with tempfile.TemporaryDirectory(prefix="rote-bench-") as tmp:
        out = Path(tmp) / f"{name}.json"
        command = [sys.executable, "-m", "services.cli", "bench", "--only", name]
        command += ["--output", str(out), *(["--quick"] if quick else [])]
        # The child's table is the parent's to print; its progress line still shows.
        done = subprocess.run(command, stdout=subprocess.DEVNULL, check=False)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"rote bench: the {name} section failed (exit {done.returncode})")
        (section,) = json.loads(out.read_text())["sections"].values()
        return harness.section_from_json(section)


def run(args: argparse.Namespace) -> int:
    load_settings(quiet=True)
    # Checked before minutes of measuring, not when the results are to be written.
    if args.output:
        output = Path(args.output)
        problem = data_dir_problem(output.parent, "--output's directory")
        if problem is None and output.is_dir():
            problem = f"--output {output} is a directory"
        if problem:
            print(f"rote bench: {problem}", file=sys.stderr)
            return 2
    names = section_names(args.only)
    started = time.perf_counter()
    if len(names) == 1:
        module = importlib.import_module(f"services.dev.bench.bench_{names[0]}")
        print(f"running {names[0]}...", file=sys.stderr, flush=True)
        sections = [anyio.run(module.run, args.quick, backend="asyncio")]
    else:
        sections = [_in_own_process(name, args.quick) for name in names]
    duration = time.perf_counter() - started
    document = harness.to_json(sections, duration, args.quick)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(document + "\n")
        report = sys.stdout
    else:
        print(document)
        # stdout is the JSON alone (`rote bench | jq` works); the person reads stderr.
        report = sys.stderr
    print(harness.render_table(sections), file=report)
    within = harness.within_quick_target(duration, args.quick)
    print(
        f"\n{len(sections)} sections in {duration:.1f} s"
        + ("" if within is None else f" (--quick target: under {harness.QUICK_TARGET_S:.0f} s")
        + ("" if within is None else (", met)" if within else ", MISSED)"))
        + (f"; JSON in {args.output}" if args.output else ""),
        file=report,
    )
    missed = [section.name for section in sections if not section.ok]
    if missed:
        print(f"targets missed in: {', '.join(missed)}", file=report)
    return 1 if (missed and args.check) else 0
