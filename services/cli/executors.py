"""`rote executors`: every task's executor at a glance, with how far its replayed answers
can be trusted (rote.api.executors.list and .stats): replays, hit rate, replays that
healed a step in place, answers checked
and found wrong, drift alarms and how many proved real, the estimated false-success rate
with its 95% upper bound, and what the replays saved."""

from __future__ import annotations

import argparse
import json
import sys

import anyio
import msgspec

from contracts import subjects as s
from contracts.base import Empty
from contracts.executors import ExecutorHealth, ExecutorList, ListExecutors, SavingsStats
from services.cli.common import nats_to_ask
from services.kernel.bus import connect
from services.kernel.secrets import redact

REQUEST_TIMEOUT_S = 10.0
HEADER = (
    f"{'task':<24} {'exec':>6} {'replays':>7} {'hit':>5} {'healed':>6} {'checked':>7} "
    f"{'wrong':>5} {'alarms':>9} {'false success':>15} {'saved $':>10}"
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "executors", help="every executor's health: replays, checks, drift, false-success rate"
    )
    parser.add_argument(
        "--nats-url", help="NATS to ask (default: ROTE_NATS_URL or the running embedded one)"
    )
    parser.add_argument("--json", action="store_true", help="print the replies as JSON")
    parser.set_defaults(func=run)


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.0f}%"


def row(health: ExecutorHealth) -> str:
    """One task's line: its current version (a candidate marked "?"), then its tallies."""
    version = f"v{health.version}" if health.version is not None else health.status
    if health.candidate:
        version += "?"
    false_success = "-"
    if health.false_success_rate is not None:
        false_success = f"{_pct(health.false_success_rate)} (<={_pct(health.false_success_upper)})"
    return (
        f"{health.task_id[:24]:<24} {version:>6} {health.replays:>7} {_pct(health.hit_rate):>5} "
        f"{health.healed:>6} {health.checked:>7} {health.wrong:>5} "
        f"{f'{health.drift_alarms}/{health.drift_confirmed}':>9} {false_success:>15} "
        f"{health.total_cost_saved_usd:>10.6f}"
    )


def summary(stats: SavingsStats) -> str:
    upper = f" (95% bound {_pct(stats.false_success_upper)})" if stats.false_success_upper else ""
    return (
        f"{stats.executors} executors, {stats.replays} replays ({_pct(stats.hit_rate)} of runs); "
        f"{stats.checked} answers checked, {stats.wrong} found wrong; {stats.drift_alarms} "
        f"drift alarms, {stats.drift_confirmed} real; false-success rate "
        f"{_pct(stats.false_success_rate)}{upper}; saved ${stats.total_cost_saved_usd:.6f}"
    )


async def _collect(url: str) -> tuple[list[ExecutorHealth], SavingsStats]:
    bus = await connect(url)
    try:
        listed: list[ExecutorHealth] = []
        after: str | None = None
        while True:
            page = await bus.request(
                s.EXECUTORS_LIST,
                ListExecutors(after=after),
                ExecutorList,
                timeout=REQUEST_TIMEOUT_S,
            )
            listed += page.executors
            if page.next_after is None:
                break
            after = page.next_after
        stats = await bus.request(
            s.EXECUTORS_STATS, Empty(), SavingsStats, timeout=REQUEST_TIMEOUT_S
        )
        return listed, stats
    finally:
        await bus.close()


def run(args: argparse.Namespace) -> int:
    url = nats_to_ask(args.nats_url)
    if isinstance(url, int):
        return url
    try:
        listed, stats = anyio.run(_collect, url, backend="asyncio")
    except Exception as exc:
        print(f"rote: executors: {redact(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        body = {"executors": msgspec.to_builtins(listed), "stats": msgspec.to_builtins(stats)}
        print(json.dumps(body, indent=2))
        return 0
    print(HEADER)
    for health in listed:
        print(row(health))
    print(summary(stats))
    return 0
