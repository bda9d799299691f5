"""`rote status`: the running services and their endpoints, from $SRV.INFO, with each
endpoint's requests and error replies from $SRV.STATS."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import anyio

from services.cli.common import last_error, nats_to_ask, positive_seconds
from services.kernel.bus import connect
from services.kernel.discovery import service_infos, service_stats
from services.kernel.secrets import redact

CONNECT_TIMEOUT_S = 5.0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "status", help="list running services and their endpoints, with their error counts"
    )
    parser.add_argument(
        "--nats-url", help="NATS to ask (default: ROTE_NATS_URL or the running embedded one)"
    )
    parser.add_argument("--json", action="store_true", help="print the raw $SRV.INFO replies")
    parser.add_argument(
        "--wait", type=positive_seconds, default=0.5, help="seconds to collect replies"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = nats_to_ask(args.nats_url)
    if isinstance(url, int):
        return url
    errors: list[str] = []
    try:
        infos, stats = anyio.run(_collect, url, args.wait, errors.append, backend="asyncio")
    except TimeoutError:
        print(
            f"rote: cannot reach NATS at {redact(url)}: no answer in {CONNECT_TIMEOUT_S:g} s"
            + last_error(errors),
            file=sys.stderr,
        )
        return 1
    except Exception as exc:
        print(f"rote: cannot reach NATS at {redact(url)}: {redact(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(infos, indent=2))
    else:
        print(render(url, infos, stats))
    if not infos:
        # Failing like "nothing running" above: scripts wait for services, not for NATS.
        print(
            f"rote: no service answered on NATS {redact(url)} within {args.wait:g} s",
            file=sys.stderr,
        )
        return 1
    return 0


async def _collect(
    url: str, wait_s: float, on_attempt_failed: Callable[[str], None]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # The kernel's connect retries forever (right for a service waiting for its NATS);
    # a one-shot command gives up instead.
    with anyio.fail_after(CONNECT_TIMEOUT_S):
        bus = await connect(
            url, name="rote-status", connect_timeout=3, on_attempt_failed=on_attempt_failed
        )
    infos: list[dict[str, Any]] = []
    stats: list[dict[str, Any]] = []

    async def ask_infos() -> None:
        infos.extend(await service_infos(bus, wait_s=wait_s))

    async def ask_stats() -> None:
        stats.extend(await service_stats(bus, wait_s=wait_s))

    try:
        # Both asked at once: each waits out `wait_s` for every instance to answer.
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask_infos)
            tg.start_soon(ask_stats)
        return infos, stats
    finally:
        await bus.close()


def render(url: str, infos: list[dict[str, Any]], stats: list[dict[str, Any]]) -> str:
    counts = {
        (reply.get("id"), endpoint.get("name")): endpoint
        for reply in stats
        for endpoint in reply.get("endpoints") or []
    }
    lines = [f"NATS {redact(url)}: {len(infos)} service instance(s)"]
    for info in infos:
        lines.append(f"  {info.get('name')} {info.get('version')}  id={info.get('id')}")
        for endpoint in info.get("endpoints") or []:
            line = f"      {endpoint.get('subject')}"
            if (counted := counts.get((info.get("id"), endpoint.get("name")))) is not None:
                line += f"  {_counts(counted)}"
            lines.append(line)
    return "\n".join(lines)


def _counts(endpoint: dict[str, Any]) -> str:
    """`12 requests, 1 error (last: not_found: no run 'r-9')`: what an operator looks
    at first when something is refused."""
    requests, errors = endpoint.get("num_requests", 0), endpoint.get("num_errors", 0)
    said = f"{requests} request{'' if requests == 1 else 's'}"
    if errors:
        said += f", {errors} error{'' if errors == 1 else 's'}"
        if last := endpoint.get("last_error"):
            said += f" (last: {redact(str(last))})"
    return said
