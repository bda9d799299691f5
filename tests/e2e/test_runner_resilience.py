"""How runs end when things go wrong, and what survives a crash or a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from contracts import subjects as s
from contracts.base import utc_now
from contracts.llm import UsageEvent
from contracts.runs import RunRequest, RunStarted, StartRun
from contracts.tasks import TaskSpec
from contracts.tools import CloseSession, SessionClosed, ToolEvent
from contracts.traces import Trace, TraceCaptured
from services.dev.demo.site import DemoSite
from services.dev.standin.server import StandinServer
from services.kernel.bus import routed
from services.kernel.codec import decode
from services.kernel.replay_read import read_all
from services.kernel.runtime import open_stack
from services.kernel.settings import Settings
from tests.e2e.conftest import Rig
from tests.e2e.helpers import run_events, wait_finished, wait_for, work_queue_settled

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]


async def start(rig_bus: object, spec: TaskSpec, task_id: str = "t") -> str:
    started = await rig_bus.request(  # type: ignore[attr-defined]
        s.RUNS_START, StartRun(spec=spec, task_id=task_id), RunStarted
    )
    return started.run_id


@pytest.mark.parametrize(
    ("marker", "reason", "max_iterations"),
    [("[standin:stuck]", "stuck", 30), ("[standin:endless]", "max_iterations", 4),
     ("[standin:fail:400]", "llm_error", 30)],
)  # fmt: skip
async def test_bad_runs_end_with_their_reason(
    rig: Rig, marker: str, reason: str, max_iterations: int
) -> None:
    spec = TaskSpec(
        name="bad",
        prompt=f"Open {rig.site.url}/news and report the top 3 headlines {marker}",
        max_iterations=max_iterations,
    )
    run_id = await start(rig.stack.bus, spec)
    done = await wait_finished(rig.stack.bus, run_id)
    assert done.status == "failed"
    assert done.reason == reason, done.error
    assert done.source == "full_llm"
    if reason == "max_iterations":
        assert done.tokens["claude-sonnet-5-5"].calls == max_iterations
    if reason == "stuck":
        assert "3 times in a row" in (done.error or "")
    # Whatever ended it, the run's browser context went with it: nothing is left to close.
    started = await read_all(rig.stack.bus.js, s.STREAM_ACTIVITY, s.tool_event(run_id, "started"))
    tools = [decode(m.data, ToolEvent).tool for m in started]
    if reason != "llm_error":  # the others failed after the browser was in use
        assert any(t.startswith("browser_") for t in tools), tools
    closed = await rig.stack.bus.request(
        s.TOOLS_CLOSE_SESSION, CloseSession(run_id=run_id), SessionClosed
    )
    assert closed.closed is False


async def test_a_model_call_billed_but_unreadable_still_counts_in_the_runs_cost(
    rig: Rig,
) -> None:
    """The model's last answer holds a block rote cannot carry: the run ends llm_error,
    and its cost still includes that call, as the usage events say."""
    spec = TaskSpec(
        name="unreadable",
        prompt=f"Open {rig.site.url}/news and report the top 3 headlines [standin:unsupported]",
    )
    run_id = await start(rig.stack.bus, spec)
    done = await wait_finished(rig.stack.bus, run_id)
    assert (done.status, done.reason) == ("failed", "llm_error"), done.error
    usage = [
        decode(m.data, UsageEvent)
        for m in await read_all(rig.stack.bus.js, s.STREAM_ACTIVITY, s.llm_event(run_id, "usage"))
    ]
    sonnet = done.tokens["claude-sonnet-5-5"]
    assert len(usage) == sonnet.calls >= 2  # the tool turns, and the unreadable answer
    assert done.cost_usd == pytest.approx(sum(u.cost_usd for u in usage))
    assert sonnet.output_tokens == sum(u.usage.output_tokens for u in usage)


async def test_a_run_past_its_deadline_ends_with_deadline(rig: Rig) -> None:
    # The model takes far longer than the whole run may.
    rig.standin.inject(latency_ms=30_000, latency_count=1)
    spec = TaskSpec(
        name="slow",
        prompt=f"Open {rig.site.url}/news and report the top 3 headlines",
        deadline_s=1.5,
    )
    run_id = await start(rig.stack.bus, spec)
    done = await wait_finished(rig.stack.bus, run_id)
    assert done.status == "failed" and done.reason == "deadline", done.error
    assert "1.5 s deadline" in (done.error or "")
    # Cut off at its deadline, not once the model answered: only the time shows which,
    # and half of the model's 30 s is room for a busy machine.
    assert done.duration_ms is not None and done.duration_ms < 15_000


async def test_a_run_whose_tools_service_is_gone_ends_with_tool_error(
    stack_settings: Settings, site: DemoSite, standin: StandinServer
) -> None:
    names = ["system", "llm", "compiler", "tracer", "runner", "scheduler"]  # no tools service
    async with open_stack(stack_settings, names) as stack:
        spec = TaskSpec(name="news", prompt=f"Open {site.url}/news and report the top 3 headlines")
        run_id = await start(stack.bus, spec)
        done = await wait_finished(stack.bus, run_id)
    assert done.status == "failed" and done.reason == "tool_error", done.error
    assert "tools" in (done.error or "")


async def test_a_finished_run_delivered_again_past_deduplication_is_not_run_again(
    rig: Rig,
) -> None:
    bus = rig.stack.bus
    spec = TaskSpec(name="news", prompt=f"Open {rig.site.url}/news and report the top 3 headlines")
    run_id = await start(bus, spec, "news")
    assert (await wait_finished(bus, run_id)).status == "completed"

    # Core NATS sees every publish, including ones the stream would de-duplicate.
    seen: list[str] = []

    async def watch(msg: object) -> None:
        seen.append(msg.subject)  # type: ignore[attr-defined]

    sub = await bus.nc.subscribe(s.run_events_of(run_id=run_id), cb=watch)
    # The same run request again, under a new Nats-Msg-Id: what a producer retrying
    # after the stream's duplicate window would send.
    again = RunRequest(run_id=run_id, task_id="news", spec=spec, requested_at=utc_now())
    await bus.publish_event(s.WORK_RUNS, again, msg_id=f"{run_id}:again")
    await work_queue_settled(bus, timeout=15)
    await anyio.sleep(1)
    await sub.unsubscribe()
    assert seen == []  # not started, not completed a second time
    events = [e.event for e in await run_events(bus, run_id)]
    assert events == ["requested", "started", "completed"]


async def test_a_run_delivered_again_while_it_runs_is_run_once(rig: Rig) -> None:
    bus = rig.stack.bus
    run_id = "twice-delivered"
    # Core NATS sees every publish, including the ones the stream de-duplicates by
    # Nats-Msg-Id: counting there catches a second execution, the stream cannot.
    published: list[str] = []

    async def watch(msg: object) -> None:
        published.append(msg.subject.rsplit(".", 1)[-1])  # type: ignore[attr-defined]

    subs = [
        await bus.nc.subscribe(s.run_events_of(run_id=run_id), cb=watch),
        await bus.nc.subscribe(s.llm_event(run_id, "usage"), cb=watch),
    ]
    # A slow first model turn keeps the run in flight while its request comes again.
    rig.standin.inject(latency_ms=2500, latency_count=1)
    spec = TaskSpec(name="news", prompt=f"Open {rig.site.url}/news and report the top 3 headlines")
    await rig.stack.bus.request(
        s.RUNS_START, StartRun(spec=spec, task_id="news", run_id=run_id), RunStarted
    )
    with anyio.fail_after(20):
        while "started" not in [e.event for e in await run_events(bus, run_id)]:
            await anyio.sleep(0.05)
    # What a producer retrying past the duplicate window sends: the same run_id under
    # a new Nats-Msg-Id. The runner's second slot takes it while the first runs.
    again = RunRequest(run_id=run_id, task_id="news", spec=spec, requested_at=utc_now())
    await bus.publish_event(s.WORK_RUNS, again, msg_id=f"{run_id}:again")
    done = await wait_finished(bus, run_id)
    await work_queue_settled(bus, timeout=20)
    await anyio.sleep(1)
    for sub in subs:
        await sub.unsubscribe()
    assert done.status == "completed", done.error
    assert published.count("started") == 1
    assert published.count("completed") + published.count("failed") == 1
    # Every model call was paid once: the usage events are the single run's calls.
    assert published.count("usage") == sum(t.calls for t in done.tokens.values())


def _runner_process(
    settings: Settings, data_dir: Path, standin_url: str, ack_wait_s: float = 3.0
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTE_")}
    env.update(
        ROTE_NATS_URL=settings.nats_url or "",
        ROTE_DATA_DIR=str(data_dir),
        ROTE_RUNNER_ACK_WAIT_S=str(ack_wait_s),
        ROTE_LOG_FORMAT="json",
        ANTHROPIC_BASE_URL=standin_url,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", "runner"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


async def test_killed_runner_run_is_redelivered_and_completes_once(
    stack_settings: Settings, site: DemoSite, standin: StandinServer, tmp_path: Path
) -> None:
    names = ["system", "llm", "tools", "compiler", "tracer", "scheduler"]
    async with open_stack(stack_settings, names) as stack:
        first = _runner_process(stack_settings, tmp_path / "r1", standin.url)
        assert first.stdout is not None
        await anyio.to_thread.run_sync(first.stdout.readline)  # "rote serve: ..." = ready
        # Core NATS sees every publish; the stream would hide a second completion
        # published under the same Nats-Msg-Id.
        published: list[str] = []

        async def watch(msg: object) -> None:
            published.append(msg.subject.rsplit(".", 1)[-1])  # type: ignore[attr-defined]

        sub = await stack.bus.nc.subscribe(s.run_events_of(task_id="news"), cb=watch)
        await routed(stack.bus.nc)
        # Make the model slow, so the run is surely in flight when the runner dies.
        standin.inject(latency_ms=1500, latency_count=2)
        spec = TaskSpec(name="news", prompt=f"Open {site.url}/news and report the top 3 headlines")
        asked = len(standin.received)
        run_id = await start(stack.bus, spec, "news")
        with anyio.fail_after(20):
            # Killed with its first model call in flight: the call is billed all the same.
            while len(standin.received) == asked:
                await anyio.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()

        second = _runner_process(stack_settings, tmp_path / "r2", standin.url)
        try:
            # The dead runner's claim on the run expires (the leases' TTL) before the
            # redelivered request is taken over.
            done = await wait_finished(stack.bus, run_id, timeout=60)
            assert done.status == "completed" and done.attempt == 2
            await anyio.sleep(4)  # past another ack wait: nothing is redelivered again
            await sub.unsubscribe()
            assert published.count("completed") == 1 and "failed" not in published
            assert published.count("started") == 2  # the dead runner's, then the second's
            events = [e.event for e in await run_events(stack.bus, run_id)]
            assert events.count("completed") == 1 and "failed" not in events
            assert events.count("started") == 2
            # The run's cost is all it spent: the dead attempt's model call included.
            usage = [
                decode(m.data, UsageEvent)
                for m in await read_all(
                    stack.bus.js, s.STREAM_ACTIVITY, s.llm_event(run_id, "usage")
                )
            ]
            first_call = min(u.at for u in usage)
            second_start = max(
                e.at for e in await run_events(stack.bus, run_id) if e.event == "started"
            )
            assert first_call < second_start  # attempt 1 was billed
            assert done.cost_usd == pytest.approx(sum(u.cost_usd for u in usage))
            assert sum(t.calls for t in done.tokens.values()) == len(usage)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=15)


async def test_a_runner_stopped_mid_run_hands_the_run_to_another_at_once(
    stack_settings: Settings, site: DemoSite, standin: StandinServer, tmp_path: Path
) -> None:
    """A rolling restart: the stopped runner gives its run back as it stops, so the
    other runner takes it over now, not once the (here 2 min) ack wait has passed."""
    names = ["system", "llm", "tools", "compiler", "tracer", "scheduler"]
    async with open_stack(stack_settings, names) as stack:
        first = _runner_process(stack_settings, tmp_path / "r1", standin.url, ack_wait_s=120)
        second: subprocess.Popen[bytes] | None = None
        try:
            assert first.stdout is not None
            await anyio.to_thread.run_sync(first.stdout.readline)  # ready
            standin.inject(latency_ms=1500, latency_count=2)
            spec = TaskSpec(
                name="news", prompt=f"Open {site.url}/news and report the top 3 headlines"
            )
            asked = len(standin.received)
            run_id = await start(stack.bus, spec, "news")
            with anyio.fail_after(20):
                while len(standin.received) == asked:  # its first model call in flight
                    await anyio.sleep(0.05)
            second = _runner_process(stack_settings, tmp_path / "r2", standin.url, ack_wait_s=120)
            assert second.stdout is not None
            await anyio.to_thread.run_sync(second.stdout.readline)
            first.send_signal(signal.SIGTERM)
            assert await anyio.to_thread.run_sync(lambda: first.wait(timeout=20)) == 0
            done = await wait_finished(stack.bus, run_id, timeout=45)
            assert done.status == "completed" and done.attempt == 2
        finally:
            for runner in (first, second):
                if runner is not None and runner.poll() is None:
                    runner.send_signal(signal.SIGTERM)
                    runner.wait(timeout=15)


def _comparable(trace: Trace) -> dict[str, object]:
    steps = [
        {"tool": st.tool, "input": st.input, "output": st.output, "status": st.status,
         "model_text": st.model_text, "thinking_blocks": st.thinking_blocks}
        for st in trace.steps
    ]  # fmt: skip
    return {"steps": steps, "answer": trace.answer}


async def test_tracer_restarted_mid_run_captures_the_same_trace(
    stack_settings: Settings, site: DemoSite, standin: StandinServer
) -> None:
    spec = TaskSpec(name="news", prompt=f"Open {site.url}/news and report the top 3 headlines")
    names = ["system", "llm", "tools", "compiler", "runner", "scheduler"]
    async with open_stack(stack_settings, names) as stack:
        async with open_stack(stack_settings, ["tracer"]):
            calm = await start(stack.bus, spec, "calm")
            await wait_finished(stack.bus, calm)
            undisturbed = await wait_for(
                stack.bus, s.STREAM_TRACES, s.trace_captured("calm", calm), TraceCaptured
            )

        standin.inject(latency_ms=800, latency_count=3)
        async with open_stack(stack_settings, ["tracer"]):
            bumpy = await start(stack.bus, spec, "bumpy")
            with anyio.fail_after(20):
                while "started" not in [e.event for e in await run_events(stack.bus, bumpy)]:
                    await anyio.sleep(0.1)
        # The tracer is down while the run goes on, then comes back.
        await wait_finished(stack.bus, bumpy)
        async with open_stack(stack_settings, ["tracer"]):
            restarted = await wait_for(
                stack.bus, s.STREAM_TRACES, s.trace_captured("bumpy", bumpy), TraceCaptured
            )
    assert _comparable(restarted.trace) == _comparable(undisturbed.trace)
    assert msgspec.json.encode(restarted.trace.task) == msgspec.json.encode(spec)
