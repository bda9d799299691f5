"""`rote status`: the running services and their endpoints, from $SRV.INFO."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import anyio

from services.cli.common import last_error, load_settings, positive_seconds
from services.kernel.bus import connect
from services.kernel.discovery import service_infos
from services.kernel.runtime import running_embedded_url
from services.kernel.secrets import redact, register_url_credentials
from services.kernel.settings import nats_url_problem

CONNECT_TIMEOUT_S = 5.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("status", help="list running services and their endpoints")
    parser.add_argument(
        "--nats-url", help="NATS to ask (default: ROTE_NATS_URL or the running embedded one)"
    )
    parser.add_argument("--json", action="store_true", help="print the raw $SRV.INFO replies")
    parser.add_argument(
        "--wait", type=positive_seconds, default=0.5, help="seconds to collect replies"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    url = args.nats_url or settings.nats_url or running_embedded_url(settings)
    register_url_credentials(url)  # --nats-url: masked like ROTE_NATS_URL
    if url is None:
        print(
            f"rote: nothing running (no ROTE_NATS_URL, no embedded NATS in {settings.data_dir})",
            file=sys.stderr,
        )
        return 1
    if problem := nats_url_problem(url):
        print(f"rote: {redact(problem)}", file=sys.stderr)
        return 2
    errors: list[str] = []
    try:
        infos = anyio.run(_collect, url, args.wait, errors.append, backend="asyncio")
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
        print(render(url, infos))
    return 0


async def _collect(
    url: str, wait_s: float, on_attempt_failed: Callable[[str], None]
) -> list[dict[str, Any]]:
    # The kernel's connect retries forever (right for a service waiting for its NATS);
    # a one-shot command gives up instead.
    with anyio.fail_after(CONNECT_TIMEOUT_S):
        bus = await connect(
            url, name="rote-status", connect_timeout=3, on_attempt_failed=on_attempt_failed
        )
    try:
        return await service_infos(bus, wait_s=wait_s)
    finally:
        await bus.close()


def render(url: str, infos: list[dict[str, Any]]) -> str:
    lines = [f"NATS {redact(url)}: {len(infos)} service instance(s)"]
    for info in infos:
        lines.append(f"  {info.get('name')} {info.get('version')}  id={info.get('id')}")
        for endpoint in info.get("endpoints") or []:
            lines.append(f"      {endpoint.get('subject')}")
    return "\n".join(lines)
