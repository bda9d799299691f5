"""Executor health: the rules, as pure functions over a task's executor events.

An executor's history is a list of events (executor_events.py: compiled, replay
succeeded/failed, superseded, invalidated, pinned/unpinned, skipped, full run recorded,
promoted, restored).
`apply` folds one event into the `Health` state; nothing else changes it, so health is
always what the events say. The `decide_*` functions turn a command and the current state
into the events to record: every status change is an explicit event, so the bus shows
why it happened. What queries and the bus show of it is views.py.

Rules:
- a new compilation gets the next version. Compiled while another version is current
  (after its fallback), it is a candidate, and the version before it stays on standby
  until a replay's check verifies or refutes the candidate (promotion.py has the
  candidate rules); else it supersedes the active one. A pinned version stays current
  (the new one waits, active, for the pin to go) and still records its failures; a
  compilation for an edited task (another task fingerprint) is no candidate, and
  unpins and supersedes the old version, since no run of the edited task replays it;
- a verified replay that repaired steps in place also records a version, the replayed
  one healed (healed.py): a compilation like any other, so a candidate beside it;
- 3 consecutive replay failures supersede a version (a success resets the count), a
  pinned one too (its pin goes with it); pinning starts the count afresh (an operator
  vouches for the version; failure_count still holds every failure); a replay that
  failed because a service was down is not reported here at all (outcomes.py);
- at lookup, a current version unused for 30 days is superseded (stale), and one whose
  stored executor no longer decodes is superseded (never retried forever);
- pinning vouches for a version, so its idle time counts from the pin; one whose
  executor no longer decodes cannot be pinned;
- an invalidated version is never replayed or pinned again;
- an invalidation names a version or means the current one. A named version must be
  active: the current one, the one on standby behind a candidate (it then never comes
  back), or the newer one waiting behind a pin (it then never takes over; the pin
  stays). A named version a compilation or lookup has since superseded,
  or one already invalidated, is refused (conflict, naming the current version), so an
  operator's verdict on v1 never lands on the v2 that replaced it meanwhile;
- what the checks of replayed answers found (trust.py) is tallied per version and per
  task from the replay events, beside the full runs recorded, for the published rates;
- each run counts once: a redelivered outcome, trace or full-run cost is ignored; a
  replay outcome counts once per delivery attempt of its run (attempt 1 may fail and
  its redelivery succeed: both happened);
- what a replay saved is the run event's cost_saved_usd, recorded as reported and never
  recomputed, so a run's event and total_cost_saved_usd always agree. The runner
  computes it as mean_full_run_cost() (as the executor lookup answered it) minus the
  replay's cost, not floored: a replay dearer than a full run saves a negative amount,
  and the ledger says so rather than overstate the savings.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec

from contracts.executors import Executor
from contracts.runs import Verification
from services.compiler import executor_events as ev
from services.compiler import promotion, trust
from services.compiler.trust import Tally

# Run ids remembered for idempotency (a redelivery comes within minutes, not 1000 runs).
REMEMBERED_RUNS = 1000
# The mean cost of this many recent full runs is what a replay saves against.
RECENT_FULL_RUNS = 10


@dataclass(frozen=True)
class Rules:
    max_consecutive_failures: int = 3
    max_idle: timedelta = timedelta(days=30)


# --- state ------------------------------------------------------------------------------


class VersionState(msgspec.Struct, kw_only=True):
    version: int
    status: str = "active"  # active | superseded | invalidated
    status_reason: str | None = None
    source_run_id: str
    compiled_at: datetime
    executor: dict[str, Any]
    source_cost_usd: float = 0.0
    success_count: int = 0
    failure_count: int = 0
    consecutive_failures: int = 0
    last_used_at: datetime | None = None
    cost_saved_usd: float = 0.0
    trust: Tally = msgspec.field(default_factory=Tally)
    # Serving runs, but not yet verified (promotion.py).
    candidate: bool = False
    # Made by healing version healed_from in place (healed.py), and why, in words.
    healed_from: int | None = None
    compiled_reason: str | None = None


class Health(msgspec.Struct, kw_only=True):
    task_id: str
    versions: list[VersionState] = []
    pinned: int | None = None
    pinned_at: datetime | None = None
    total_cost_saved_usd: float = 0.0
    replays: int = 0
    replay_failures: int = 0
    full_run_costs: list[float] = []
    # Every full run recorded (full_run_costs keeps the recent ones): the hit rate's.
    full_runs: int = 0
    trust: Tally = msgspec.field(default_factory=Tally)
    last_skip_reason: str | None = None
    # Insertion-ordered set of "<kind>:<run_id>" ("replay:<run_id>:<attempt>"), values
    # unused, oldest dropped first.
    seen: dict[str, int] = {}
    events: int = 0

    def version(self, number: int) -> VersionState | None:
        # Versions are 1..n in order, so the list index is the version - 1.
        if 1 <= number <= len(self.versions):
            found = self.versions[number - 1]
            if found.version == number:
                return found
        return next((v for v in self.versions if v.version == number), None)


def new(task_id: str) -> Health:
    return Health(task_id=task_id)


def replay_key(run_id: str, attempt: int | None) -> str:
    # Per attempt, not per run: a run redelivered after its runner died mid-replay
    # replays again, and that replay's outcome is news; the same attempt's outcome
    # delivered twice is not (nor an earlier attempt's, carried to the run's end). Without an
    # attempt (recorded by an earlier version), the key is the run's alone.
    return f"replay:{run_id}" if attempt is None else f"replay:{run_id}:{attempt}"


def _replay_seen(health: Health, run_id: str, attempt: int) -> bool:
    # A run whose outcome was recorded under the earlier per-run rule (its event or a
    # snapshot holds the run's key alone) keeps that rule: nothing more counts for it.
    return replay_key(run_id, attempt) in health.seen or replay_key(run_id, None) in health.seen


def _remember(health: Health, key: str) -> None:
    health.seen[key] = 1
    while len(health.seen) > REMEMBERED_RUNS:
        del health.seen[next(iter(health.seen))]


def apply(health: Health, event: ev.HealthEvent) -> None:
    """Fold one event into the state (in place)."""
    health.events += 1
    match event:
        case ev.Compiled():
            health.versions.append(
                VersionState(
                    version=event.version,
                    source_run_id=event.source_run_id,
                    compiled_at=event.at,
                    executor=event.executor,
                    source_cost_usd=event.source_cost_usd,
                    candidate=event.candidate,
                    healed_from=event.healed_from,
                    compiled_reason=event.reason,
                )
            )
            _remember(health, f"trace:{event.source_run_id}")
        case ev.Skipped():
            health.last_skip_reason = event.reason
            _remember(health, f"trace:{event.run_id}")
        case ev.ReplaySucceeded():
            health.replays += 1
            health.total_cost_saved_usd += event.cost_saved_usd
            _remember(health, replay_key(event.run_id, event.attempt))
            trust.count(health.trust, event.verification, event.healed_steps)
            found = health.version(event.version)
            if found is not None:
                trust.count(found.trust, event.verification, event.healed_steps)
                found.success_count += 1
                found.consecutive_failures = 0
                found.last_used_at = event.at
                found.cost_saved_usd += event.cost_saved_usd
        case ev.ReplayFailed():
            health.replays += 1
            health.replay_failures += 1
            _remember(health, replay_key(event.run_id, event.attempt))
            trust.count(health.trust, event.verification, event.healed_steps)
            found = health.version(event.version)
            if found is not None:
                trust.count(found.trust, event.verification, event.healed_steps)
                found.failure_count += 1
                found.consecutive_failures += 1
                found.last_used_at = event.at
        case ev.Superseded():
            found = health.version(event.version)
            if found is not None:
                found.status, found.status_reason = "superseded", event.reason
        case ev.Invalidated():
            found = health.version(event.version)
            if found is not None:
                found.status = "invalidated"
                found.status_reason = f"{event.reason} (by {event.by})"
        case ev.Pinned():
            _drop_pin(health)  # a pin moved on from: that version is no longer pinned
            health.pinned, health.pinned_at = event.version, event.at
            found = health.version(event.version)
            if found is not None:
                found.status, found.status_reason = "active", f"pinned by {event.by}"
                found.consecutive_failures = 0
                found.candidate = False  # the operator vouches for it
        case ev.Unpinned():
            if health.pinned == event.version:
                _drop_pin(health)
        case ev.FullRunRecorded():
            health.full_runs += 1
            health.full_run_costs.append(event.cost_usd)
            del health.full_run_costs[:-RECENT_FULL_RUNS]
            _remember(health, f"full:{event.run_id}")
        case ev.Promoted() | ev.Restored():
            promotion.apply(health, event)


def _drop_pin(health: Health) -> None:
    """No version is pinned any more. One that stays active loses its "pinned by"
    reason, or the history would go on calling it pinned (one superseded or invalidated
    keeps the reason that says why)."""
    pinned = health.version(health.pinned) if health.pinned is not None else None
    if pinned is not None and pinned.status == "active":
        pinned.status_reason = None
    health.pinned, health.pinned_at = None, None


def fold(task_id: str, events: list[ev.HealthEvent]) -> Health:
    health = new(task_id)
    for event in events:
        apply(health, event)
    return health


# --- derived values ---------------------------------------------------------------------


def current(health: Health) -> VersionState | None:
    """The version to replay: the pinned one, else the newest active one."""
    if health.pinned is not None:
        pinned = health.version(health.pinned)
        if pinned is not None and pinned.status == "active":
            return pinned
    for version in reversed(health.versions):
        if version.status == "active":
            return version
    return None


def next_version(health: Health) -> int:
    return max((v.version for v in health.versions), default=0) + 1


def mean_full_run_cost(health: Health) -> float:
    """What a full LLM run of this task costs: the mean of the recent ones seen (the
    last RECENT_FULL_RUNS), else the cost of the run the current executor was compiled
    from. (services/executor/cost.full_run_cost is one run's, from its run event.)"""
    if health.full_run_costs:
        return sum(health.full_run_costs) / len(health.full_run_costs)
    version = current(health) or (health.versions[-1] if health.versions else None)
    return version.source_cost_usd if version is not None else 0.0


def last_activity(health: Health, version: VersionState) -> datetime:
    moments = [version.compiled_at]
    if version.last_used_at is not None:
        moments.append(version.last_used_at)
    if health.pinned == version.version and health.pinned_at is not None:
        moments.append(health.pinned_at)
    return max(moments)


def stale_reason(health: Health, now: datetime, rules: Rules) -> str | None:
    version = current(health)
    if version is None:
        return None
    idle = now - last_activity(health, version)
    if idle > rules.max_idle:
        return f"stale: unused for {idle.days} days (limit {rules.max_idle.days})"
    return None


def decode_executor(raw: dict[str, Any]) -> Executor:
    """The stored executor as the current contract reads it (raises on mismatch)."""
    return msgspec.convert(raw, Executor)


def status(health: Health) -> str:
    version = current(health)
    if version is not None:
        return "active"
    if not health.versions:
        return "none"
    return health.versions[-1].status


# --- decisions: command + state -> events to record -------------------------------------


class HealthError(Exception):
    """A command the state does not allow; `code` is an error code (contracts.errors),
    `field` the command's field at fault, `details` what a caller may act on."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details


def _settle(health: Health, at: datetime, keep: set[int], reason: str) -> list[ev.HealthEvent]:
    """Supersede every active version not in `keep` (at most the pin and the newest
    stay active)."""
    return [
        ev.Superseded(at=at, version=v.version, reason=reason)
        for v in health.versions
        if v.status == "active" and v.version not in keep
    ]


def decide_trace(
    health: Health,
    executor: Executor | None,
    skip_reason: str | None,
    run_id: str,
    at: datetime,
    *,
    reason: str | None = None,
    healed_steps: tuple[int, ...] = (),
) -> list[ev.HealthEvent]:
    """A captured trace compiled (executor) or skipped (skip_reason); or a version healed
    in place by run `run_id` (healed.py: `reason`, and the steps it healed)."""
    if f"trace:{run_id}" in health.seen or any(v.source_run_id == run_id for v in health.versions):
        return []
    if executor is None:
        return [ev.Skipped(at=at, run_id=run_id, reason=skip_reason or "skipped")]
    version = next_version(health)
    raw = msgspec.to_builtins(msgspec.structs.replace(executor, version=version))
    now = current(health)  # the pin, if there is one
    changed = now is not None and _task_changed(now, executor)
    candidate, standby = promotion.on_compile(health, now, changed)
    events: list[ev.HealthEvent] = [
        ev.Compiled(
            at=at,
            version=version,
            executor=raw,
            source_run_id=run_id,
            source_cost_usd=executor.stats.source_run_cost_usd,
            candidate=candidate,
            healed_from=executor.healed_from,
            healed_steps=list(healed_steps),
            reason=reason,
        )
    ]
    if now is not None and changed and health.pinned == now.version:
        # The pin vouches for a version of the task as it was: the runner never replays
        # it for the edited task, so keeping it would make every run a full one.
        reason = f"the task changed; v{version} is compiled for it as it is now"
        events.append(ev.Unpinned(at=at, version=now.version, reason=reason))
        return events + _settle(health, at, {version}, reason)
    keep = {version} | {v for v in (health.pinned, standby) if v is not None}
    events += _settle(health, at, keep, f"replaced by v{version}")
    return events


def _task_changed(version: VersionState, executor: Executor) -> bool:
    """Whether `executor` was compiled for a different task spec than `version` was
    (unknown fingerprints, from executors compiled before they existed, never differ)."""
    return _fingerprints_differ(version.executor.get("task_fingerprint"), executor.task_fingerprint)


def _fingerprints_differ(old: object, new: object) -> bool:
    return None not in (old, new) and old != new


def decide_replay(
    health: Health,
    *,
    run_id: str,
    version: int,
    ok: bool,
    at: datetime,
    rules: Rules,
    attempt: int = 1,
    step: int | None = None,
    reason: str | None = None,
    tokens: int = 0,
    cost_usd: float = 0.0,
    cost_saved_usd: float = 0.0,
    verification: Verification | None = None,
    healed_steps: tuple[int, ...] = (),
) -> list[ev.HealthEvent]:
    """`cost_saved_usd` is the run event's, recorded as is (see the module's rules);
    `verification` the check of the replay's answer, kept as its evidence;
    `healed_steps` the steps repaired in place (healed.py records their version)."""
    if _replay_seen(health, run_id, attempt):
        return []
    state = health.version(version)
    if state is None:
        return []
    check = ev.replay_check(verification)
    if ok:
        succeeded: list[ev.HealthEvent] = [
            ev.ReplaySucceeded(
                at=at,
                version=version,
                run_id=run_id,
                attempt=attempt,
                tokens=tokens,
                cost_usd=cost_usd,
                cost_saved_usd=cost_saved_usd,
                verification=check,
                healed_steps=list(healed_steps),
            )
        ]
        healed = bool(healed_steps)
        return succeeded + promotion.on_verified(health, state, check, run_id, at, healed)
    events: list[ev.HealthEvent] = [
        ev.ReplayFailed(
            at=at,
            version=version,
            run_id=run_id,
            attempt=attempt,
            step=step,
            reason=reason or "replay failed",
            tokens=tokens,
            cost_usd=cost_usd,
            verification=check,
            healed_steps=list(healed_steps),
        )
    ]
    refuted = promotion.failed_verification(state, check)
    if refuted is not None:
        # A candidate is on trial: one answer found wrong is enough.
        events.append(ev.Superseded(at=at, version=version, reason=refuted))
        return events + promotion.restore(health, state, at, "failed verification")
    failures = state.consecutive_failures + 1
    if state.status == "active" and failures >= rules.max_consecutive_failures:
        events += _retire(health, version, at, f"{failures} consecutive replay failures")
    return events


def _retire(health: Health, version: int, at: datetime, reason: str) -> list[ev.HealthEvent]:
    events: list[ev.HealthEvent] = [ev.Superseded(at=at, version=version, reason=reason)]
    if health.pinned == version:
        events.append(ev.Unpinned(at=at, version=version, reason=reason))
    state = health.version(version)
    if state is not None:
        events += promotion.restore(health, state, at, f"superseded: {reason}")
    return events


def decide_full_run(
    health: Health, *, run_id: str, cost_usd: float, at: datetime
) -> list[ev.HealthEvent]:
    if f"full:{run_id}" in health.seen or cost_usd < 0:
        return []
    return [ev.FullRunRecorded(at=at, run_id=run_id, cost_usd=cost_usd)]


def decide_lookup(health: Health, *, now: datetime, rules: Rules) -> list[ev.HealthEvent]:
    """Health applied at lookup: a stale or undecodable current version is superseded
    (then the version current after it is checked too)."""
    return _looked_up(health, now, rules)[1]


def as_of(health: Health, *, now: datetime, rules: Rules) -> Health:
    """The state a lookup at `now` would leave, without recording anything: what the
    queries show, so they never call active a version the next lookup would refuse."""
    return _looked_up(health, now, rules)[0]


def _looked_up(health: Health, now: datetime, rules: Rules) -> tuple[Health, list[ev.HealthEvent]]:
    events: list[ev.HealthEvent] = []
    probe = health
    while (version := current(probe)) is not None:
        reason = stale_reason(probe, now, rules)
        if reason is None:
            try:
                decode_executor(version.executor)
            except (msgspec.ValidationError, TypeError) as exc:
                reason = f"cannot be decoded: {exc}"
        if reason is None:
            break
        if probe is health:  # a scratch copy to fold into, made only when needed
            probe = msgspec.convert(msgspec.to_builtins(health), Health)
        step = _retire(probe, version.version, now, reason)
        for event in step:
            apply(probe, event)
        events += step
    return probe, events


def named_version(health: Health, version: int) -> VersionState:
    """Version `version` of the task; not_found when it has none."""
    state = health.version(version)
    if state is None:
        known = ", ".join(str(v.version) for v in health.versions)
        message = f"task {health.task_id} has no version {version} ({known})"
        raise HealthError("not_found", message, field="version")
    return state


def decide_pin(
    health: Health, *, version: int | None, by: str, at: datetime, rules: Rules = Rules()
) -> list[ev.HealthEvent]:
    """Pin `version` (None: unpin). Pinning vouches for the version: its idle time
    counts from the pin (last_activity), so a stale or superseded version may be
    pinned back into service, and pinning the pinned one again when it has gone stale
    renews the pin. It cannot vouch for an executor the runner cannot read, nor for one
    compiled for the task before an edit (the runner never replays it): those are
    refused, or the pin would only be dropped again (at the next lookup or full run)."""
    if not health.versions:
        raise HealthError("not_found", f"task {health.task_id} has no executor")
    if version is None:
        if health.pinned is None:
            return []
        events: list[ev.HealthEvent] = [
            ev.Unpinned(at=at, version=health.pinned, reason=f"by {by}")
        ]
        newest = _newest_active(health, exclude=None)
        keep = {newest} if newest is not None else set()
        return events + _settle(health, at, keep, f"unpinned; v{newest} is current")
    state = named_version(health, version)
    if state.status == "invalidated":
        raise HealthError(
            "conflict", f"v{version} was invalidated: {state.status_reason}", field="version"
        )
    try:
        decode_executor(state.executor)
    except (msgspec.ValidationError, TypeError) as exc:
        raise HealthError(
            "conflict",
            f"v{version} cannot be pinned: its stored executor cannot be decoded ({exc});"
            " a new run compiles a replacement",
            field="version",
        ) from None
    latest = health.versions[-1]
    if _fingerprints_differ(
        state.executor.get("task_fingerprint"), latest.executor.get("task_fingerprint")
    ):
        # The runner never replays it for the task as it is now (the newest version's):
        # the pin would only put aside the current version until a full run unpins it.
        raise HealthError(
            "conflict",
            f"v{version} was compiled for the task before it was edited (its prompt, tools"
            f" or small model changed; v{latest.version} is compiled for it as it is now):"
            " runs would not replay it",
            field="version",
        )
    if health.pinned == version and state.status == "active":
        if stale_reason(health, at, rules) is None:
            return []
        # Stale: the next lookup would retire the pin; pinning again renews it.
        return [ev.Pinned(at=at, version=version, by=by)]
    events = [ev.Pinned(at=at, version=version, by=by)]
    newest = _newest_active(health, exclude=version)
    # Only a newer version waits for the pin to go; an older active one (the pin being
    # moved on from) is replaced, or it would be replayed again when this pin goes.
    keep = {version} | ({newest} if newest is not None and newest > version else set())
    return events + _settle(health, at, keep, f"v{version} pinned")


def _newest_active(health: Health, exclude: int | None) -> int | None:
    for v in reversed(health.versions):
        if v.status == "active" and v.version != exclude:
            return v.version
    return None
