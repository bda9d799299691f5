"""The tools service's record of acting calls: what a record says, and what it keeps."""

from __future__ import annotations

from datetime import timedelta

from contracts.base import utc_now
from contracts.errors import ErrorInfo
from contracts.tools import ExecTool, ToolResult
from services.kernel.codec import encode
from services.tools import call_records as cr


def call(**input: object) -> ExecTool:
    return ExecTool(
        run_id="r1",
        allowed_tools=["file_write"],
        tool="file_write",
        input=dict(input),
        timeout_s=10,
        idempotency_key="x0",
    )


def test_a_record_is_running_until_its_time_then_in_doubt() -> None:
    now = utc_now()
    record = cr.running(call(path="a"), "fp", "inst", now)
    assert record.until == now + timedelta(seconds=10 + cr.GRACE_S)
    assert cr.state_of(record, now) == "running"
    assert cr.state_of(record, record.until - timedelta(seconds=1)) == "running"
    assert cr.state_of(record, record.until) == "in_doubt"
    late = cr.status("r1", "x0", record, record.until)
    assert (late.state, late.started_at, late.result) == ("in_doubt", now, None)


def test_finished_fenced_and_unknown() -> None:
    now = utc_now()
    record = cr.running(call(path="a"), "fp", "inst", now)
    result = ToolResult(ok=True, output={"bytes": 1}, duration_ms=3, served_by="inst")
    done = cr.status("r1", "x0", cr.finished(record, now, result=result), now)
    assert (done.state, done.result) == ("finished", result)
    failed = cr.finished(record, now, refusal=ErrorInfo(code="internal", message="bug"))
    shown = cr.status("r1", "x0", failed, now).result
    assert shown is not None and not shown.ok and shown.error == failed.refusal
    assert cr.status("r1", "x0", cr.fenced(now), now).state == "fenced"
    assert cr.status("r1", "x0", None, now).state == "unknown"


def test_a_large_result_is_kept_cut() -> None:
    big = ToolResult(ok=True, output="z" * 2_000_000, duration_ms=1, served_by="inst")
    kept = cr.bounded(big)
    assert len(encode(kept)) <= cr.MAX_RESULT_BYTES
    assert kept.truncated and kept.output.startswith("zzz") and kept.served_by == "inst"
    small = ToolResult(ok=True, output="z", duration_ms=1)
    assert cr.bounded(small) is small


def test_the_same_action_has_one_fingerprint_and_keys_stay_apart() -> None:
    assert cr.fingerprint(call(path="a", content="x")) == cr.fingerprint(
        call(content="x", path="a")
    )
    assert cr.fingerprint(call(path="a", content="x")) != cr.fingerprint(
        call(path="a", content="y")
    )
    assert cr.record_key("r1", "a~b") == "r1.a=b"
    assert cr.record_key("r1", "a~b") != cr.record_key("r1", "a-b")
