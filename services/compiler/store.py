"""The eventsourcing application that keeps the Executor aggregates (aggregate.py):
SQLite under the data dir by default, PostgreSQL when configured
(services.kernel.event_store). Synchronous, like the library: the service calls it from
worker threads.

Every command is decide (pure, health.py) -> record -> save, run by the kernel's
CommandRunner: on a concurrent write (another process saved first) it reloads and decides
again. That is what gives two concurrent compilations two distinct versions.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from eventsourcing.application import Application
from eventsourcing.persistence import JSONTranscoder

from contracts.base import utc_now
from contracts.executors import Executor
from contracts.runs import HealedStep, Verification
from services.compiler import executor_events as ev
from services.compiler import healed, invalidation
from services.compiler import health as h
from services.compiler.aggregate import (
    CREATED_TOPICS,
    ExecutorAggregate,
    aggregate_id,
    health_event,
)
from services.kernel.commands import CommandRunner
from services.kernel.logs import get_logger
from services.kernel.transcoding import StructAsText

DEFAULT_SNAPSHOT_EVERY = 50

log = get_logger("rote.compiler")


class ExecutorStore(Application[uuid.UUID]):
    """Commands (record_*, pin, invalidate, lookup_active) and queries over the Executor
    aggregates of every task."""

    name = "compiler"

    def __init__(
        self,
        env: dict[str, str],
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        cache_size: int = 1000,
        rules: h.Rules | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if snapshot_every > 0:
            env = {**env, "IS_SNAPSHOTTING_ENABLED": "y"}
        # Recent aggregates stay in memory; the cache fast-forwards from the store on
        # each get, so another process's writes show.
        if cache_size > 0:
            env = {"AGGREGATE_CACHE_MAXSIZE": str(cache_size), **env}
        super().__init__(env)
        # An instance attribute: the interval is configuration, not a class constant.
        self.snapshotting_intervals = (  # type: ignore[misc]
            {ExecutorAggregate: snapshot_every} if snapshot_every > 0 else {}
        )
        self.rules = rules or h.Rules()
        self.clock = clock
        self._tasks: dict[str, None] = {}
        self._tasks_position = 0
        self._tasks_lock = threading.Lock()
        self.commands = CommandRunner(self)

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        # Snapshots hold the folded Health, as JSON text: it holds recorded tool inputs.
        transcoder.register(StructAsText(h.Health, "rote_executor_health"))

    # --- the command loop ---------------------------------------------------------------

    def load(self, task_id: str) -> ExecutorAggregate | None:
        aggregate: ExecutorAggregate | None = self.commands.load(aggregate_id(task_id))
        return aggregate

    def execute(
        self,
        task_id: str,
        decide: Callable[[h.Health], list[ev.HealthEvent]],
        *,
        create: bool = True,
    ) -> tuple[h.Health, list[ev.HealthEvent]]:
        """Decide on the latest state and record; on a concurrent write, reload and
        decide again. Returns the new state and the events recorded."""

        def command(
            aggregate: ExecutorAggregate | None,
        ) -> tuple[ExecutorAggregate | None, tuple[h.Health, list[ev.HealthEvent]]]:
            if aggregate is None and not create:
                raise h.HealthError("not_found", f"task {task_id} has no executor")
            state = aggregate.state if aggregate is not None else h.new(task_id)
            events = decide(state)
            if not events:  # nothing to say: an aggregate is not created empty
                return None, (state, [])
            aggregate = aggregate or ExecutorAggregate.open(ev.Created(task_id=task_id))
            aggregate.record(events)
            return aggregate, (aggregate.state, events)

        busy = f"task {task_id}: too many concurrent writes"
        return self.commands.run(aggregate_id(task_id), command, busy=busy)

    # --- commands -----------------------------------------------------------------------

    def record_trace(
        self, task_id: str, run_id: str, result: Executor | str
    ) -> tuple[h.Health, list[ev.HealthEvent]]:
        """A trace compiled (an Executor; its version is assigned here) or skipped (the
        reason)."""
        now = self.clock()
        executor = result if isinstance(result, Executor) else None
        reason = None if isinstance(result, Executor) else result
        return self.execute(task_id, lambda s: h.decide_trace(s, executor, reason, run_id, now))

    def record_replay(
        self,
        task_id: str,
        *,
        run_id: str,
        version: int,
        ok: bool,
        attempt: int = 1,
        step: int | None = None,
        reason: str | None = None,
        tokens: int = 0,
        cost_usd: float = 0.0,
        cost_saved_usd: float = 0.0,
        verification: Verification | None = None,
        heals: Sequence[HealedStep] = (),
    ) -> tuple[h.Health, list[ev.HealthEvent]]:
        """A replay's outcome; `cost_saved_usd` is the run event's, recorded as is,
        `verification` the check of its answer, `heals` the steps it repaired in place:
        with them, a verified replay records a healed version too (healed.py), in the
        same write, so a redelivered outcome records neither twice."""
        now = self.clock()
        notes: list[str] = []

        def decide(state: h.Health) -> list[ev.HealthEvent]:
            replayed = h.decide_replay(
                state,
                run_id=run_id,
                version=version,
                ok=ok,
                at=now,
                rules=self.rules,
                attempt=attempt,
                step=step,
                reason=reason,
                tokens=tokens,
                cost_usd=cost_usd,
                cost_saved_usd=cost_saved_usd if ok else 0.0,
                verification=verification,
                healed_steps=tuple(heal.step for heal in heals),
            )
            healing = healed.decide(state, replayed, heals, now)
            notes[:] = [healing.note] if healing.note else []  # this attempt's, if retried
            return replayed + healing.events

        # An unknown task or version records nothing.
        recorded = self.execute(task_id, decide)
        for note in notes:
            log.info("healed_version_not_recorded", task_id=task_id, version=version, why=note)
        return recorded

    def record_full_run(
        self, task_id: str, *, run_id: str, cost_usd: float
    ) -> tuple[h.Health, list[ev.HealthEvent]]:
        now = self.clock()
        return self.execute(
            task_id, lambda s: h.decide_full_run(s, run_id=run_id, cost_usd=cost_usd, at=now)
        )

    def invalidate(
        self, task_id: str, *, reason: str, by: str, version: int | None = None
    ) -> h.Health:
        """Invalidate `version` (None: the current one). Decided on the state as
        recorded, inside the write: a version compiled since the operator looked is
        seen here, and the named one refused (invalidation.decide_invalidate)."""
        now = self.clock()
        return self.execute(
            task_id,
            lambda s: invalidation.decide_invalidate(
                s, reason=reason, by=by, at=now, version=version
            ),
            create=False,
        )[0]

    def pin(self, task_id: str, *, version: int | None, by: str = "operator") -> h.Health:
        now = self.clock()
        return self.execute(
            task_id,
            lambda s: h.decide_pin(s, version=version, by=by, at=now, rules=self.rules),
            create=False,
        )[0]

    def lookup_active(self, task_id: str) -> tuple[Executor | None, h.Health | None]:
        """The executor to replay, health applied first (stale or undecodable versions
        are superseded, and recorded as such)."""
        now = self.clock()
        state, _ = self.execute(task_id, lambda s: h.decide_lookup(s, now=now, rules=self.rules))
        if not state.versions and state.events == 0:
            return None, None
        version = h.current(state)
        if version is None:
            return None, state
        return h.decode_executor(version.executor), state

    # --- queries ------------------------------------------------------------------------

    def health(self, task_id: str) -> h.Health | None:
        """The state as recorded."""
        aggregate = self.load(task_id)
        return aggregate.state if aggregate is not None else None

    def health_now(self, task_id: str) -> h.Health | None:
        """The state as the next lookup would leave it (health.as_of): what queries show."""
        state = self.health(task_id)
        return self.as_of(state) if state is not None else None

    def as_of(self, state: h.Health) -> h.Health:
        """`state` as the next lookup would leave it: what every reply shows."""
        return h.as_of(state, now=self.clock(), rules=self.rules)

    def history(self, task_id: str) -> list[ev.HealthEvent]:
        """Every recorded event of the task, oldest first."""
        return self._health_events(task_id)

    def _health_events(
        self, task_id: str, gt: int | None = None, lte: int | None = None
    ) -> list[ev.HealthEvent]:
        """The task's health events, oldest first, of versions past `gt` up to `lte`."""
        stored = self.events.get(aggregate_id(task_id), gt=gt, lte=lte)
        return [found[1] for found in map(health_event, stored) if found is not None]

    def history_page(
        self, task_id: str, limit: int, before: int | None
    ) -> tuple[int, int, list[ev.HealthEvent]]:
        """The `limit` events before event number `before` (numbered from 1, oldest
        first; all of them when None), read by version from the store rather than the
        whole history: (how many events there are, the number of the first one before
        the page, the page)."""
        aggregate = self.load(task_id)
        if aggregate is None:
            return 0, 0, []
        total = aggregate.version - 1  # event n is version n + 1: Created is version 1
        end = total if before is None else min(before - 1, total)
        start = max(0, end - limit)
        return total, start, self._health_events(task_id, gt=start + 1, lte=end + 1)

    def task_ids(self) -> list[str]:
        """Every task with an executor aggregate, in creation order (read from the
        notification log once, then only what is new)."""
        with self._tasks_lock:
            while True:
                batch = self.recorder.select_notifications(
                    start=self._tasks_position + 1, limit=500, topics=CREATED_TOPICS
                )
                if not batch:
                    break
                for notification in batch:
                    created = self.mapper.to_domain_event(notification)
                    self._tasks[created.task_id] = None  # type: ignore[attr-defined]
                    self._tasks_position = notification.id
            return list(self._tasks)
