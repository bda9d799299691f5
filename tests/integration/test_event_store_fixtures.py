"""Stores written by an earlier version (tests/data/stores, written at f62bed0) load with
this code and read back exactly what that version read: every task's view, the run
ledger, the daily spend, what the relays publish for every stored event, and each
executor's health and history. Events recorded now, on top of the old ones, fold in
with them, snapshots included, and a fresh process reads the same."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from contracts.executors import Executor
from contracts.runs import HealedStep, RunEvent, Verification
from contracts.tasks import RunTask, TaskRef, UpdateTask
from contracts.traces import Trace
from services.compiler import service as compiler_service
from services.compiler import views
from services.compiler.compile import compile
from services.compiler.store import ExecutorStore
from services.compiler.trust import Tally
from services.kernel.event_store import application_env
from services.kernel.settings import Settings
from services.scheduler.application import Tasks, to_view
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler, SchedulerConfig
from services.scheduler.outbox import messages_for
from services.scheduler.task import Task

STORES = Path(__file__).parent.parent / "data" / "stores"
WRITTEN_IN = "rote_fixture_f62bed0"  # the schema the PostgreSQL dump names
READBACK = json.loads((STORES / "readback.json").read_text())
TRACE = msgspec.json.decode((STORES.parent / "traces" / "news_top3.json").read_bytes(), type=Trace)
LATER = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)  # after everything in the stores


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def old_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings opening a copy of the stores the earlier version wrote."""
    if request.param == "sqlite":
        shutil.copytree(STORES / "sqlite" / "events", tmp_path / "events")
        return Settings(data_dir=tmp_path, event_store="sqlite")
    url = request.getfixturevalue("postgres_url")
    _load_dump(request.getfixturevalue("postgres_base_url"), url.rsplit("schema=", 1)[1])
    return Settings(data_dir=tmp_path, event_store=url)


def _load_dump(base_url: str, schema: str) -> None:
    import psycopg

    statements = [
        line
        for line in (STORES / "postgresql.sql").read_text().replace(WRITTEN_IN, schema).splitlines()
        # psql's own commands, and the schema the test's fixture made already.
        if not line.startswith("\\") and not line.startswith("CREATE SCHEMA")
    ]
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute("\n".join(statements))


@pytest.fixture
def tasks(old_stores: Settings) -> Iterator[Tasks]:
    app = Tasks(env=application_env(old_stores, "scheduler"))
    yield app
    app.close()


@pytest.fixture
def executors(old_stores: Settings) -> Iterator[ExecutorStore]:
    store = ExecutorStore(application_env(old_stores, "compiler"), clock=lambda: LATER)
    yield store
    store.close()


def dumped(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


def scheduler_readback(app: Tasks) -> dict[str, Any]:
    """As the fixture's script read it, with this code."""
    app.catalog.catch_up()
    runs = app.catalog.runs(None, 10**6)
    days = sorted({r.finished_at.date() for r in runs if r.finished_at})
    relayed = []
    task_ids: dict[Any, str] = {}
    for notification in app.recorder.select_notifications(start=1, limit=10**6):
        event: Any = app.mapper.to_domain_event(notification)
        if isinstance(event, Task.Defined):
            task_ids[event.originator_id] = event.event.task_id
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
        "tasks": dict(sorted((t.task_id, dumped(to_view(t))) for t in app.catalog.snapshot())),
        "runs": dumped(runs),
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
            "summary": dumped(views.summary(state)),
            "version_views": dumped(views.version_views(state)),
            "history": [dumped(views.to_wire(task_id, e)) for e in history],
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


# Fields the contracts have gained since the stores were written, with the default an
# old value reads as: the only difference an event, view or executor may show (run
# events' resumed_actions, task specs' verify_rate and shadow_rate, executor steps'
# fingerprint, target and sample, replay events' verification, executor events' and
# views' candidate: no old version is one; executors', executor events' and views'
# healed_from, healed_steps and compiled_reason: nor was any healed).
ADDED_SINCE = {
    "resumed_actions": 0,
    "verify_rate": None,
    "shadow_rate": None,
    "budget_left_usd": None,
    "fingerprint": None,
    "target": None,
    "sample": [],
    "verification": None,
    "candidate": False,
    "healed_from": None,
    "healed_steps": [],
    "compiled_reason": None,
}
# What the executor views have gained since: the tallies of replay checks and the rates.
ADDED_TO_VIEWS = (
    *Tally.__struct_fields__,
    "full_runs",
    "hit_rate",
    "false_success_rate",
    "false_success_upper",
)


def without_added(readback: Any) -> Any:
    """The readback with every field added since, at its default, left out."""
    if isinstance(readback, list):
        return [without_added(item) for item in readback]
    if not isinstance(readback, dict):
        return readback
    return {
        name: without_added(value)
        for name, value in readback.items()
        if name not in ADDED_SINCE or value != ADDED_SINCE[name]
    }


def views_added(readback: dict[str, Any]) -> dict[str, Any]:
    """Takes the fields the executor views have gained out of `readback`, and returns
    them by task: {task: {"summary": {...}, "versions": [{...}, ...]}}."""
    added = {}
    for task_id, found in readback["executors"].items():
        views = [found["summary"], *found["version_views"]]
        taken = [{k: view.pop(k) for k in ADDED_TO_VIEWS if k in view} for view in views]
        added[task_id] = {"summary": taken[0], "versions": taken[1:]}
    return added


def test_the_old_stores_read_back_as_the_earlier_version_read_them(
    tasks: Tasks, executors: ExecutorStore
) -> None:
    assert without_added(scheduler_readback(tasks)) == READBACK["scheduler"]
    compiler = without_added(compiler_readback(executors))
    added = views_added(compiler)
    assert compiler == READBACK["compiler"]
    # Old replay events hold no verification: no check is counted, no rate estimated.
    for found in added.values():
        for view in [found["summary"], *found["versions"]]:
            assert {view[k] for k in Tally.__struct_fields__} == {0}, view
            assert view["false_success_rate"] is view["false_success_upper"] is None
    # The runs are: poll's 3 replays answered and 2 full runs (poll is read from a
    # snapshot taken before full runs were counted: its recent costs count them).
    summaries = {t: (a["summary"]["full_runs"], a["summary"]["hit_rate"]) for t, a in added.items()}
    assert summaries == {
        "poll": (2, 0.6),
        "report": (0, None),
        "hot": (0, 1.0),
        "broken": (0, None),
    }
    # A version's: its replays that answered (v1 2 of 3, v2 none of 3, v3 never replayed).
    assert [v["hit_rate"] for v in added["poll"]["versions"]] == [0.666667, 0.0, None, 1.0]


def test_the_old_snapshots_are_read(tasks: Tasks, executors: ExecutorStore) -> None:
    # Loaded from its latest snapshot (one the earlier version took) and the events
    # after it, an aggregate is what the fold of all its events makes.
    assert tasks.snapshots is not None and executors.snapshots is not None
    for task_id in ("poll", "gone", "later", "queue"):
        task = tasks.get(task_id)
        assert list(tasks.snapshots.get(task.id)), task_id
        assert task.state == folded(tasks, task.id).state, task_id
    poll = executors.load("poll")
    assert poll is not None and list(executors.snapshots.get(poll.id))
    assert poll.state == folded(executors, poll.id).state


def folded(app: Any, aggregate_id: Any) -> Any:
    aggregate = None
    for event in app.events.get(aggregate_id):
        aggregate = event.mutate(aggregate)
    return aggregate


async def _new_scheduler_events(app: Tasks) -> None:
    clock = ManualClock(LATER)
    engine = Scheduler(app, clock, SchedulerConfig(max_concurrent=5, compile_wait_s=0.0))
    await engine.update(UpdateTask(task_id="report", prompt="Write the weekly report"))
    await engine.pause(TaskRef(task_id="report", reason="holiday"))
    await engine.resume(TaskRef(task_id="report"))
    # gone: gone-3 was left in flight and gone-4 queued behind it.
    await engine.on_run_event(
        RunEvent(
            task_id="gone",
            run_id="gone-3",
            event="completed",
            status="completed",
            at=clock.advance(5),
            cost_usd=0.01,
        )
    )
    assert ("gone", "gone-4") in (await engine.tick()).dispatched
    await engine.run(RunTask(task_id="flaky", run_id="flaky-3"), key="intake-new")
    await engine.resume(TaskRef(task_id="flaky"))
    assert ("flaky", "flaky-3") in (await engine.tick()).dispatched


@pytest.mark.anyio
async def test_new_events_fold_in_with_the_old_ones(old_stores: Settings) -> None:
    app = Tasks(env=application_env(old_stores, "scheduler"))
    app.snapshotting_intervals = {Task: 4}
    try:
        before = scheduler_readback(app)
        await _new_scheduler_events(app)
        after = scheduler_readback(app)
        assert app.snapshots is not None
        report = app.get("report")
        versions = [s.originator_version for s in app.snapshots.get(report.id)]
        assert max(versions) == 12  # a snapshot taken by this code, on top of old ones
    finally:
        app.close()
    # The old events read as before; the new ones follow them.
    assert after["relayed"][: len(before["relayed"])] == before["relayed"]
    new = [m["subject"] for r in after["relayed"][len(before["relayed"]) :] for m in r["messages"]]
    assert "rote.evt.task.report.updated" in new and "rote.evt.run.gone.gone-4.requested" in new
    assert after["tasks"]["report"]["spec"]["prompt"] == "Write the weekly report"
    assert after["tasks"]["report"]["version"] == 12
    assert after["tasks"]["gone"]["run_in_flight"] == "gone-4"
    assert after["tasks"]["flaky"]["status"] == "active"
    fresh = Tasks(env=application_env(old_stores, "scheduler"))
    try:
        again = scheduler_readback(fresh)
    finally:
        fresh.close()
    # The spend of days long past was dropped by the engine reading today's.
    assert again.pop("spend")["2025-03-01"] == after.pop("spend")["2025-03-01"] == 0.01
    assert again == after


def _executor() -> Executor:
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    return result


def test_new_executor_events_fold_in_with_the_old_ones(old_stores: Settings) -> None:
    store = ExecutorStore(
        application_env(old_stores, "compiler"), snapshot_every=4, clock=lambda: LATER
    )
    try:
        before = compiler_readback(store)
        sampled = Verification(status="verified", why="sampled", reasons=["PASS: it is"])
        store.record_replay(
            "hot", run_id="hx3", version=1, ok=True, cost_saved_usd=0.02, verification=sampled
        )
        # An old version healed in place: the healed one waits behind hot's pin.
        heal = HealedStep(
            step=1, tool="browser_extract", input={"selector": "h3.title"}, reason="gone"
        )
        healed = Verification(status="verified", why="healed")
        store.record_replay(
            "hot", run_id="hx4", version=1, ok=True, verification=healed, heals=[heal]
        )
        store.record_trace("poll", "r6", _executor())
        store.pin("poll", version=5, by="carol")
        store.record_full_run("report", run_id="r9", cost_usd=0.08)
        store.record_trace("fresh", "f1", _executor())
        # A candidate, promoted: the new kinds of event, stored beside the old ones.
        store.record_trace("fresh", "f2", _executor())
        verified = Verification(status="verified", why="new_version")
        store.record_replay("fresh", run_id="fx1", version=2, ok=True, verification=verified)
        after = compiler_readback(store)
    finally:
        store.close()
    assert after["task_ids"] == [*before["task_ids"], "fresh"]
    assert after["relayed"][: len(before["relayed"])] == before["relayed"]
    poll = after["executors"]["poll"]
    assert (
        poll["history"][: before["executors"]["poll"]["events"]]
        == (before["executors"]["poll"]["history"])
    )
    assert [e["event"] for e in poll["history"][-2:]] == ["compiled", "pinned"]
    assert (poll["summary"]["version"], poll["summary"]["pinned_version"]) == (5, 5)
    hot = after["executors"]["hot"]["summary"]
    assert (hot["success_count"], hot["failure_count"], hot["healed"]) == (3, 1, 1)
    # The new replays' checks count; the old replays, recorded unchecked, do not.
    assert (hot["checked"], hot["unflagged_checked"], hot["false_success_rate"]) == (2, 2, 0.0)
    hot_history = after["executors"]["hot"]["history"]
    assert hot_history[-4]["verification"]["reasons"] == ["PASS: it is"]
    assert [(e["event"], e["version"]) for e in hot_history[-3:]] == [
        ("replay_succeeded", 1),
        ("compiled", 3),
        ("superseded", 2),
    ]
    hot_versions = after["executors"]["hot"]["version_views"]
    assert [(v["status"], v.get("healed_from")) for v in hot_versions] == [
        ("active", None),
        ("superseded", None),
        ("active", 1),
    ]
    published = [
        r["outgoing"][0] for r in after["relayed"][len(before["relayed"]) :] if r["outgoing"]
    ]
    assert published == [
        "rote.evt.executor.hot.replay_succeeded",
        "rote.evt.executor.hot.replay_succeeded",
        "rote.evt.executor.hot.compiled",
        "rote.evt.executor.hot.superseded",
        "rote.evt.executor.poll.compiled",
        "rote.evt.executor.poll.pinned",
        "rote.evt.executor.report.full_run_recorded",
        "rote.evt.executor.fresh.compiled",
        "rote.evt.executor.fresh.compiled",
        "rote.evt.executor.fresh.replay_succeeded",
        "rote.evt.executor.fresh.promoted",
        "rote.evt.executor.fresh.superseded",
    ]
    fresh_versions = after["executors"]["fresh"]["version_views"]
    assert [(v["status"], v["candidate"]) for v in fresh_versions] == [
        ("superseded", False),
        ("active", False),
    ]
    fresh = ExecutorStore(application_env(old_stores, "compiler"), clock=lambda: LATER)
    try:
        assert compiler_readback(fresh) == after
        assert fresh.lookup_active("poll")[0] is not None
    finally:
        fresh.close()


def test_an_old_task_goes_on_scheduling(tasks: Tasks) -> None:
    # poll's last slot came from the old events; its next run is due from it.
    task = tasks.get("poll")
    view = to_view(task)
    assert view.next_due_at is not None
    assert view.next_due_at - timedelta(seconds=300) == task.state.last_slot
