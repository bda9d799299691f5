"""Every trigger kind against a controllable clock: when it is due, what a missed
schedule does, cron in a named time zone (DST included), and what is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.tasks import (
    Above,
    ConditionTrigger,
    CronTrigger,
    IntervalTrigger,
    ManualTrigger,
    OnceTrigger,
)
from services.scheduler.clock import ManualClock
from services.scheduler.triggers import (
    MAX_EVERY_S,
    MAX_INPUT_NESTING,
    TriggerError,
    TriggerState,
    is_due,
    missed_slots,
    next_due,
    validate,
)
from tests.unit.conftest import T0


def at(hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
    return T0 + timedelta(hours=hours, minutes=minutes, seconds=seconds)


def nested(depth: int) -> list[object]:
    """A list `depth` lists deep."""
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_interval_first_run_at_creation_then_every_interval() -> None:
    clock = ManualClock(T0)
    trigger = IntervalTrigger(every_s=600)
    state = TriggerState(set_at=clock.now())
    assert is_due(trigger, state, clock.now())

    fired = TriggerState(set_at=T0, last_fired=clock.now())
    clock.advance(599)
    assert not is_due(trigger, fired, clock.now())
    clock.advance(1)
    assert is_due(trigger, fired, clock.now())
    assert next_due(trigger, fired) == at(minutes=10)


def test_interval_missed_while_down_runs_once() -> None:
    trigger = IntervalTrigger(every_s=3600)
    state = TriggerState(set_at=T0, last_fired=T0)
    now = at(hours=5, minutes=30)  # down for five slots
    assert is_due(trigger, state, now)
    assert missed_slots(trigger, state, now) == 5
    # Once it fires, the next slot is an interval after now, not the next missed one.
    after = TriggerState(set_at=T0, last_fired=now)
    assert not is_due(trigger, after, now)
    assert next_due(trigger, after) == now + timedelta(hours=1)
    assert missed_slots(trigger, after, now) == 0


def test_interval_resumed_skips_the_slots_missed_while_paused() -> None:
    trigger = IntervalTrigger(every_s=3600)
    resumed = TriggerState(set_at=T0, last_fired=T0, resumed_at=at(hours=10, minutes=20))
    # Not at once: the first slot of the schedule (T0 + k hours) at or after the resume.
    assert not is_due(trigger, resumed, at(hours=10, minutes=20))
    assert next_due(trigger, resumed) == at(hours=11)
    assert missed_slots(trigger, resumed, at(hours=11)) == 1  # a plain scheduled run
    on_a_slot = TriggerState(set_at=T0, last_fired=T0, resumed_at=at(hours=10))
    assert next_due(trigger, on_a_slot) == at(hours=10)
    before_the_next = TriggerState(set_at=T0, last_fired=T0, resumed_at=at(minutes=30))
    assert next_due(trigger, before_the_next) == at(hours=1)
    # Down (not paused) after the resume: the slots missed then still run once.
    assert missed_slots(trigger, resumed, at(hours=15, minutes=30)) == 5


@given(
    every=st.floats(min_value=1, max_value=86_400),
    paused=st.floats(min_value=0, max_value=30 * 86_400),
)
def test_a_resumed_interval_keeps_its_phase(every: float, paused: float) -> None:
    resumed_at = T0 + timedelta(seconds=paused)
    state = TriggerState(set_at=T0, last_fired=T0, resumed_at=resumed_at)
    due = next_due(IntervalTrigger(every_s=every), state)
    assert due is not None and due >= resumed_at
    # A slot of the schedule (to the microsecond a datetime keeps)...
    slots = (due - T0).total_seconds() / every
    assert round(slots) >= 1 and abs(slots - round(slots)) < 1e-3
    # ...and the first one at or after the resume: the one before it was not.
    previous = due - timedelta(seconds=every)
    assert previous < max(resumed_at, T0 + timedelta(seconds=every)) + timedelta(milliseconds=1)


def test_cron_in_utc() -> None:
    trigger = validate(CronTrigger(expr="0 9 * * 1-5"))
    state = TriggerState(set_at=T0)
    assert next_due(trigger, state) == at(hours=1)
    assert not is_due(trigger, state, at(minutes=59, seconds=59))
    assert is_due(trigger, state, at(hours=1))
    fired = TriggerState(set_at=T0, last_fired=at(hours=1, seconds=2))
    assert next_due(trigger, fired) == at(hours=25)  # Tuesday 09:00


def test_cron_in_a_named_time_zone_follows_its_offset() -> None:
    trigger = validate(CronTrigger(expr="0 9 * * *", tz="America/New_York"))
    winter = TriggerState(set_at=datetime(2025, 1, 15, 12, 0, tzinfo=UTC))
    assert next_due(trigger, winter) == datetime(2025, 1, 15, 14, 0, tzinfo=UTC)  # EST
    summer = TriggerState(set_at=datetime(2025, 7, 15, 12, 0, tzinfo=UTC))
    assert next_due(trigger, summer) == datetime(2025, 7, 15, 13, 0, tzinfo=UTC)  # EDT


def test_cron_runs_once_when_clocks_go_back_and_once_when_they_skip() -> None:
    ny = validate(CronTrigger(expr="30 1 * * *", tz="America/New_York"))
    # 2025-11-02: 01:30 happens twice in New York (EDT, then EST).
    first = next_due(ny, TriggerState(set_at=datetime(2025, 11, 2, 4, 0, tzinfo=UTC)))
    assert first == datetime(2025, 11, 2, 5, 30, tzinfo=UTC)  # 01:30 EDT
    second = next_due(ny, TriggerState(set_at=first, last_fired=first + timedelta(seconds=1)))
    assert second == datetime(2025, 11, 3, 6, 30, tzinfo=UTC)  # next day 01:30 EST
    # 2025-03-09: 02:30 does not exist in New York; the job runs at 03:00 EDT instead.
    spring = validate(CronTrigger(expr="30 2 * * *", tz="America/New_York"))
    skipped = next_due(spring, TriggerState(set_at=datetime(2025, 3, 9, 5, 0, tzinfo=UTC)))
    assert skipped == datetime(2025, 3, 9, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize("expr", ["*/15 * * * *", "0 * * * *", "@hourly", "*/20 */2 * * *"])
@pytest.mark.parametrize(
    "start",
    [
        datetime(2024, 11, 3, 3, 50, tzinfo=UTC),  # New York: clocks go back at 06:00Z
        datetime(2025, 3, 9, 5, 50, tzinfo=UTC),  # New York: clocks go forward at 07:00Z
    ],
)
def test_cron_with_a_wildcard_hour_keeps_to_real_time_through_clock_changes(
    expr: str, start: datetime
) -> None:
    # An hourly check must not go quiet for the repeated hour, nor run twice in the
    # skipped one: New York's offsets are whole hours, so it fires exactly when the
    # same schedule in UTC does (every 2 hours counts the wall clock's hours, so the
    # repeated hour shifts that one; it still never stops nor goes back).
    ny = validate(CronTrigger(expr=expr, tz="America/New_York"))
    utc = validate(CronTrigger(expr=expr, tz="UTC"))
    when = when_utc = start
    fired, fired_utc = [], []
    for _ in range(12):
        when = next_due(ny, TriggerState(set_at=T0 - timedelta(days=400), last_fired=when))
        when_utc = next_due(utc, TriggerState(set_at=T0 - timedelta(days=400), last_fired=when_utc))
        assert when is not None and when_utc is not None
        fired.append(when)
        fired_utc.append(when_utc)
    assert fired == sorted(set(fired)), "an instant fired twice or the schedule went back"
    if "*/2" not in expr:
        assert fired == fired_utc
    else:
        gaps = {later - earlier for earlier, later in pairwise(fired)}
        assert max(gaps) <= timedelta(hours=2, minutes=20)


def test_cron_at_fixed_hours_fires_once_per_wall_time_when_clocks_go_back() -> None:
    # Every 15 minutes during 01:00-01:59 New York time: the repeated hour is not run
    # twice (what a fixed-hour job means), and the job goes on the next night.
    ny = validate(CronTrigger(expr="*/15 1 * * *", tz="America/New_York"))
    zone = ZoneInfo("America/New_York")
    when = datetime(2024, 11, 3, 5, 50, tzinfo=UTC)  # 01:50 EDT
    walls = []
    for _ in range(6):
        when = next_due(ny, TriggerState(set_at=T0 - timedelta(days=400), last_fired=when))
        assert when is not None
        walls.append(when.astimezone(zone).replace(tzinfo=None))
    assert walls == sorted(set(walls)), "a wall-clock time fired twice or went backwards"
    assert walls[0] == datetime(2024, 11, 4, 1, 0)


@pytest.mark.parametrize(
    ("expr", "days"),
    [
        # Both day fields restricted: either one matching fires.
        ("0 9 13 * 5", ["Fri 07", "Thu 13", "Fri 14", "Fri 21"]),
        ("0 9 1-31 * 1", ["Sat 01", "Sun 02", "Mon 03", "Tue 04"]),
        # A day field starting with `*` (`*/2` too) is not restricted: both must match,
        # as crontab has it (Vixie cron's DOM_STAR/DOW_STAR).
        ("0 9 */2 * 1", ["Mon 03", "Mon 17", "Mon 31", "Mon 07"]),
        ("0 9 1 * */2", ["Sat 01", "Tue 01", "Thu 01", "Sun 01"]),
        ("0 9 */1 * 1", ["Mon 03", "Mon 10", "Mon 17", "Mon 24"]),
        ("0 9 * * 1", ["Mon 03", "Mon 10", "Mon 17", "Mon 24"]),
        # A day of the week by its place in the month (`#`, `L`) combines the same way:
        # the 1st, 15th and first Monday; the 15th and last Friday; the 31st and the
        # fifth Monday (neither comes every month: still a schedule).
        ("0 9 1,15 * 1#1", ["Sat 01", "Mon 03", "Sat 15", "Tue 01"]),
        ("0 9 15 * L5", ["Sat 15", "Fri 28", "Tue 15", "Fri 25"]),
        ("0 9 31 * 1#5", ["Mon 31", "Sat 31", "Mon 30", "Thu 31"]),
        ("0 9 ? * 1", ["Mon 03", "Mon 10", "Mon 17", "Mon 24"]),
    ],
)
def test_cron_day_of_month_and_day_of_week_combine_as_in_crontab(
    expr: str, days: list[str]
) -> None:
    trigger = validate(CronTrigger(expr=expr))
    when = datetime(2025, 3, 1, tzinfo=UTC)
    fired = []
    for _ in range(len(days)):
        when = next_due(trigger, TriggerState(set_at=when))
        assert when is not None
        fired.append(when.strftime("%a %d"))
    assert fired == days


def test_cron_missed_slots_collapse_and_resume_skips_the_paused_ones() -> None:
    hourly = validate(CronTrigger(expr="0 * * * *"))
    state = TriggerState(set_at=T0, last_fired=at(hours=1))
    now = at(hours=6, minutes=30)
    assert next_due(hourly, state) == at(hours=2)
    assert missed_slots(hourly, state, now) == 5  # 10:00 .. 14:00 UTC
    assert next_due(hourly, TriggerState(set_at=T0, last_fired=now)) == at(hours=7)
    resumed = TriggerState(set_at=T0, last_fired=at(hours=1), resumed_at=now)
    assert not is_due(hourly, resumed, now)
    assert next_due(hourly, resumed) == at(hours=7)


def test_once_fires_once_and_reads_a_naive_time_as_utc() -> None:
    trigger = validate(OnceTrigger(at=datetime(2025, 1, 6, 12, 0)))
    assert isinstance(trigger, OnceTrigger) and trigger.at.tzinfo is not None
    state = TriggerState(set_at=T0)
    assert not is_due(trigger, state, at(hours=3, minutes=59))
    assert is_due(trigger, state, at(hours=4))
    fired = TriggerState(set_at=T0, last_fired=at(hours=4))
    assert next_due(trigger, fired) is None
    assert not is_due(trigger, fired, at(hours=100))
    # A new `once` (trigger changed after the last firing) is due again.
    assert is_due(trigger, TriggerState(set_at=at(hours=5), last_fired=at(hours=4)), at(hours=6))


def test_a_once_whose_time_passed_while_paused_runs_on_resume() -> None:
    """A one-off is delayed by a pause, not lost: unlike a schedule's slots, there is no
    next one to wait for."""
    trigger = validate(OnceTrigger(at=datetime(2025, 1, 6, 12, 0)))  # at(hours=4)
    resumed = TriggerState(set_at=T0, resumed_at=at(hours=9))
    assert next_due(trigger, resumed) == at(hours=4)
    assert is_due(trigger, resumed, at(hours=9))
    # Resumed before its time: it waits for it.
    early = TriggerState(set_at=T0, resumed_at=at(hours=1))
    assert not is_due(trigger, early, at(hours=2))


def test_manual_is_never_due() -> None:
    state = TriggerState(set_at=T0)
    assert next_due(ManualTrigger(), state) is None
    assert not is_due(ManualTrigger(), state, at(hours=10_000))


def test_condition_checks_every_interval_and_waits_out_the_cooldown() -> None:
    trigger = ConditionTrigger(
        tool="shell_exec",
        input={"command": "df /"},
        predicate=Above(value=90, path="stdout"),
        every_s=60,
        cooldown_s=600,
    )
    assert next_due(trigger, TriggerState(set_at=T0)) == T0  # first check right away
    checked = TriggerState(set_at=T0, last_checked=at(minutes=1))
    assert next_due(trigger, checked) == at(minutes=2)
    fired = TriggerState(set_at=T0, last_checked=at(minutes=1), last_fired=at(minutes=1))
    assert next_due(trigger, fired) == at(minutes=11)  # cooldown beats the interval


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (CronTrigger(expr="61 * * * *"), "trigger.expr"),
        (CronTrigger(expr="* * * *"), "trigger.expr"),
        (CronTrigger(expr="* * * * * *"), "trigger.expr"),  # seconds are not cron
        (CronTrigger(expr="@sometimes"), "trigger.expr"),
        (CronTrigger(expr="0 9 * * *", tz="Mars/Olympus"), "trigger.tz"),
        (CronTrigger(expr="0 9 * * *", tz="../etc/passwd"), "trigger.tz"),
        (CronTrigger(expr="0 9 * * *", tz="Europe"), "trigger.tz"),  # a folder
        (CronTrigger(expr="0 9 * * *", tz="x" * 300), "trigger.tz"),
        (CronTrigger(expr="0 0 31 2 *"), "trigger.expr"),  # valid syntax, never comes
        (IntervalTrigger(every_s=0.01), "trigger.every_s"),
        (
            ConditionTrigger(tool="x", predicate=Above(value=1), every_s=0.5),
            "trigger.every_s",
        ),
        # So long that `last_fired + every_s` leaves the datetime range.
        (IntervalTrigger(every_s=1e12), "trigger.every_s"),
        (IntervalTrigger(every_s=1e308), "trigger.every_s"),
        (IntervalTrigger(every_s=MAX_EVERY_S + 1), "trigger.every_s"),
        (
            ConditionTrigger(tool="x", predicate=Above(value=1), every_s=1e12),
            "trigger.every_s",
        ),
        (
            ConditionTrigger(tool="x", predicate=Above(value=1), every_s=60, cooldown_s=1e308),
            "trigger.cooldown_s",
        ),
        # Fine as written, outside the years 1..9999 once read as UTC.
        (OnceTrigger(at=datetime.fromisoformat("0001-01-01T00:00:00+14:00")), "trigger.at"),
        (OnceTrigger(at=datetime.fromisoformat("9999-12-31T23:59:59-14:00")), "trigger.at"),
        # Nested deeper than anything walking the task (a copy, an encoder) can follow.
        (
            ConditionTrigger(
                tool="x",
                input={"a": nested(MAX_INPUT_NESTING)},
                predicate=Above(value=1),
                every_s=60,
            ),
            "trigger.input",
        ),
    ],
)
def test_unschedulable_triggers_name_the_field(trigger: object, field: str) -> None:
    with pytest.raises(TriggerError) as caught:
        validate(trigger)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_a_yearly_interval_and_cooldown_are_accepted() -> None:
    assert validate(IntervalTrigger(every_s=MAX_EVERY_S)) == IntervalTrigger(every_s=MAX_EVERY_S)
    condition = ConditionTrigger(
        tool="x", predicate=Above(value=1), every_s=MAX_EVERY_S, cooldown_s=MAX_EVERY_S
    )
    assert validate(condition) == condition


def test_a_condition_input_nested_up_to_the_limit_is_accepted() -> None:
    deep = {"a": nested(MAX_INPUT_NESTING - 1)}  # the input object is the first level
    condition = ConditionTrigger(tool="x", input=deep, predicate=Above(value=1), every_s=60)
    assert validate(condition) == condition


@pytest.mark.parametrize(
    ("trigger", "state", "field"),
    [
        (
            IntervalTrigger(every_s=1e12),
            TriggerState(set_at=T0, last_fired=T0),
            "trigger.every_s",
        ),
        (
            IntervalTrigger(every_s=1e308),
            TriggerState(set_at=T0, last_fired=T0),
            "trigger.every_s",
        ),
        (
            ConditionTrigger(tool="x", predicate=Above(value=1), every_s=1e12),
            TriggerState(set_at=T0, last_checked=T0),
            "trigger.every_s",
        ),
        (
            ConditionTrigger(tool="x", predicate=Above(value=1), every_s=60, cooldown_s=1e308),
            TriggerState(set_at=T0, last_checked=T0, last_fired=T0),
            "trigger.cooldown_s",
        ),
    ],
)
def test_a_stored_trigger_past_the_bounds_is_a_trigger_error_not_an_overflow(
    trigger: object, state: TriggerState, field: str
) -> None:
    # Tasks saved before the bounds existed: their next time is an error naming the
    # field (the engine pauses such a task), never an OverflowError.
    with pytest.raises(TriggerError) as caught:
        next_due(trigger, state)  # type: ignore[arg-type]
    assert caught.value.field == field


@given(
    every=st.floats(min_value=1, max_value=86_400),
    gap=st.floats(min_value=0, max_value=30 * 86_400),
)
def test_interval_is_due_exactly_when_an_interval_has_passed(every: float, gap: float) -> None:
    trigger = IntervalTrigger(every_s=every)
    state = TriggerState(set_at=T0, last_fired=T0)
    now = T0 + timedelta(seconds=gap)
    due = is_due(trigger, state, now)
    assert due == (now >= T0 + timedelta(seconds=every))
    assert (missed_slots(trigger, state, now) >= 1) == due
