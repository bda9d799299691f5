"""`rote demo`: a task's whole life, offline (or against Claude with --live)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

import anyio
from anyio.abc import TaskGroup

from services.cli.common import data_dir_problem, describe_failure, load_settings
from services.dev.demo.scenario import DemoReport, run_demo
from services.dev.demo.site import DemoSite
from services.dev.standin.server import StandinServer
from services.kernel.logs import get_logger
from services.kernel.settings import Settings

log = get_logger("rote.cli")


def register(sub: argparse._SubParsersAction) -> None:
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
    if args.data_dir:
        data_dir = Path(args.data_dir)
        if data_dir.is_dir() and any(data_dir.iterdir()):
            # The demo's story (its task, executor v1, v2...) starts from an empty store.
            print(
                f"rote: --data-dir {args.data_dir} is not empty; give a new directory",
                file=sys.stderr,
            )
            return 2
        problem = data_dir_problem(data_dir, "--data-dir")
        if problem:
            print(f"rote: {problem}", file=sys.stderr)
            return 2
    # SIGTERM outside the event loop (the site and stand-in starting, the temp dir
    # going) interrupts like Ctrl-C, so the `with` blocks still clean up; inside the
    # loop `_run` listens for both itself.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        report = _demo(args, settings)
    except KeyboardInterrupt:
        report = None
    except BaseExceptionGroup as group:
        if group.subgroup(KeyboardInterrupt) is None:
            return _failed(group, settings)
        log.debug("demo_interrupted_with_errors", exc_info=group)
        report = None
    except Exception as exc:
        return _failed(exc, settings)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if report is None:
        print("rote: demo interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    ok = all(row.status == "completed" for row in report.rows)
    return 0 if ok else 1


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _failed(exc: BaseException, settings: Settings) -> int:
    log.debug("demo_failed", exc_info=exc)
    print(f"rote: demo failed: {describe_failure(exc, settings)}", file=sys.stderr)
    return 1


def _demo(args: argparse.Namespace, settings: Settings) -> DemoReport | None:
    """The report, or None when a signal stopped the demo."""
    with tempfile.TemporaryDirectory(prefix="rote-demo-") as tmp, DemoSite() as site:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp)
        settings = settings.with_(
            data_dir=data_dir, nats_url=None, event_store="sqlite", replay_backoff_s=0.5
        )
        if args.live:
            _print("model: Claude (live)")
            report = _run_loop(settings, site)
        else:
            with StandinServer() as standin:
                # The llm service reads these when it starts: point it at the stand-in,
                # and never send a real key to it.
                os.environ["ANTHROPIC_BASE_URL"] = standin.url
                os.environ["ANTHROPIC_API_KEY"] = "stand-in-needs-no-key"
                _print(f"model: rote's scripted stand-in at {standin.url} (offline; not Claude)")
                report = _run_loop(settings, site)
    return report


def _run_loop(settings: Settings, site: DemoSite) -> DemoReport | None:
    try:
        return anyio.run(_run, settings, site, backend="asyncio")
    finally:
        # Leaving the loop put SIGTERM back to its default (kill at once): interrupt
        # again, so the clean-up still to come runs.
        signal.signal(signal.SIGTERM, _interrupt)


async def _run(settings: Settings, site: DemoSite) -> DemoReport | None:
    report: DemoReport | None = None
    stopped_by: str | None = None
    # Listening before anything starts, and until everything has stopped: a signal
    # cancels the scenario, and open_stack's exit then closes the services and stops
    # the embedded NATS in order (a second signal meanwhile changes nothing).
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

        async def stop_on_signal(tg: TaskGroup) -> None:
            nonlocal stopped_by
            async for signum in signals:
                stopped_by = signal.Signals(signum).name
                log.info("demo_stopping", signal=stopped_by)
                tg.cancel_scope.cancel()
                return

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_on_signal, tg)
                report = await run_demo(settings=settings, site=site, out=_print)
                tg.cancel_scope.cancel()
        except Exception as exc:
            if stopped_by is None:
                raise
            # What broke while stopping early (a request cut short) is no news.
            log.debug("demo_stop_errors", exc_info=exc)
    return None if stopped_by else report
