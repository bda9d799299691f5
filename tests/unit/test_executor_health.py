"""Executor health rules as pure functions over events (no database)."""

from __future__ import annotations

import typing
from datetime import datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.executors import Executor, ExecutorEvent
from contracts.runs import Verification
from contracts.traces import Trace
from services.compiler import executor_events as ev
from services.compiler import health as h
from services.compiler import views
from services.compiler.compile import compile
from services.compiler.invalidation import decide_invalidate
from tests.executor_events import RULES, T0, replay

TRACE = msgspec.json.decode(
    (Path(__file__).parent.parent / "data" / "traces" / "news_top3.json").read_bytes(), type=Trace
)


def executor() -> Executor:
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    return result


def run(state: h.Health, events: list[ev.HealthEvent]) -> list[ev.HealthEvent]:
    for event in events:
        h.apply(state, event)
    return events


def compiled(state: h.Health, run_id: str, at: datetime = T0) -> list[ev.HealthEvent]:
    return run(state, h.decide_trace(state, executor(), None, run_id, at))


def outcome(
    state: h.Health, run_id: str, ok: bool, version: int = 1, attempt: int = 1
) -> list[ev.HealthEvent]:
    return replay(state, run_id, version, ok, reason="x", attempt=attempt)


def verified(state: h.Health, run_id: str, version: int) -> list[ev.HealthEvent]:
    check = Verification(status="verified", why="new_version", reasons=["PASS: it is"])
    return replay(state, run_id, version, True, verification=check)


def test_compilations_get_the_next_version_and_the_newest_is_current() -> None:
    state = h.new("t")
    assert [type(e) for e in compiled(state, "r1")] == [ev.Compiled]
    second = compiled(state, "r2")
    # Compiled while v1 was current: a candidate, v1 on standby until it is verified
    # (the candidate rules: tests/unit/test_executor_promotion.py).
    assert [type(e) for e in second] == [ev.Compiled]
    current = h.current(state)
    assert current is not None and current.version == 2
    assert h.decode_executor(current.executor).version == 2
    assert compiled(state, "r2") == []  # the same trace again changes nothing
    events = verified(state, "x1", 2)
    assert events[1:] == [
        ev.Promoted(at=T0, version=2, run_id="x1"),
        ev.Superseded(at=T0, version=1, reason="replaced by verified v2"),
    ]


def test_a_success_resets_the_run_of_failures() -> None:
    state = h.new("t")
    compiled(state, "r1")
    for i, ok in enumerate([False, False, True, False, False]):
        outcome(state, f"x{i}", ok)
    version = h.current(state)
    assert version is not None
    assert (version.success_count, version.failure_count, version.consecutive_failures) == (1, 4, 2)
    events = outcome(state, "x5", False)
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded]
    assert h.current(state) is None and h.status(state) == "superseded"
    assert views.summary(state).status_reason == "3 consecutive replay failures"


@given(st.lists(st.booleans(), max_size=30))
def test_superseded_exactly_when_three_failures_run_together(outcomes: list[bool]) -> None:
    state = h.new("t")
    log = compiled(state, "r1")
    recorded: list[ev.HealthEvent] = []
    for i, ok in enumerate(outcomes):
        recorded += outcome(state, f"x{i}", ok)
    log += recorded
    runs, longest = 0, 0
    for ok in outcomes:
        runs = 0 if ok else runs + 1
        longest = max(longest, runs)
    superseded = [e for e in recorded if isinstance(e, ev.Superseded)]
    assert len(superseded) == (1 if longest >= 3 else 0)
    version = state.versions[0]
    assert version.success_count == outcomes.count(True)
    assert version.failure_count == outcomes.count(False)
    assert version.consecutive_failures == runs
    assert state == h.fold("t", log)  # the state is nothing but its events


def test_redelivered_outcomes_count_once() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert outcome(state, "x1", True)
    assert outcome(state, "x1", True) == []
    assert outcome(state, "x1", False) == []  # one outcome per attempt, whatever it says
    assert run(state, h.decide_full_run(state, run_id="f1", cost_usd=0.04, at=T0))
    assert run(state, h.decide_full_run(state, run_id="f1", cost_usd=0.04, at=T0)) == []


def test_a_redelivered_run_that_replays_again_counts_each_attempt_once() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert outcome(state, "x1", False, attempt=1)
    # Attempt 2 (the run redelivered) replayed successfully: that is news, and it is
    # what the run's final event says.
    succeeded = outcome(state, "x1", True, attempt=2)
    assert [(type(e), e.attempt) for e in succeeded] == [(ev.ReplaySucceeded, 2)]  # type: ignore[union-attr]
    assert outcome(state, "x1", True, attempt=2) == []
    assert outcome(state, "x1", False, attempt=1) == []
    version = state.versions[0]
    assert (version.success_count, version.failure_count, version.consecutive_failures) == (1, 1, 0)
    wire = views.to_wire("t", succeeded[0])
    assert wire is not None and (wire.run_id, wire.attempt) == ("x1", 2)


def test_a_run_counted_before_outcomes_were_per_attempt_is_not_counted_again() -> None:
    """Stored by the earlier version: an outcome without an attempt, and a snapshot whose
    remembered keys are per run. A redelivery of that run's later attempt after the
    upgrade must not count a second time."""
    state = h.new("t")
    compiled(state, "r1")
    # What a stored event without the field decodes as.
    old_event = ev.ReplayFailed(at=T0, version=1, run_id="x1", reason="gone")
    assert isinstance(old_event, ev.ReplayFailed) and old_event.attempt is None
    run(state, [old_event])
    assert outcome(state, "x1", False, attempt=2) == []
    assert outcome(state, "x1", True, attempt=3) == []
    assert state.versions[0].failure_count == 1

    snapshot = h.new("t")
    compiled(snapshot, "r1")
    snapshot.seen["replay:x2"] = 1  # as an earlier version remembered a counted run
    assert outcome(snapshot, "x2", True, attempt=2) == []
    assert outcome(snapshot, "x3", True, attempt=1)  # other runs count as before


def test_outcomes_of_unknown_versions_record_nothing() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert outcome(state, "x1", True, version=9) == []


def test_stale_after_thirty_days_unused() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert h.decide_lookup(state, now=T0 + timedelta(days=29), rules=RULES) == []
    events = h.decide_lookup(state, now=T0 + timedelta(days=31), rules=RULES)
    assert len(events) == 1 and isinstance(events[0], ev.Superseded)
    assert events[0].reason.startswith("stale: unused for 31 days")
    # A replay on day 20 makes it fresh until day 50.
    run(
        state,
        h.decide_replay(
            state, run_id="x", version=1, ok=True, at=T0 + timedelta(days=20), rules=RULES
        ),
    )
    assert h.decide_lookup(state, now=T0 + timedelta(days=49), rules=RULES) == []


def test_an_undecodable_executor_is_superseded_once() -> None:
    state = h.new("t")
    run(state, [ev.Compiled(at=T0, version=1, executor={"steps": "garbage"}, source_run_id="r1")])
    events = run(state, h.decide_lookup(state, now=T0, rules=RULES))
    assert len(events) == 1 and isinstance(events[0], ev.Superseded)
    assert events[0].reason.startswith("cannot be decoded")
    assert h.current(state) is None
    assert h.decide_lookup(state, now=T0, rules=RULES) == []  # not retried forever


@pytest.mark.parametrize(
    "stats",
    [
        {"total_steps": "many", "llm_steps": None},
        {"total_steps": None},
        ["not", "a", "dict"],
        {"estimated_replay_cost_usd": {"usd": 1}},
    ],
)
def test_an_undecodable_executors_odd_stats_read_as_zeros(stats: object) -> None:
    """What an earlier contract stored may hold anything; a query still answers."""
    state = h.new("t")
    raw = {"steps": "garbage", "stats": stats}
    run(state, [ev.Compiled(at=T0, version=1, executor=raw, source_run_id="r1")])
    shown = views.summary(h.as_of(state, now=T0, rules=RULES))
    assert (shown.status, shown.version, shown.total_steps, shown.llm_steps) == (
        "superseded",
        1,
        0,
        0,
    )
    assert (shown.status_reason or "").startswith("cannot be decoded")


def test_as_of_shows_what_a_lookup_would_decide_and_records_nothing() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert h.as_of(state, now=T0 + timedelta(days=29), rules=RULES) is state  # nothing to do
    later = h.as_of(state, now=T0 + timedelta(days=31), rules=RULES)
    assert h.status(later) == "superseded" and h.status(state) == "active"
    assert later.events == state.events + 1 and h.current(state) is not None


def test_the_savings_ledger_names_the_tasks_that_saved_most() -> None:
    states = []
    for i in range(views.MAX_STATS_TASKS + 5):
        state = h.new(f"t{i}")
        compiled(state, "r1")
        state.total_cost_saved_usd = float(i)
        states.append(state)
    stats = views.savings(states)
    assert stats.executors == views.MAX_STATS_TASKS + 5 and stats.by_task_omitted == 5
    assert len(stats.by_task) == views.MAX_STATS_TASKS
    assert "t0" not in stats.by_task and f"t{views.MAX_STATS_TASKS + 4}" in stats.by_task


def test_a_pinned_version_survives_new_compilations_and_still_counts_failures() -> None:
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    assert [type(e) for e in compiled(state, "r2")] == [ev.Compiled]  # v1 is not superseded
    current = h.current(state)
    assert current is not None and current.version == 1
    assert state.versions[1].status == "active"  # v2 waits for the pin to go
    outcome(state, "x1", False)
    assert state.versions[0].failure_count == 1
    # Unpinning makes the newest current and retires the old pin.
    events = run(state, h.decide_pin(state, version=None, by="ops", at=T0))
    assert [type(e) for e in events] == [ev.Unpinned, ev.Superseded]
    current = h.current(state)
    assert current is not None and current.version == 2


def test_a_compilation_for_an_edited_task_unpins_the_old_pin() -> None:
    # The runner never replays a version compiled for the task as it was; a pin that
    # held on to it would make every run of the edited task a full one.
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    edited = msgspec.structs.replace(executor(), task_fingerprint="edited")
    events = run(state, h.decide_trace(state, edited, None, "r2", T0))
    assert [type(e) for e in events] == [ev.Compiled, ev.Unpinned, ev.Superseded]
    assert state.pinned is None and state.versions[0].status == "superseded"
    assert state.versions[0].status_reason == (
        "the task changed; v2 is compiled for it as it is now"
    )
    current = h.current(state)
    assert current is not None and current.version == 2
    # A version from before fingerprints (None) keeps its pin: nothing says it differs.
    state = h.new("t")
    run(
        state,
        h.decide_trace(
            state, msgspec.structs.replace(executor(), task_fingerprint=None), None, "r1", T0
        ),
    )
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    assert [type(e) for e in run(state, h.decide_trace(state, edited, None, "r2", T0))] == [
        ev.Compiled
    ]
    assert state.pinned == 1


def test_a_pinned_version_that_keeps_failing_is_superseded_and_unpinned() -> None:
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    compiled(state, "r2")
    for i in range(3):
        events = outcome(state, f"x{i}", False)
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded, ev.Unpinned]
    current = h.current(state)
    assert state.pinned is None and current is not None and current.version == 2


def test_moving_the_pin_to_a_newer_version_retires_the_old_pin() -> None:
    # Only a version newer than the pin waits for it to go; the old pin, once the
    # operator moved on from it, is replaced like any older version, and is never
    # replayed again when the new pin goes.
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    compiled(state, "r2")  # waits behind the pin
    events = run(state, h.decide_pin(state, version=2, by="ops", at=T0))
    assert [type(e) for e in events] == [ev.Pinned, ev.Superseded]
    assert [(v.version, v.status) for v in state.versions] == [(1, "superseded"), (2, "active")]
    assert state.versions[0].status_reason == "v2 pinned"
    run(state, decide_invalidate(state, reason="wrong answers", by="ops", at=T0))
    assert h.current(state) is None and h.status(state) == "invalidated"
    # Pinning an older version still lets the newest wait for the pin to go.
    state = h.new("t")
    compiled(state, "r1")
    compiled(state, "r2")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    assert [v.status for v in state.versions] == ["active", "active"]


def test_only_the_pinned_version_is_shown_as_pinned() -> None:
    # The history's summaries say who pinned a version; once the pin goes (unpinned, or
    # moved to another version) a version that stays active is no longer "pinned by".
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    run(state, h.decide_pin(state, version=None, by="ops", at=T0))
    assert [(v.status, v.status_reason) for v in views.version_views(state)] == [("active", None)]
    compiled(state, "r2")
    run(state, h.decide_pin(state, version=2, by="ops", at=T0))
    run(state, h.decide_pin(state, version=1, by="bob", at=T0))  # v2, newer, waits
    assert [(v.version, v.status, v.status_reason) for v in views.version_views(state)] == [
        (1, "active", "pinned by bob"),
        (2, "active", None),
    ]


def test_pinning_brings_back_a_superseded_version_but_not_an_invalidated_one() -> None:
    state = h.new("t")
    compiled(state, "r1")
    compiled(state, "r2")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    current = h.current(state)
    assert current is not None and current.version == 1 and current.status_reason == "pinned by ops"
    run(state, decide_invalidate(state, reason="wrong answers", by="ops", at=T0))
    assert state.pinned is None and state.versions[0].status == "invalidated"
    with pytest.raises(h.HealthError) as caught:
        h.decide_pin(state, version=1, by="ops", at=T0)
    assert (caught.value.code, caught.value.field) == ("conflict", "version")
    with pytest.raises(h.HealthError) as caught:
        h.decide_pin(state, version=7, by="ops", at=T0)
    assert (caught.value.code, caught.value.field) == ("not_found", "version")


def test_a_version_compiled_for_the_task_before_an_edit_cannot_be_pinned() -> None:
    # The runner never replays it (its task fingerprint is not the task's): pinned, it
    # would push the current version aside for a version no run replays.
    state = h.new("t")
    compiled(state, "r1")
    edited = msgspec.structs.replace(executor(), task_fingerprint="edited")
    run(state, h.decide_trace(state, edited, None, "r2", T0))
    with pytest.raises(h.HealthError) as caught:
        h.decide_pin(state, version=1, by="ops", at=T0)
    assert caught.value.code == "conflict"
    assert "v1 was compiled for the task before it was edited" in caught.value.message
    assert state.pinned is None  # nothing recorded
    run(state, h.decide_pin(state, version=2, by="ops", at=T0))  # the task as it is
    assert state.pinned == 2
    # A version from before fingerprints (None) can be pinned: nothing says it differs.
    state = h.new("t")
    run(
        state,
        h.decide_trace(
            state, msgspec.structs.replace(executor(), task_fingerprint=None), None, "r1", T0
        ),
    )
    run(state, h.decide_trace(state, edited, None, "r2", T0))
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    assert state.pinned == 1


def test_a_version_whose_executor_does_not_decode_cannot_be_pinned() -> None:
    # Pinned, it would be superseded again (and unpinned) at the next lookup.
    state = h.new("t")
    compiled(state, "r1")
    run(state, [ev.Compiled(at=T0, version=2, executor={"steps": 5}, source_run_id="r2")])
    run(state, h.decide_lookup(state, now=T0, rules=RULES))  # v2 superseded: undecodable
    with pytest.raises(h.HealthError) as caught:
        h.decide_pin(state, version=2, by="ops", at=T0)
    assert caught.value.code == "conflict"
    assert "v2 cannot be pinned" in caught.value.message
    assert "cannot be decoded" in caught.value.message
    assert state.pinned is None  # nothing recorded
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))  # one that decodes
    assert state.pinned == 1


def test_pinning_vouches_for_a_stale_version_and_renews_a_stale_pin() -> None:
    later = T0 + timedelta(days=40)
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    shown = views.summary(h.as_of(state, now=later, rules=RULES))
    assert (shown.status, shown.pinned_version) == ("superseded", None)  # what get says
    # Pinning it again renews the pin rather than doing nothing: the reply, get and the
    # next lookup then agree it is current.
    events = run(state, h.decide_pin(state, version=1, by="ops", at=later, rules=RULES))
    assert [type(e) for e in events] == [ev.Pinned]
    assert h.decide_lookup(state, now=later, rules=RULES) == []
    shown = views.summary(h.as_of(state, now=later, rules=RULES))
    assert (shown.status, shown.version, shown.pinned_version) == ("active", 1, 1)
    # Pinned again while fresh, nothing is recorded.
    assert h.decide_pin(state, version=1, by="ops", at=later, rules=RULES) == []
    # A version superseded as stale at lookup can be pinned back the same way.
    fresh = h.new("t")
    compiled(fresh, "r1")
    run(fresh, h.decide_lookup(fresh, now=later, rules=RULES))
    assert h.current(fresh) is None
    run(fresh, h.decide_pin(fresh, version=1, by="ops", at=later, rules=RULES))
    assert h.decide_lookup(fresh, now=later + timedelta(days=29), rules=RULES) == []


def test_invalidate_needs_an_active_executor() -> None:
    state = h.new("t")
    with pytest.raises(h.HealthError) as caught:
        decide_invalidate(state, reason="x", by="ops", at=T0)
    assert caught.value.code == "not_found"
    compiled(state, "r1")
    run(state, decide_invalidate(state, reason="x", by="ops", at=T0))
    assert h.status(state) == "invalidated"
    with pytest.raises(h.HealthError) as caught:
        decide_invalidate(state, reason="again", by="ops", at=T0)
    assert caught.value.code == "conflict"


def test_an_invalidation_naming_a_replaced_version_leaves_the_current_one_alone() -> None:
    # The operator judged v1 ("site redesign"); a fallback run compiled v2 from the new
    # site, and a replay verified it, before the command arrived. The fresh v2 must not
    # take v1's invalidation.
    state = h.new("t")
    compiled(state, "r1")
    compiled(state, "r2")
    verified(state, "x1", 2)
    before = msgspec.to_builtins(state)
    with pytest.raises(h.HealthError) as caught:
        decide_invalidate(state, version=1, reason="site redesign", by="alice", at=T0)
    assert (caught.value.code, caught.value.field) == ("conflict", "version")
    assert "v1 is superseded" in caught.value.message
    assert "the current version is v2" in caught.value.message
    assert caught.value.details == {"current_version": 2}
    with pytest.raises(h.HealthError) as caught:
        decide_invalidate(state, version=3, reason="site redesign", by="alice", at=T0)
    assert (caught.value.code, caught.value.field) == ("not_found", "version")
    assert msgspec.to_builtins(state) == before  # nothing decided
    events = run(state, decide_invalidate(state, version=2, reason="bad", by="bob", at=T0))
    assert events == [ev.Invalidated(at=T0, version=2, reason="bad", by="bob")]
    # Already invalidated: refused the same way, and no version is current any more.
    with pytest.raises(h.HealthError) as caught:
        decide_invalidate(state, version=2, reason="again", by="bob", at=T0)
    assert (caught.value.code, caught.value.field) == ("conflict", "version")
    assert "v2 is invalidated" in caught.value.message and "no version is current" in (
        caught.value.message
    )
    assert caught.value.details == {"current_version": None}


def test_an_invalidation_may_name_either_active_version_beside_a_pin() -> None:
    # A pin keeps a newer version active, waiting for the pin to go: named, it is
    # invalidated (it never takes over) and the pinned one stays current.
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    compiled(state, "r2")
    events = run(state, decide_invalidate(state, version=2, reason="x", by="ops", at=T0))
    assert events == [ev.Invalidated(at=T0, version=2, reason="x", by="ops")]
    current = h.current(state)
    assert current is not None and current.version == 1 and state.pinned == 1
    run(state, h.decide_pin(state, version=None, by="ops", at=T0))
    current = h.current(state)
    assert current is not None and current.version == 1
    # Named, the pinned version goes as it does unnamed: unpinned, the waiting one current.
    state = h.new("t")
    compiled(state, "r1")
    compiled(state, "r2")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    events = run(state, decide_invalidate(state, version=1, reason="x", by="ops", at=T0))
    assert [type(e) for e in events] == [ev.Invalidated, ev.Unpinned]
    current = h.current(state)
    assert current is not None and current.version == 2 and state.pinned is None


def test_full_run_cost_is_the_mean_of_recent_full_runs() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert h.mean_full_run_cost(state) == pytest.approx(TRACE.cost_usd)  # no full run seen yet
    for i, cost in enumerate([0.02, 0.04, 0.06]):
        run(state, h.decide_full_run(state, run_id=f"f{i}", cost_usd=cost, at=T0))
    assert h.mean_full_run_cost(state) == pytest.approx(0.04)
    for i in range(20):
        run(state, h.decide_full_run(state, run_id=f"g{i}", cost_usd=0.10, at=T0))
    assert h.mean_full_run_cost(state) == pytest.approx(0.10)  # only the recent ones count


@pytest.mark.parametrize("saved", [0.0, 0.039, -0.002])
def test_a_replay_saving_is_recorded_as_the_run_reported_it(saved: float) -> None:
    """Zero and negative savings included: health never recomputes the run's figure,
    so the run event and total_cost_saved_usd agree."""
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_full_run(state, run_id="f1", cost_usd=0.04, at=T0))
    events = h.decide_replay(
        state,
        run_id="x1",
        version=1,
        ok=True,
        at=T0,
        rules=RULES,
        cost_usd=0.001,
        cost_saved_usd=saved,
    )
    run(state, events)
    assert [e.cost_saved_usd for e in events] == [saved]  # type: ignore[union-attr]
    assert views.summary(state).total_cost_saved_usd == saved
    assert views.version_views(state)[0].cost_saved_usd == saved


def test_skips_are_recorded_and_explain_a_missing_executor() -> None:
    state = h.new("t")
    events = run(state, h.decide_trace(state, None, "one-time task", "r1", T0))
    assert events == [ev.Skipped(at=T0, run_id="r1", reason="one-time task")]
    summary = views.summary(state)
    assert summary.status == "none" and summary.status_reason == "skipped: one-time task"
    wire = views.to_wire("t", events[0])
    assert wire is not None and (wire.event, wire.reason) == ("skipped", "one-time task")


def test_every_published_event_names_itself() -> None:
    state = h.new("t")
    events = compiled(state, "r1") + compiled(state, "r2") + verified(state, "x1", 2)
    wires = [views.to_wire("t", e) for e in events]
    assert [(w.event, w.version, w.candidate) for w in wires] == [
        ("compiled", 1, False),
        ("compiled", 2, True),
        ("replay_succeeded", 2, False),
        ("promoted", 2, False),
        ("superseded", 1, False),
    ]
    assert wires[0] is not None and wires[0].executor is not None
    assert (wires[3].run_id, wires[4].reason) == ("x1", "replaced by verified v2")
    # Published too: it moves full_run_cost_usd, which runners cache with the lookup.
    wire = views.to_wire("t", ev.FullRunRecorded(at=T0, run_id="f", cost_usd=1.0))
    assert wire is not None and (wire.event, wire.run_id, wire.cost_usd) == (
        "full_run_recorded",
        "f",
        1.0,
    )


def test_every_field_of_every_health_event_has_a_place_on_the_wire() -> None:
    # to_wire maps fields by name: one the contract lacks would fail in the relay's
    # convert, and the event would never be published.
    wire_fields = set(ExecutorEvent.__struct_fields__)
    kinds = typing.get_args(ev.HealthEvent)
    assert len(kinds) == 11
    for kind in kinds:
        for name in kind.__struct_fields__:
            assert views.WIRE_NAMES.get(name, name) in wire_fields, (kind.__name__, name)


def test_each_kind_of_health_event_goes_out_as_it_always_did() -> None:
    raw = msgspec.to_builtins(msgspec.structs.replace(executor(), version=1))
    at = T0
    cases: list[tuple[ev.HealthEvent, ExecutorEvent]] = [
        (
            ev.Compiled(at=at, version=1, executor=raw, source_run_id="r1", source_cost_usd=0.04),
            ExecutorEvent(
                task_id="t",
                event="compiled",
                at=at,
                version=1,
                run_id="r1",
                executor=h.decode_executor(raw),
                cost_usd=0.04,
            ),
        ),
        (
            ev.Compiled(at=at, version=2, executor={"steps": 3}, source_run_id="r2"),
            ExecutorEvent(
                task_id="t", event="compiled", at=at, version=2, run_id="r2", cost_usd=0.0
            ),
        ),
        (
            ev.Skipped(at=at, run_id="r3", reason="one-time task"),
            ExecutorEvent(task_id="t", event="skipped", at=at, run_id="r3", reason="one-time task"),
        ),
        (
            ev.ReplaySucceeded(
                at=at,
                version=1,
                run_id="r4",
                attempt=2,
                tokens=7,
                cost_usd=0.001,
                cost_saved_usd=-0.002,
            ),
            ExecutorEvent(
                task_id="t",
                event="replay_succeeded",
                at=at,
                version=1,
                run_id="r4",
                attempt=2,
                tokens=7,
                cost_usd=0.001,
                cost_saved_usd=-0.002,
            ),
        ),
        (
            ev.ReplayFailed(
                at=at,
                version=1,
                run_id="r5",
                attempt=1,
                step=3,
                reason="no match",
                tokens=5,
                cost_usd=0.002,
            ),
            ExecutorEvent(
                task_id="t",
                event="replay_failed",
                at=at,
                version=1,
                run_id="r5",
                attempt=1,
                step=3,
                reason="no match",
                tokens=5,
                cost_usd=0.002,
            ),
        ),
        (
            ev.Superseded(at=at, version=1, reason="replaced by v2"),
            ExecutorEvent(
                task_id="t", event="superseded", at=at, version=1, reason="replaced by v2"
            ),
        ),
        (
            ev.Invalidated(at=at, version=2, reason="wrong page", by="ops"),
            ExecutorEvent(
                task_id="t", event="invalidated", at=at, version=2, reason="wrong page", by="ops"
            ),
        ),
        (
            ev.Pinned(at=at, version=1, by="ops"),
            ExecutorEvent(task_id="t", event="pinned", at=at, version=1, by="ops"),
        ),
        (
            ev.Unpinned(at=at, version=1, reason="by ops"),
            ExecutorEvent(task_id="t", event="unpinned", at=at, version=1, reason="by ops"),
        ),
        (
            ev.FullRunRecorded(at=at, run_id="f", cost_usd=1.0),
            ExecutorEvent(task_id="t", event="full_run_recorded", at=at, run_id="f", cost_usd=1.0),
        ),
        (
            ev.Promoted(at=at, version=2, run_id="r6"),
            ExecutorEvent(task_id="t", event="promoted", at=at, version=2, run_id="r6"),
        ),
        (
            ev.Restored(at=at, version=1, reason="v2 failed verification"),
            ExecutorEvent(
                task_id="t", event="restored", at=at, version=1, reason="v2 failed verification"
            ),
        ),
    ]
    assert {type(event) for event, _ in cases} == set(typing.get_args(ev.HealthEvent))
    for event, wire in cases:
        assert views.to_wire("t", event) == wire
