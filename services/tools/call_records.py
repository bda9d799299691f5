"""The tools service's record of each acting call it ran under an idempotency key
(ExecTool.idempotency_key), kept in the key-value bucket rote_tool_calls, key
`<run_id>.<key>`: any tools process reads it, so the same key acts at most once across
processes and their restarts.

A record is created `running` before the tool runs (created only if the key is new:
two processes never both run it) and replaced by the `finished` one once the tool has
answered. A record still `running` past its `until` (the call's timeout and a grace
after it started) belongs to a call whose process died mid-call: whether it acted is
unknown, it is in doubt. A status check may close a key no call has used (`fenced`),
so that a request still on its way never runs under it later.

The record is the tools service's own storage, not a contract: callers see it through
the replies to their calls and `rote.api.tools.call_status` (contracts/tools.py).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Literal

import msgspec
import nats.errors
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from contracts import subjects as s
from contracts.base import UtcDatetime
from contracts.errors import ErrorInfo
from contracts.tools import CallState, CallStatus, ExecTool, ToolResult
from services.kernel.bus import Bus
from services.kernel.codec import decode, encode
from services.kernel.errors import ServiceError
from services.tools.bounds import bound_value

RecordState = Literal["running", "finished", "fenced"]

# How long after its timeout a call may still be running on a live process: its
# finished event and record still to write (across a NATS hiccup), and the clocks of
# two machines a little apart. Past it, a record still running is a call that died.
GRACE_S = 15.0
# A recorded result over this is kept with its output cut (a key-value entry is one
# NATS message, and the bucket holds every acting call of a week).
MAX_RESULT_BYTES = 256 * 1024


class CallRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    state: RecordState
    # The call that used the key (not on a fenced record): which tool, on which tools
    # process (ToolsService.instance), and what request (`fingerprint`).
    tool: str = ""
    instance: str = ""
    fingerprint: str = ""
    started_at: UtcDatetime | None = None
    # It cannot still be running on a live process after this.
    until: UtcDatetime | None = None
    finished_at: UtcDatetime | None = None
    fenced_at: UtcDatetime | None = None
    # What it answered (as the reply was sent: masked, `served_by` its process)...
    result: ToolResult | None = None
    # ...or the error it was refused with after it may have acted (an internal failure).
    refusal: ErrorInfo | None = None


class RecordUnreadable(Exception):
    """What is stored under the key is not a record this service wrote."""


def record_key(run_id: str, key: str) -> str:
    """The bucket key: `~`, valid in an idempotency key but not in a key-value key, is
    written `=`, which an idempotency key never holds (so no two keys meet)."""
    return f"{run_id}.{key.replace('~', '=')}"


def fingerprint(call: ExecTool) -> str:
    """What makes two requests the same action: the tool and its input (its keys in any
    order). Not call_id, attempt, step or timeout: a later delivery of the run sends the
    same action again under another call_id."""
    data = msgspec.json.encode([call.tool, call.input], order="sorted")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# --- records and what they say -------------------------------------------------------------


def running(call: ExecTool, fingerprint: str, instance: str, now: datetime) -> CallRecord:
    return CallRecord(
        state="running",
        tool=call.tool,
        instance=instance,
        fingerprint=fingerprint,
        started_at=now,
        until=now + timedelta(seconds=call.timeout_s + GRACE_S),
    )


def finished(
    record: CallRecord,
    now: datetime,
    *,
    result: ToolResult | None = None,
    refusal: ErrorInfo | None = None,
) -> CallRecord:
    return msgspec.structs.replace(
        record,
        state="finished",
        finished_at=now,
        result=None if result is None else bounded(result),
        refusal=refusal,
    )


def fenced(now: datetime) -> CallRecord:
    return CallRecord(state="fenced", fenced_at=now)


def bounded(result: ToolResult) -> ToolResult:
    """`result`, or a copy whose output is cut to keep it within MAX_RESULT_BYTES (and
    says so: `truncated`). Only the output can be large: the toolbox bounds metadata
    and error messages far below it."""
    if len(encode(result)) <= MAX_RESULT_BYTES:
        return result
    rest = len(encode(msgspec.structs.replace(result, output=None)))
    output, _ = bound_value(result.output, max(4, MAX_RESULT_BYTES - rest))
    return msgspec.structs.replace(result, output=output, truncated=True)


def state_of(record: CallRecord, now: datetime) -> CallState:
    if record.state != "running":
        return record.state
    return "running" if record.until is not None and now < record.until else "in_doubt"


def outcome(record: CallRecord) -> ToolResult | None:
    """A finished call's result; one refused after it may have acted shows as a failed
    result with that error (a status check has no error reply to give)."""
    if record.refusal is not None:
        return ToolResult(ok=False, duration_ms=0, error=record.refusal)
    return record.result


def status(run_id: str, key: str, record: CallRecord | None, now: datetime) -> CallStatus:
    """The answer to a status check of `key`; no record: `unknown`."""
    if record is None:
        return CallStatus(run_id=run_id, key=key, state="unknown")
    state = state_of(record, now)
    return CallStatus(
        run_id=run_id,
        key=key,
        state=state,
        result=outcome(record) if state == "finished" else None,
        started_at=record.started_at,
        until=record.until,
    )


def in_doubt(record: CallRecord) -> ServiceError:
    started = record.started_at.isoformat() if record.started_at else "an unknown time"
    where = f" on tools process {record.instance}" if record.instance else ""
    return ServiceError(
        "in_doubt",
        f"{record.tool or 'a call'} under this idempotency key started at {started}{where}"
        " and never finished (its process stopped mid-call): whether it acted is unknown,"
        " so it is not run again",
        details={"tool": record.tool, "started_at": started, "instance": record.instance},
    )


# --- the bucket ----------------------------------------------------------------------------


def _unreachable(exc: Exception) -> ServiceError:
    return ServiceError(
        "unavailable", f"cannot reach the record of tool calls ({s.BUCKET_TOOL_CALLS}): {exc}"
    )


class CallRecords:
    """The bucket, read and written; a NATS failure is ServiceError `unavailable`."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:  # a look-up is an API round trip: once
            self._kv = await self.bus.js.key_value(s.BUCKET_TOOL_CALLS)
        return self._kv

    async def get(self, run_id: str, key: str) -> tuple[CallRecord, int] | None:
        """The record and its revision; None when there is none (never used, forgotten,
        or expired with the bucket's TTL). RecordUnreadable for a value not ours."""
        try:
            entry = await (await self._bucket()).get(record_key(run_id, key))
        except KeyNotFoundError:
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise _unreachable(exc) from None
        try:
            return decode(entry.value or b"", CallRecord), entry.revision or 0
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise RecordUnreadable(str(exc)) from None

    async def create(self, run_id: str, key: str, record: CallRecord) -> int | None:
        """Write `record` if the key has none; its revision, or None when it has one."""
        try:
            return await (await self._bucket()).create(record_key(run_id, key), encode(record))
        except KeyWrongLastSequenceError:
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise _unreachable(exc) from None

    async def put(self, run_id: str, key: str, record: CallRecord) -> None:
        try:
            await (await self._bucket()).put(record_key(run_id, key), encode(record))
        except (nats.errors.Error, TimeoutError) as exc:
            raise _unreachable(exc) from None

    async def forget(self, run_id: str, key: str, revision: int) -> None:
        """Remove the record written at `revision` (not one written since)."""
        try:
            await (await self._bucket()).delete(record_key(run_id, key), last=revision)
        except (nats.errors.Error, TimeoutError) as exc:
            raise _unreachable(exc) from None
