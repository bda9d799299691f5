"""When a task is due: interval, cron (in a named time zone), once, manual, condition.

Everything here is a function of the trigger, what happened so far (`TriggerState`)
and, where it matters, the current time. Nothing reads a clock.

Missed schedules collapse: a run that goes out uses up every slot passed by then
(`passed_slots` says how many, and the latest), and the next due time is the slot after
that one. So a scheduler that was down for five hourly slots runs once, and a run that
went out late does not shift the schedule (nor, on the night clocks go back, repeat a
fixed-hour job).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter
from croniter.croniter import CroniterError

from contracts.tasks import (
    ConditionTrigger,
    CronTrigger,
    IntervalTrigger,
    ManualTrigger,
    OnceTrigger,
    Trigger,
)
from services.kernel.codec import nesting_depth
from services.scheduler.conditions import ConditionError, check_path, page_url_problem

# Anything faster is a busy loop, not a schedule.
MIN_EVERY_S = 1.0
# The longest every_s / cooldown_s: anything slower is a typo, not a schedule (a yearly
# job, leap year included, fits; cron suits calendar schedules). It also keeps
# `last_fired + every_s` far from year 9999, where datetime arithmetic overflows.
MAX_EVERY_S = 366 * 86_400.0
# How deeply a condition's input may nest. Real tool inputs nest a handful of levels; a
# few hundred exhaust Python's stack wherever the task is walked (the event store's
# cache copies it), leaving a task no one can load, change or delete.
MAX_INPUT_NESTING = 32
_CRON_MACROS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


class TriggerError(ValueError):
    """A trigger that cannot be scheduled; `field` is its path inside a task spec."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class TriggerState:
    """What the schedule has to go on.

    set_at:       when the current trigger took effect (task defined, trigger changed)
    resumed_at:   when the task was last resumed (slots missed while paused are skipped)
    last_fired:   when the trigger last produced a run (or a skipped run)
    last_slot:    the schedule slot that run used up (interval, cron); None for a run
                  recorded before slots were (the schedule then goes on from last_fired)
    last_checked: condition triggers: when the condition was last evaluated
    deferred_to:  a `once` whose run was skipped for the budget runs from then on; a
                  condition skipped for it is checked again from then on
    """

    set_at: datetime
    resumed_at: datetime | None = None
    last_fired: datetime | None = None
    last_checked: datetime | None = None
    last_slot: datetime | None = None
    deferred_to: datetime | None = None


def _utc(when: datetime) -> datetime:
    # A time without an offset is read as UTC, the only zone rote stores.
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00+14:00 is still year 0 in UTC; 9999-12-31T23:59-14:00, 10000.
        raise TriggerError(
            "trigger.at", f"{when.isoformat()} is outside the years 1 to 9999 once read as UTC"
        ) from None


def _after(when: datetime, seconds: float, field: str) -> datetime:
    """`when` plus `seconds`, or TriggerError when that leaves the datetime range (a
    task stored before the upper bounds existed can carry any number)."""
    try:
        return when + timedelta(seconds=seconds)
    except OverflowError:
        name = field.rsplit(".", 1)[-1]
        raise TriggerError(
            field, f"{name}={seconds:g} after {when.isoformat()} is past the year 9999"
        ) from None


def _check_seconds(field: str, seconds: float, low: float, high: float = MAX_EVERY_S) -> None:
    # Written so that NaN fails too.
    if not low <= seconds <= high:
        raise TriggerError(
            field,
            f"{field.rsplit('.', 1)[-1]} must be between {low:g} and {high:.0f} seconds"
            f" ({high / 86_400:g} days), not {seconds:g}",
        )


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    # OSError: a name that is a folder of the zone database ("Europe") or too long.
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise TriggerError(
            "trigger.tz", f"unknown time zone {name!r} (use an IANA name like 'Europe/Berlin')"
        ) from None


def validate(trigger: Trigger) -> Trigger:
    """Check what the contract cannot express; return the trigger normalised (a `once`
    time without an offset becomes UTC). Raises TriggerError naming the field."""
    match trigger:
        case CronTrigger(expr=expr, tz=tz):
            zone(tz)
            text = expr.strip()
            if not text.startswith("@") and len(text.split()) != 5:
                raise TriggerError(
                    "trigger.expr",
                    f"cron expression {expr!r} must have 5 fields "
                    "(minute hour day-of-month month day-of-week) or be a macro like @hourly",
                )
            if text.startswith("@") and text not in _CRON_MACROS:
                raise TriggerError("trigger.expr", f"unknown cron macro {expr!r}")
            if not croniter.is_valid(text):
                raise TriggerError("trigger.expr", f"invalid cron expression {expr!r}")
            # Valid syntax can still name a date that never comes ("0 0 31 2 *").
            cron_after(text, tz, _VALIDATION_START)
            return msgspec.structs.replace(trigger, expr=text)
        case IntervalTrigger(every_s=every):
            _check_seconds("trigger.every_s", every, MIN_EVERY_S)
        case ConditionTrigger(
            every_s=every, cooldown_s=cooldown, input=tool_input, tool=tool, predicate=predicate
        ):
            try:
                check_path(tool, predicate)
            except ConditionError as exc:
                raise TriggerError("trigger.predicate.path", str(exc)) from None
            if (problem := page_url_problem(tool, trigger.url)) is not None:
                raise TriggerError("trigger.url", problem)
            if nesting_depth(tool_input) > MAX_INPUT_NESTING:
                raise TriggerError(
                    "trigger.input",
                    f"the condition input is nested more than {MAX_INPUT_NESTING} levels deep",
                )
            _check_seconds("trigger.every_s", every, MIN_EVERY_S)
            _check_seconds("trigger.cooldown_s", cooldown, 0.0)
        case OnceTrigger(at=at):
            return msgspec.structs.replace(trigger, at=_utc(at))
    return trigger


def _latest(*times: datetime | None) -> datetime:
    return max(t for t in times if t is not None)


# Parsing a cron expression costs about a millisecond; a tick asks the same question
# of every cron task again and again until its state changes, so remember the answers.
@lru_cache(maxsize=16_384)
def cron_after(expr: str, tz: str, after: datetime) -> datetime:
    """The first cron time strictly after `after`, in UTC.

    A job at fixed hours fires once per local wall-clock time: when clocks go back, the
    repeated hour does not run a daily 02:30 job twice. A job whose hour field is a
    wildcard (`0 * * * *`, `*/15 * * * *`) keeps to real time instead, as cron does:
    an hourly check runs in the repeated hour too rather than going quiet for an hour.
    A wall time skipped when clocks go forward runs at the first valid time after it
    (croniter's behaviour).
    """
    if (halves := _day_halves(expr)) is not None:
        return _earliest(expr, halves, tz, after)
    if _hour_is_wildcard(expr):
        return _wildcard_hour_after(expr, zone(tz), _utc(after))
    local = _utc(after).astimezone(zone(tz))
    wall = local.replace(tzinfo=None)
    try:
        it = croniter(expr, local, day_or=_day_or(expr))
        candidate: datetime = it.get_next(datetime)
        if candidate.replace(tzinfo=None) <= wall:
            # Clocks went back: the candidate is in the repeated hour, at a wall time
            # that already fired. Go on from the second time the clock shows `wall`.
            second = local.replace(fold=1).astimezone(UTC).astimezone(local.tzinfo)
            candidate = croniter(expr, max(second, local), day_or=_day_or(expr)).get_next(datetime)
    except (CroniterError, ValueError, OverflowError) as exc:
        raise _never_fires(expr, exc) from None
    if candidate.replace(tzinfo=None) <= wall:
        raise TriggerError("trigger.expr", f"cron expression {expr!r} never fires")
    return candidate.astimezone(UTC)


def _never_fires(expr: str, exc: Exception) -> TriggerError:
    # croniter gives up on dates that never come ("0 0 31 2 *") after a search.
    return TriggerError("trigger.expr", f"cron expression {expr!r} never fires: {exc}")


# Longer than any clock change (Lord Howe moves 30 minutes; none has moved 3 hours).
_CLOCK_CHANGE_MAX = timedelta(hours=3)


def _day_or(expr: str) -> bool:
    """Whether a day matching either day-of-month or day-of-week fires, as crontab has
    it: only when neither field starts with `*`. croniter counts only a lone `*` as
    unrestricted, so `0 9 */2 * 1` would fire on every odd day and every Monday rather
    than on the Mondays that are odd days."""
    fields = expr.split()
    return len(fields) != 5 or not (fields[2].startswith("*") or fields[4].startswith("*"))


def _day_halves(expr: str) -> tuple[str, str] | None:
    """Both day fields restricted: the days of `m h dom mon *` and of `m h * mon dow`.
    Asked of croniter in one piece, some of those days are lost: `1,15 * 1#1` fired on
    first Mondays only, `15W * 1` on the weekday nearest the 15th only, and `15 * L5`
    was refused as never firing. `?` is no restriction."""
    fields = expr.split()
    if len(fields) != 5 or not _day_or(expr) or "?" in (fields[2], fields[4]):
        return None
    minute, hour, dom, month, dow = fields
    return f"{minute} {hour} {dom} {month} *", f"{minute} {hour} * {month} {dow}"


def _earliest(expr: str, halves: tuple[str, str], tz: str, after: datetime) -> datetime:
    """The first time after `after` of either half (see _day_halves)."""
    found = []
    for half in halves:
        try:
            found.append(cron_after(half, tz, after))
        except TriggerError:
            continue  # one half may never come (`31 2 *`) while the other does
    if not found:
        raise TriggerError("trigger.expr", f"cron expression {expr!r} never fires")
    return min(found)


def _hour_is_wildcard(expr: str) -> bool:
    fields = ["0", "*", "*", "*", "*"] if expr == "@hourly" else expr.split()
    return len(fields) == 5 and fields[1].startswith("*")


def _wildcard_hour_after(expr: str, tz: ZoneInfo, after: datetime) -> datetime:
    """The first instant strictly after `after` whose local wall time matches `expr`,
    counting both instants of a wall time that clocks going back show twice."""
    wall = after.astimezone(tz).replace(tzinfo=None)
    found = _first_instant(expr, tz, after, wall)
    if _offset(found, tz) >= _offset(after, tz):
        return found
    # Clocks go back before it: the repeated hour's second pass shows wall times
    # earlier than `after`'s, so look again from before them (slower, once a year).
    return _first_instant(expr, tz, after, wall - _CLOCK_CHANGE_MAX)


def _offset(when: datetime, tz: ZoneInfo) -> timedelta:
    offset = when.astimezone(tz).utcoffset()
    assert offset is not None  # an aware datetime in a ZoneInfo always has one
    return offset


def _first_instant(expr: str, tz: ZoneInfo, after: datetime, start: datetime) -> datetime:
    """The earliest instant after `after` of the wall times `expr` names from `start`
    on; wall times that do not exist (clocks went forward) are left out."""
    walls = croniter(expr, start, day_or=_day_or(expr))
    best: datetime | None = None
    while True:
        try:
            candidate: datetime = walls.get_next(datetime)
        except (CroniterError, ValueError, OverflowError) as exc:
            raise _never_fires(expr, exc) from None
        # First instants only grow with the wall time: none later can beat `best`.
        if best is not None and candidate.replace(tzinfo=tz, fold=0).astimezone(UTC) > best:
            return best
        for fold in (0, 1):
            instant = candidate.replace(tzinfo=tz, fold=fold).astimezone(UTC)
            exists = instant.astimezone(tz).replace(tzinfo=None) == candidate
            if exists and instant > after and (best is None or instant < best):
                best = instant


# Where validation asks "does this cron ever fire?": any fixed instant will do.
_VALIDATION_START = datetime(2025, 1, 1, tzinfo=UTC)


def _interval_after(last_slot: datetime, every: float, resumed_at: datetime | None) -> datetime:
    """The slot after `last_slot`; after a resume, the first slot at or after it, in the
    schedule's phase (last_slot + k * every): slots missed while paused are skipped, as
    with cron. Slots missed while the scheduler was down (no resume) still run once."""
    due = _after(last_slot, every, "trigger.every_s")
    if resumed_at is None or due >= resumed_at:
        return due
    return _first_slot_from(last_slot, every, resumed_at)


def _first_slot_from(anchor: datetime, every: float, when: datetime) -> datetime:
    """The first slot of the schedule anchor + k * every (k >= 1) at or after `when`."""
    slots = max(1, math.floor((when - anchor).total_seconds() / every))
    due = _after(anchor, slots * every, "trigger.every_s")
    # Float rounding can leave the slot a hair before `when`.
    return due if due >= when else _after(due, every, "trigger.every_s")


def next_due(trigger: Trigger, state: TriggerState) -> datetime | None:
    """When the trigger next wants a run; for a condition, when it next wants a check.
    None: never (manual, or a `once` that already fired). A time in the past is due."""
    match trigger:
        case ManualTrigger():
            return None
        case OnceTrigger(at=at):
            fired = state.last_fired is not None and state.last_fired >= state.set_at
            return None if fired else _latest(_utc(at), state.deferred_to)
        case IntervalTrigger(every_s=every):
            if state.last_fired is None:
                return _latest(state.set_at, state.resumed_at)
            return _interval_after(state.last_slot or state.last_fired, every, state.resumed_at)
        case CronTrigger(expr=expr, tz=tz):
            last = state.last_slot or state.last_fired
            return cron_after(expr, tz, _latest(state.set_at, state.resumed_at, last))
        case ConditionTrigger(every_s=every, cooldown_s=cooldown):
            return _latest(
                state.set_at,
                state.resumed_at,
                _after(state.last_checked, every, "trigger.every_s")
                if state.last_checked
                else None,
                _after(state.last_fired, cooldown, "trigger.cooldown_s")
                if state.last_fired
                else None,
                state.deferred_to,
            )
    raise TypeError(f"unknown trigger {trigger!r}")


def is_due(trigger: Trigger, state: TriggerState, now: datetime) -> bool:
    due = next_due(trigger, state)
    return due is not None and due <= now


def passed_slots(
    trigger: Trigger, state: TriggerState, now: datetime, limit: int = 1000
) -> tuple[int, datetime | None]:
    """How many scheduled times have passed without a run (0: not due), and the latest
    of them: the slot a run going out now uses up, the next due time being the slot
    after it. More than one means the scheduler was down or saturated; the task still
    runs only once. The latest is None past `limit` slots of a cron (the schedule then
    goes on from the time the run went out), and for triggers without slots."""
    due = next_due(trigger, state)
    if due is None or due > now:
        return 0, None
    match trigger:
        case IntervalTrigger(every_s=every):
            passed = math.floor((now - due).total_seconds() / every)
            return min(limit, 1 + passed), _after(due, passed * every, "trigger.every_s")
        case CronTrigger(expr=expr, tz=tz):
            count = 1
            while count < limit:
                after = cron_after(expr, tz, due)
                if after > now:
                    return count, due
                due = after
                count += 1
            return count, None
    return 1, None


def missed_slots(trigger: Trigger, state: TriggerState, now: datetime, limit: int = 1000) -> int:
    """How many scheduled times have passed without a run (see `passed_slots`)."""
    return passed_slots(trigger, state, now, limit)[0]
