"""`rote infra`: what an operator needs from rote's code to run it on their own NATS.

    rote infra streams [DIR] [--replicas N]          write one JSON file per stream
    rote infra streams [DIR] [--replicas N] --check  fail when DIR differs from the code
    rote infra provision [--replicas N]              create/update streams and buckets

The stream files are generated from `services.kernel.streams.STREAMS`, never edited by
hand, in the JetStream API's stream configuration format: `nats stream add --config
FILE` reads them, and so does `$JS.API.STREAM.CREATE.<name>`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio
from nats.js import JetStreamContext

from services.cli.common import (
    data_dir_problem,
    last_error,
    load_settings,
    positive_seconds,
    replicas_problem,
    write_files,
)
from services.kernel.bus import connect
from services.kernel.secrets import redact, register_url_credentials
from services.kernel.settings import nats_url_problem
from services.kernel.streams import STREAMS, StreamSpec, ensure_streams

DEFAULT_DIR = "infra/streams"

# Limits rote leaves at the server's "unlimited" (-1): streams are bounded by age.
# The NATS CLI's schema requires them to be present.
_UNLIMITED = ("max_consumers", "max_msgs", "max_bytes", "max_msgs_per_subject")

# Field order in the files: identity first, then retention, then everything else.
_ORDER = (
    "name",
    "description",
    "subjects",
    "retention",
    "storage",
    "num_replicas",
    "max_age",
    "duplicate_window",
    "max_msg_size",
    "discard",
    *_UNLIMITED,
)


def stream_config_json(spec: StreamSpec, replicas: int = 1) -> dict[str, Any]:
    """The stream's configuration as the JetStream API spells it (durations in
    nanoseconds, enums as lower-case strings): exactly what `ensure_streams` creates."""
    config = spec.config(replicas).as_dict()
    for name in _UNLIMITED:
        config.setdefault(name, -1)
    config.setdefault("compression", "none")
    config.setdefault("allow_direct", False)
    config.setdefault("mirror_direct", False)
    ordered = {name: config.pop(name) for name in _ORDER if name in config}
    ordered.update(sorted(config.items()))
    return ordered


def render(spec: StreamSpec, replicas: int = 1) -> str:
    return json.dumps(stream_config_json(spec, replicas), indent=2) + "\n"


def stream_files(replicas: int = 1) -> dict[str, str]:
    """File name -> content, one per stream."""
    return {f"{spec.name}.json": render(spec, replicas) for spec in STREAMS}


def differences(directory: Path, replicas: int = 1) -> list[str]:
    """What in `directory` differs from the code: missing, changed and stray files."""
    want = stream_files(replicas)
    have = {p.name: p for p in directory.glob("*.json")} if directory.is_dir() else {}
    problems = []
    for name, content in want.items():
        path = have.get(name)
        if path is None:
            problems.append(f"missing: {directory / name}")
        elif path.read_text() != content:
            problems.append(f"differs from the code: {path}{_replicas_hint(path, replicas)}")
    for name in sorted(set(have) - set(want)):
        problems.append(f"no such stream in the code: {have[name]}")
    return problems


class NotReplicatedError(RuntimeError):
    """Streams whose new replica count did not settle in time."""


def _replicas_hint(path: Path, replicas: int) -> str:
    """Say so when a file is right for another replica count (a cluster's files checked
    without --replicas)."""
    try:
        have = json.loads(path.read_text())
        other = int(have["num_replicas"])
        spec = next(spec for spec in STREAMS if f"{spec.name}.json" == path.name)
    except (ValueError, KeyError, TypeError, StopIteration):
        return ""
    if other != replicas and have == stream_config_json(spec, other):
        return f" (it has num_replicas {other}: check it with --replicas {other})"
    return ""


async def provision(js: JetStreamContext, replicas: int) -> dict[str, str]:
    """Streams and buckets at `replicas`; returns what happened to each. Idempotent."""
    outcomes: dict[str, str] = dict(await ensure_streams(js, replicas))
    changed = [name for name, outcome in outcomes.items() if outcome != "unchanged"]
    if replicas > 1:
        await _wait_replicated(js, changed, replicas)
    return outcomes


async def _wait_replicated(
    js: JetStreamContext, names: list[str], replicas: int, timeout_s: float = 60.0
) -> None:
    """Return once every named stream has a leader and all its replicas are current: a
    stream whose replica count just changed elects a new group first, and writes made
    meanwhile time out."""
    pending = set(names)
    with anyio.move_on_after(timeout_s):
        while pending:
            for name in sorted(pending):
                try:
                    cluster = (await js.stream_info(name)).cluster
                except Exception:  # no leader yet: the API does not answer
                    continue
                peers = (cluster.replicas or []) if cluster else []
                settled = cluster is not None and bool(cluster.leader)
                if settled and len(peers) == replicas - 1 and all(p.current for p in peers):
                    pending.discard(name)
            if pending:
                await anyio.sleep(0.2)
    if pending:
        raise NotReplicatedError(
            f"streams not replicated {replicas} times within {timeout_s:.0f}s: "
            + ", ".join(sorted(pending))
        )


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "infra", help="stream definitions and provisioning for your own NATS deployment"
    )
    infra = parser.add_subparsers(dest="infra_command", metavar="WHAT", required=True)

    streams = infra.add_parser(
        "streams", help="write the stream definitions as JSON (nats stream add --config FILE)"
    )
    streams.add_argument(
        "dir", nargs="?", default=DEFAULT_DIR, help=f"output directory (default: {DEFAULT_DIR})"
    )
    streams.add_argument(
        "--replicas", type=int, default=1, help="num_replicas in every file (default: 1)"
    )
    streams.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when DIR differs from what would be written",
    )
    streams.set_defaults(func=run_streams)

    prov = infra.add_parser(
        "provision",
        help="create or update rote's streams and buckets on ROTE_NATS_URL, then exit",
    )
    prov.add_argument("--nats-url", help="the NATS to provision (default: ROTE_NATS_URL)")
    prov.add_argument(
        "--replicas", type=int, help="replicas of every stream (default: ROTE_STREAM_REPLICAS)"
    )
    prov.add_argument(
        "--connect-timeout",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help="give up when NATS does not answer within this (default: 30)",
    )
    prov.set_defaults(func=run_provision)


def _valid_replicas(replicas: int) -> bool:
    if 1 <= replicas <= 5:
        return True
    print(f"rote: --replicas must be 1 to 5, got {replicas}", file=sys.stderr)
    return False


def run_streams(args: argparse.Namespace) -> int:
    if not _valid_replicas(args.replicas):
        return 2
    out = Path(args.dir)
    if args.check:
        problems = differences(out, args.replicas)
        for difference in problems:
            print(f"rote infra: {difference}", file=sys.stderr)
        if problems and not any("check it with --replicas" in p for p in problems):
            print(
                f"rote infra: regenerate with `rote infra streams {out}"
                + (f" --replicas {args.replicas}`" if args.replicas != 1 else "`"),
                file=sys.stderr,
            )
        if problems:
            return 1
        print(f"{out}: {len(STREAMS)} stream definitions match the code")
        return 0
    problem = data_dir_problem(out, "the output directory")
    if problem:
        print(f"rote: {problem}", file=sys.stderr)
        return 2
    files = stream_files(args.replicas)
    if problem := write_files(out, files):
        print(f"rote: {problem}", file=sys.stderr)
        return 1
    stray = sorted(p.name for p in out.glob("*.json") if p.name not in files)
    for name in stray:
        print(f"rote infra: {out / name} is not a stream rote defines", file=sys.stderr)
    print(f"wrote {len(files)} stream definitions to {out}")
    return 0


def run_provision(args: argparse.Namespace) -> int:
    # Quiet (warnings only, unless ROTE_LOG_LEVEL asks for more): the summary printed at
    # the end says what was created and updated, without log lines in between.
    settings = load_settings(quiet=True)
    url = args.nats_url or settings.nats_url
    register_url_credentials(url)  # --nats-url: masked like ROTE_NATS_URL
    replicas = settings.stream_replicas if args.replicas is None else args.replicas
    if url is None:
        print("rote: set ROTE_NATS_URL or pass --nats-url", file=sys.stderr)
        return 2
    if problem := nats_url_problem(url):
        print(f"rote: {redact(problem)}", file=sys.stderr)
        return 2
    if not _valid_replicas(replicas):
        return 2

    errors: list[str] = []

    async def main() -> dict[str, str]:
        # The kernel's connect retries forever (right for a service waiting for its
        # NATS); a one-shot command gives up instead.
        with anyio.fail_after(args.connect_timeout):
            bus = await connect(url, name="rote:infra", on_attempt_failed=errors.append)
        try:
            return await provision(bus.js, replicas)
        finally:
            await bus.close()

    try:
        outcomes = anyio.run(main, backend="asyncio")
    except TimeoutError:
        print(
            f"rote: no NATS answered at {redact(url)} within {args.connect_timeout:g}s"
            + last_error(errors),
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # an API error: say it plainly
        problem = replicas_problem(exc, replicas, "--replicas 1")
        print(
            f"rote: provisioning {redact(url)} failed: {problem or redact(str(exc))}",
            file=sys.stderr,
        )
        return 1
    for name, outcome in outcomes.items():
        print(f"{name}: {outcome} (R{replicas})")
    return 0
