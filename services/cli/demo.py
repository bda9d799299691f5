"""`rote demo`: a task's whole life, offline (or against Claude with --live)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import anyio

from services.cli.common import load_settings
from services.demo.scenario import DemoReport, run_demo
from services.demo.site import DemoSite
from services.kernel.settings import Settings
from services.standin.server import StandinServer


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "demo", help="walk one task through its life: full run, replays, site change, healing"
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="use Claude (needs ANTHROPIC_API_KEY) instead of the offline stand-in model",
    )
    parser.add_argument("--data-dir", help="keep the demo's data here (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="also print a JSON summary")
    parser.set_defaults(func=run)


def _print(line: str) -> None:
    print(line, flush=True)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(quiet=True)
    if args.live and not os.environ.get("ANTHROPIC_API_KEY"):
        print("rote: --live needs ANTHROPIC_API_KEY", file=sys.stderr)
        return 2
    if args.data_dir and Path(args.data_dir).exists() and any(Path(args.data_dir).iterdir()):
        # The demo's story (its task, executor v1, v2...) starts from an empty store.
        print(
            f"rote: --data-dir {args.data_dir} is not empty; give a new directory", file=sys.stderr
        )
        return 2
    interrupted = False
    try:
        report = _demo(args, settings)
    except* KeyboardInterrupt:
        interrupted = True
    if interrupted:
        print("rote: demo interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    ok = all(row.status == "completed" for row in report.rows)
    return 0 if ok else 1


def _demo(args: argparse.Namespace, settings: Settings) -> DemoReport:
    with tempfile.TemporaryDirectory(prefix="rote-demo-") as tmp, DemoSite() as site:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp)
        settings = settings.with_(
            data_dir=data_dir, nats_url=None, event_store="sqlite", replay_backoff_s=0.5
        )
        if args.live:
            _print("model: Claude (live)")
            report = anyio.run(_run, settings, site, backend="asyncio")
        else:
            with StandinServer() as standin:
                # The llm service reads these when it starts: point it at the stand-in,
                # and never send a real key to it.
                os.environ["ANTHROPIC_BASE_URL"] = standin.url
                os.environ["ANTHROPIC_API_KEY"] = "stand-in-needs-no-key"
                _print(f"model: rote's scripted stand-in at {standin.url} (offline; not Claude)")
                report = anyio.run(_run, settings, site, backend="asyncio")
    return report


async def _run(settings: Settings, site: DemoSite) -> DemoReport:
    return await run_demo(settings=settings, site=site, out=_print)
