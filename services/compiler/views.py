"""What the outside sees of an executor's health, built from folded health states: the
replies of the executor queries and the events published on the bus. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from contracts.executors import (
    Executor,
    ExecutorEvent,
    ExecutorHealth,
    ExecutorHistory,
    SavingsStats,
    VersionView,
)
from contracts.runs import Verification
from services.compiler import health as h
from services.compiler import trust
from services.compiler.executor_events import Compiled, HealthEvent, ReplayCheck

MAX_STATS_TASKS = 1000  # tasks named in the savings ledger's by_task


def none_health(task_id: str) -> ExecutorHealth:
    return ExecutorHealth(task_id=task_id, status="none")


class _StoredStats(msgspec.Struct):
    """An executor's stats as stored by any version: a missing count reads as 0."""

    total_steps: int = 0
    deterministic_steps: int = 0
    templated_steps: int = 0
    llm_steps: int = 0
    estimated_replay_cost_usd: float = 0.0


_NO_STATS = _StoredStats()


def _stats_of(version: h.VersionState | None) -> _StoredStats:
    """The version's stats as stored; an executor the contract no longer reads may hold
    anything there, and counts as zeros rather than fail every query."""
    stats = version.executor.get("stats") if version is not None else None
    try:
        return msgspec.convert(stats, _StoredStats, strict=False)
    except (msgspec.ValidationError, TypeError):
        return _NO_STATS


def _trust(tally: trust.Tally, hits: int, runs: int) -> dict[str, Any]:
    """The published tallies and rates: `hits` of `runs` were answered by a replay."""
    rate, upper = trust.false_success(tally)
    return {
        **msgspec.structs.asdict(tally),
        "hit_rate": trust.ratio(hits, runs),
        "false_success_rate": rate,
        "false_success_upper": upper,
    }


def _task_trust(tally: trust.Tally, replays: int, failures: int, full_runs: int) -> dict[str, Any]:
    # A failed replay's fallback is one of the full runs: counting the failure as well
    # would count that run twice.
    hits = replays - failures
    return {**_trust(tally, hits, hits + full_runs), "full_runs": full_runs}


def summary(health: h.Health) -> ExecutorHealth:
    """What rote.api.executors.get answers: the current version (or the latest, when none
    is current) and how it fared."""
    current = h.current(health)
    version = current or (health.versions[-1] if health.versions else None)
    reason = None
    if version is not None and version.status != "active":
        reason = version.status_reason
    elif version is None:
        reason = health.last_skip_reason and f"skipped: {health.last_skip_reason}"
    stats = _stats_of(version)
    return ExecutorHealth(
        task_id=health.task_id,
        status=h.status(health),  # type: ignore[arg-type]
        version=version.version if version else None,
        pinned_version=health.pinned,
        versions=len(health.versions),
        success_count=version.success_count if version else 0,
        failure_count=version.failure_count if version else 0,
        consecutive_failures=version.consecutive_failures if version else 0,
        last_used_at=version.last_used_at if version else None,
        total_cost_saved_usd=round(health.total_cost_saved_usd, 9),
        source_run_id=version.source_run_id if version else None,
        total_steps=stats.total_steps,
        deterministic_steps=stats.deterministic_steps,
        llm_steps=stats.llm_steps,
        templated_steps=stats.templated_steps,
        estimated_replay_cost_usd=stats.estimated_replay_cost_usd,
        full_run_cost_usd=round(h.mean_full_run_cost(health), 9),
        status_reason=reason,
        compiled_at=version.compiled_at if version else None,
        replays=health.replays,
        replay_failures=health.replay_failures,
        candidate=current.candidate if current is not None else False,
        **_task_trust(health.trust, health.replays, health.replay_failures, health.full_runs),
    )


def version_views(health: h.Health) -> list[VersionView]:
    return [
        VersionView(
            version=v.version,
            status=v.status,  # type: ignore[arg-type]
            status_reason=v.status_reason,
            source_run_id=v.source_run_id,
            compiled_at=v.compiled_at,
            success_count=v.success_count,
            failure_count=v.failure_count,
            consecutive_failures=v.consecutive_failures,
            last_used_at=v.last_used_at,
            cost_saved_usd=round(v.cost_saved_usd, 9),
            candidate=v.candidate and v.status == "active",  # one gone is no candidate
            healed_from=v.healed_from,
            compiled_reason=v.compiled_reason,
            **_trust(v.trust, v.success_count, v.success_count + v.failure_count),
        )
        for v in health.versions
    ]


def history(
    task_id: str, state: h.Health, page: list[HealthEvent], start: int, total: int
) -> ExecutorHistory:
    """One page of the history (see HistoryQuery): `page` holds the events after the
    first `start` of `total`, numbered from 1, oldest first. Bounded, so a long-lived
    task's history still fits in a reply."""
    versions: list[Executor] = []
    wire: list[ExecutorEvent] = []
    for event in page:
        out = to_wire(task_id, event)
        if out.executor is not None:  # carried once, in `versions`
            versions.append(out.executor)
            out = msgspec.structs.replace(out, executor=None)
        wire.append(out)
    return ExecutorHistory(
        task_id=task_id,
        versions=versions,
        events=wire,
        summaries=version_views(state),
        first_event=start + 1,
        total_events=total,
        next_before=start + 1 if start > 0 else None,
    )


def savings(states: Iterable[h.Health]) -> SavingsStats:
    executors = active = replays = failures = 0
    total = 0.0
    by_task: dict[str, float] = {}
    # Every task's, with an executor or not: a task never compiled runs in full.
    tallies: list[trust.Tally] = []
    full_runs = 0
    for state in states:
        tallies.append(state.trust)
        full_runs += state.full_runs
        if not state.versions:
            continue
        executors += 1
        active += h.current(state) is not None
        replays += state.replays
        failures += state.replay_failures
        total += state.total_cost_saved_usd
        by_task[state.task_id] = round(state.total_cost_saved_usd, 9)
    # Bounded, so the ledger fits in a reply however many tasks there are.
    top = sorted(by_task.items(), key=lambda item: item[1], reverse=True)[:MAX_STATS_TASKS]
    return SavingsStats(
        executors=executors,
        active=active,
        replays=replays,
        replay_failures=failures,
        total_cost_saved_usd=round(total, 9),
        by_task=dict(top),
        by_task_omitted=len(by_task) - len(top),
        **_task_trust(trust.total(tallies), replays, failures, full_runs),
    )


# Event fields the wire names otherwise; every other field goes out under its own name
# (a field ExecutorEvent lacks would make to_wire fail: tests/unit/test_executor_health).
WIRE_NAMES = {"source_run_id": "run_id", "source_cost_usd": "cost_usd"}


def to_wire(task_id: str, event: HealthEvent) -> ExecutorEvent:
    """The ExecutorEvent published for a recorded event: every kind is published, a
    full run's cost too (it moves full_run_cost_usd, which runners' cached lookups
    hold: any executor event of the task makes them ask again)."""
    fields = {WIRE_NAMES.get(k, k): v for k, v in msgspec.structs.asdict(event).items()}
    if isinstance(fields.get("verification"), ReplayCheck):  # without its cost: not kept
        fields["verification"] = msgspec.convert(
            msgspec.to_builtins(fields["verification"]), Verification
        )
    if isinstance(event, Compiled):
        try:
            fields["executor"] = h.decode_executor(event.executor)
        except (msgspec.ValidationError, TypeError):
            fields["executor"] = None
    kind: Any = type(event).__struct_config__.tag
    return ExecutorEvent(task_id=task_id, event=kind, **fields)
