"""Every contract round-trips through JSON; bad input is rejected naming the field."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.catalog import CONTRACTS, json_schemas
from contracts.executors import InvalidateExecutor
from contracts.llm import CompleteRequest, Message, ThinkingBlock, ToolUseBlock
from contracts.runs import RunEvent
from contracts.tasks import CreateTask, IntervalTrigger, TaskRef, TaskSpec
from services.kernel.codec import decode, encode
from services.kernel.errors import validation_error
from tests.strategies import contract_values


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_contract_round_trips_through_json(name: str) -> None:
    cls = CONTRACTS[name]

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(contract_values(cls))
    def round_trip(value: msgspec.Struct) -> None:
        assert decode(encode(value), cls) == value

    round_trip()


def test_every_named_message_has_a_contract() -> None:
    expected = {
        "TaskSpec", "CreateTask", "UpdateTask", "TaskRef", "TaskView", "TaskEvent",
        "TaskRejected", "RunRequest", "RunEvent", "RunView", "Transcript", "CompleteRequest",
        "CompleteReply", "UsageEvent", "TextEvent", "ExecTool", "ToolResult", "ToolEvent",
        "TraceStep", "Trace", "TraceCaptured", "Executor", "ExecutorHealth", "ExecutorEvent",
        "ErrorReply", "SystemInfo", "Empty",
    }  # fmt: skip
    assert expected <= set(CONTRACTS)
    schemas = json_schemas()
    assert set(schemas) == set(CONTRACTS)


def _rejection(raw: bytes, cls: type) -> tuple[str, str | None, str]:
    with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)) as caught:
        decode(raw, cls)
    err = validation_error(caught.value)
    return err.code, err.field, err.message


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"name":"a","prompt":"b","colour":"red"}', "colour"),
        (b'{"name":"a","prompt":"b","max_iterations":"ten"}', "max_iterations"),
        (b'{"name":"a","prompt":"b","max_iterations":0}', "max_iterations"),
        (
            b'{"name":"a","prompt":"b","trigger":{"kind":"interval","every_s":"x"}}',
            "trigger.every_s",
        ),
        (b'{"name":"a","prompt":"b","trigger":{"kind":"interval","every":5}}', "trigger.every"),
        (b'{"name":"a","prompt":"b","trigger":{"kind":"weekly"}}', "trigger.kind"),
        (b'{"name":"a","prompt":"b","task_id":"has.dot"}', "task_id"),
        # A missing required field is named, inside the object it is missing from.
        (b'{"prompt":"b"}', "name"),
        (b'{"name":"a","prompt":"b","trigger":{"kind":"cron"}}', "trigger.expr"),
        # A spec travels whole in one NATS message: its parts are bounded.
        (b'{"name":"a","prompt":"%s"}' % (b"p" * 100_001), "prompt"),
        (b'{"name":"%s","prompt":"b"}' % (b"n" * 201), "name"),
        (
            b'{"name":"a","prompt":"b","allowed_tools":[%s]}' % b",".join([b'"t"'] * 201),
            "allowed_tools",
        ),
    ],
)
def test_bad_commands_are_rejected_naming_the_field(raw: bytes, field: str) -> None:
    code, got_field, message = _rejection(raw, CreateTask)
    assert code == "invalid_request"
    assert got_field == field
    assert field.split(".")[-1] in message


@pytest.mark.parametrize("cls", [TaskRef, InvalidateExecutor])
def test_an_operators_reason_is_a_sentence_not_a_payload(cls: type) -> None:
    # Kept in events and every view of the task: bounded like the spec's parts.
    raw = b'{"task_id":"t","reason":"%s"}' % (b"r" * 1001)
    assert _rejection(raw, cls)[:2] == ("invalid_request", "reason")
    assert decode(b'{"task_id":"t","reason":"%s"}' % (b"r" * 1000), cls)


def test_an_event_time_without_an_offset_is_rejected_on_decode() -> None:
    # Compared later with offset-aware times it would raise inside a service; rejected
    # here it is one poison message, logged and set aside.
    raw = b'{"task_id":"a","run_id":"r","event":"started","status":"running","at":"%s"}'
    code, field, _ = _rejection(raw % b"2025-01-06T08:00:01", RunEvent)
    assert (code, field) == ("invalid_request", "at")
    assert decode(raw % b"2025-01-06T08:00:01+01:00", RunEvent).at.utcoffset() is not None


def test_a_run_event_written_before_infrastructure_is_not_an_infrastructure_failure() -> None:
    raw = b'{"task_id":"t","run_id":"r","event":"failed","status":"failed",'
    raw += b'"at":"2026-01-01T00:00:00Z","reason":"tool_error"}'
    assert decode(raw, RunEvent).infrastructure is False


@pytest.mark.parametrize("run_id", ["*", ">", "a.b", "has space", ""])
def test_a_run_event_whose_ids_are_not_subject_tokens_is_rejected(run_id: str) -> None:
    # Consumers build subjects from a run's ids: "*" would read every run's events.
    raw = b'{"task_id":"t","run_id":"%s","event":"completed","status":"completed",'
    raw += b'"at":"2026-01-01T00:00:00Z"}'
    code, field, _ = _rejection(raw % run_id.encode(), RunEvent)
    assert (code, field) == ("invalid_request", "run_id")


def test_bytes_that_are_not_utf8_are_malformed_not_a_crash() -> None:
    code, field, _ = _rejection(b'{"name":"\xff","prompt":"b"}', CreateTask)
    assert (code, field) == ("malformed", None)


def test_malformed_json_is_its_own_code() -> None:
    code, field, _ = _rejection(b"{not json", CreateTask)
    assert (code, field) == ("malformed", None)


def test_thinking_blocks_survive_unchanged() -> None:
    raw = (
        b'{"model":"sonnet","messages":[{"role":"user","content":"hi"},'
        b'{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":"c2ln"},'
        b'{"type":"tool_use","id":"t1","name":"browser_navigate","input":{"url":"http://x"}}]}]}'
    )
    request = decode(raw, CompleteRequest)
    assistant = request.messages[1]
    assert isinstance(assistant, Message)
    # Decoded as the strict request twins (subclasses): same classes by isinstance,
    # same content field for field.
    thinking, tool_use = assistant.content
    assert isinstance(thinking, ThinkingBlock) and isinstance(tool_use, ToolUseBlock)
    assert msgspec.to_builtins(assistant.content) == msgspec.to_builtins(
        [
            ThinkingBlock(thinking="", signature="c2ln"),
            ToolUseBlock(id="t1", name="browser_navigate", input={"url": "http://x"}),
        ]
    )
    assert decode(encode(request), CompleteRequest) == request


@given(st.floats(min_value=0.001, max_value=1e6))
def test_task_spec_defaults_fill_in(every: float) -> None:
    spec = decode(
        encode({"name": "n", "prompt": "p", "trigger": {"kind": "interval", "every_s": every}}),
        TaskSpec,
    )
    assert spec.trigger == IntervalTrigger(every_s=every)
    assert spec.model == "sonnet" and spec.max_iterations == 30 and spec.max_failures == 3
