"""JetStream streams and buckets rote needs, and their idempotent provisioning.

`ensure_streams` creates what is missing and updates what differs in any field the
definition sets; run twice, the second run changes nothing. infra/streams/*.json are
generated from STREAMS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StoreCompression,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError

from contracts import subjects as s
from services.kernel.logs import get_logger

log = get_logger("rote.streams")

DAY = 24 * 3600.0
MB = 1024 * 1024
# How long a stream drops a message whose Nats-Msg-Id it has already stored.
DUPLICATE_WINDOW_S = 120.0


@dataclass(frozen=True)
class StreamSpec:
    name: str
    description: str
    retention: RetentionPolicy
    max_age_s: float
    duplicate_window_s: float = DUPLICATE_WINDOW_S
    max_msg_size: int = MB

    @property
    def subjects(self) -> list[str]:
        return list(s.STREAM_SUBJECTS[self.name])

    def config(self, replicas: int = 1) -> StreamConfig:
        """Every field rote defines, each set explicitly (limits at the server's
        "unlimited", -1): `ensure_streams` compares and repairs exactly these."""
        return StreamConfig(
            name=self.name,
            description=self.description,
            subjects=self.subjects,
            retention=self.retention,
            storage=StorageType.FILE,
            discard=DiscardPolicy.OLD,
            max_age=self.max_age_s,
            duplicate_window=self.duplicate_window_s,
            max_msg_size=self.max_msg_size,
            num_replicas=replicas,
            max_consumers=-1,
            max_msgs=-1,
            max_bytes=-1,
            max_msgs_per_subject=-1,
            discard_new_per_subject=False,
            no_ack=False,
            sealed=False,
            deny_delete=False,
            deny_purge=False,
            allow_rollup_hdrs=False,
            allow_direct=False,
            mirror_direct=False,
            compression=StoreCompression.NONE,
        )


STREAMS: list[StreamSpec] = [
    StreamSpec(
        s.STREAM_INTAKE,
        "Task commands published without waiting for a reply",
        RetentionPolicy.WORK_QUEUE,
        7 * DAY,
    ),
    StreamSpec(
        s.STREAM_WORK,
        "Run requests, one consumer delivery per run",
        RetentionPolicy.WORK_QUEUE,
        7 * DAY,
    ),
    StreamSpec(s.STREAM_RUNS, "Run lifecycle events", RetentionPolicy.LIMITS, 90 * DAY),
    StreamSpec(
        s.STREAM_TASKS,
        "Task aggregate events and intake rejections",
        RetentionPolicy.LIMITS,
        365 * DAY,
    ),
    StreamSpec(s.STREAM_EXECUTORS, "Executor aggregate events", RetentionPolicy.LIMITS, 365 * DAY),
    StreamSpec(
        s.STREAM_ACTIVITY,
        "Tool calls and model output/usage of every run",
        RetentionPolicy.LIMITS,
        30 * DAY,
    ),
    StreamSpec(
        s.STREAM_TRACES,
        "Traces captured from successful full LLM runs",
        RetentionPolicy.LIMITS,
        365 * DAY,
    ),
]

Outcome = Literal["created", "updated", "unchanged"]

# Durations, compared to the millisecond: the client turns nanoseconds into float seconds.
_DURATIONS = ("max_age", "duplicate_window")


class StreamDriftError(RuntimeError):
    """A stream differs from its definition in a way the server will not change in place
    (storage type, retention to or from work queue, deny_delete, deny_purge, sealed)."""


def _differs(want: StreamConfig, have: StreamConfig) -> list[str]:
    """The fields the definition sets (every field of `StreamSpec.config`, the same as
    in infra/streams/*.json) whose value on the server is another."""
    wanted, held = want.as_dict(), have.as_dict()
    changed = []
    a: Any
    b: Any
    for name, a in wanted.items():
        b = held.get(name)
        if name == "subjects":
            a, b = sorted(a or []), sorted(b or [])
        elif name in _DURATIONS:
            a, b = round((a or 0) / 1e6), round((b or 0) / 1e6)
        elif b is None and a in (False, -1, StoreCompression.NONE):
            continue  # a server that omits a field it holds at its default
        if a != b:
            changed.append(name)
    return changed


# The replica count this process provisions with (the last `ensure_streams`), so a stream
# re-created later (a consumer finding its stream deleted) gets the same.
_replicas = 1


async def ensure_stream(js: JetStreamContext, name: str) -> Outcome | None:
    """Create or repair one of STREAMS at this process's replica count; None when `name`
    is not a stream rote defines."""
    spec = next((spec for spec in STREAMS if spec.name == name), None)
    return None if spec is None else await _ensure(js, spec, _replicas)


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> dict[str, Outcome]:
    """Create missing streams, update changed ones; return what happened to each. Raises
    StreamDriftError for a difference the server cannot repair."""
    global _replicas
    _replicas = replicas
    outcomes: dict[str, Outcome] = {}
    for spec in STREAMS:
        outcomes[spec.name] = await _ensure(js, spec, replicas)
    outcomes.update(await _ensure_buckets(js, replicas))
    return outcomes


async def _ensure(js: JetStreamContext, spec: StreamSpec, replicas: int) -> Outcome:
    want = spec.config(replicas)
    try:
        have = (await js.stream_info(spec.name)).config
    except NotFoundError:
        await js.add_stream(want)
        log.info("stream_created", stream=spec.name)
        return "created"
    changed = _differs(want, have)
    if not changed:
        return "unchanged"
    try:
        await js.update_stream(want)
    except APIError as exc:
        raise StreamDriftError(
            f"stream {spec.name} differs from its definition in {', '.join(changed)}"
            f" and the server refuses to change it in place ({exc.description or exc});"
            " repair or re-create the stream by hand"
        ) from exc
    log.info("stream_updated", stream=spec.name, fields=changed)
    return "updated"


# How long a bucket keeps a key (None: forever). Transcripts live as long as run events;
# a run's effects and its acting calls' records as long as a run can be redelivered
# (ROTE_WORK keeps a run request 7 days).
KV_TTL_S: dict[str, float] = {
    s.BUCKET_TRANSCRIPTS: 90 * DAY,
    s.BUCKET_LEASES: 15.0,
    s.BUCKET_EFFECTS: 7 * DAY,
    s.BUCKET_TOOL_CALLS: 7 * DAY,
}

# The streams behind rote's buckets (NATS names them KV_<bucket> and OBJ_<bucket>).
BUCKET_STREAMS: dict[str, str] = {
    f"KV_{s.BUCKET_RELAY}": "event-store relay positions",
    f"OBJ_{s.BUCKET_BLOBS}": "large blobs by sha256",
    f"KV_{s.BUCKET_TRANSCRIPTS}": "run transcripts by run_id",
    f"KV_{s.BUCKET_LEASES}": "one holder at a time: the scheduler, each run",
    f"KV_{s.BUCKET_EFFECTS}": "each run's effect journal: its actions, done once",
    f"KV_{s.BUCKET_TOOL_CALLS}": "acting tool calls by idempotency key, run once",
}


async def _ensure_buckets(js: JetStreamContext, replicas: int) -> dict[str, Outcome]:
    """Create the buckets, or bring their streams to `replicas` and a key's lifetime
    (KV_TTL_S); a bucket's other settings are the server's own and left alone."""
    outcomes: dict[str, Outcome] = {}
    for stream, description in BUCKET_STREAMS.items():
        kind, _, bucket = stream.partition("_")
        try:
            config = (await js.stream_info(stream)).config
        except NotFoundError:
            if kind == "KV":
                await js.create_key_value(
                    bucket=bucket,
                    description=description,
                    replicas=replicas,
                    ttl=KV_TTL_S.get(bucket),
                )
            else:
                await js.create_object_store(
                    bucket=bucket, description=description, replicas=replicas
                )
            outcomes[stream] = "created"
            continue
        max_age = KV_TTL_S.get(bucket) if kind == "KV" else None
        if (config.num_replicas or 1) != replicas or (config.max_age or None) != max_age:
            config.num_replicas = replicas
            config.max_age = max_age
            if max_age and (config.duplicate_window or 0) > max_age:
                config.duplicate_window = max_age  # the server refuses a longer one
            await js.update_stream(config)
            outcomes[stream] = "updated"
            log.info("bucket_updated", bucket=bucket, replicas=replicas, max_age_s=max_age)
        else:
            outcomes[stream] = "unchanged"
    return outcomes
