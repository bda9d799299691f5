"""What the run endpoints do with input they cannot carry or read: a spec too big for a
run request, or one tasks.create would refuse, is refused up front by runs.start with
nothing queued; two starts under one run_id start one run; and an unreadable event
among a run's events does not break the run's view (runs.get) or transcript."""

from __future__ import annotations

import anyio
import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.runs import (
    RunEvent,
    RunRef,
    RunRequest,
    RunStarted,
    RunView,
    StartRun,
    Transcript,
)
from contracts.tasks import MAX_SPEC_BYTES, ConditionTrigger, Contains, CronTrigger, TaskSpec
from services.kernel.errors import RemoteError
from services.kernel.pricing import default_table
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.scheduler import adhoc
from tests.e2e.helpers import stored

pytestmark = pytest.mark.anyio


async def test_a_spec_too_big_for_a_run_request_is_refused(settings: Settings) -> None:
    # Every field within its own bounds; together, over what one run request carries.
    check = ConditionTrigger(
        tool="shell_exec",
        input={"command": "df -h", "notes": "n" * MAX_SPEC_BYTES},
        predicate=Contains(text="9"),
        every_s=60,
    )
    spec = TaskSpec(name="big", prompt="check the disk", trigger=check)
    async with open_stack(settings, ["scheduler"]) as stack:
        with pytest.raises(RemoteError) as refused:
            await stack.bus.request(s.RUNS_START, StartRun(spec=spec), RunView)
        assert (refused.value.code, refused.value.status) == ("too_large", 413)
        assert refused.value.info.field == "spec"
        assert (await stack.bus.js.stream_info(s.STREAM_WORK)).state.messages == 0


def _nested(depth: int) -> str:
    # As JSON text: deeper than msgspec (or Python's stack) would encode it from a dict.
    return '{"x":' * depth + '{"command": "df -h"}' + "}" * depth


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        # Decodes, but deep enough to exhaust Python's stack where the spec is walked
        # recursively (masking it for the run's events, on every delivery).
        (
            '{"name": "deep", "prompt": "p", "trigger": {"kind": "condition",'
            ' "tool": "shell_exec", "predicate": {"op": "contains", "text": "x"},'
            f' "every_s": 5, "input": {_nested(700)}}}}}',
            "trigger.input",
            "nested more than 32 levels deep",
        ),
        (
            '{"name": "cron", "prompt": "p", "trigger": {"kind": "cron", "expr": "61 * * * *"}}',
            "trigger.expr",
            "invalid cron expression",
        ),
        # Unpriced, its run would count as $0 (an ad hoc run is not held to the budget,
        # but the ledger still counts it).
        ('{"name": "gpt", "prompt": "p", "model": "gpt-9"}', "model", "has no price"),
    ],
    ids=["deep-condition-input", "bad-cron", "unpriced-model"],
)
async def test_a_spec_tasks_create_would_refuse_is_refused_and_nothing_is_queued(
    settings: Settings, spec: str, field: str, says: str
) -> None:
    async with open_stack(settings, ["scheduler"]) as stack:
        with pytest.raises(RemoteError) as refused:
            await stack.bus.request(s.RUNS_START, f'{{"spec": {spec}}}'.encode(), RunStarted)
        assert (refused.value.code, refused.value.status) == ("invalid_request", 400)
        assert refused.value.info.field == field
        assert says in refused.value.message
        assert (await stack.bus.js.stream_info(s.STREAM_WORK)).state.messages == 0
        runs = await stored(stack.bus, s.STREAM_RUNS, s.run_events_of(), RunEvent)
        assert runs == []


async def test_a_run_whose_requested_event_cannot_be_made_is_not_queued(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever breaks before the requested event (here, masking its spec) must break
    # before the work request goes out: a queued run runs, whatever the caller was told.
    def broken(value: object, **_: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(adhoc, "redact_struct", broken)
    request = RunRequest(
        run_id="r-broken",
        task_id="t",
        spec=TaskSpec(name="n", prompt="p"),
        requested_at=utc_now(),
        origin="operator",
    )
    async with open_stack(settings, []) as stack:
        with pytest.raises(RecursionError):
            await adhoc.AdHocRuns(stack.bus, default_table()).enqueue(request)
        assert (await stack.bus.js.stream_info(s.STREAM_WORK)).state.messages == 0


async def test_a_valid_inline_spec_runs_with_its_trigger_as_stored(settings: Settings) -> None:
    # The same checks normalise too: the queued spec is the one tasks.create would store.
    spec = TaskSpec(name="n", prompt="p", trigger=CronTrigger(expr="  0 9 * * *  "))
    async with open_stack(settings, ["scheduler"]) as stack:
        await stack.bus.request(s.RUNS_START, StartRun(spec=spec, run_id="r-ok"), RunStarted)
        requested = s.run_events_of(run_id="r-ok", event="requested")
        (event,) = await stored(stack.bus, s.STREAM_RUNS, requested, RunEvent)
    assert event.spec is not None
    assert event.spec.trigger == CronTrigger(expr="0 9 * * *")


async def test_two_starts_at_once_under_one_run_id_start_one_run(settings: Settings) -> None:
    # Checking that the run_id is free and queuing the run are one step: the second
    # start finds the first's run and is refused, rather than both being told started.
    spec = TaskSpec(name="n", prompt="p")
    answers: list[str] = []

    async def start() -> None:
        try:
            await stack.bus.request(s.RUNS_START, StartRun(spec=spec, run_id="r-1"), RunStarted)
            answers.append("started")
        except RemoteError as exc:
            answers.append(exc.code)

    async with open_stack(settings, ["scheduler"]) as stack:
        async with anyio.create_task_group() as tg:
            tg.start_soon(start)
            tg.start_soon(start)
        assert sorted(answers) == ["conflict", "started"]
        assert (await stack.bus.js.stream_info(s.STREAM_WORK)).state.messages == 1


async def test_an_unreadable_event_of_a_run_does_not_break_its_view(settings: Settings) -> None:
    async with open_stack(settings, ["runner"]) as stack:
        bus = stack.bus
        await bus.js.publish(s.run_event("t", "r1", "requested"), b'{"bogus": 1}')
        started = RunEvent(
            task_id="t", run_id="r1", event="started", at=utc_now(), status="running"
        )
        await bus.publish_event(s.run_event("t", "r1", "started"), started, msg_id="r1:started:1")
        view = await bus.request(s.RUNS_GET, RunRef(run_id="r1"), RunView)
    assert (view.run_id, view.status) == ("r1", "running")


async def test_a_missing_transcript_says_why(settings: Settings) -> None:
    async with open_stack(settings, ["runner"]) as stack:
        bus = stack.bus
        for run_id, event, status in (
            ("r-running", "started", "running"),
            ("r-ended", "completed", "completed"),
            ("r-ended-odd", "completed", "completed"),
        ):
            done = RunEvent(task_id="t", run_id=run_id, event=event, at=utc_now(), status=status)
            await bus.publish_event(s.run_event("t", run_id, event), done, msg_id=run_id)
        # A value rote did not write, under a run's key.
        await (await bus.js.key_value(s.BUCKET_TRANSCRIPTS)).put("r-ended-odd", b"[1, 2]")
        said = {}
        for run_id in ("r-none", "r-running", "r-ended", "r-ended-odd"):
            with pytest.raises(RemoteError) as missing:
                await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
            assert missing.value.code == "not_found"
            said[run_id] = missing.value.message.removeprefix(f"no transcript for {run_id}: ")
    assert said == {
        "r-none": "no such run",
        "r-running": "it is written when the run ends",
        "r-ended": "the run ended without writing one",
        "r-ended-odd": "what is stored for it is not a transcript this version of rote can read",
    }
