"""Path A's harder branches over the real stack (NATS, llm, tools with Chromium, compiler,
tracer, runner; the stand-in model over HTTP): per-step retry and its settings, the
whole-run deadline during a replay, a failing condition step, and small-model steps."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from contracts import subjects as s
from contracts.executors import (
    ActiveExecutor,
    ConditionStep,
    Executor,
    ExecutorEvent,
    ExecutorHealth,
    ExecutorRef,
    HttpStatus,
    LlmStep,
    ResultStep,
    ToolStep,
)
from contracts.llm import UsageEvent
from contracts.runs import RunEvent, RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import ExecTool, ToolEvent
from services.compiler.store import ExecutorStore
from services.dev.bench.corpus.tasks import SITES, TASKS_BY_ID, SiteServer
from services.dev.bench.corpus_oracle import expected_answer as oracle_answer
from services.dev.demo.site import DemoSite, stories
from services.dev.standin.server import StandinServer
from services.kernel.bus import Bus, routed
from services.kernel.codec import decode
from services.kernel.event_store import application_env
from services.kernel.replay_read import read_all
from services.kernel.runtime import Stack, open_stack
from services.kernel.settings import Settings
from tests.e2e.helpers import run_events, wait_finished
from tests.e2e.test_replay_lifecycle import executor_events, wait_compiled
from tests.hand_built_replay import hand_built_executor

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

SERVICES = ["system", "llm", "tools", "compiler", "tracer", "runner", "scheduler"]
SONNET = "claude-sonnet-5-5"
HAIKU = "claude-haiku-5-5"


class FlakySite(DemoSite):
    """The demo site, whose /news answers 503 to the next `fail_news` requests: a page
    that hiccups, then recovers."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_news = 0
        self._lock = threading.Lock()  # the server renders on one thread per request

    def render(self, path: str, form: dict[str, str] | None = None) -> tuple[int, bytes]:
        if path == "/news":
            with self._lock:
                failing, self.fail_news = self.fail_news > 0, max(0, self.fail_news - 1)
            if failing:
                return 503, b"<!doctype html><title>Busy</title><h1>Try again</h1>"
        return super().render(path, form)


@pytest.fixture
def flaky_site() -> Iterator[FlakySite]:
    with FlakySite() as site:
        yield site


@pytest.fixture
def kitchen() -> Iterator[SiteServer]:
    with SiteServer(SITES["kitchen"]) as site:
        yield site


def from_env(settings: Settings, **env: str) -> Settings:
    """Settings as `rote up` reads them, pointing at this test's NATS and data dir."""
    base = {
        "ROTE_NATS_URL": str(settings.nats_url),
        "ROTE_DATA_DIR": str(settings.data_dir),
        "ROTE_LOG_FORMAT": "json",
    }
    return Settings.from_env({**base, **env})


@asynccontextmanager
async def stack_of(settings: Settings) -> AsyncIterator[Stack]:
    async with open_stack(settings, SERVICES) as stack:
        yield stack


async def run(bus: Bus, spec: TaskSpec, task_id: str) -> RunEvent:
    started = await bus.request(s.RUNS_START, StartRun(spec=spec, task_id=task_id), RunStarted)
    return await wait_finished(bus, started.run_id, timeout=30)


async def wait_executor_event(bus: Bus, task_id: str, event: str) -> ExecutorEvent:
    with anyio.fail_after(10):
        while True:
            for e in await executor_events(bus, task_id):
                if e.event == event:
                    return e
            await anyio.sleep(0.1)


async def replayed_calls(bus: Bus, run_id: str, step: int, count: int) -> list[ToolEvent]:
    """The executor's finished calls of one step, in order (one per try), once `count`
    of them are in: tool events are published without acks, so allow a moment."""
    calls: list[ToolEvent] = []
    with anyio.move_on_after(5):
        while len(calls) < count:
            msgs = await read_all(bus.js, s.STREAM_ACTIVITY, s.tool_event(run_id, "finished"))
            events = [decode(m.data, ToolEvent) for m in msgs]
            calls = [e for e in events if e.source == "executor" and e.step == step]
            await anyio.sleep(0.05)
    return calls


def news_spec(site: DemoSite, **changes: object) -> TaskSpec:
    spec = TaskSpec(name="news", prompt=f"Open {site.url}/news and report the top 3 headlines")
    return msgspec.structs.replace(spec, **changes)


def headlines(edition: int) -> str:
    titles = [st.title for st in stories(edition)[:3]]
    return "Top 3 headlines:\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(titles, 1))


async def first_full_run(bus: Bus, spec: TaskSpec, task_id: str) -> RunEvent:
    first = await run(bus, spec, task_id)
    assert first.status == "completed" and first.source == "full_llm", first.error
    await wait_compiled(bus, task_id, 1)
    return first


# --- 1. per-step retry -------------------------------------------------------------------


async def test_a_step_that_fails_once_is_retried_and_the_replay_succeeds(
    settings: Settings, flaky_site: FlakySite, standin: StandinServer
) -> None:
    config = from_env(settings, ROTE_REPLAY_RETRIES="1", ROTE_REPLAY_BACKOFF_S="0.6")
    async with stack_of(config) as stack:
        bus = stack.bus
        await first_full_run(bus, news_spec(flaky_site), "news")

        flaky_site.edition, flaky_site.fail_news = 1, 1
        second = await run(bus, news_spec(flaky_site), "news")
        assert second.status == "completed", second.error
        assert second.source == "executor" and second.executor_version == 1
        assert not second.fell_back and SONNET not in second.tokens
        assert second.result == headlines(1)
        # The navigation saw the 503, waited the configured backoff, and tried again.
        tries = await replayed_calls(bus, second.run_id, 0, count=2)
        assert [t.metadata.http_status for t in tries if t.metadata] == [503, 200]
        assert second.replay is not None and second.replay.ok
        # The backoff shows only in time; a bound from below, which a busy machine only
        # makes easier to meet.
        assert second.replay.duration_ms >= 600
        names = [e.event for e in await run_events(bus, second.run_id)]
        assert names == ["requested", "started", "completed"]


async def test_a_replayed_step_has_as_long_as_the_full_run_gave_its_call(
    settings: Settings, site: DemoSite, standin: StandinServer
) -> None:
    """A step that took a while in the full run (a slow page, a long command) must not
    time out on every replay: each replayed call gets the time a full run's call gets."""
    async with stack_of(settings) as stack:
        bus = stack.bus
        timeouts: dict[str, set[float]] = {"full_llm": set(), "executor": set()}

        async def seen(msg: Msg) -> None:  # a copy of every tools call, as sent
            call = decode(msg.data, ExecTool)
            timeouts.setdefault(call.source, set()).add(call.timeout_s)

        sub = await bus.nc.subscribe(s.TOOLS_EXEC, cb=seen)
        await routed(bus.nc)
        await first_full_run(bus, news_spec(site), "news")
        replayed = await run(bus, news_spec(site), "news")
        assert replayed.source == "executor", replayed.error
        await sub.unsubscribe()
    assert timeouts["full_llm"] and timeouts["executor"] == timeouts["full_llm"]


async def test_retries_exhausted_fail_the_replay_at_that_step_and_fall_back(
    settings: Settings, flaky_site: FlakySite, standin: StandinServer
) -> None:
    # Two retries from the environment: three tries in all before the replay gives up.
    config = from_env(settings, ROTE_REPLAY_RETRIES="2", ROTE_REPLAY_BACKOFF_S="0.1")
    async with stack_of(config) as stack:
        bus = stack.bus
        await first_full_run(bus, news_spec(flaky_site), "news")

        flaky_site.edition, flaky_site.fail_news = 1, 3
        second = await run(bus, news_spec(flaky_site), "news")
        tries = await replayed_calls(bus, second.run_id, 0, count=3)
        assert [t.metadata.http_status for t in tries if t.metadata] == [503, 503, 503]
        # The full run that followed found the page back and answered from it.
        assert second.status == "completed", second.error
        assert second.source == "full_llm" and second.fell_back
        assert second.result == headlines(1)
        replay = second.replay
        assert replay is not None and not replay.ok and replay.version == 1
        assert replay.step == 0 and replay.reason == "expected HTTP status 200, got 503"

        events = await run_events(bus, second.run_id)
        assert [e.event for e in events] == ["requested", "started", "replay_failed", "completed"]
        assert events[2].replay == replay
        failed = await wait_executor_event(bus, "news", "replay_failed")
        assert (failed.run_id, failed.version, failed.step) == (second.run_id, 1, 0)
        assert failed.reason == replay.reason
        health = await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id="news"), ExecutorHealth)
        # Counted across versions: the fallback may already have compiled v2.
        assert (health.replays, health.replay_failures) == (1, 1)


# --- 2. the whole-run deadline -------------------------------------------------------------


async def test_the_run_deadline_ends_a_replay_that_hangs(
    stack_settings: Settings, kitchen: SiteServer, standin: StandinServer
) -> None:
    task = TASKS_BY_ID["kitchen-stock"]
    spec = TaskSpec(name="stock", prompt=task.prompt_for(kitchen.url))
    async with stack_of(stack_settings) as stack:
        bus = stack.bus
        await first_full_run(bus, spec, "stock")

        # The replay's first small-model call hangs far past the run's 3 s deadline.
        kitchen.edition = 1
        standin.received.clear()
        standin.inject(latency_ms=30_000, latency_count=1)
        second = await run(bus, msgspec.structs.replace(spec, deadline_s=3.0), "stock")
        assert second.status == "failed" and second.reason == "deadline"
        assert second.error == "the run passed its 3 s deadline"
        # At the deadline, not the hang: only the time shows which, and half of the
        # hang's 30 s is room for a busy machine.
        assert 3000 <= (second.duration_ms or 0) < 15_000
        # The deadline covers the fallback too: no full LLM run was started after it.
        assert not second.fell_back and SONNET not in second.tokens
        assert [body["model"] for body in standin.received] == [HAIKU]
        names = [e.event for e in await run_events(bus, second.run_id)]
        assert names == ["requested", "started", "failed"]
        # The executor failed this run: the event says so, and its health hears of it
        # (an executor that always hangs must end up superseded, not retried forever).
        assert second.source == "executor" and second.executor_version == 1
        replay = second.replay
        assert replay is not None and not replay.ok and replay.version == 1
        assert replay.reason == "the run passed its 3 s deadline" and replay.step is not None
        failed = await wait_executor_event(bus, "stock", "replay_failed")
        assert (failed.run_id, failed.version) == (second.run_id, 1)
        health = await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id="stock"), ExecutorHealth)
        assert (health.replays, health.replay_failures, health.consecutive_failures) == (1, 1, 1)


# --- 3. a failing condition step -----------------------------------------------------------


def gated_executor(site: DemoSite) -> Executor:
    """Navigate, extract with a selector that finds nothing (no expectation on it), and
    a condition that fails the replay on the empty list before the result."""
    steps = [
        ToolStep(
            index=0,
            tool="browser_navigate",
            input={"url": f"{site.url}/news"},
            expect=[HttpStatus(status=200)],
        ),
        ToolStep(index=1, tool="browser_extract", input={"selector": "h2.gone"}),
        ConditionStep(index=2, ref="{{step_1}}", message="no headlines on the page"),
        ResultStep(index=3, mode="template", template="Top headline: {{step_1[0]}}"),
    ]
    return hand_built_executor("gated", steps)


async def test_a_failing_condition_fails_the_replay_at_that_step_and_falls_back(
    stack_settings: Settings, site: DemoSite, standin: StandinServer
) -> None:
    # The compiler's own store (SQLite under the data dir) is given the executor before
    # the stack starts, so the compiler serves it as the task's active version.
    store = ExecutorStore(application_env(stack_settings, "compiler"))
    try:
        store.record_trace("gated", "seed", gated_executor(site))
    finally:
        store.close()
    async with stack_of(stack_settings) as stack:
        bus = stack.bus
        result = await run(bus, news_spec(site), "gated")
        assert result.status == "completed", result.error
        assert result.source == "full_llm" and result.fell_back
        assert result.result == headlines(0)
        replay = result.replay
        assert replay is not None and not replay.ok and replay.version == 1
        assert (replay.step, replay.reason) == (2, "no headlines on the page")
        # The steps before the condition did run; the result step never did.
        assert len(await replayed_calls(bus, result.run_id, 1, count=1)) == 1
        names = [e.event for e in await run_events(bus, result.run_id)]
        assert names == ["requested", "started", "replay_failed", "completed"]
        failed = await wait_executor_event(bus, "gated", "replay_failed")
        assert (failed.step, failed.reason) == (2, "no headlines on the page")
        # The fallback's trace heals the task: a compiled v2 becomes the active version.
        await wait_compiled(bus, "gated", 2)
        health = await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id="gated"), ExecutorHealth)
        assert (health.status, health.version, health.replay_failures) == ("active", 2, 1)


# --- 4. small-model steps ------------------------------------------------------------------


async def test_judgement_steps_run_on_the_small_model_at_low_effort(
    stack_settings: Settings, kitchen: SiteServer, standin: StandinServer
) -> None:
    task = TASKS_BY_ID["kitchen-stock"]
    spec = TaskSpec(name="stock", prompt=task.prompt_for(kitchen.url))
    async with stack_of(stack_settings) as stack:
        bus = stack.bus
        first = await first_full_run(bus, spec, "stock")
        active = await bus.request(s.EXECUTORS_ACTIVE, ExecutorRef(task_id="stock"), ActiveExecutor)
        assert active.executor is not None
        steps = active.executor.steps
        # Picking the cheapest is judgement, and so is the answer's wording.
        assert any(isinstance(st, LlmStep) and st.tool is None for st in steps)
        assert isinstance(steps[-1], ResultStep) and steps[-1].mode == "llm"

        kitchen.edition = 1  # prices moved: another product is the cheapest
        standin.received.clear()
        second = await run(bus, spec, "stock")
        assert second.status == "completed", second.error
        assert second.source == "executor" and second.executor_version == 1
        assert second.result == oracle_answer(task, kitchen)
        assert second.result != first.result
        # No large-model token at all; the small model's tokens and cost are counted.
        assert set(second.tokens) == {HAIKU}
        small = second.tokens[HAIKU]
        # The pick, the answer, and the check of a new version's first replay.
        assert second.replay is not None and second.replay.verification is not None
        assert second.replay.verification.status == "verified"
        assert small.calls == 3 and small.input_tokens > 0 and small.output_tokens > 0
        assert second.cost_usd > 0 and second.cost_usd == pytest.approx(small.cost_usd)
        assert second.cost_saved_usd == pytest.approx(first.cost_usd - second.cost_usd)
        # What the model server received: every call on the small model, at low effort.
        sent = [(body["model"], body.get("output_config")) for body in standin.received]
        assert sent == [(HAIKU, {"effort": "low"})] * 3
        # And what a user watching rote.evt.llm.<run_id>.usage sees.
        msgs = await read_all(bus.js, s.STREAM_ACTIVITY, s.llm_event(second.run_id, "usage"))
        usage = [decode(m.data, UsageEvent) for m in msgs]
        assert [(u.model, u.purpose) for u in usage] == [
            (HAIKU, "replay_step"),
            (HAIKU, "replay_step"),
            (HAIKU, "verification"),
        ]
        assert sum(u.cost_usd for u in usage) == pytest.approx(second.cost_usd)
