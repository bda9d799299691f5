"""The daily budget: spend is the sum of `cost_usd` over runs that finished on a UTC day,
every run counted (full LLM runs and replays, scheduled or not). At or over the budget,
due runs are skipped, not queued."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta


def utc_day(when: datetime) -> date:
    return when.astimezone(UTC).date()


def next_utc_day(when: datetime) -> datetime:
    """When the UTC day after `when`'s starts: the budget counts afresh from then."""
    day = utc_day(when) + timedelta(days=1)
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def over_budget(spent_usd: float, budget_usd: float | None) -> bool:
    return budget_usd is not None and spent_usd >= budget_usd


def skip_reason(spent_usd: float, budget_usd: float, day: date) -> str:
    return (
        f"daily budget reached: ${spent_usd:.4f} spent on {day.isoformat()} (UTC) "
        f"of ${budget_usd:.4f} (ROTE_DAILY_BUDGET_USD)"
    )


class DailySpend:
    """Spend per UTC day. Each run counts once, at its latest known cost: an outcome
    seen twice is not added twice, and the real cost of a run first recorded as
    abandoned (cost 0) replaces the zero.

    Old days are dropped when spend is read, relative to the reader's clock: pruning
    relative to an outcome's own day would let one future-dated outcome (a runner with
    a skewed clock) wipe today's spend and lift the budget."""

    def __init__(self, keep_days: int = 3) -> None:
        self.keep_days = keep_days
        self._by_day: dict[date, float] = {}
        self._runs: dict[date, dict[str, float]] = {}

    def add(self, run_id: str, at: datetime, cost_usd: float) -> None:
        day = utc_day(at)
        runs = self._runs.setdefault(day, {})
        cost = max(cost_usd, 0.0)
        self._by_day[day] = self._by_day.get(day, 0.0) - runs.get(run_id, 0.0) + cost
        runs[run_id] = cost

    def spent_on(self, day: date) -> float:
        return self._by_day.get(day, 0.0)

    def spent_at(self, now: datetime) -> float:
        today = utc_day(now)
        self._prune(today)
        return self.spent_on(today)

    def _prune(self, today: date) -> None:
        oldest = today - timedelta(days=self.keep_days)
        for day in [d for d in self._by_day if d < oldest]:
            del self._by_day[day]
            self._runs.pop(day, None)
