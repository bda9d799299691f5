"""`rote up` (every service in one process) and `rote serve NAME` (one service)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import anyio
import nats.js.errors
from anyio.abc import TaskStatus

from services.cli.common import data_dir_problem, describe_failure, load_settings
from services.kernel.logs import get_logger
from services.kernel.runtime import (
    SERVICE_MODULES,
    AlreadyRunningError,
    UnknownServiceError,
    open_stack,
)
from services.kernel.secrets import redact
from services.kernel.settings import Settings, SettingsError

log = get_logger("rote.cli")


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser(
        "up",
        help="run every service in one process (embedded NATS by default)",
        description="Run every service in one process. Without --nats-url or ROTE_NATS_URL"
        " it starts an embedded NATS with JetStream in ROTE_DATA_DIR (port 4222, or a free"
        " one when that is taken; the first line printed says which). Stops on SIGINT"
        " (Ctrl-C) or SIGTERM.",
    )
    up.add_argument("--nats-url", help="use this NATS (default: ROTE_NATS_URL, else embedded)")
    up.set_defaults(func=lambda args: run(args, list(SERVICE_MODULES), join=False, command="up"))

    serve = sub.add_parser(
        "serve",
        help="run one service",
        description="Run one service. Without --nats-url or ROTE_NATS_URL it joins the"
        " embedded NATS of a running `rote up` in the same ROTE_DATA_DIR, else starts its"
        " own, and warns that only this machine can reach it. Stops on SIGINT or SIGTERM.",
    )
    serve.add_argument("name", choices=list(SERVICE_MODULES), help="the service to run")
    serve.add_argument(
        "--nats-url", help="use this NATS (default: ROTE_NATS_URL, else the embedded one)"
    )
    serve.set_defaults(func=lambda args: run(args, [args.name], join=True, command="serve"))


def run(args: argparse.Namespace, names: list[str], *, join: bool, command: str) -> int:
    """`join`: use the embedded NATS a running `rote up` started in this data dir.
    `command`: what was run (`up`, `serve`), for the lines printed."""
    settings = load_settings()
    if args.nats_url:
        try:
            settings = settings.with_(nats_url=args.nats_url)
        except SettingsError as exc:
            print(f"rote: --nats-url: {exc}", file=sys.stderr)
            return 2
    problem = data_dir_problem(Path(settings.data_dir))
    if problem:
        print(f"rote: {problem}", file=sys.stderr)
        return 2
    code = 0
    try:
        anyio.run(_serve_until_signal, settings, names, join, command, backend="asyncio")
    # Start-up failures surface from inside a task group, wrapped in an exception group.
    except* UnknownServiceError as group:
        print(f"rote: {group.exceptions[0]}", file=sys.stderr)
        code = 2
    except* AlreadyRunningError as group:
        print(f"rote: {group.exceptions[0]}", file=sys.stderr)
        code = 1
    except* nats.js.errors.ServiceUnavailableError:
        where = redact(settings.nats_url) if settings.nats_url else "the embedded NATS"
        print(f"rote: JetStream is not enabled (or not ready) on {where}", file=sys.stderr)
        code = 1
    except* KeyboardInterrupt:
        pass
    except* Exception as group:
        # Anything else that stopped rote (a store it cannot open, a request NATS
        # refused...): one line for the user; the traceback goes to the debug log.
        log.debug("rote_failed", exc_info=group)
        print(f"rote: {describe_failure(group, settings)}", file=sys.stderr)
        code = 1
    return code


def local_only_warning(url: str, names: list[str], *, started: bool) -> str:
    """What `rote serve` says on stderr when no NATS URL was given: its service is on an
    embedded NATS that nothing outside this machine can reach (a silent island in a
    deployment whose other processes use ROTE_NATS_URL)."""
    which = "its own embedded NATS" if started else "the embedded NATS of a running `rote up`"
    return (
        f"rote serve: warning: ROTE_NATS_URL is not set, so {', '.join(names)} is on"
        f" {which} at {redact(url)}: only processes on this machine pointed at that URL"
        " can reach it; a deployment sets ROTE_NATS_URL on every process"
    )


async def _serve_until_signal(
    settings: Settings, names: list[str], join: bool, command: str
) -> None:
    async with anyio.create_task_group() as tg:

        async def stop_on_signal(*, task_status: TaskStatus[None]) -> None:
            # Listening from the very start: a signal that arrives while services are
            # still starting stops them too, instead of waiting for start-up to finish.
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                async for signum in signals:
                    log.info("rote_stopping", signal=signal.Signals(signum).name)
                    tg.cancel_scope.cancel()
                    return

        # Started (its handlers installed) before anything else: a signal in the first
        # moments of start-up would otherwise kill the process with the default action.
        await tg.start(stop_on_signal)
        async with open_stack(settings, names, join_running=join) as stack:
            if stack.embedded:
                where = "embedded"
            elif settings.nats_url is None:  # joined the one a running `rote up` started
                where = "embedded, of the running rote up"
            else:
                where = "external"
            if command == "serve" and settings.nats_url is None:
                started = stack.embedded is not None
                print(local_only_warning(stack.nats_url, names, started=started), file=sys.stderr)
            # One plain line for people and scripts; the structured log has the rest.
            print(
                f"rote {command}: NATS {redact(stack.nats_url)} ({where});"
                f" services: {', '.join(names)}",
                flush=True,
            )
            log.info(
                "rote_ready",
                nats_url=stack.nats_url,
                services=names,
                data_dir=str(settings.data_dir),
            )
            await anyio.sleep_forever()
    log.info("rote_stopped")
