"""A finished run is never run again, over real NATS: its terminal event is tried again
while JetStream cannot take it, and a delivery that finds the run's end recorded in its
effect journal only publishes it.

Only the runner runs here; the model is a small stand-in at the bus boundary, and the
test takes ROTE_RUNS' subject for completions away and gives it back, as a leader
election or a NATS restart would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError

from contracts import subjects as s
from contracts.base import utc_now
from contracts.effects import Effect
from contracts.runs import RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ToolList
from services.kernel.bus import Bus
from services.kernel.codec import encode
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from services.runner import execution
from tests.integration.test_runner_deliveries import answer, finished, watch

pytestmark = pytest.mark.anyio

SPEC = TaskSpec(name="claimed", prompt="Read the news")


@pytest.fixture
async def runner_bus(settings: Settings) -> AsyncIterator[Bus]:
    async with open_stack(settings.with_(runner_ack_wait_s=3.0), ["runner", "scheduler"]) as stack:
        yield stack.bus


async def model_counting(bus: Bus) -> list[int]:
    calls: list[int] = []

    async def complete(msg: Msg) -> None:
        calls.append(1)
        await msg.respond(encode(answer("Quiet day", tokens_in=100, cost_usd=0.01)))

    async def tools_list(msg: Msg) -> None:
        await msg.respond(encode(ToolList(tools=[])))

    await bus.nc.subscribe(s.LLM_COMPLETE, cb=complete)
    await bus.nc.subscribe(s.TOOLS_LIST, cb=tools_list)
    return calls


async def completions_refused(bus: Bus) -> list[str]:
    """ROTE_RUNS stops taking completed events (no stream answers their subject); the
    returned subjects give them back."""
    info = await bus.js.stream_info(s.STREAM_RUNS)
    subjects = list(info.config.subjects or [])
    info.config.subjects = [
        s.run_events_of(event=event) for event in ("requested", "started", "failed")
    ]
    await bus.js.update_stream(info.config)
    return subjects


async def give_back(bus: Bus, subjects: list[str]) -> None:
    info = await bus.js.stream_info(s.STREAM_RUNS)
    info.config.subjects = subjects
    await bus.js.update_stream(info.config)


async def test_a_terminal_event_jetstream_cannot_take_yet_is_tried_again(
    runner_bus: Bus,
) -> None:
    bus, run_id = runner_bus, "ends-through-an-election"
    calls = await model_counting(bus)
    seen = await watch(bus, run_id)
    subjects = await completions_refused(bus)
    await bus.request(
        s.RUNS_START, StartRun(spec=SPEC, task_id="claimed", run_id=run_id), RunStarted
    )
    with anyio.fail_after(30):
        while seen.count("completed") < 2:  # tried, and tried again
            await anyio.sleep(0.05)
    await give_back(bus, subjects)
    done = await finished(bus, run_id)
    assert (done.status, done.attempt, done.result) == ("completed", 1, "Quiet day")
    assert len(calls) == 1 and seen.count("started") == 1


async def test_a_run_whose_end_was_recorded_is_only_published_by_the_next_delivery(
    runner_bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first delivery records the end and cannot publish it within its bound: it
    breaks. The next one finds the end in the journal and publishes it, running nothing."""
    monkeypatch.setattr(execution, "END_PUBLISH_S", 1.0)
    bus, run_id = runner_bus, "ended-unpublished"
    calls = await model_counting(bus)
    seen = await watch(bus, run_id)
    subjects = await completions_refused(bus)
    await bus.request(
        s.RUNS_START, StartRun(spec=SPEC, task_id="claimed", run_id=run_id), RunStarted
    )
    with anyio.fail_after(60):
        while not await _end_recorded(bus, run_id) or await _deliveries(bus) < 2:
            await anyio.sleep(0.1)
    await give_back(bus, subjects)
    done = await finished(bus, run_id)
    assert (done.status, done.attempt, done.result) == ("completed", 1, "Quiet day")
    assert len(calls) == 1  # the model was asked once: the run ran once
    assert seen.count("started") == 1  # the next delivery started nothing


async def _end_recorded(bus: Bus, run_id: str) -> bool:
    kv = await bus.js.key_value(s.BUCKET_EFFECTS)
    try:
        entry = await kv.get(f"{run_id}.finished")
    except KeyNotFoundError:
        return False
    return entry.value is not None


async def _deliveries(bus: Bus) -> int:
    """How many deliveries the runners' work consumer has made (redeliveries too)."""
    info = await bus.js.consumer_info(s.STREAM_WORK, s.CONSUMER_RUNNER)
    return info.delivered.consumer_seq if info.delivered else 0


async def test_a_run_given_up_after_it_acted_needs_attention(runner_bus: Bus) -> None:
    """Every delivery breaks, but the run's journal shows it submitted a form: given up,
    it ends `needs_attention`, not `abandoned`, since running it again would submit
    again."""
    bus, run_id = runner_bus, "acted-then-broke"

    async def unreadable_tools(msg: Msg) -> None:
        await msg.respond(b'{"tools": "not a list"}')

    await bus.nc.subscribe(s.TOOLS_LIST, cb=unreadable_tools)
    submitted = Effect(
        run_id=run_id, key="b1-1", tool="browser_fill_form", input={"fields": {"name": "Ada"}},
        state="done", attempt=1, call_key="b1-1~1~0", source="full_llm",
        intended_at=utc_now(), ok=True, output="Thank you",
    )  # fmt: skip
    await (await bus.js.key_value(s.BUCKET_EFFECTS)).put(f"{run_id}.b1-1", encode(submitted))
    await bus.request(
        s.RUNS_START, StartRun(spec=SPEC, task_id="claimed", run_id=run_id), RunStarted
    )
    done = await finished(bus, run_id)
    assert (done.status, done.reason) == ("failed", "needs_attention")
    assert done.error is not None and "browser_fill_form (b1-1): done" in done.error
