"""What the checks of replayed answers add to executor health: the verification kept on
replay events, the tallies folded from them, and the published rates (no database)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.executors import Executor
from contracts.runs import Verification
from contracts.traces import Trace
from services.compiler import executor_events as ev
from services.compiler import health as h
from services.compiler import trust, views
from services.compiler.compile import compile
from tests.executor_events import T0, replay

TRACE = msgspec.json.decode(
    (Path(__file__).parent.parent / "data" / "traces" / "news_top3.json").read_bytes(), type=Trace
)
FINGERPRINT = "step 1: the page's columns changed: price -> was"
FAIL = "FAIL: the page lists the old price, not the new one"

# The checks the runner makes (services/runner/verification.py), by what they found.
DRIFT_WRONG = Verification(
    status="wrong",
    flagged=True,
    why="flagged",
    method="small_model",
    reasons=[FINGERPRINT, FAIL],
    cost_usd=0.0004,
)
DRIFT_CLEARED = Verification(
    status="verified", flagged=True, why="flagged", method="small_model", reasons=["PASS: ok"]
)
DRIFT_UNCHECKED = Verification(
    status="unverified",
    flagged=True,
    why="flagged",
    reasons=[FINGERPRINT, "the check could not be made: llm down"],
)
SAMPLE_OK = Verification(status="verified", why="sampled", method="small_model", reasons=["PASS"])
SAMPLE_WRONG = Verification(status="wrong", why="sampled", method="small_model", reasons=[FAIL])
NEW_OK = Verification(status="verified", why="new_version", method="small_model")
UNCHECKED = Verification(status="skipped")


def compiled(state: h.Health, run_id: str = "r1") -> None:
    result = compile(TRACE.task, TRACE)
    assert isinstance(result, Executor)
    for event in h.decide_trace(state, result, None, run_id, T0):
        h.apply(state, event)


def replayed(
    state: h.Health, run_id: str, verification: Verification | None, version: int = 1
) -> list[ev.HealthEvent]:
    """A replay whose answer the check judged: one found wrong failed (the runner's rule)."""
    ok = verification is None or verification.status != "wrong"
    reason = None if ok else f"verification: {verification.reasons[-1]}"  # type: ignore[union-attr]
    return replay(state, run_id, version, ok, reason=reason, verification=verification)


def full_run(state: h.Health, run_id: str) -> None:
    for event in h.decide_full_run(state, run_id=run_id, cost_usd=0.04, at=T0):
        h.apply(state, event)


# --- the Wilson interval ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        # Published values (e.g. Newcombe 1998, Table I; Wilson 1927), to 4 places.
        (0, 10, 0.0, 0.2775),
        (1, 10, 0.0179, 0.4042),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),
        (0, 100, 0.0, 0.0370),
    ],
)
def test_the_wilson_interval_has_its_known_values(
    successes: int, trials: int, low: float, high: float
) -> None:
    assert trust.wilson_interval(successes, trials) == pytest.approx((low, high), abs=5e-5)


def test_the_wilson_interval_of_nothing_seen_is_everything() -> None:
    assert trust.wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        trust.wilson_interval(3, 2)


@given(
    st.integers(min_value=1, max_value=10_000).flatmap(
        lambda n: st.tuples(st.integers(0, n), st.just(n))
    )
)
def test_the_wilson_interval_holds_the_share_seen(seen: tuple[int, int]) -> None:
    successes, trials = seen
    low, high = trust.wilson_interval(successes, trials)
    assert 0.0 <= low <= successes / trials <= high <= 1.0
    # A wider z gives a wider interval.
    wide_low, wide_high = trust.wilson_interval(successes, trials, z=2.58)
    assert wide_low <= low and high <= wide_high


# --- the tallies ------------------------------------------------------------------------


def tally_of(*checks: Verification | None) -> trust.Tally:
    tally = trust.Tally()
    for check in checks:
        trust.count(tally, ev.replay_check(check))
    return tally


def test_a_flagged_wrong_replay_is_a_confirmed_alarm_and_a_disagreement() -> None:
    assert tally_of(DRIFT_WRONG) == trust.Tally(
        checked=1, wrong=1, drift_alarms=1, drift_confirmed=1
    )


def test_a_sampled_verified_replay_is_an_unflagged_check() -> None:
    assert tally_of(SAMPLE_OK) == trust.Tally(checked=1, unflagged_checked=1)
    assert tally_of(NEW_OK) == trust.Tally(checked=1, unflagged_checked=1)


def test_a_sampled_wrong_replay_is_silent_drift() -> None:
    assert tally_of(SAMPLE_WRONG) == trust.Tally(
        checked=1, wrong=1, unflagged_checked=1, unflagged_wrong=1
    )


def test_an_alarm_no_check_could_clear_is_unverified_and_judges_nothing() -> None:
    assert tally_of(DRIFT_UNCHECKED) == trust.Tally(drift_alarms=1, unverified=1)
    assert tally_of(DRIFT_CLEARED) == trust.Tally(checked=1, drift_alarms=1)


def test_an_unchecked_replay_and_one_from_before_checks_count_nothing() -> None:
    assert tally_of(UNCHECKED, None) == trust.Tally()


# --- decide and apply -------------------------------------------------------------------


def test_a_replay_event_keeps_the_check_without_its_cost() -> None:
    state = h.new("t")
    compiled(state)
    events = replayed(state, "x1", DRIFT_WRONG)
    assert [type(e) for e in events] == [ev.ReplayFailed]
    failed = events[0]
    assert isinstance(failed, ev.ReplayFailed)
    assert failed.reason == f"verification: {FAIL}"
    assert failed.verification == ev.ReplayCheck(
        status="wrong",
        flagged=True,
        why="flagged",
        method="small_model",
        reasons=[FINGERPRINT, FAIL],
    )
    ok = replayed(state, "x2", SAMPLE_OK)[0]
    assert isinstance(ok, ev.ReplaySucceeded) and ok.verification is not None
    assert ok.verification.why == "sampled"


def test_a_checks_reasons_are_bounded() -> None:
    long = Verification(status="wrong", reasons=["x" * 5000] * 50)
    check = ev.replay_check(long)
    assert check is not None and len(check.reasons) == ev.MAX_CHECK_REASONS
    assert {len(r) for r in check.reasons} == {1000}


def test_checks_are_tallied_per_version_and_per_task() -> None:
    state = h.new("t")
    compiled(state, "r1")
    replayed(state, "a1", NEW_OK)
    replayed(state, "a2", DRIFT_WRONG)
    compiled(state, "r2")
    replayed(state, "b1", SAMPLE_WRONG, version=2)
    replayed(state, "b2", UNCHECKED, version=2)
    replayed(state, "b3", DRIFT_UNCHECKED, version=2)
    assert state.versions[0].trust == trust.Tally(
        checked=2, wrong=1, drift_alarms=1, drift_confirmed=1, unflagged_checked=1
    )
    assert state.versions[1].trust == trust.Tally(
        checked=1, wrong=1, drift_alarms=1, unflagged_checked=1, unflagged_wrong=1, unverified=1
    )
    assert state.trust == trust.total([v.trust for v in state.versions])
    # A redelivered outcome counts once, its check too.
    assert replayed(state, "b1", SAMPLE_WRONG, version=2) == []
    assert state.trust.checked == 3


def test_old_replay_events_without_a_verification_decode_and_count_nothing() -> None:
    # As recorded before replays were checked: no `verification` field.
    old = [
        b'{"kind":"replay_succeeded","at":"2025-01-02T00:00:00Z","version":1,"run_id":"x1",'
        b'"tokens":3,"cost_usd":0.001,"cost_saved_usd":0.04}',
        b'{"kind":"replay_failed","at":"2025-01-02T00:00:00Z","version":1,"run_id":"x2",'
        b'"step":1,"reason":"selector vanished"}',
    ]
    state = h.new("t")
    compiled(state)
    for raw in old:
        event = msgspec.json.decode(raw, type=ev.HealthEvent)
        assert isinstance(event, ev.ReplaySucceeded | ev.ReplayFailed)
        assert event.verification is None
        h.apply(state, event)
        assert views.to_wire("t", event).verification is None
    assert state.replays == 2 and state.trust == state.versions[0].trust == trust.Tally()
    summary = views.summary(state)
    assert (summary.checked, summary.false_success_rate, summary.false_success_upper) == (
        0,
        None,
        None,
    )
    # A snapshot written before the tallies existed reads as none counted.
    snapshot = msgspec.json.encode(state)
    stripped = msgspec.json.decode(snapshot)
    del stripped["trust"], stripped["full_runs"]
    for version in stripped["versions"]:
        del version["trust"]
    assert msgspec.convert(stripped, h.Health).trust == trust.Tally()


# --- what the queries publish -----------------------------------------------------------


def test_the_published_rates() -> None:
    state = h.new("t")
    compiled(state)
    full_run(state, "f1")  # the run the executor was compiled from, say
    replayed(state, "a1", NEW_OK)
    replayed(state, "a2", NEW_OK)
    for i in range(17):
        replayed(state, f"s{i}", UNCHECKED)
    replayed(state, "s17", SAMPLE_WRONG)  # failed: it fell back to a full run
    full_run(state, "s17")
    replayed(state, "d1", DRIFT_WRONG)
    full_run(state, "d1")
    summary = views.summary(state)
    assert (summary.replays, summary.replay_failures, summary.full_runs) == (21, 2, 3)
    assert (summary.checked, summary.wrong, summary.unverified) == (4, 2, 0)
    assert (summary.drift_alarms, summary.drift_confirmed) == (1, 1)
    assert (summary.unflagged_checked, summary.unflagged_wrong) == (3, 1)
    # 19 of the 22 runs were answered by a replay: the failed ones ran in full, once each.
    assert summary.hit_rate == round(19 / 22, 6)
    assert summary.false_success_rate == round(1 / 3, 6)
    assert summary.false_success_upper == round(trust.wilson_interval(1, 3)[1], 6)
    (version,) = views.version_views(state)
    assert (version.checked, version.unflagged_wrong) == (4, 1)
    assert version.hit_rate == round(19 / 21, 6)  # its replays that answered
    assert version.false_success_rate == summary.false_success_rate


def test_no_runs_no_rates() -> None:
    state = h.new("t")
    compiled(state)
    summary = views.summary(state)
    assert summary.hit_rate is summary.false_success_rate is summary.false_success_upper is None
    assert views.version_views(state)[0].hit_rate is None
    full_run(state, "f1")
    assert views.summary(state).hit_rate == 0.0


def test_a_clean_record_still_has_an_upper_bound() -> None:
    state = h.new("t")
    compiled(state)
    for i in range(10):
        replayed(state, f"s{i}", SAMPLE_OK)
    summary = views.summary(state)
    assert summary.false_success_rate == 0.0
    assert summary.false_success_upper == pytest.approx(1.96**2 / (10 + 1.96**2), abs=1e-6)


def test_the_savings_ledger_sums_every_task() -> None:
    first, second, never = h.new("a"), h.new("b"), h.new("c")
    compiled(first)
    replayed(first, "a1", SAMPLE_OK)
    replayed(first, "a2", DRIFT_WRONG)
    full_run(first, "a2")
    compiled(second)
    replayed(second, "b1", SAMPLE_WRONG)
    full_run(second, "b1")
    full_run(never, "c1")  # a task never compiled: its runs are full runs all the same
    stats = views.savings([first, second, never])
    assert (stats.executors, stats.replays, stats.replay_failures, stats.full_runs) == (2, 3, 2, 3)
    assert (stats.checked, stats.wrong, stats.drift_alarms, stats.drift_confirmed) == (3, 2, 1, 1)
    assert (stats.unflagged_checked, stats.unflagged_wrong) == (2, 1)
    assert stats.hit_rate == round(1 / 4, 6)
    assert stats.false_success_rate == 0.5
    assert stats.false_success_upper == round(trust.wilson_interval(1, 2)[1], 6)


def test_the_history_shows_the_check_and_its_reasons() -> None:
    state = h.new("t")
    compiled(state)
    (failed,) = replayed(state, "d1", DRIFT_WRONG)
    wire = views.to_wire("t", failed)
    assert wire.event == "replay_failed" and wire.reason == f"verification: {FAIL}"
    assert wire.verification == msgspec.structs.replace(DRIFT_WRONG, cost_usd=0.0)
    history = views.history("t", state, [failed], 1, 2)
    assert history.events[0].verification is not None
    assert history.events[0].verification.reasons == [FINGERPRINT, FAIL]
    assert history.summaries[0].drift_confirmed == 1
