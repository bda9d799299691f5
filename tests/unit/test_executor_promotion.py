"""Gated promotion (services/compiler/promotion.py) as pure rules over events: a version
compiled after a fallback is a candidate, promoted once a replay verifies it, and rolled
back when one is found wrong. No database."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.executors import Executor
from contracts.runs import Verification, VerificationStatus
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
FAIL = "FAIL: the page shows last week's prices"


@cache  # compiled once: the hypothesis test compiles many times per example
def executor(fingerprint: str | None = "task-a") -> Executor:
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    return msgspec.structs.replace(result, task_fingerprint=fingerprint)


def run(state: h.Health, events: list[ev.HealthEvent]) -> list[ev.HealthEvent]:
    for event in events:
        h.apply(state, event)
    return events


def compiled(state: h.Health, run_id: str, fingerprint: str = "task-a") -> list[ev.HealthEvent]:
    return run(state, h.decide_trace(state, executor(fingerprint), None, run_id, T0))


def replayed(
    state: h.Health, run_id: str, version: int, status: VerificationStatus | None, ok: bool = True
) -> list[ev.HealthEvent]:
    """A replay of `version` whose check said `status` (None: no check reported): a
    wrong answer fails the replay, as the runner does."""
    check = None
    if status is not None:
        reasons = [FAIL] if status == "wrong" else ["PASS: it is"]
        check = Verification(status=status, why="new_version", reasons=reasons)
    ok = ok and status != "wrong"
    reason = None if ok else "verification: failed"
    return replay(state, run_id, version, ok, reason=reason, verification=check)


def statuses(state: h.Health) -> list[tuple[int, str, bool]]:
    return [(v.version, v.status, v.candidate) for v in state.versions]


def current(state: h.Health) -> int | None:
    found = h.current(state)
    return found.version if found is not None else None


def candidate_beside_v1() -> h.Health:
    """v1 trusted (replayed), then a fallback run's trace compiled v2."""
    state = h.new("t")
    compiled(state, "r1")
    replayed(state, "v1-check", 1, "verified")
    compiled(state, "r2")
    return state


def test_the_first_version_of_a_task_is_no_candidate() -> None:
    state = h.new("t")
    (event,) = compiled(state, "r1")
    assert isinstance(event, ev.Compiled) and not event.candidate
    assert statuses(state) == [(1, "active", False)]
    # Nor one compiled when no version is current (the last was superseded).
    run(state, decide_invalidate(state, reason="wrong", by="ops", at=T0))
    (event,) = compiled(state, "r2")
    assert isinstance(event, ev.Compiled) and not event.candidate


def test_a_version_compiled_after_a_fallback_is_a_candidate_beside_its_predecessor() -> None:
    state = candidate_beside_v1()
    assert state.versions[1].candidate
    assert statuses(state) == [(1, "active", False), (2, "active", True)]
    assert current(state) == 2  # the candidate serves runs
    summary = views.summary(state)
    assert (summary.version, summary.candidate, summary.status) == (2, True, "active")
    assert [(v.version, v.candidate) for v in views.version_views(state)] == [(1, False), (2, True)]


def test_a_verified_replay_promotes_the_candidate_and_retires_its_predecessor() -> None:
    state = candidate_beside_v1()
    events = replayed(state, "x1", 2, "verified")
    assert [type(e) for e in events] == [ev.ReplaySucceeded, ev.Promoted, ev.Superseded]
    assert events[1:] == [
        ev.Promoted(at=T0, version=2, run_id="x1"),
        ev.Superseded(at=T0, version=1, reason="replaced by verified v2"),
    ]
    assert statuses(state) == [(1, "superseded", False), (2, "active", False)]
    assert not views.summary(state).candidate
    # Trusted now: a later verified replay changes nothing more.
    assert [type(e) for e in replayed(state, "x2", 2, "verified")] == [ev.ReplaySucceeded]


def test_a_wrong_answer_supersedes_the_candidate_and_restores_its_predecessor() -> None:
    state = candidate_beside_v1()
    events = replayed(state, "x1", 2, "wrong")
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded, ev.Restored]
    assert events[1:] == [
        ev.Superseded(at=T0, version=2, reason=f"failed verification: {FAIL}"),
        ev.Restored(at=T0, version=1, reason="v2 failed verification"),
    ]
    assert current(state) == 1
    assert statuses(state) == [(1, "active", True), (2, "superseded", True)]
    summary = views.summary(state)
    assert (summary.version, summary.candidate) == (1, True)
    shown = views.version_views(state)
    assert shown[0].status_reason == "restored as a candidate: v2 failed verification"
    assert [v.candidate for v in shown] == [True, False]  # a version gone is no candidate
    # Verified on the page as it is now, it is trusted again.
    events = replayed(state, "x2", 1, "verified")
    assert [type(e) for e in events] == [ev.ReplaySucceeded, ev.Promoted]
    assert statuses(state) == [(1, "active", False), (2, "superseded", True)]
    assert views.version_views(state)[0].status_reason is None


def test_a_restored_version_found_wrong_goes_too_leaving_no_version() -> None:
    state = candidate_beside_v1()
    replayed(state, "x1", 2, "wrong")
    events = replayed(state, "x2", 1, "wrong")
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded]
    assert events[1] == ev.Superseded(at=T0, version=1, reason=f"failed verification: {FAIL}")
    assert current(state) is None and h.status(state) == "superseded"
    # The next run is a full one; its trace compiles a version with nothing before it.
    (event,) = compiled(state, "r3")
    assert isinstance(event, ev.Compiled) and not event.candidate and current(state) == 3


def test_replays_neither_verified_nor_wrong_leave_a_candidate_a_candidate() -> None:
    state = candidate_beside_v1()
    unjudged: list[VerificationStatus | None] = ["skipped", "unverified", None]
    for i, status in enumerate(unjudged):
        events = replayed(state, f"x{i}", 2, status)
        assert [type(e) for e in events] == [ev.ReplaySucceeded], status
    # A replay that failed at a step says nothing of the answer either.
    assert [type(e) for e in replayed(state, "x3", 2, None, ok=False)] == [ev.ReplayFailed]
    assert statuses(state) == [(1, "active", False), (2, "active", True)]


def test_three_failures_retire_a_candidate_and_restore_its_predecessor() -> None:
    state = candidate_beside_v1()
    for i in range(2):
        replayed(state, f"x{i}", 2, "skipped", ok=False)
    events = replayed(state, "x2", 2, "skipped", ok=False)
    assert [type(e) for e in events] == [ev.ReplayFailed, ev.Superseded, ev.Restored]
    assert events[2] == ev.Restored(
        at=T0, version=1, reason="v2 superseded: 3 consecutive replay failures"
    )
    assert current(state) == 1 and state.versions[0].candidate


def test_a_trusted_versions_wrong_answer_counts_as_a_failure_as_before() -> None:
    state = h.new("t")
    compiled(state, "r1")
    assert [type(e) for e in replayed(state, "x1", 1, "wrong")] == [ev.ReplayFailed]
    assert statuses(state) == [(1, "active", False)]


def test_a_new_compilation_replaces_a_pending_candidate_and_keeps_the_standby() -> None:
    state = candidate_beside_v1()
    events = compiled(state, "r3")
    assert [type(e) for e in events] == [ev.Compiled, ev.Superseded]
    assert events[1] == ev.Superseded(at=T0, version=2, reason="replaced by v3")
    assert statuses(state) == [(1, "active", False), (2, "superseded", True), (3, "active", True)]
    # A restored version is what a new compilation keeps beside it: nothing else is left.
    replayed(state, "x1", 3, "wrong")
    assert current(state) == 1
    assert [type(e) for e in compiled(state, "r4")] == [ev.Compiled]
    assert statuses(state)[0] == (1, "active", True) and current(state) == 4
    replayed(state, "x2", 4, "wrong")  # v1 comes back, a candidate still
    assert current(state) == 1 and state.versions[0].candidate


def test_a_compilation_for_an_edited_task_is_no_candidate() -> None:
    # The old version cannot answer the edited task: nothing to roll back to.
    state = h.new("t")
    compiled(state, "r1")
    events = compiled(state, "r2", fingerprint="task-b")
    assert [type(e) for e in events] == [ev.Compiled, ev.Superseded]
    assert isinstance(events[0], ev.Compiled) and not events[0].candidate
    assert statuses(state) == [(1, "superseded", False), (2, "active", False)]
    # Nor beside a candidate: both versions were compiled for the task as it was.
    state = candidate_beside_v1()
    events = compiled(state, "r3", fingerprint="task-b")
    assert [type(e) for e in events] == [ev.Compiled, ev.Superseded, ev.Superseded]
    assert statuses(state)[2] == (3, "active", False)


def test_pins_work_as_before_and_a_candidate_behind_one_waits_for_it() -> None:
    state = h.new("t")
    compiled(state, "r1")
    run(state, h.decide_pin(state, version=1, by="ops", at=T0))
    assert [type(e) for e in compiled(state, "r2")] == [ev.Compiled]
    assert current(state) == 1 and statuses(state)[1] == (2, "active", True)
    # The pin's failures are its own: nothing is promoted or restored.
    assert [type(e) for e in replayed(state, "x1", 1, "wrong")] == [ev.ReplayFailed]
    events = run(state, h.decide_pin(state, version=None, by="ops", at=T0))
    assert [type(e) for e in events] == [ev.Unpinned, ev.Superseded]
    # The pin gone, the candidate is current, and still a candidate (with no standby:
    # unpinning retired the old pin, as it always has).
    assert current(state) == 2 and views.summary(state).candidate
    assert [type(e) for e in replayed(state, "x2", 2, "wrong")] == [ev.ReplayFailed, ev.Superseded]
    assert current(state) is None


def test_pinning_a_candidate_vouches_for_it() -> None:
    state = candidate_beside_v1()
    events = run(state, h.decide_pin(state, version=2, by="ops", at=T0))
    assert [type(e) for e in events] == [ev.Pinned, ev.Superseded]
    assert statuses(state) == [(1, "superseded", False), (2, "active", False)]
    # Pinning the standby instead keeps the candidate waiting behind the pin.
    state = candidate_beside_v1()
    assert [type(e) for e in run(state, h.decide_pin(state, version=1, by="ops", at=T0))] == [
        ev.Pinned
    ]
    assert current(state) == 1 and statuses(state)[1] == (2, "active", True)


def test_an_operator_may_invalidate_the_standby_or_the_candidate() -> None:
    state = candidate_beside_v1()
    events = run(state, decide_invalidate(state, version=1, reason="x", by="ops", at=T0))
    assert events == [ev.Invalidated(at=T0, version=1, reason="x", by="ops")]
    assert current(state) == 2 and statuses(state)[1] == (2, "active", True)
    # Invalidating the candidate brings its standby back, to be verified again.
    state = candidate_beside_v1()
    events = run(state, decide_invalidate(state, reason="wrong page", by="ops", at=T0))
    assert events[1] == ev.Restored(at=T0, version=1, reason="v2 invalidated: wrong page")
    assert current(state) == 1 and state.versions[0].candidate


def test_a_stale_candidate_and_its_standby_go_at_lookup() -> None:
    state = candidate_beside_v1()
    later = T0 + timedelta(days=31)
    events = run(state, h.decide_lookup(state, now=later, rules=RULES))
    assert [(type(e), e.version) for e in events] == [  # type: ignore[union-attr]
        (ev.Superseded, 2),
        (ev.Restored, 1),
        (ev.Superseded, 1),
    ]
    assert current(state) is None


@settings(deadline=None)  # a shared machine's load is not this test's failure
@given(
    st.lists(
        st.one_of(
            st.just("compile"),
            st.sampled_from(["verified", "wrong", "skipped", "failed"]),
            st.just("pin"),
            st.just("unpin"),
        ),
        max_size=25,
    )
)
def test_at_most_one_version_stands_by_and_the_state_is_its_events(steps: list[str]) -> None:
    state = h.new("t")
    log: list[ev.HealthEvent] = []
    for i, step in enumerate(steps):
        now = h.current(state)
        if step == "compile":
            log += compiled(state, f"r{i}")
        elif step == "pin" and now is not None:
            log += run(state, h.decide_pin(state, version=now.version, by="ops", at=T0))
        elif step == "unpin" and state.versions:
            log += run(state, h.decide_pin(state, version=None, by="ops", at=T0))
        elif step in ("verified", "wrong", "skipped") and now is not None:
            log += replayed(state, f"x{i}", now.version, step)  # type: ignore[arg-type]
        elif step == "failed" and now is not None:
            log += replayed(state, f"x{i}", now.version, None, ok=False)
        active = [v for v in state.versions if v.status == "active"]
        unpinned = [v for v in active if v.version != state.pinned]
        assert len(unpinned) <= 2, statuses(state)
        if len(unpinned) == 2:  # a candidate, and the version it would roll back to
            assert unpinned[1].candidate, statuses(state)
        assert all(not v.candidate for v in active if v.version == state.pinned)
    assert state == h.fold("t", log)
