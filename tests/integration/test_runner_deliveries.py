"""How the runner settles a run's deliveries over real NATS: one claim per run (a second
delivery waits while a live runner holds it, takes over when that runner dies), and a
terminal `failed` event when the last permitted delivery breaks.

Only the runner runs here; where a run needs another service, a small stand-in answers
at the bus boundary, and the test plays the other runner through the same lease.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio
import pytest
from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError
from structlog.testing import capture_logs

from contracts import subjects as s
from contracts.base import utc_now
from contracts.executors import (
    ActiveExecutor,
    ExecutorHealth,
    ExitCode,
    ResultStep,
    ToolStep,
)
from contracts.llm import (
    CompleteReply,
    CompleteRequest,
    TextBlock,
    ToolDefinition,
    ToolUseBlock,
    Usage,
    UsageEvent,
)
from contracts.runs import (
    RunEvent,
    RunRef,
    RunRequest,
    RunStarted,
    RunView,
    StartRun,
    Transcript,
)
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, SessionClosed, ToolList, ToolMetadata, ToolResult
from services.compiler.outcomes import replay_report
from services.executor.cost import full_run_cost
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode, encode
from services.kernel.consumers import durable_config
from services.kernel.errors import RemoteError
from services.kernel.lease import Lease, run_key
from services.kernel.replay_read import read_all
from services.kernel.run_store import RunStore
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.kernel.streams import KV_TTL_S, ensure_streams
from services.runner.deliveries import MAX_DELIVERIES
from services.tracer.build import full_loop_cost
from tests.e2e.helpers import work_queue_settled
from tests.hand_built_replay import hand_built_executor

pytestmark = pytest.mark.anyio

SPEC = TaskSpec(name="claimed", prompt="Read the news")


@dataclass
class Watch:
    """Run events as published (core NATS): the stream would hide a second publish of
    the same Nats-Msg-Id, this does not."""

    published: list[str]

    def count(self, event: str) -> int:
        return self.published.count(event)


@pytest.fixture
async def runner_bus(settings: Settings) -> AsyncIterator[Bus]:
    # A short ack wait: a delivery not kept in progress would be redelivered within a test.
    # (Not shorter: a stalled test process must not miss the in-progress heartbeat.)
    async with open_stack(settings.with_(runner_ack_wait_s=3.0), ["runner", "scheduler"]) as stack:
        yield stack.bus


async def watch(bus: Bus, run_id: str) -> Watch:
    seen = Watch([])

    async def on(msg: Msg) -> None:
        seen.published.append(msg.subject.rsplit(".", 1)[-1])

    await bus.nc.subscribe(s.run_events_of(run_id=run_id), cb=on)
    return seen


async def start(bus: Bus, run_id: str, spec: TaskSpec = SPEC) -> None:
    await bus.request(
        s.RUNS_START, StartRun(spec=spec, task_id="claimed", run_id=run_id), RunStarted
    )


async def finished(bus: Bus, run_id: str, timeout: float = 30) -> RunEvent:
    store = RunStore(bus)
    with anyio.fail_after(timeout):
        while (done := await store.finished(run_id)) is None:
            await anyio.sleep(0.1)
    return done


STATUS = {"requested": "requested", "started": "running", "completed": "completed",
          "failed": "failed"}  # fmt: skip


async def publish_run_event(
    bus: Bus, run_id: str, event: str, msg_id: str, at: datetime | None = None, **fields: Any
) -> None:
    """A run event as another service publishes it: the scheduler, another runner."""
    published = RunEvent(
        task_id="claimed",
        run_id=run_id,
        event=event,
        status=STATUS[event],
        at=at or utc_now(),
        **fields,
    )
    await bus.publish_event(s.run_event("claimed", run_id, event), published, msg_id=msg_id)


async def other_runners_claim(bus: Bus, run_id: str) -> Lease:
    claim = Lease(
        await bus.js.key_value(s.BUCKET_LEASES),
        run_key(run_id),
        ttl_s=KV_TTL_S[s.BUCKET_LEASES],
        holder="other-runner",
    )
    assert await claim.try_acquire()
    return claim


async def bill_dead_attempt(bus: Bus, run_id: str) -> None:
    """A model call a dead attempt made ($0.0123, 1000 tokens in), as the llm service
    reports it."""
    billed = UsageEvent(
        run_id=run_id, model="claude-sonnet-5-5", at=utc_now(), cost_usd=0.0123,
        usage=Usage(input_tokens=1000, output_tokens=200),
    )  # fmt: skip
    await bus.publish_event(s.llm_event(run_id, "usage"), billed, msg_id=f"usage-{run_id}")


def answer(text: str, *, tokens_in: int, cost_usd: float) -> CompleteReply:
    """A model's final answer, as the llm service replies with it."""
    return CompleteReply(
        id="m1", model="claude-sonnet-5-5", content=[TextBlock(text=text)],
        stop_reason="end_turn", usage=Usage(input_tokens=tokens_in, output_tokens=10),
        cost_usd=cost_usd,
    )  # fmt: skip


@dataclass
class ToolsLists:
    lists: int = 0


async def first_full_run_breaks(bus: Bus, answer_text: str) -> ToolsLists:
    """A tools service whose first tools.list answer this runner cannot read (that
    delivery's full run breaks; later ones get no tools), and a model that answers
    `answer_text` at once ($0.01)."""
    seen = ToolsLists()

    async def tools_list(msg: Msg) -> None:
        seen.lists += 1
        first = seen.lists == 1
        await msg.respond(b'{"tools": "not a list"}' if first else encode(ToolList(tools=[])))

    async def complete(msg: Msg) -> None:
        await msg.respond(encode(answer(answer_text, tokens_in=100, cost_usd=0.01)))

    await bus.nc.subscribe(s.TOOLS_LIST, cb=tools_list)
    await bus.nc.subscribe(s.LLM_COMPLETE, cb=complete)
    return seen


async def test_the_last_failed_delivery_ends_the_run_failed_abandoned(runner_bus: Bus) -> None:
    bus, run_id = runner_bus, "breaks-every-time"
    # A tools service that answers what this runner cannot read (a peer on another
    # contract version): an unexpected error on every delivery, not a run outcome.
    calls = 0

    async def unreadable_tools(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        await msg.respond(b'{"tools": "not a list"}')

    await bus.nc.subscribe(s.TOOLS_LIST, cb=unreadable_tools)
    seen = await watch(bus, run_id)
    await bill_dead_attempt(bus, run_id)
    await start(bus, run_id)

    done = await finished(bus, run_id)
    assert (done.event, done.status, done.reason) == ("failed", "failed", "abandoned")
    # What it spent still counts (the daily budget sums run costs).
    assert done.cost_usd == pytest.approx(0.0123)
    assert done.tokens["claude-sonnet-5-5"].input_tokens == 1000
    assert done.error is not None
    assert f"{MAX_DELIVERIES} deliveries" in done.error and "Expected `array`" in done.error
    assert done.attempt == MAX_DELIVERIES and calls == MAX_DELIVERIES
    await work_queue_settled(bus)  # terminated, not left to a redelivery
    await anyio.sleep(0.5)
    assert seen.count("started") == MAX_DELIVERIES and seen.count("failed") == 1
    assert "completed" not in seen.published
    # The operator's view agrees: not `running` forever.
    view = await bus.request(s.RUNS_GET, RunRef(run_id=run_id), RunView)
    assert (view.status, view.reason) == ("failed", "abandoned")
    # ...and the run's claim went with it.
    with pytest.raises(KeyNotFoundError):
        await (await bus.js.key_value(s.BUCKET_LEASES)).get(run_key(run_id))
    # Its transcript is the last attempt's, saying what broke it.
    transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
    last = transcript.entries[-1].detail or {}
    assert f"attempt {MAX_DELIVERIES} broke: ValidationError" in last["text"]


async def test_a_redelivered_runs_full_run_cost_is_its_last_loop_alone(runner_bus: Bus) -> None:
    """The run's cost holds what a dead attempt spent (the daily budget needs it), but
    what a full run of the task costs, which replays' savings are measured against, is
    the one full loop that answered."""
    bus, run_id = runner_bus, "redelivered-cost"
    await first_full_run_breaks(bus, "Top story: rain")
    await bill_dead_attempt(bus, run_id)
    await start(bus, run_id)

    done = await finished(bus, run_id)
    assert (done.status, done.source, done.attempt) == ("completed", "full_llm", 2)
    assert done.cost_usd == pytest.approx(0.0223)  # both attempts: what the run spent
    assert done.loop_cost_usd == pytest.approx(0.01)
    # The compiler's and the tracer's full-run cost: the live attempt's loop only.
    assert full_run_cost(done) == pytest.approx(0.01)
    assert full_loop_cost(done) == pytest.approx(0.01)


async def test_a_run_redelivered_after_its_replay_failed_goes_on_with_the_full_run(
    runner_bus: Bus,
) -> None:
    """The first delivery replays (a POST that now exits 1), falls back, and dies in its
    full run. The next delivery must not post again: it goes on with the full run, and
    the run still says which replay failed, counted once for the executor's health."""
    bus, run_id = runner_bus, "fell-back-then-died"
    post = ToolStep(
        index=0, tool="shell_exec", input={"command": "curl -X POST http://orders/new"},
        expect=[ExitCode(code=0)],
    )  # fmt: skip
    active = ActiveExecutor(
        executor=hand_built_executor(
            "claimed", [post, ResultStep(index=1, mode="template", template="Ordered")]
        ),
        health=ExecutorHealth(task_id="claimed", status="active", version=1),
    )
    posts = 0

    async def compiler(msg: Msg) -> None:
        await msg.respond(encode(active))

    async def tools_exec(msg: Msg) -> None:
        nonlocal posts
        call = decode(msg.data, ExecTool)
        posts += call.source == "executor"
        await msg.respond(
            encode(
                ToolResult(ok=True, output="", duration_ms=1, metadata=ToolMetadata(exit_code=1))
            )
        )

    await bus.nc.subscribe(s.EXECUTORS_ACTIVE, cb=compiler)
    await bus.nc.subscribe(s.TOOLS_EXEC, cb=tools_exec)
    full_runs = await first_full_run_breaks(bus, "Order placed earlier")
    seen = await watch(bus, run_id)
    await start(bus, run_id, TaskSpec(name="claimed", prompt="Order", allowed_tools=["shell_exec"]))

    done = await finished(bus, run_id)
    assert (done.status, done.source, done.attempt) == ("completed", "full_llm", 2)
    assert done.result == "Order placed earlier"
    assert posts == 1 and full_runs.lists == 2  # replayed once; delivery 2's full run ran
    assert seen.count("replay_failed") == 1
    assert done.fell_back and done.replay is not None
    assert (done.replay.ok, done.replay.version, done.replay.step) == (False, 1, 0)
    assert done.replay.attempt == 1
    # The health's key for it is the first delivery's, which its replay_failed reported.
    report = replay_report(done)
    assert report is not None and report.attempt == 1
    transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
    notes = [(e.detail or {}).get("text", "") for e in transcript.entries]
    assert any("delivery 1 replayed v1 and failed at step 0" in n for n in notes), notes


async def first_start(bus: Bus, run_id: str) -> RunEvent:
    return min((await starts(bus, run_id)).values(), key=lambda e: e.at)


async def starts(bus: Bus, run_id: str) -> dict[int | None, RunEvent]:
    """Each delivery's `started` event, by attempt."""
    started = await read_all(bus.js, s.STREAM_RUNS, s.run_event("claimed", run_id, "started"))
    return {e.attempt: e for e in (decode(m.data, RunEvent) for m in started)}


async def test_a_redelivered_run_gets_only_what_is_left_of_its_deadline(runner_bus: Bus) -> None:
    """A deadline bounds the run's wall-clock time: a delivery that dies after using
    most of it leaves the next only the rest, not a fresh deadline."""
    bus, run_id, deadline_s = runner_bus, "deadline-left", 10.0
    lists = model_calls = 0

    async def tools_list(msg: Msg) -> None:
        nonlocal lists
        lists += 1
        if lists == 1:  # the first delivery uses most of the deadline, then breaks
            await anyio.sleep(deadline_s - 4.0)
            await msg.respond(b'{"tools": "not a list"}')
        else:
            await msg.respond(encode(ToolList(tools=[])))

    async def never_answers(msg: Msg) -> None:  # only the deadline ends the second
        nonlocal model_calls
        model_calls += 1

    await bus.nc.subscribe(s.TOOLS_LIST, cb=tools_list)
    await bus.nc.subscribe(s.LLM_COMPLETE, cb=never_answers)
    await start(
        bus, run_id, TaskSpec(name="claimed", prompt="Read the news", deadline_s=deadline_s)
    )

    done = await finished(bus, run_id)
    assert (done.status, done.reason, done.attempt) == ("failed", "deadline", 2)
    assert (lists, model_calls) == (2, 1)  # the second delivery did run, and was cut off
    # The second delivery was charged what the run had used since its first start...
    first = await first_start(bus, run_id)
    assert first.attempt == 1
    used = ((await starts(bus, run_id))[2].at - first.at).total_seconds()
    assert done.error is not None and "10 s deadline across 2 deliveries" in done.error
    assert f"it first started {used:.1f} s before delivery 2" in done.error
    # ...and ran for what was left: at least that (it was cut off, not failed early), and
    # well short of a fresh deadline. The first delivery used 6 s or more of the 10 s:
    # those are the busy machine's room.
    left_ms = (deadline_s - used) * 1000
    assert done.duration_ms is not None and left_ms - 50 <= done.duration_ms < deadline_s * 1000


async def test_a_run_redelivered_past_its_deadline_fails_at_once(runner_bus: Bus) -> None:
    bus, run_id, deadline_s = runner_bus, "deadline-gone", 3.0
    lists = 0

    async def tools_list(msg: Msg) -> None:
        nonlocal lists
        lists += 1
        if lists == 1:
            # The first delivery breaks just short of the deadline; its redelivery
            # comes a second later (the runner's retry delay), past it.
            await anyio.sleep(deadline_s - 0.6)
            await msg.respond(b'{"tools": "not a list"}')
        else:
            await msg.respond(encode(ToolList(tools=[])))

    await bus.nc.subscribe(s.TOOLS_LIST, cb=tools_list)
    seen = await watch(bus, run_id)
    await bill_dead_attempt(bus, run_id)
    await start(
        bus, run_id, TaskSpec(name="claimed", prompt="Read the news", deadline_s=deadline_s)
    )

    done = await finished(bus, run_id)
    assert (done.status, done.reason, done.attempt) == ("failed", "deadline", 2)
    assert done.error is not None and "deadline passed across its deliveries" in done.error
    assert lists == 1  # nothing ran on the second delivery
    assert done.error.endswith("which had no time left")
    assert done.cost_usd == pytest.approx(0.0123)  # what the dead delivery spent counts
    assert done.tokens["claude-sonnet-5-5"].input_tokens == 1000
    await work_queue_settled(bus)
    await anyio.sleep(0.5)
    assert seen.published == ["requested", "started", "started", "failed"]
    # The transcript keeps what the first delivery did and broke on, then how it ended.
    transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
    notes = [(e.detail or {}).get("text", "") for e in transcript.entries if e.kind == "note"]
    assert any(n.startswith("attempt 1 broke: ValidationError") for n in notes)
    assert "deadline passed across its deliveries" in notes[-1]


async def test_a_first_start_stamped_by_a_clock_ahead_takes_nothing_off_the_deadline(
    runner_bus: Bus,
) -> None:
    """Runner hosts' clocks differ: a first start that reads as in the future counts as
    just now, so the redelivery gets the full deadline and no more."""
    bus, run_id, deadline_s = runner_bus, "clock-ahead", 2.0
    lists = 0

    async def tools_list(msg: Msg) -> None:
        nonlocal lists
        lists += 1
        await msg.respond(b'{"tools": "not a list"}' if lists == 1 else encode(ToolList(tools=[])))

    async def never_answers(msg: Msg) -> None:
        pass

    await bus.nc.subscribe(s.TOOLS_LIST, cb=tools_list)
    await bus.nc.subscribe(s.LLM_COMPLETE, cb=never_answers)
    # The first delivery's `started`, as a runner a minute ahead stamped it (the
    # runner's own publish under the same message id is then a duplicate).
    await publish_run_event(
        bus, run_id, "started", f"{run_id}:started:1", at=utc_now() + timedelta(minutes=1)
    )
    spec = TaskSpec(name="claimed", prompt="Read the news", deadline_s=deadline_s)
    request = RunRequest(run_id=run_id, task_id="claimed", spec=spec, requested_at=utc_now())
    await bus.publish_event(s.WORK_RUNS, request, msg_id=run_id)

    done = await finished(bus, run_id)
    assert (done.status, done.reason, done.attempt) == ("failed", "deadline", 2)
    assert done.error == "the run passed its 2 s deadline"
    # The full deadline and no more: a start a minute ahead counted as it reads would
    # give 62 s. Only the time shows which; the bound leaves a busy machine 18 s.
    assert done.duration_ms is not None and deadline_s * 1000 <= done.duration_ms < 20_000


async def test_a_run_whose_runner_stops_during_every_delivery_still_ends(
    settings: Settings,
) -> None:
    """A rolling restart or a crash during each delivery: no delivery's code gets to end
    the run, and an operator's run has no scheduler to declare it abandoned. The server's
    advisory that the deliveries ran out does: one runner ends it."""
    settings = settings.with_(runner_ack_wait_s=3.0)
    run_id, model_calls = "stopped-every-time", 0

    async def never_answers(msg: Msg) -> None:  # each attempt waits on the model
        nonlocal model_calls
        model_calls += 1

    async def no_tools(msg: Msg) -> None:
        await msg.respond(encode(ToolList(tools=[])))

    async with open_stack(settings, ["system", "scheduler"]) as side:
        await side.bus.nc.subscribe(s.LLM_COMPLETE, cb=never_answers)
        await side.bus.nc.subscribe(s.TOOLS_LIST, cb=no_tools)
        await routed(side.bus.nc)
        for delivery in range(1, MAX_DELIVERIES + 1):
            async with open_stack(settings, ["runner"]) as stack:
                if delivery == 1:
                    await start(stack.bus, run_id)
                with anyio.fail_after(20):
                    while model_calls < delivery:
                        await anyio.sleep(0.05)
            # The runner stops mid-run, its delivery neither acked nor finished.
        async with open_stack(settings, ["runner"]) as stack:
            done = await finished(stack.bus, run_id)
            assert (done.event, done.reason) == ("failed", "abandoned")
            assert done.error is not None and "deliveries ended without an outcome" in done.error
            view = await stack.bus.request(s.RUNS_GET, RunRef(run_id=run_id), RunView)
            assert view.status == "failed"
            transcript = await stack.bus.request(
                s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript
            )
            last = transcript.entries[-1].detail or {}
            assert f"attempt {MAX_DELIVERIES} was stopped" in last["text"]
            # The request is gone from the work queue, never to be delivered again.
            info = await stack.bus.js.stream_info(s.STREAM_WORK)
            assert info.state.messages == 0
        assert model_calls == MAX_DELIVERIES


async def test_a_run_whose_deliveries_ran_out_with_no_runner_up_is_ended_by_the_next(
    settings: Settings,
) -> None:
    """Each delivery taken by a runner that then died (killed: nothing handed back), and
    no runner up when the last ack wait ran out. The server sends its advisory only when
    the next pull request comes, from a runner by then listening: that one ends the run."""
    run_id = "died-every-time"
    async with open_stack(settings, ["system"]) as side:
        js = side.bus.js
        config = durable_config(
            s.CONSUMER_RUNNER, filter_subjects=[s.WORK_RUNS], ack_wait_s=1.0,
            max_deliver=MAX_DELIVERIES,
        )  # fmt: skip
        await js.add_consumer(s.STREAM_WORK, config)
        request = RunRequest(run_id=run_id, task_id="claimed", spec=SPEC, requested_at=utc_now())
        await side.bus.publish_event(s.WORK_RUNS, request, msg_id=run_id)
        dead = await js.pull_subscribe_bind(durable=s.CONSUMER_RUNNER, stream=s.STREAM_WORK)
        for _ in range(MAX_DELIVERIES):  # taken, never acked: the taker died
            [msg] = await dead.fetch(1, timeout=10)
            assert msg.data == encode(request)
        await dead.unsubscribe()
        await anyio.sleep(2.0)  # the last ack wait runs out with no runner up
        async with open_stack(settings.with_(runner_ack_wait_s=1.0), ["runner"]) as stack:
            done = await finished(stack.bus, run_id)
            assert (done.event, done.reason) == ("failed", "abandoned")
            assert done.error is not None and "deliveries ended without an outcome" in done.error
            with anyio.fail_after(10):  # the request is gone, never delivered again
                while (await js.stream_info(s.STREAM_WORK)).state.messages:
                    await anyio.sleep(0.1)


async def test_a_delivery_of_a_run_held_elsewhere_waits_and_acks_once_it_finished(
    runner_bus: Bus,
) -> None:
    bus, run_id = runner_bus, "held-elsewhere"
    claim = await other_runners_claim(bus, run_id)
    seen = await watch(bus, run_id)
    async with anyio.create_task_group() as tg:
        tg.start_soon(claim.keep)  # the other runner is alive and renewing
        await start(bus, run_id)
        await anyio.sleep(7.0)  # two ack waits and more
        # Not run here, and not dropped either: kept in progress, never redelivered.
        info = await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
        assert (info.num_ack_pending, info.num_redelivered) == (1, 0)
        assert seen.published == ["requested"]
        # The other runner finishes the run, then lets its claim go.
        await publish_run_event(
            bus, run_id, "completed", f"{run_id}:finished", source="full_llm",
            result="done elsewhere",
        )  # fmt: skip
        tg.cancel_scope.cancel()
    await claim.release()
    await work_queue_settled(bus)
    assert seen.published == ["requested", "completed"]  # acked as a duplicate
    assert (await finished(bus, run_id)).result == "done elsewhere"


async def test_a_delivery_takes_over_a_run_whose_holder_died(runner_bus: Bus) -> None:
    bus, run_id = runner_bus, "holder-died"
    await other_runners_claim(bus, run_id)  # ...and that runner dies: no renewal
    seen = await watch(bus, run_id)
    await start(bus, run_id)
    await anyio.sleep(2)
    assert seen.published == ["requested"]
    # Within the leases' TTL the claim expires and this runner runs the run. (No tools
    # service answers here, so it ends `tool_error`; what matters is that it ran once.)
    done = await finished(bus, run_id, timeout=KV_TTL_S[s.BUCKET_LEASES] + 10)
    assert (done.status, done.reason, done.attempt) == ("failed", "tool_error", 1)
    await work_queue_settled(bus)
    assert seen.published == ["requested", "started", "failed"]


async def test_a_run_declared_abandoned_while_it_ran_late_keeps_that_one_ending(
    runner_bus: Bus,
) -> None:
    """The scheduler gives up on a run past its deadline (plus grace) and publishes its
    terminal event; past the stream's duplicate window, the runner's own late outcome
    must not become a second one."""
    bus, run_id = runner_bus, "outlived"
    seen = await watch(bus, run_id)

    async def slow_tools(msg: Msg) -> None:
        # While the run waits on its tools, the scheduler declares it abandoned (with a
        # message id of its own: the duplicate window has long passed).
        await publish_run_event(
            bus, run_id, "failed", f"{run_id}:late", reason="abandoned",
            error="no outcome reported within deadline",
        )  # fmt: skip
        await msg.respond(b'{"tools": []}')

    await bus.nc.subscribe(s.TOOLS_LIST, cb=slow_tools)
    request = RunRequest(
        run_id=run_id,
        task_id="claimed",
        spec=TaskSpec(name="claimed", prompt="Read the news", deadline_s=30),
        requested_at=utc_now() - timedelta(seconds=120),  # dispatched long ago
    )
    await bus.publish_event(s.WORK_RUNS, request, msg_id=run_id)
    await work_queue_settled(bus, timeout=30)
    await anyio.sleep(0.5)
    assert seen.published == ["started", "failed"]  # the scheduler's, and no other
    done = await finished(bus, run_id)
    assert done.reason == "abandoned"


async def test_a_claim_lost_on_the_last_delivery_with_no_one_holding_it_ends_the_run(
    runner_bus: Bus,
) -> None:
    """No delivery comes after the last: if its claim is lost and no other runner holds
    one (NATS lost the key, an operator removed it), the run ends `abandoned` rather
    than `running` for good."""
    bus, run_id = runner_bus, "claim-lost"
    leases = await bus.js.key_value(s.BUCKET_LEASES)
    calls = 0

    async def tools(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        if calls < MAX_DELIVERIES:
            await msg.respond(b'{"tools": "not a list"}')  # the early deliveries break
            return
        await leases.delete(run_key(run_id))  # the claim is gone under the runner
        await anyio.sleep(KV_TTL_S[s.BUCKET_LEASES] / 3 + 2)  # past its next renewal
        await msg.respond(b'{"tools": []}')

    await bus.nc.subscribe(s.TOOLS_LIST, cb=tools)
    seen = await watch(bus, run_id)
    await start(bus, run_id)
    done = await finished(bus, run_id, timeout=40)
    assert (done.status, done.reason, done.attempt) == ("failed", "abandoned", MAX_DELIVERIES)
    assert "lease" in (done.error or "")
    await work_queue_settled(bus)
    assert seen.count("failed") == 1 and "completed" not in seen.published


async def test_a_claim_that_expired_unnoticed_at_the_end_is_taken_back_and_the_run_ends(
    runner_bus: Bus,
) -> None:
    """The run's claim expires while its runner closes the browser session (NATS slow,
    the key gone), and no other runner took the run: the runner takes the claim back
    and publishes the ending. Dropping it would ack the request with the run `running`
    for good."""
    bus, run_id = runner_bus, "claim-expired-at-end"
    leases = await bus.js.key_value(s.BUCKET_LEASES)
    replies = iter(
        [
            CompleteReply(
                id="m1", model="claude-sonnet-5-5", stop_reason="tool_use",
                content=[ToolUseBlock(id="tu1", name="browser_read_page", input={})],
                usage=Usage(input_tokens=100, output_tokens=10), cost_usd=0.001,
            ),
            answer("Top story: rain", tokens_in=120, cost_usd=0.001),
        ]
    )  # fmt: skip
    page = ToolDefinition(name="browser_read_page", description="Read", input_schema={})

    async def complete(msg: Msg) -> None:
        await msg.respond(encode(next(replies)))

    async def tools_list(msg: Msg) -> None:
        await msg.respond(encode(ToolList(tools=[page])))

    async def tools_exec(msg: Msg) -> None:
        await msg.respond(encode(ToolResult(ok=True, output="Rain today", duration_ms=1)))

    async def close_session(msg: Msg) -> None:
        await leases.delete(run_key(run_id))  # the key expired...
        await anyio.sleep(KV_TTL_S[s.BUCKET_LEASES] / 2 + 0.5)  # ...long after a renewal
        await msg.respond(encode(SessionClosed(run_id=run_id, closed=True)))

    for subject, handler in [
        (s.LLM_COMPLETE, complete),
        (s.TOOLS_LIST, tools_list),
        (s.TOOLS_EXEC, tools_exec),
        (s.TOOLS_CLOSE_SESSION, close_session),
    ]:
        await bus.nc.subscribe(subject, cb=handler)
    seen = await watch(bus, run_id)
    await start(
        bus, run_id, TaskSpec(name="claimed", prompt="p", allowed_tools=["browser_read_page"])
    )
    done = await finished(bus, run_id, timeout=40)
    assert (done.status, done.result, done.attempt) == ("completed", "Top story: rain", 1)
    await work_queue_settled(bus)
    assert seen.published == ["requested", "started", "completed"]
    # Let go once the run ended: a later delivery would find it finished, not held.
    assert await (await other_runners_claim(bus, run_id)).current_holder() == "other-runner"


async def test_a_terminal_event_hidden_behind_a_later_start_is_still_found(
    runner_bus: Bus,
) -> None:
    """The scheduler abandoned the run, then a late delivery published `started`: the
    run is finished all the same, and a delivery after that must not run it."""
    bus, run_id = runner_bus, "hidden-end"
    store = RunStore(bus)

    await publish_run_event(bus, run_id, "requested", "h1")
    assert await store.finished(run_id) is None
    await publish_run_event(bus, run_id, "failed", "h2", reason="abandoned")
    await publish_run_event(bus, run_id, "started", "h3")
    done = await store.finished(run_id)
    assert done is not None and done.reason == "abandoned"


async def test_a_request_republished_after_the_run_ended_is_not_run_again(
    runner_bus: Bus,
) -> None:
    """An outbox relay that crashed before saving its position republishes, past the
    duplicate window, a run's `requested` event and its work request after the run
    has ended: the run's last event is `requested` again, and still it must not run."""
    bus, run_id = runner_bus, "republished"
    long_ago = utc_now() - timedelta(minutes=10)

    for name in ("requested", "started"):
        await publish_run_event(bus, run_id, name, f"{run_id}:{name}", at=long_ago)
    await publish_run_event(bus, run_id, "completed", f"{run_id}:finished", at=long_ago)
    seen = await watch(bus, run_id)
    # The republish: new message ids, as the stream no longer remembers the old ones.
    await publish_run_event(bus, run_id, "requested", f"{run_id}:requested:again", at=long_ago)
    request = RunRequest(run_id=run_id, task_id="claimed", spec=SPEC, requested_at=long_ago)
    await bus.publish_event(s.WORK_RUNS, request, msg_id=f"{run_id}:again")
    await work_queue_settled(bus)
    await anyio.sleep(0.5)
    assert seen.published == ["requested"]  # acked: no start, no second ending


async def test_a_run_outlives_a_shorter_ack_wait_another_runner_set(
    settings: Settings, bus: Bus
) -> None:
    # Runner processes share one consumer. Another runner, started with an ack wait of
    # 8 s, set it; this one is started with 30 s (a third of which, 10 s, would be too
    # slow a heartbeat for 8 s): it says the values differ, and its runs stay alive.
    await ensure_streams(bus.js)
    await bus.js.add_consumer(
        s.STREAM_WORK,
        durable_config(s.CONSUMER_RUNNER, filter_subjects=[s.WORK_RUNS], ack_wait_s=8.0),
    )
    with capture_logs() as logs:
        async with open_stack(
            settings.with_(runner_ack_wait_s=30.0), ["runner", "scheduler"]
        ) as stack:
            differs = [e for e in logs if e["event"] == "runner_ack_wait_differs"]
            assert [(e["configured_s"], e["consumer_s"]) for e in differs] == [(30.0, 8.0)]
            # The other runner's value is back (its idle check restores its config).
            config = (await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)).config
            config.ack_wait = 8.0
            await bus.js.add_consumer(s.STREAM_WORK, config)

            async def slow_model(msg: Msg) -> None:  # longer than the 8 s ack wait
                await anyio.sleep(11)
                await msg.respond(encode(answer("done", tokens_in=10, cost_usd=0.001)))

            async def no_tools(msg: Msg) -> None:
                await msg.respond(encode(ToolList(tools=[])))

            await bus.nc.subscribe(s.TOOLS_LIST, cb=no_tools)
            await bus.nc.subscribe(s.LLM_COMPLETE, cb=slow_model)
            await routed(bus.nc)
            seen = await watch(bus, "outlives")
            await start(stack.bus, "outlives")
            done = await finished(bus, "outlives", timeout=60)
            assert (done.status, done.attempt) == ("completed", 1)
            info = await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
            assert info.delivered.consumer_seq == 1  # never redelivered
            assert seen.count("started") == 1


async def test_a_transcript_rote_cannot_read_is_not_found_not_an_internal_error(
    runner_bus: Bus,
) -> None:
    """A value put in the bucket by hand (or by another version): asking again cannot
    change it, so readers are told there is none, with a reason, not "internal"."""
    bus, run_id = runner_bus, "hand-put-transcript"
    await start(bus, run_id)  # no llm or tools service: it fails, and writes one
    await finished(bus, run_id)
    await (await bus.js.key_value(s.BUCKET_TRANSCRIPTS)).put(run_id, b'{"entries": "garbage"}')
    with pytest.raises(RemoteError) as refused:
        await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
    assert refused.value.code == "not_found", refused.value


async def test_a_session_close_that_breaks_at_the_end_does_not_run_the_run_again(
    runner_bus: Bus,
) -> None:
    """The run has answered (its tool calls acted) when closing its browser session
    breaks, here on a tools service whose reply this runner cannot read (a peer on
    another contract version). That must not undo the outcome: the run ends completed,
    once, rather than being redelivered and run again (its actions twice)."""
    bus, run_id = runner_bus, "close-breaks"
    page = ToolDefinition(name="browser_read_page", description="Read", input_schema={})
    calls = closes = 0

    async def complete(msg: Msg) -> None:
        asked = decode(msg.data, CompleteRequest)
        if len(asked.messages) == 1:  # the first turn: read the page
            reply = CompleteReply(
                id="m1", model="claude-sonnet-5-5", stop_reason="tool_use",
                content=[ToolUseBlock(id="tu1", name="browser_read_page", input={})],
                usage=Usage(input_tokens=100, output_tokens=10), cost_usd=0.001,
            )  # fmt: skip
        else:
            reply = answer("Top story: rain", tokens_in=120, cost_usd=0.001)
        await msg.respond(encode(reply))

    async def tools_list(msg: Msg) -> None:
        await msg.respond(encode(ToolList(tools=[page])))

    async def tools_exec(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        await msg.respond(encode(ToolResult(ok=True, output="Rain today", duration_ms=1)))

    async def close_session(msg: Msg) -> None:
        nonlocal closes
        closes += 1
        await msg.respond(b'{"run_id": "close-breaks"}')  # no `closed`: unreadable here

    for subject, handler in [
        (s.LLM_COMPLETE, complete),
        (s.TOOLS_LIST, tools_list),
        (s.TOOLS_EXEC, tools_exec),
        (s.TOOLS_CLOSE_SESSION, close_session),
    ]:
        await bus.nc.subscribe(subject, cb=handler)
    seen = await watch(bus, run_id)
    await start(
        bus, run_id, TaskSpec(name="claimed", prompt="p", allowed_tools=["browser_read_page"])
    )
    done = await finished(bus, run_id)
    assert (done.status, done.result, done.attempt) == ("completed", "Top story: rain", 1)
    await work_queue_settled(bus)
    await anyio.sleep(0.5)
    assert (calls, closes) == (1, 1)
    assert seen.published == ["requested", "started", "completed"]
    transcript = await bus.request(s.RUNS_TRANSCRIPT, RunRef(run_id=run_id), Transcript)
    assert any(e.kind == "message" for e in transcript.entries)
