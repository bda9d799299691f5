"""The scheduler's pure rules: condition predicates, dispatch limits, the daily budget,
recovery, max_failures, ids, the run ledger and a task's own rules. No server, no store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.base import SubjectToken
from contracts.tasks import Above, Below, Contains, IntervalTrigger, NotContains, TaskSpec
from services.kernel.codec import decode, encode
from services.kernel.ids import new_run_id
from services.kernel.ids import slug as task_id_from_name
from services.scheduler import failures, recovery
from services.scheduler.budget import DailySpend, over_budget
from services.scheduler.conditions import ConditionError, as_number, holds
from services.scheduler.dispatch import Candidate, plan
from services.scheduler.ids import run_id_for_key
from services.scheduler.ledger import RunLedger
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from services.scheduler.task_rules import outcome_of
from tests.unit.conftest import T0

DF = {
    "exit_code": 0,
    "stdout": "Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/sda1 100 91 9 91% /\n",
    "stderr": "",
}


# --- conditions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicate", "output", "expected"),
    [
        (Contains(text="In stock"), "<p>In stock</p>", True),
        (Contains(text="In stock"), "<p>Sold out</p>", False),
        (NotContains(text="error"), "all good", True),
        (NotContains(text="error"), "an error occurred", False),
        (Contains(text="/dev/sda1", path="stdout"), DF, True),
        (Above(value=90, path="stdout"), DF, False),  # the first number is 1 (1K-blocks)
        (Above(value=90, path="exit_code"), DF, False),
        (Below(value=1, path="exit_code"), DF, True),
        (Above(value=1000, path="items.0.price"), {"items": [{"price": "$1,299.00"}]}, True),
        (Below(value=1000, path="items.-1.price"), {"items": [{"price": 999.5}]}, True),
        (Above(value=80), "Use% 85%", True),
        (Below(value=0), "temperature -3.5 C", True),
        (Contains(text="ok", path="status"), '{"status": "ok"}', True),  # JSON text
    ],
)
def test_predicates(predicate: object, output: object, expected: bool) -> None:
    assert holds(predicate, output) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("predicate", "output"),
    [
        (Contains(text="x", path="missing"), {"stdout": "x"}),
        (Above(value=1, path="items.3"), {"items": [1]}),
        (Above(value=1), "no digits here"),
        (Contains(text="x", path="a.b"), {"a": "plain text"}),
    ],
)
def test_predicates_on_output_without_what_they_test_raise(
    predicate: object, output: object
) -> None:
    with pytest.raises(ConditionError):
        holds(predicate, output)  # type: ignore[arg-type]


# shell_exec of `df --output=pcent /`.
PCENT = {"exit_code": 0, "stdout": " Use%\n  91%\n", "stderr": ""}


@pytest.mark.parametrize(
    ("predicate", "output", "expected"),
    [
        # A number test without `path` reads shell_exec's stdout, not its exit_code.
        (Above(value=90), PCENT, True),
        (Below(value=10), PCENT, False),
        (Above(value=10), {"title": "Widget", "price": "€12,50"}, True),  # its one number
        (Below(value=20), [{"price": 12.5}], True),  # a list of one
        # Text tests see the text values, not escaped JSON nor the keys.
        (Contains(text='say "hi"'), {"stdout": 'say "hi"'}, True),
        (Contains(text="a\nb"), {"msg": "a\nb"}, True),
        (NotContains(text="exit_code"), PCENT, True),
        (Contains(text="91%"), PCENT, True),
        (Contains(text="200"), {"status": 200}, True),
    ],
)
def test_predicates_on_structured_output(predicate: object, output: object, expected: bool) -> None:
    assert holds(predicate, output) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "output", [{"exit_code": 0, "count": 3}, {"a": "1 item", "b": "2 items"}, [1, 2]]
)
def test_a_number_test_that_cannot_tell_which_field_asks_for_a_path(output: object) -> None:
    with pytest.raises(ConditionError, match="`path`"):
        holds(Above(value=1), output)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("$1,299.00", 1299.0),
        ("€1.299,00", 1299.0),  # both marks: the last is the decimal mark
        ("1.299.000,50", 1299000.5),
        ("1\u202f299,00 €", 1299.0),  # narrow no-break space groups
        ("1\u00a0299,00 €", 1299.0),
        ("1\u2009299", 1299.0),
        ("1 299,00 €", 1.0),  # a plain space ends the number
        ("1,299", 1299.0),  # a lone comma and three digits: grouping
        ("12,5 °C", 12.5),  # a lone comma otherwise: the decimal mark
        ("0,125", 0.125),
        ("1.299", 1.299),  # a lone point: always the decimal mark
        ("\u22125 °C", -5.0),  # U+2212 minus
        ("temperature -3.5 C", -3.5),
        ("7,1999.00", 7.0),  # groups not of three: read up to the first separator
        (".5", 0.5),
        # Scientific notation (as Python prints small and large floats) is one number.
        ("5e-05", 5e-05),
        ("ratio 2.5E-3", 0.0025),
        ("-1e3 items", -1000.0),
        ("\u22121.5e+2", -150.0),
        ("1e5abc", 1.0),  # not a number in scientific notation: a word such as a hash
        ("1,299e3", 1299.0),  # an exponent only on a plain number
    ],
)
def test_numbers_in_text(text: str, number: float) -> None:
    assert as_number(text) == pytest.approx(number)


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False).map(lambda f: round(f, 2)))
def test_a_number_written_in_text_reads_back(value: float) -> None:
    assert as_number(f"price: {value:.2f} EUR") == pytest.approx(value)


# --- dispatch --------------------------------------------------------------------------


def _due(n: int) -> list[Candidate]:
    return [Candidate(f"t{i:02d}", T0 + timedelta(seconds=n - i), "schedule") for i in range(n)]


def test_dispatch_fills_free_slots_earliest_due_first() -> None:
    decision = plan(
        _due(5), in_flight=1, max_concurrent=3, spent_today_usd=0, budget_usd=None, day=T0.date()
    )
    assert [c.task_id for c in decision.dispatch] == ["t04", "t03"]
    assert len(decision.waiting) == 3 and not decision.skip


def test_dispatch_with_no_free_slot_waits() -> None:
    decision = plan(
        _due(3), in_flight=2, max_concurrent=2, spent_today_usd=0, budget_usd=None, day=T0.date()
    )
    assert decision.dispatch == [] and len(decision.waiting) == 3


def test_over_budget_skips_every_due_run_with_the_reason() -> None:
    decision = plan(
        _due(3), in_flight=0, max_concurrent=2, spent_today_usd=1.0, budget_usd=1.0, day=T0.date()
    )
    assert decision.dispatch == [] and decision.waiting == []
    assert len(decision.skip) == 3
    assert all("daily budget reached" in reason for _, reason in decision.skip)
    assert "2025-01-06" in decision.skip[0][1]


@given(
    due=st.integers(0, 30),
    in_flight=st.integers(0, 10),
    limit=st.integers(1, 10),
)
def test_dispatch_never_exceeds_the_limit(due: int, in_flight: int, limit: int) -> None:
    decision = plan(
        _due(due),
        in_flight=in_flight,
        max_concurrent=limit,
        spent_today_usd=0,
        budget_usd=None,
        day=T0.date(),
    )
    assert in_flight + len(decision.dispatch) <= max(limit, in_flight)
    assert len(decision.dispatch) + len(decision.waiting) == due


# --- budget ----------------------------------------------------------------------------


def test_spend_is_per_utc_day_and_counts_each_run_once() -> None:
    spend = DailySpend()
    late = datetime(2025, 1, 6, 23, 59, tzinfo=UTC)
    spend.add("r1", late, 0.40)
    spend.add("r1", late, 0.40)  # the same outcome seen twice
    spend.add("r2", late.astimezone(tz=UTC) + timedelta(minutes=2), 0.25)  # next UTC day
    assert spend.spent_at(late) == pytest.approx(0.40)
    assert spend.spent_at(late + timedelta(minutes=2)) == pytest.approx(0.25)
    assert not over_budget(0.99, 1.0) and over_budget(1.0, 1.0) and not over_budget(5, None)


def test_a_future_dated_outcome_does_not_wipe_todays_spend() -> None:
    # A runner with a skewed clock reports a run two weeks ahead: today's spend (and so
    # the budget) must still hold.
    spend = DailySpend(keep_days=3)
    today = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
    spend.add("r1", today, 2.0)
    spend.add("r2", today + timedelta(days=14), 0.01)
    assert spend.spent_at(today) == pytest.approx(2.0)
    # Days older than keep_days before the reader's day are dropped once read.
    assert spend.spent_at(today + timedelta(days=4)) == 0.0
    assert spend.spent_on(today.date()) == 0.0


# --- recovery and failures --------------------------------------------------------------


def test_a_run_is_abandoned_only_after_its_deadline_and_the_grace() -> None:
    assert not recovery.is_abandoned(T0, 600, T0 + timedelta(seconds=659), grace_s=60)
    assert recovery.is_abandoned(T0, 600, T0 + timedelta(seconds=661), grace_s=60)
    assert recovery.scheduled_origin(1) == "schedule"
    assert recovery.scheduled_origin(3) == "catch_up"


def test_max_failures_rule() -> None:
    assert not failures.should_pause(2, 3)
    assert failures.should_pause(3, 3)
    reason = failures.pause_reason(3, 3, "tool_error: selector vanished")
    assert "3 failed runs in a row" in reason and "selector vanished" in reason


# --- ids -------------------------------------------------------------------------------


@given(st.text(max_size=200))
def test_task_ids_from_any_name_are_subject_tokens(name: str) -> None:
    task_id = task_id_from_name(name)
    decode(encode({"v": task_id}), dict[str, SubjectToken])


def test_ids() -> None:
    assert task_id_from_name("Check ACME price!") == "check-acme-price"
    assert task_id_from_name("  ") != task_id_from_name("!!")
    assert run_id_for_key("msg-1") == run_id_for_key("msg-1") != run_id_for_key("msg-2")
    first, second = new_run_id(T0), new_run_id(T0)
    assert first != second and first.startswith("20250106T080000-")


# --- ledger ----------------------------------------------------------------------------


def test_ledger_folds_a_run_and_lists_newest_first() -> None:
    ledger = RunLedger(keep_per_task=2)
    ledger.requested("a", "r1", "schedule", T0)
    ledger.started("a", "r1", T0 + timedelta(seconds=1))
    ledger.finished(
        "a",
        "r1",
        status="completed",
        at=T0 + timedelta(seconds=4),
        cost_usd=0.01,
        cost_saved_usd=0.2,
        source="executor",
        executor_version=3,
    )
    ledger.requested("b", "r2", "manual", T0 + timedelta(seconds=10))
    runs = ledger.list()
    assert [r.run_id for r in runs] == ["r2", "r1"]
    r1 = runs[1]
    assert (r1.status, r1.source, r1.executor_version, r1.duration_ms) == (
        "completed",
        "executor",
        3,
        3000,
    )
    assert (r1.cost_usd, r1.cost_saved_usd, r1.origin) == (0.01, 0.2, "schedule")
    # A late "started" never reopens a finished run.
    ledger.started("a", "r1", T0 + timedelta(seconds=20))
    assert ledger.list("a")[0].status == "completed"
    for i in range(3, 6):
        ledger.requested("a", f"r{i}", "schedule", T0 + timedelta(minutes=i))
    assert [r.run_id for r in ledger.list("a")] == ["r5", "r4"]  # only the newest kept
    assert len(ledger.list(limit=1)) == 1


# --- a task's rules ----------------------------------------------------------------------


def test_a_mistyped_outcome_field_is_an_error_not_ignored() -> None:
    task = Task.open(Defined(task_id="t", spec=TaskSpec(name="t", prompt="p"), at=T0))
    task.dispatch_run("r-1", "manual", T0)
    with pytest.raises(TypeError, match="eror"):
        task.finish_run("r-1", at=T0, status="failed", eror="boom")
    assert task.state.in_flight is not None  # nothing recorded
    with pytest.raises(TypeError, match="reported_by"):
        outcome_of({"status": "failed", "reported_by": "runner"})
    assert task.finish_run("r-1", at=T0, status="failed", error="boom") == "recorded"


def test_a_task_defined_again_starts_afresh_and_keeps_its_history() -> None:
    interval = TaskSpec(name="t", prompt="p", trigger=IntervalTrigger(every_s=60))
    task = Task.open(Defined(task_id="t", spec=interval, at=T0))
    slot = T0 + timedelta(minutes=1)
    task.dispatch_run("r-1", "schedule", slot, slot)
    task.finish_run("r-1", at=slot, status="failed", cost_usd=0.5)
    task.pause("by hand", slot)
    task.resume(slot)
    task.request_run("r-2", "manual", slot)
    task.delete("gone", slot)
    later = T0 + timedelta(hours=1)
    task.define_again(TaskSpec(name="t", prompt="again"), later)
    state = task.state
    assert (state.status, state.status_reason, state.spec.prompt) == ("active", None, "again")
    assert (state.created_at, state.updated_at, state.trigger_set_at) == (T0, later, later)
    assert state.resumed_at is None and state.last_fired_at is None
    assert state.last_slot is None and state.deferred_to is None and state.pending is None
    assert state.consecutive_failures == 0
    # Its history stays.
    assert (state.runs_dispatched, state.total_cost_usd) == (1, 0.5)
    assert (state.last_run_id, state.recent) == ("r-1", {"r-1": "failed"})
