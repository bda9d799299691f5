"""Path A end to end: compile after the first full run, replay with no large-model
tokens, heal a step in place after a site redesign, fall back once when no heal can
bridge the next one, recompile, replay the new version."""

from __future__ import annotations

import anyio
import pytest

from contracts import subjects as s
from contracts.executors import ExecutorEvent, ExecutorHealth, ExecutorRef
from contracts.runs import RunEvent, RunStarted, StartRun
from contracts.tasks import TaskSpec
from services.dev.demo.site import stories
from services.kernel.bus import Bus
from services.kernel.codec import decode
from services.kernel.replay_read import read_all
from tests.e2e.conftest import Rig
from tests.e2e.helpers import run_events, wait_finished

pytestmark = [pytest.mark.anyio, pytest.mark.browser, pytest.mark.slow]

SONNET = "claude-sonnet-5-5"


async def executor_events(bus: Bus, task_id: str) -> list[ExecutorEvent]:
    msgs = await read_all(bus.js, s.STREAM_EXECUTORS, s.executor_event(task_id, "*"))
    return [decode(m.data, ExecutorEvent) for m in msgs]


async def wait_executor_event(bus: Bus, task_id: str, event: str, **fields: object) -> None:
    """Until the task has an executor event of that name with those field values."""
    with anyio.fail_after(30):
        while not any(
            e.event == event and all(getattr(e, k) == v for k, v in fields.items())
            for e in await executor_events(bus, task_id)
        ):
            await anyio.sleep(0.2)


async def wait_compiled(bus: Bus, task_id: str, version: int) -> None:
    await wait_executor_event(bus, task_id, "compiled", version=version)


async def wait_full_run_recorded(bus: Bus, task_id: str, run_id: str) -> None:
    await wait_executor_event(bus, task_id, "full_run_recorded", run_id=run_id)


async def health(bus: Bus, task_id: str) -> ExecutorHealth:
    return await bus.request(s.EXECUTORS_GET, ExecutorRef(task_id=task_id), ExecutorHealth)


async def run(rig: Rig, spec: TaskSpec) -> RunEvent:
    started = await rig.stack.bus.request(
        s.RUNS_START, StartRun(spec=spec, task_id="news"), RunStarted
    )
    return await wait_finished(rig.stack.bus, started.run_id, timeout=90)


def expected_answer(edition: int) -> str:
    titles = [st.title for st in stories(edition)[:3]]
    return "Top 3 headlines:\n" + "\n".join(f"{i}. {t}" for i, t in enumerate(titles, 1))


async def test_compile_replay_heal_break_recompile_replay(rig: Rig) -> None:
    bus = rig.stack.bus
    spec = TaskSpec(name="news", prompt=f"Open {rig.site.url}/news and report the top 3 headlines")

    # Run 1: full LLM run -> v1.
    first = await run(rig, spec)
    assert first.status == "completed" and first.source == "full_llm"
    assert first.result == expected_answer(0)
    await wait_compiled(bus, "news", 1)
    h = await health(bus, "news")
    assert (h.status, h.version, h.success_count, h.failure_count) == ("active", 1, 0, 0)

    # Run 2: new content, replayed by v1 with no large-model tokens at all.
    rig.site.edition = 1
    second = await run(rig, spec)
    assert second.status == "completed", second.error
    assert second.source == "executor" and second.executor_version == 1
    assert SONNET not in second.tokens
    assert second.result == expected_answer(1)  # fresh data, same form
    assert second.cost_saved_usd == pytest.approx(first.cost_usd - second.cost_usd)
    with anyio.fail_after(10):
        while (h := await health(bus, "news")).success_count < 1:
            await anyio.sleep(0.2)
    assert (h.status, h.version, h.consecutive_failures) == ("active", 1, 0)
    assert h.total_cost_saved_usd == pytest.approx(second.cost_saved_usd)

    # The site is redesigned: run 3's extract finds nothing, and heals in place: the
    # small model picks the headlines among the page's candidates. No full run.
    rig.site.layout = "v2"
    rig.site.edition = 2
    third = await run(rig, spec)
    assert third.status == "completed", third.error
    assert (third.source, third.executor_version, third.fell_back) == ("executor", 1, False)
    assert SONNET not in third.tokens
    assert third.result == expected_answer(2)
    replay = third.replay
    assert replay is not None and replay.ok
    assert [(h.step, h.tool) for h in replay.healed_steps] == [(1, "browser_extract")]
    assert replay.healed_steps[0].reason == "expected at least 4 items, got 0"
    assert replay.verification is not None
    assert (replay.verification.status, replay.verification.why) == ("verified", "healed")
    names = [e.event for e in await run_events(bus, third.run_id)]
    assert names == ["requested", "started", "completed"]
    # v2 is v1 with the healed step: a candidate until a replay of its own verifies.
    await wait_compiled(bus, "news", 2)
    (healed,) = [e for e in await executor_events(bus, "news") if e.version == 2]
    assert (healed.healed_from, healed.run_id) == (1, third.run_id)
    h = await health(bus, "news")
    assert (h.version, h.versions, h.candidate) == (2, 2, True)

    # Run 4 replays v2; its check verifies the answer and promotes it.
    rig.site.edition = 3
    fourth = await run(rig, spec)
    assert (fourth.source, fourth.executor_version) == ("executor", 2), fourth.error
    assert fourth.result == expected_answer(3)
    await wait_executor_event(bus, "news", "promoted", version=2)
    h = await health(bus, "news")
    assert (h.status, h.version, h.candidate) == ("active", 2, False)

    # A second redesign no locator can bridge (each headline shares its element with
    # its time): the heal finds no candidate, and run 5 falls back to the full loop.
    rig.site.layout = "v3"
    rig.site.edition = 4
    fifth = await run(rig, spec)
    assert fifth.status == "completed", fifth.error
    assert fifth.source == "full_llm" and fifth.fell_back
    assert fifth.replay is not None and not fifth.replay.ok and fifth.replay.version == 2
    assert "not healed" in (fifth.replay.reason or "")
    assert all(t.title in (fifth.result or "") for t in stories(4)[:3])
    names = [e.event for e in await run_events(bus, fifth.run_id)]
    assert names == ["requested", "started", "replay_failed", "completed"]
    await wait_compiled(bus, "news", 3)
    h = await health(bus, "news")
    assert (h.status, h.version, h.versions) == ("active", 3, 3)
    assert h.source_run_id == fifth.run_id

    # Two full runs are known now: run 1, and run 5's fallback (its replay part aside).
    await wait_full_run_recorded(bus, "news", first.run_id)
    await wait_full_run_recorded(bus, "news", fifth.run_id)
    mean_full = (first.cost_usd + fifth.cost_usd - fifth.replay.cost_usd) / 2
    assert (await health(bus, "news")).full_run_cost_usd == pytest.approx(mean_full)

    # Run 6 replays v3, and saves against the mean of the recent full runs: the
    # runner's cached lookup was refreshed by the full run's record.
    rig.site.edition = 5
    sixth = await run(rig, spec)
    assert sixth.source == "executor" and sixth.executor_version == 3
    assert SONNET not in sixth.tokens
    assert all(t.title in (sixth.result or "") for t in stories(5)[:3])
    assert sixth.cost_saved_usd == pytest.approx(mean_full - sixth.cost_usd, abs=1e-8)
    # One figure everywhere: the run events' savings are what health added up.
    with anyio.fail_after(10):
        while (h := await health(bus, "news")).success_count < 1:
            await anyio.sleep(0.2)
    completed = await read_all(bus.js, s.STREAM_RUNS, s.run_events_of("news", event="completed"))
    runs = [decode(m.data, RunEvent) for m in completed]
    assert len(runs) == 6
    assert h.total_cost_saved_usd == pytest.approx(sum(r.cost_saved_usd for r in runs), abs=1e-9)
    recorded = {
        e.run_id: e.cost_saved_usd
        for e in await executor_events(bus, "news")
        if e.event == "replay_succeeded"
    }
    assert recorded == {r.run_id: r.cost_saved_usd for r in runs if r.source == "executor"}
    events = [e.event for e in await executor_events(bus, "news")]
    assert events.count("compiled") == 3
    assert {"replay_failed", "superseded", "promoted"} <= set(events)


async def test_an_edited_task_is_not_answered_by_its_old_executor(rig: Rig) -> None:
    """v1 reports the top 3; the task now asks for the top 5. Replaying v1 would answer
    the old question with no expectation to notice: the run goes full instead (not a
    replay failure, v1 did nothing wrong) and compiles v2 for the task as it is."""
    top3 = TaskSpec(name="news", prompt=f"Open {rig.site.url}/news and report the top 3 headlines")
    first = await run(rig, top3)
    assert first.source == "full_llm", first.error
    await wait_compiled(rig.stack.bus, "news", 1)

    top5 = TaskSpec(name="news", prompt=f"Open {rig.site.url}/news and report the top 5 headlines")
    edited = await run(rig, top5)
    assert edited.status == "completed", edited.error
    assert (edited.source, edited.fell_back, edited.replay) == ("full_llm", False, None)
    assert (edited.result or "").startswith("Top 5 headlines:\n")
    await wait_compiled(rig.stack.bus, "news", 2)
    assert (await health(rig.stack.bus, "news")).failure_count == 0

    again = await run(rig, top5)
    assert (again.source, again.executor_version) == ("executor", 2), again.error
    assert again.result == edited.result
