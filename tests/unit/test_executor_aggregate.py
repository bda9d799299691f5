"""The Executor aggregate on real stores: every health rule, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from contracts.executors import Executor, ToolStep
from contracts.runs import HealedStep, Verification, VerificationStatus
from contracts.traces import Trace
from services.compiler import executor_events as ev
from services.compiler import health as h
from services.compiler import views
from services.compiler.aggregate import ExecutorAggregate
from services.compiler.compile import compile
from services.compiler.store import ExecutorStore
from services.kernel.event_store import application_env
from services.kernel.settings import Settings

TRACE = msgspec.json.decode(
    (Path(__file__).parent.parent / "data" / "traces" / "news_top3.json").read_bytes(), type=Trace
)
T0 = datetime(2025, 6, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def executor() -> Executor:
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    return result


@pytest.fixture
def settings(tmp_path: Path, event_store: str) -> Settings:
    return Settings(data_dir=tmp_path, event_store=event_store)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(settings: Settings, clock: Clock) -> Iterator[ExecutorStore]:
    app = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4, clock=clock)
    yield app
    app.close()


def fail(store: ExecutorStore, run_id: str, version: int = 1) -> list[ev.HealthEvent]:
    return store.record_replay(
        "t", run_id=run_id, version=version, ok=False, step=1, reason="selector vanished"
    )[1]


def verify(
    store: ExecutorStore, run_id: str, version: int, status: VerificationStatus = "verified"
) -> list[ev.HealthEvent]:
    """A replay whose answer the check judged (`status`: verified or wrong)."""
    check = Verification(status=status, why="new_version", reasons=[f"{status}: x"])
    ok = status == "verified"
    return store.record_replay("t", run_id=run_id, version=version, ok=ok, verification=check)[1]


def succeed(
    store: ExecutorStore, run_id: str, version: int = 1, attempt: int = 1, saved: float = 0.04
) -> list[ev.HealthEvent]:
    return store.record_replay(
        "t",
        run_id=run_id,
        version=version,
        ok=True,
        attempt=attempt,
        cost_usd=0.001,
        cost_saved_usd=saved,
    )[1]


def test_reset_on_success(store: ExecutorStore) -> None:
    store.record_trace("t", "r1", executor())
    for i, ok in enumerate([False, False, True, False, False]):
        (succeed if ok else fail)(store, f"x{i}")
    state = store.health("t")
    assert state is not None
    summary = views.summary(state)
    assert (summary.status, summary.consecutive_failures) == ("active", 2)
    assert (summary.success_count, summary.failure_count) == (1, 4)
    assert summary.total_cost_saved_usd == pytest.approx(0.04)


def test_three_consecutive_failures_supersede(store: ExecutorStore) -> None:
    store.record_trace("t", "r1", executor())
    fail(store, "x1")
    fail(store, "x2")
    assert store.lookup_active("t")[0] is not None
    events = fail(store, "x3")
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded]
    found, state = store.lookup_active("t")
    assert found is None and state is not None and h.status(state) == "superseded"
    # A failure redelivered after the fact does not count again.
    assert fail(store, "x3") == []


def test_a_redelivered_run_records_each_attempts_replay_once(
    store: ExecutorStore, settings: Settings
) -> None:
    """Attempt 1 failed its replay, attempt 2 (redelivery) replayed it: both count,
    each once however often it is delivered, and a fresh process reads the same."""
    store.record_trace("t", "r1", executor())
    assert fail(store, "x1")  # attempt 1
    assert fail(store, "x1") == []
    assert succeed(store, "x1", attempt=2, saved=0.03)
    assert succeed(store, "x1", attempt=2, saved=0.03) == []
    assert fail(store, "x1") == []  # attempt 1's outcome, late: still counted once
    state = store.health("t")
    assert state is not None
    summary = views.summary(state)
    assert (summary.success_count, summary.failure_count, summary.consecutive_failures) == (
        1,
        1,
        0,
    )
    assert summary.total_cost_saved_usd == pytest.approx(0.03)
    assert [(type(e), getattr(e, "attempt", None)) for e in store.history("t")[1:]] == [
        (ev.ReplayFailed, 1),
        (ev.ReplaySucceeded, 2),
    ]
    other = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4)
    assert other.health("t") == state
    other.close()


def test_negative_savings_are_kept_as_reported(store: ExecutorStore) -> None:
    store.record_trace("t", "r1", executor())
    succeed(store, "x1", saved=0.02)
    succeed(store, "x2", saved=-0.005)  # this replay cost more than a full run
    state = store.health("t")
    assert state is not None
    assert views.summary(state).total_cost_saved_usd == pytest.approx(0.015)


def test_stale_at_thirty_days(store: ExecutorStore, clock: Clock) -> None:
    store.record_trace("t", "r1", executor())
    clock.now = T0 + timedelta(days=10)
    succeed(store, "x1")
    clock.now = T0 + timedelta(days=39)
    assert store.lookup_active("t")[0] is not None
    clock.now = T0 + timedelta(days=41)
    found, state = store.lookup_active("t")
    assert found is None and state is not None
    assert views.summary(state).status_reason == "stale: unused for 31 days (limit 30)"
    assert isinstance(store.history("t")[-1], ev.Superseded)


def test_undecodable_executor_is_superseded_not_retried(store: ExecutorStore) -> None:
    broken = ev.Compiled(
        at=T0, version=1, executor={"steps": [{"type": "teleport"}]}, source_run_id="r"
    )
    store.execute("t", lambda state: [broken])
    found, state = store.lookup_active("t")
    assert found is None and state is not None
    assert (views.summary(state).status_reason or "").startswith("cannot be decoded")
    before = len(store.history("t"))
    assert store.lookup_active("t")[0] is None
    assert len(store.history("t")) == before  # looked up again: nothing new recorded
    # The next good compilation takes over.
    store.record_trace("t", "r2", executor())
    found, _ = store.lookup_active("t")
    assert found is not None and found.version == 2


def test_pinned_version_stays_through_a_new_compilation(store: ExecutorStore) -> None:
    store.record_trace("t", "r1", executor())
    store.pin("t", version=1, by="ops")
    store.record_trace("t", "r2", executor())
    found, state = store.lookup_active("t")
    assert found is not None and found.version == 1
    assert state is not None and state.pinned == 1 and len(state.versions) == 2
    fail(store, "x1")
    state = store.health("t")
    assert state is not None and state.versions[0].failure_count == 1
    store.pin("t", version=None)
    found, _ = store.lookup_active("t")
    assert found is not None and found.version == 2


def test_pin_and_invalidate_refuse_what_cannot_be(store: ExecutorStore) -> None:
    with pytest.raises(h.HealthError) as caught:
        store.pin("t", version=1)
    assert caught.value.code == "not_found"
    store.record_trace("t", "r1", executor())
    store.invalidate("t", reason="wrong", by="ops")
    with pytest.raises(h.HealthError) as caught:
        store.pin("t", version=1)
    assert caught.value.code == "conflict"
    assert store.lookup_active("t")[0] is None


def test_an_invalidation_names_the_version_it_means(store: ExecutorStore) -> None:
    # v2, compiled by a fallback run after a site change and verified since, is current
    # when an operator's invalidation of v1 arrives: refused, and nothing is recorded.
    store.record_trace("t", "r1", executor())
    store.record_trace("t", "r2", executor())
    verify(store, "v1", version=2)
    before = store.health("t")
    with pytest.raises(h.HealthError) as caught:
        store.invalidate("t", version=1, reason="site redesign", by="alice")
    assert (caught.value.code, caught.value.field) == ("conflict", "version")
    assert "the current version is v2" in caught.value.message
    with pytest.raises(h.HealthError) as caught:
        store.invalidate("t", version=9, reason="site redesign", by="alice")
    assert (caught.value.code, caught.value.field) == ("not_found", "version")
    assert store.health("t") == before
    found, _ = store.lookup_active("t")
    assert found is not None and found.version == 2
    state = store.invalidate("t", version=2, reason="wrong", by="alice")
    assert [v.status for v in state.versions] == ["superseded", "invalidated"]
    assert store.lookup_active("t")[0] is None


def test_two_concurrent_compilations_get_distinct_versions(settings: Settings) -> None:
    """Process B saves between A's load and A's save: A's save conflicts, A reloads
    and decides again, so A gets the next version: the candidate B compiled is replaced,
    and the version both were compiled after stays on standby."""
    env = application_env(settings, "compiler")
    a, b = ExecutorStore(env), ExecutorStore(env)
    a.record_trace("t", "r0", executor())
    interleaved = False

    def decide_a(state: h.Health) -> list[ev.HealthEvent]:
        nonlocal interleaved
        if not interleaved:
            interleaved = True
            b.record_trace("t", "rB", executor())  # the other process wins the race
        return h.decide_trace(state, executor(), None, "rA", T0)

    _, events = a.execute("t", decide_a)
    compiled = [e for e in events if isinstance(e, ev.Compiled)]
    assert [e.version for e in compiled] == [3]
    state = a.health("t")
    assert state is not None
    assert [v.version for v in state.versions] == [1, 2, 3]
    assert [v.status for v in state.versions] == ["active", "superseded", "active"]
    assert [v.candidate for v in state.versions] == [False, True, True]
    assert {v.source_run_id for v in state.versions} == {"r0", "rB", "rA"}
    a.close()
    b.close()


def test_many_concurrent_compilations_never_share_a_version(settings: Settings) -> None:
    env = application_env(settings, "compiler")
    stores = [ExecutorStore(env) for _ in range(2)]
    stores[0].record_trace("t", "r0", executor())  # create the aggregate first
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def compile_one(i: int) -> None:
        try:
            barrier.wait()
            stores[i % 2].record_trace("t", f"r{i + 1}", executor())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=compile_one, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    state = stores[0].health("t")
    assert state is not None
    assert sorted(v.version for v in state.versions) == list(range(1, 8))
    # The newest is current, a candidate; v1, the version before them all, on standby.
    assert [v.version for v in state.versions if v.status == "active"] == [1, 7]
    current = h.current(state)
    assert current is not None and current.version == 7 and current.candidate
    assert len({v.source_run_id for v in state.versions}) == 7
    for s in stores:
        s.close()


def test_health_is_the_fold_of_the_stored_events(store: ExecutorStore, settings: Settings) -> None:
    store.record_trace("t", "r1", executor())
    for i in range(9):
        (succeed if i % 4 else fail)(store, f"x{i}")
    store.record_full_run("t", run_id="f1", cost_usd=0.05)
    store.record_trace("t", "r2", executor())  # a candidate, v1 on standby
    verify(store, "w1", version=2, status="wrong")  # v2 superseded, v1 restored
    store.record_trace("t", "r3", executor())  # a candidate, v1 on standby again
    verify(store, "w2", version=3)  # v3 promoted, v1 superseded
    state = store.health("t")
    assert state is not None and state.events == 19
    # Each went as it stood: v1 last restored as a candidate, v2 never verified.
    assert [(v.status, v.candidate) for v in state.versions] == [
        ("superseded", True),
        ("superseded", True),
        ("active", False),
    ]
    assert state == h.fold("t", store.history("t"))
    # A snapshot was taken (every 4 events) and a fresh process rebuilds the same state.
    assert store.snapshots is not None
    assert list(store.snapshots.get(store.load("t").id))  # type: ignore[union-attr]
    other = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4)
    assert other.health("t") == state
    assert other.task_ids() == ["t"]
    other.close()


def test_a_replays_check_is_stored_and_read_back(store: ExecutorStore, settings: Settings) -> None:
    store.record_trace("t", "r1", executor())
    check = Verification(
        status="wrong",
        flagged=True,
        why="flagged",
        method="small_model",
        reasons=['step 1: {"_type_": "x", "_data_": 1} moved', "FAIL: the price is stale"],
    )
    store.record_replay("t", run_id="x1", version=1, ok=False, verification=check)
    cleared = msgspec.structs.replace(check, status="verified", reasons=["PASS: it is"])
    for i in range(4):  # past a snapshot (every 4 events)
        store.record_replay("t", run_id=f"s{i}", version=1, ok=True, verification=cleared)
    state = store.health("t")
    assert state is not None
    assert (state.trust.checked, state.trust.drift_alarms, state.trust.drift_confirmed) == (5, 5, 1)
    other = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4)
    try:
        assert other.health("t") == state == h.fold("t", other.history("t"))
        wire = views.to_wire("t", other.history("t")[1])
        assert wire.verification == check
    finally:
        other.close()


def test_a_healed_version_is_stored_once_and_read_back(
    store: ExecutorStore, settings: Settings, clock: Clock
) -> None:
    store.record_trace("t", "r1", executor())
    heal = HealedStep(
        step=1,
        tool="browser_extract",
        input={"selector": "h3.title"},
        reason="browser_extract: element_not_found: h2.headline",
    )
    check = Verification(status="verified", why="healed", reasons=["PASS: it is"])
    for _ in range(2):  # the run event delivered again: recorded once
        store.record_replay("t", run_id="x1", version=1, ok=True, verification=check, heals=[heal])
    for i in range(3):  # past a snapshot (every 4 events)
        succeed(store, f"s{i}", version=2)
    state = store.health("t")
    assert state is not None and state.events == 6
    assert [(v.version, v.healed_from, v.candidate) for v in state.versions] == [
        (1, None, False),
        (2, 1, True),
    ]
    assert state.versions[1].compiled_reason == (
        "healed step 1 (browser_extract): selector 'h2.headline' -> 'h3.title'"
        f" after: {heal.reason}"
    )
    assert state.trust.healed == state.versions[0].trust.healed == 1
    other = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4, clock=clock)
    try:
        assert other.health("t") == state == h.fold("t", other.history("t"))
        executor_v2, _ = other.lookup_active("t")
        assert executor_v2 is not None and executor_v2.healed_from == 1
        assert executor_v2.steps[1].input == {"selector": "h3.title"}  # type: ignore[union-attr]
    finally:
        other.close()


def test_a_history_page_is_read_by_version_and_matches_the_whole_history(
    store: ExecutorStore,
) -> None:
    assert store.history_page("t", 10, None) == (0, 0, [])  # no such task yet
    store.record_trace("t", "r1", executor())
    for i in range(12):
        (succeed if i % 5 else fail)(store, f"x{i}")
    whole = store.history("t")
    assert len(whole) == 13
    for limit, before in [(5, None), (5, 9), (5, 3), (100, None), (1, 1), (4, 99)]:
        total, start, page = store.history_page("t", limit, before)
        end = 13 if before is None else min(before - 1, 13)
        assert (total, start) == (13, max(0, end - limit))
        assert page == whole[start:end], (limit, before)


def test_listing_finds_every_task(store: ExecutorStore) -> None:
    for task in ("a", "b", "c"):
        store.record_trace(task, f"r-{task}", executor())
    assert store.task_ids() == ["a", "b", "c"]
    store.record_trace("d", "r-d", "fewer than 2 successful tool steps (1)")
    assert store.task_ids() == ["a", "b", "c", "d"]
    # An outcome for a task nobody compiled does not create one.
    store.record_replay("ghost", run_id="x", version=1, ok=True)
    assert "ghost" not in store.task_ids()


# Objects eventsourcing's JSON decoder would take for its own encoded values.
LOOKALIKES = {
    "unknown": {"_type_": "note", "_data_": 1},
    "registered": {"_type_": "datetime_iso", "_data_": "2025-01-01T00:00:00"},
}


def test_tool_inputs_shaped_like_library_values_read_back_as_recorded(
    store: ExecutorStore, settings: Settings, clock: Clock
) -> None:
    recorded = executor()
    first = recorded.steps[0]
    assert isinstance(first, ToolStep)
    steps = [msgspec.structs.replace(first, input={**first.input, **LOOKALIKES})]
    store.record_trace("t", "r1", msgspec.structs.replace(recorded, steps=steps))
    for i in range(5):  # past a snapshot (every 4 events)
        succeed(store, f"x{i}")
    other = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4, clock=clock)
    try:
        found, state = other.lookup_active("t")
        assert found is not None and state is not None and state.replays == 5
        assert isinstance(found.steps[0], ToolStep)
        assert {k: found.steps[0].input[k] for k in LOOKALIKES} == LOOKALIKES
        assert len(other.history("t")) == 6
    finally:
        other.close()


def test_events_stored_as_plain_data_by_earlier_versions_still_read(
    store: ExecutorStore, settings: Settings, clock: Clock
) -> None:
    aggregate = ExecutorAggregate.open(ev.Created(task_id="t"))
    compiled = ev.Compiled(
        at=T0,
        version=1,
        executor=msgspec.to_builtins(msgspec.structs.replace(executor(), version=1)),
        source_run_id="r1",
    )
    aggregate.trigger_event(
        ExecutorAggregate.Recorded, task_id="t", data=msgspec.to_builtins(compiled)
    )
    store.save(aggregate)
    succeed(store, "x1")  # recorded the current way, after the old one
    other = ExecutorStore(application_env(settings, "compiler"), snapshot_every=4, clock=clock)
    try:
        found, state = other.lookup_active("t")
        assert found is not None and found.version == 1
        assert state is not None and state.versions[0].success_count == 1
    finally:
        other.close()
