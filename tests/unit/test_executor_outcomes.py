"""What the compiler reads from run events: replay outcomes and full-run costs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from contracts.runs import ModelTokens, ReplayOutcome, RunEvent, Verification
from services.compiler.outcomes import replay_report
from services.executor.cost import full_run_cost

AT = datetime(2025, 6, 1, tzinfo=UTC)


def event(name: str, **kw: Any) -> RunEvent:
    return RunEvent(task_id="t", run_id="r", event=name, at=AT, status="completed", **kw)  # type: ignore[arg-type]


def test_a_replayed_run_reports_its_outcome_and_saving() -> None:
    tokens = {"haiku": ModelTokens(input_tokens=100, output_tokens=10, cache_read_tokens=5)}
    run = event(
        "completed",
        source="executor",
        cost_usd=0.001,
        cost_saved_usd=0.05,
        replay=ReplayOutcome(version=2, ok=True, tokens=tokens, cost_usd=0.001),
    )
    report = replay_report(run)
    assert report is not None
    assert (report.version, report.ok, report.tokens, report.cost_saved_usd) == (2, True, 115, 0.05)
    assert report.attempt == 1
    assert full_run_cost(run) is None  # a replay is not a full run


def test_a_fallback_counts_a_failure_and_a_full_run_without_the_replay_part() -> None:
    failed = ReplayOutcome(version=1, ok=False, step=3, reason="selector vanished", cost_usd=0.002)
    run = event("completed", source="full_llm", fell_back=True, cost_usd=0.052, replay=failed)
    report = replay_report(run)
    assert report is not None and (report.ok, report.step, report.reason) == (
        False,
        3,
        "selector vanished",
    )
    assert report.cost_saved_usd == 0.0
    assert full_run_cost(run) == 0.05


def test_a_replay_reports_its_runs_attempt_and_a_negative_saving_as_is() -> None:
    run = event(
        "completed",
        source="executor",
        attempt=2,
        cost_usd=0.06,
        cost_saved_usd=-0.01,
        replay=ReplayOutcome(version=1, ok=True, cost_usd=0.06),
    )
    report = replay_report(run)
    assert report is not None and (report.attempt, report.cost_saved_usd) == (2, -0.01)


def test_a_replay_reports_the_check_of_its_answer() -> None:
    check = Verification(
        status="wrong", flagged=True, why="flagged", method="small_model", reasons=["FAIL: no"]
    )
    replay = ReplayOutcome(version=1, ok=False, step=3, reason="verification: FAIL: no")
    run = event("completed", source="full_llm", replay=replay)
    report = replay_report(run)
    assert report is not None and report.verification is None  # an older runner's
    checked = msgspec.structs.replace(replay, verification=check)
    report = replay_report(event("completed", source="full_llm", replay=checked))
    assert report is not None and report.verification == check


def test_other_events_say_nothing() -> None:
    assert replay_report(event("completed", source="full_llm", cost_usd=0.04)) is None
    assert full_run_cost(event("completed", source="full_llm", cost_usd=0.04)) == 0.04
    assert full_run_cost(event("failed", source="full_llm", cost_usd=0.04)) is None


def test_a_replay_failed_by_an_outage_is_not_reported_to_health() -> None:
    down = ReplayOutcome(version=1, ok=False, step=0, reason="unavailable", infrastructure=True)
    run = event("completed", source="full_llm", fell_back=True, cost_usd=0.05, replay=down)
    assert replay_report(run) is None
    assert full_run_cost(run) == 0.05  # the full run that followed still counts


def test_a_redelivered_full_runs_cost_is_its_own_loop_not_the_dead_attempts() -> None:
    """Attempt 1 died after spending $1.00; attempt 2's replay broke ($0.05) and its
    full loop cost $1.00. A full run of the task costs $1.00: replays save against that."""
    failed = ReplayOutcome(version=1, ok=False, step=1, reason="no items", cost_usd=0.05)
    run = event(
        "completed", source="full_llm", attempt=2, fell_back=True, cost_usd=2.05,
        loop_cost_usd=1.0, replay=failed,
    )  # fmt: skip
    assert full_run_cost(run) == 1.0


def test_a_run_event_from_before_loop_cost_usd_still_gives_a_full_run_cost() -> None:
    written_before = {
        "task_id": "t", "run_id": "r", "event": "completed", "at": "2025-06-01T00:00:00Z",
        "status": "completed", "source": "full_llm", "cost_usd": 0.052,
        "replay": {"version": 1, "ok": False, "cost_usd": 0.002},
    }  # fmt: skip
    run = msgspec.convert(written_before, RunEvent)
    assert run.loop_cost_usd is None
    assert full_run_cost(run) == 0.05  # cost_usd less the replay, as before


def test_an_earlier_deliverys_replay_carried_to_the_runs_end_keeps_that_deliverys_key() -> None:
    """Delivery 1 replayed, failed and died in its fallback; delivery 2 finished the full
    run. The end event carries delivery 1's replay: the same key its replay_failed event
    had, so the executor's health counts the failure once."""
    failed = ReplayOutcome(version=1, ok=False, step=0, reason="exit 1", attempt=1)
    report = replay_report(event("completed", source="full_llm", attempt=2, replay=failed))
    assert report is not None and (report.attempt, report.ok) == (1, False)
