"""Writes the event-store fixtures in this folder, with the code of commit f62bed0.

History, not a tool: it documents how the stores here were made, and is not meant to be
run on later code (which stores events differently). See README.md.

    PYTHONPATH=$PWD python tests/data/stores/write_fixtures.py [postgresql://...]

It plays one scenario through the scheduler's engine and the compiler's store, with a
manual clock and run ids that do not depend on chance, so the SQLite and PostgreSQL
stores hold the same events. Snapshot intervals are lowered so some snapshots are
taken, with events after the last one. It then records, as JSON, what this code reads
back from each store: each task's view, the run ledger, the daily spend, what the relay
publishes for every stored event, and each executor's summary, version views and history.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import msgspec
import psycopg

from contracts.executors import Executor
from contracts.runs import ModelTokens, ReplayOutcome, RunEvent
from contracts.tasks import (
    Above,
    ConditionTrigger,
    CreateTask,
    CronTrigger,
    IntervalTrigger,
    ManualTrigger,
    OnceTrigger,
    RunTask,
    TaskRef,
    UpdateTask,
)
from contracts.traces import Trace
from services.compiler import health as h
from services.compiler import service as compiler_service
from services.compiler.compile import compile
from services.compiler.store import ExecutorStore
from services.kernel.event_store import application_env
from services.kernel.settings import Settings
from services.scheduler import engine as engine_module
from services.scheduler.application import Tasks, to_view
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task

HERE = Path(__file__).parent
TRACE = msgspec.json.decode((HERE.parent / "traces" / "news_top3.json").read_bytes(), type=Trace)
T0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
SCHEMA = "rote_fixture_f62bed0"
TASK_SNAPSHOT_EVERY = 4
EXECUTOR_SNAPSHOT_EVERY = 4


def _counting_run_ids() -> None:
    """Run ids the tick gives out: by time and a counter, not a random suffix."""
    counter = itertools.count(1)

    def new_run_id(now: datetime | None = None) -> str:
        at = (now or T0).astimezone(UTC)
        return f"{at:%Y%m%dT%H%M%S}-{next(counter):012d}"

    engine_module.new_run_id = new_run_id  # type: ignore[assignment]


def outcome(task_id: str, run_id: str, at: datetime, *, ok: bool = True, **fields: Any) -> RunEvent:
    return RunEvent(
        task_id=task_id,
        run_id=run_id,
        event="completed" if ok else "failed",
        status="completed" if ok else "failed",
        at=at,
        **fields,
    )


def started(task_id: str, run_id: str, at: datetime, attempt: int = 1) -> RunEvent:
    return RunEvent(
        task_id=task_id,
        run_id=run_id,
        event="started",
        status="running",
        at=at,
        attempt=attempt,
    )


TOKENS = {
    "claude-sonnet": ModelTokens(input_tokens=1200, output_tokens=300, cost_usd=0.04, calls=3)
}


class Story:
    """The scheduler's engine on a manual clock, and the steps of the scenario."""

    def __init__(self, app: Tasks) -> None:
        self.clock = ManualClock(T0)

        async def check(task_id: str, trigger: Any) -> Any:
            return "95"

        self.engine = Scheduler(
            app,
            self.clock,
            SchedulerConfig(max_concurrent=3, daily_budget_usd=1.0, compile_wait_s=0.0),
            check_condition=check,
        )

    async def tick(self) -> list[tuple[str, str]]:
        return (await self.engine.tick()).dispatched

    async def poll(self) -> None:
        """An interval task created through the intake (an idempotency key, the command
        coming twice), runs that complete (full and replay), fail, and fail for the
        infrastructure."""
        engine, clock = self.engine, self.clock
        create = CreateTask(
            name="poll", prompt="Read the price", trigger=IntervalTrigger(every_s=300)
        )
        await engine.create(create, key="intake-create-poll")
        await engine.create(create, key="intake-create-poll")  # applied once
        ((_, run_id),) = await self.tick()
        await engine.on_run_event(started("poll", run_id, clock.advance(1)))
        await engine.on_run_event(
            outcome(
                "poll",
                run_id,
                clock.advance(20),
                cost_usd=0.05,
                source="full_llm",
                tokens=TOKENS,
                duration_ms=21000,
            )
        )
        clock.set(T0 + timedelta(seconds=300))
        ((_, run_id),) = await self.tick()
        await engine.on_run_event(started("poll", run_id, clock.advance(1)))
        await engine.on_run_event(
            outcome(
                "poll",
                run_id,
                clock.advance(2),
                cost_usd=0.001,
                cost_saved_usd=0.049,
                source="replay",
                executor_version=1,
                replay=ReplayOutcome(version=1, ok=True),
            )
        )
        await self.poll_failures()

    async def poll_failures(self) -> None:
        engine, clock = self.engine, self.clock
        clock.set(T0 + timedelta(seconds=600))
        ((_, run_id),) = await self.tick()
        await engine.on_run_event(started("poll", run_id, clock.advance(1)))
        await engine.on_run_event(started("poll", run_id, clock.advance(5), attempt=2))
        await engine.on_run_event(
            outcome(
                "poll",
                run_id,
                clock.advance(30),
                ok=False,
                cost_usd=0.06,
                source="full_llm",
                fell_back=True,
                executor_version=1,
                reason="tool_error",
                error="selector #price vanished",
                tokens=TOKENS,
            )
        )
        clock.set(T0 + timedelta(seconds=900))
        ((_, run_id),) = await self.tick()
        await engine.on_run_event(
            outcome(
                "poll",
                run_id,
                clock.advance(3),
                ok=False,
                reason="tool_error",
                error="the tools service did not answer",
                infrastructure=True,
            )
        )
        await engine.update(UpdateTask(task_id="poll", prompt="Read the price of ACME"))

    async def definitions(self) -> None:
        """report: a cron task updated without and with a trigger change, paused and
        resumed (through the intake). gone: a run in flight and one queued behind it;
        deleting the task skips the queued one; created again, it is defined afresh."""
        engine, clock = self.engine, self.clock
        await engine.create(
            CreateTask(
                name="report", prompt="Write the report", trigger=CronTrigger(expr="0 9 * * *")
            )
        )
        await engine.update(UpdateTask(task_id="report", max_failures=5), key="intake-update-1")
        berlin = CronTrigger(expr="30 9 * * 1-5", tz="Europe/Berlin")
        await engine.update(UpdateTask(task_id="report", trigger=berlin))
        await engine.pause(TaskRef(task_id="report", reason="maintenance"), key="intake-pause-1")
        await engine.resume(TaskRef(task_id="report"), key="intake-resume-1")

        await engine.create(CreateTask(name="gone", prompt="p", trigger=ManualTrigger()))
        await engine.run(RunTask(task_id="gone", run_id="gone-1"))
        await self.tick()
        await engine.run(RunTask(task_id="gone", run_id="gone-2"), key="intake-run-1")
        await engine.on_run_event(started("gone", "gone-1", clock.advance(1)))
        await engine.delete(TaskRef(task_id="gone", reason="no longer needed"))
        await engine.on_run_event(outcome("gone", "gone-1", clock.advance(5), cost_usd=0.02))
        await engine.create(CreateTask(name="gone", prompt="p again", trigger=ManualTrigger()))

    async def queues_and_failures(self) -> None:
        """queue: a queued run skipped by a pause. flaky: failures in a row pause it."""
        engine, clock = self.engine, self.clock
        await engine.create(
            CreateTask(name="queue", prompt="p", trigger=ManualTrigger(), deadline_s=60)
        )
        await engine.run(RunTask(task_id="queue", run_id="queue-1"))
        await self.tick()
        await engine.run(RunTask(task_id="queue", run_id="queue-2"))
        await engine.pause(TaskRef(task_id="queue", reason="hold on"))

        await engine.create(
            CreateTask(name="flaky", prompt="p", trigger=ManualTrigger(), max_failures=2)
        )
        for n in (1, 2):
            await engine.run(RunTask(task_id="flaky", run_id=f"flaky-{n}"))
            await self.tick()
            await engine.on_run_event(started("flaky", f"flaky-{n}", clock.advance(1)))
            await engine.on_run_event(
                outcome(
                    "flaky",
                    f"flaky-{n}",
                    clock.advance(2),
                    ok=False,
                    reason="timeout",
                    error="took too long",
                )
            )

    async def abandoned(self) -> None:
        """slow: runs abandoned past their deadline, one no runner started (an
        infrastructure failure), one started, whose real outcome comes late (untracked);
        a run started outside the scheduler (rote.api.runs.start) is untracked too."""
        engine, clock = self.engine, self.clock
        await engine.create(
            CreateTask(name="slow", prompt="p", trigger=ManualTrigger(), deadline_s=30)
        )
        await engine.run(RunTask(task_id="slow", run_id="slow-1"))
        await self.tick()
        clock.advance(200)
        await self.tick()
        await engine.run(RunTask(task_id="slow", run_id="slow-2"))
        await self.tick()
        await engine.on_run_event(started("slow", "slow-2", clock.advance(1)))
        clock.advance(200)
        await self.tick()
        await engine.on_run_event(outcome("slow", "slow-2", clock.advance(5), cost_usd=0.03))
        adhoc = outcome("adhoc", "adhoc-1", clock.advance(1), cost_usd=0.01)
        await engine.on_run_event(adhoc)
        await engine.on_run_event(adhoc)  # recorded once

    async def budget(self) -> None:
        """A manual run spends past the budget; then a once task is kept for the next
        day, a condition waits for it, and a cron slot is skipped. The next day runs go
        out again; one is left in flight and one queued."""
        engine, clock = self.engine, self.clock
        await engine.create(CreateTask(name="spender", prompt="p", trigger=ManualTrigger()))
        await engine.run(RunTask(task_id="spender", run_id="spend-1"))
        await self.tick()
        await engine.on_run_event(outcome("spender", "spend-1", clock.advance(10), cost_usd=2.5))
        once_at = clock.now() + timedelta(minutes=5)
        await engine.create(CreateTask(name="once", prompt="p", trigger=OnceTrigger(at=once_at)))
        # later: its fourth event keeps it for the next day, so a snapshot holds that.
        later = CreateTask(name="later", prompt="p", trigger=OnceTrigger(at=once_at))
        await engine.create(later)
        await engine.update(UpdateTask(task_id="later", prompt="p, later"))
        await engine.update(UpdateTask(task_id="later", max_failures=4))
        trigger = ConditionTrigger(tool="t", predicate=Above(value=90), every_s=60, cooldown_s=600)
        await engine.create(CreateTask(name="hot", prompt="p", trigger=trigger))
        await engine.check_conditions()
        clock.set(once_at + timedelta(seconds=1))
        await self.tick()
        clock.advance(300)
        await self.tick()

        clock.set(datetime(2025, 1, 7, 0, 0, 1, tzinfo=UTC))
        await engine.check_conditions()
        for task_id, run_id in await self.tick():
            await engine.on_run_event(outcome(task_id, run_id, clock.advance(3), cost_usd=0.002))
        await engine.run(RunTask(task_id="gone", run_id="gone-3"))
        await self.tick()
        await engine.on_run_event(started("gone", "gone-3", clock.advance(1)))
        await engine.run(RunTask(task_id="gone", run_id="gone-4"))


async def scheduler_scenario(app: Tasks) -> None:
    story = Story(app)
    await story.poll()
    await story.definitions()
    await story.queues_and_failures()
    await story.abandoned()
    await story.budget()


def executor() -> Executor:
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    return result


def executor_scenario(store: ExecutorStore, clock: list[datetime]) -> None:
    def at(days: float) -> None:
        clock[0] = T0 + timedelta(days=days)

    def replay(task_id: str, run_id: str, version: int, ok: bool, **fields: Any) -> None:
        store.record_replay(task_id, run_id=run_id, version=version, ok=ok, **fields)

    # poll: compiled, replayed, superseded by a newer compilation and by 3 failures,
    # pinned, unpinned, invalidated, a skipped trace, full runs, and stale at last.
    store.record_trace("poll", "r1", executor())
    store.record_full_run("poll", run_id="r1", cost_usd=0.05)
    replay("poll", "x1", 1, True, tokens=900, cost_usd=0.001, cost_saved_usd=0.049)
    replay("poll", "x2", 1, False, step=2, reason="selector vanished", tokens=300)
    replay("poll", "x2", 1, True, attempt=2, cost_usd=0.002, cost_saved_usd=0.048)
    at(1)
    store.record_trace("poll", "r2", executor())
    store.record_full_run("poll", run_id="r2", cost_usd=0.07)
    for n in (3, 4, 5):
        replay("poll", f"x{n}", 2, False, step=1, reason="page changed")
    at(2)
    store.record_trace("poll", "r3", executor())
    store.pin("poll", version=3, by="alice")
    store.record_trace("poll", "r4", "fewer than 2 successful tool steps (1)")
    store.pin("poll", version=None, by="alice")
    store.invalidate("poll", reason="wrong answers", by="bob")
    at(3)
    store.record_trace("poll", "r5", executor())
    replay("poll", "x6", 4, True, cost_usd=0.001, cost_saved_usd=0.059)
    at(40)
    store.lookup_active("poll")  # stale: unused for 37 days

    # report: nothing compiled, only a skip.
    store.record_trace("report", "r1", "one-time task: it will not run again")

    # hot: a pinned version kept through a newer compilation, its failures recorded.
    at(5)
    store.record_trace("hot", "h1", executor())
    store.pin("hot", version=1, by="ops")
    store.record_trace("hot", "h2", executor())
    replay("hot", "hx1", 1, False, reason="timeout")
    replay("hot", "hx2", 1, True, cost_usd=0.003, cost_saved_usd=0.02)

    # broken: a stored executor the contract no longer reads is superseded at lookup.
    broken = h.Compiled(
        at=T0, version=1, executor={"steps": [{"type": "teleport"}]}, source_run_id="b1"
    )
    store.execute("broken", lambda state: [broken])
    store.lookup_active("broken")


def dumped(value: Any) -> Any:
    return msgspec.to_builtins(value)


def scheduler_readback(app: Tasks) -> dict[str, Any]:
    app.catalog.catch_up()
    tasks = {t.task_id: dumped(to_view(t)) for t in app.catalog.snapshot()}
    days = sorted({r.finished_at.date() for r in app.catalog.runs(None, 10**6) if r.finished_at})
    relayed = []
    task_ids: dict[Any, str] = {}
    for notification in app.recorder.select_notifications(start=1, limit=10**6):
        event: Any = app.mapper.to_domain_event(notification)
        if isinstance(event, Task.Defined):
            task_ids[event.originator_id] = event.task_id
        task_id = task_ids.get(event.originator_id)
        messages = messages_for(event, task_id) if task_id is not None else []
        relayed.append(
            {
                "notification_id": notification.id,
                "topic": notification.topic,
                "messages": [
                    {"subject": m.subject, "msg_id": m.msg_id, "event": dumped(m.event)}
                    for m in messages
                ],
            }
        )
    return {
        "tasks": dict(sorted(tasks.items())),
        "runs": dumped(app.catalog.runs(None, 10**6)),
        "spend": {
            day.isoformat(): app.catalog.spent_on(datetime.combine(day, time(), UTC))
            for day in days
        },
        "relayed": relayed,
    }


def compiler_readback(store: ExecutorStore) -> dict[str, Any]:
    executors = {}
    for task_id in store.task_ids():
        state = store.health(task_id)
        assert state is not None
        history = store.history(task_id)
        executors[task_id] = {
            "summary": dumped(h.summary(state)),
            "version_views": dumped(h.version_views(state)),
            "history": [dumped(h.to_wire(task_id, e)) for e in history],
            "events": len(history),
        }
    relayed = []
    for notification in store.recorder.select_notifications(start=1, limit=10**6):
        out = compiler_service.convert(store.mapper.to_domain_event(notification))
        relayed.append(
            {
                "notification_id": notification.id,
                "topic": notification.topic,
                "outgoing": None if out is None else [out.subject, dumped(out.event)],
            }
        )
    return {"task_ids": store.task_ids(), "executors": executors, "relayed": relayed}


def write(settings: Settings, label: str) -> dict[str, Any]:
    """Play the scenario into the store `settings` names; what it reads back."""
    _counting_run_ids()
    tasks = Tasks(env=application_env(settings, "scheduler"))
    tasks.snapshotting_intervals = {Task: TASK_SNAPSHOT_EVERY}
    try:
        anyio.run(scheduler_scenario, tasks)
        scheduler = scheduler_readback(tasks)
    finally:
        tasks.close()
    clock = [T0]
    store = ExecutorStore(
        application_env(settings, "compiler"),
        snapshot_every=EXECUTOR_SNAPSHOT_EVERY,
        clock=lambda: clock[0],
    )
    try:
        executor_scenario(store, clock)
        compiler = compiler_readback(store)
    finally:
        store.close()
    print(f"{label}: written", file=sys.stderr)
    return {"scheduler": scheduler, "compiler": compiler}


def reread(settings: Settings) -> dict[str, Any]:
    """What a fresh process reads back (snapshots and all)."""
    tasks = Tasks(env=application_env(settings, "scheduler"))
    store = ExecutorStore(application_env(settings, "compiler"))
    try:
        return {"scheduler": scheduler_readback(tasks), "compiler": compiler_readback(store)}
    finally:
        tasks.close()
        store.close()


def dump_postgres(base_url: str) -> str:
    parts = urlsplit(base_url)
    result = subprocess.run(
        [
            "pg_dump",
            "--no-owner",
            "--no-privileges",
            "--inserts",  # plain SQL: a test loads it without psql
            "--restrict-key=rotefixture",
            "--schema",
            SCHEMA,
            "--host",
            parts.hostname or "127.0.0.1",
            "--port",
            str(parts.port or 5432),
            "--username",
            parts.username or "postgres",
            parts.path.lstrip("/") or "test",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test"
    sqlite_dir = HERE / "sqlite"
    shutil.rmtree(sqlite_dir, ignore_errors=True)
    sqlite = Settings(data_dir=sqlite_dir, event_store="sqlite")
    written = write(sqlite, "sqlite")
    # Only the event files are fixtures.
    for extra in sqlite_dir.iterdir():
        if extra.name != "events":
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{SCHEMA}"')
    try:
        postgres = Settings(data_dir=HERE / "unused", event_store=f"{base}?schema={SCHEMA}")
        assert write(postgres, "postgresql") == written, "the two stores read back differently"
        assert reread(postgres) == written
        (HERE / "postgresql.sql").write_text(dump_postgres(base))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        shutil.rmtree(HERE / "unused", ignore_errors=True)
    assert reread(sqlite) == written
    (HERE / "readback.json").write_text(json.dumps(written, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
