"""The Executor aggregate (one per task): its state is the task's executor `Health`,
folded from its events by health.apply (services/kernel/aggregate.py tells the idiom).

A new one is `ExecutorAggregate.open(Created(task_id=...))`. Each event is stored under
its own topic, with its task (the relay publishes it under the task's subject). Earlier
versions stored every health event as JSON text in one `Recorded` event, and kept this
class in store.py: both still read.
"""

from __future__ import annotations

import uuid
from typing import Any

from eventsourcing.domain import Aggregate
from eventsourcing.utils import get_topic, register_topic

from services.compiler import executor_events as ev
from services.compiler import health as h
from services.kernel.aggregate import Folded, Stored, StoredCreation
from services.kernel.codec import decode_stored

# Executor aggregate ids are derived from task ids, so every process finds the same one.
NAMESPACE = uuid.UUID("5b0f6a52-3f1e-4c4e-9a57-7f1c0d2e8a11")
# Where earlier versions kept the aggregate: its events and snapshots name it so.
OLD_TOPIC = "services.compiler.store:ExecutorAggregate"


def aggregate_id(task_id: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, task_id)


class StoredWithTask(Stored):
    """A stored health event, with the task it is about (ExecutorAggregate.context adds
    it to each): declared, unlike the event's own fields, since readers of the
    notification log (health_event) ask for it by name."""

    task_id: str


class ExecutorAggregate(Folded[h.Health, ev.Created, ev.HealthEvent]):
    """A task's executors: versions and health. Created with the first event recorded
    for the task."""

    class Created(StoredCreation):
        event_type = ev.Created

    class Compiled(StoredWithTask):
        event_type = ev.Compiled
        # Recorded tool inputs: user data.
        text_fields = ("executor",)

    class Skipped(StoredWithTask):
        event_type = ev.Skipped

    class ReplaySucceeded(StoredWithTask):
        event_type = ev.ReplaySucceeded

    class ReplayFailed(StoredWithTask):
        event_type = ev.ReplayFailed

    class Superseded(StoredWithTask):
        event_type = ev.Superseded

    class Invalidated(StoredWithTask):
        event_type = ev.Invalidated

    class Pinned(StoredWithTask):
        event_type = ev.Pinned

    class Unpinned(StoredWithTask):
        event_type = ev.Unpinned

    class FullRunRecorded(StoredWithTask):
        event_type = ev.FullRunRecorded

    class Promoted(StoredWithTask):
        event_type = ev.Promoted

    class Restored(StoredWithTask):
        event_type = ev.Restored

    class Recorded(Aggregate.Event):
        """Read only: how earlier versions stored every health event, as JSON text
        (plain data before that)."""

        task_id: str
        data: str | dict[str, Any]

        @property
        def event(self) -> ev.HealthEvent:
            return decode_stored(self.data, ev.HealthEvent)  # type: ignore[arg-type]

        def apply(self, aggregate: Any) -> None:
            aggregate.fold(self.event)

    # Snapshots: v1 held the task id and the Health as `health`; v2 holds `state`; v3's
    # state counts every full run (full_runs); v4's versions say which is a candidate;
    # v5's which were healed in place (healed_from, compiled_reason; trust.healed).
    class_version = 5

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["state"] = state.pop("health")
        del state["task_id"]

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        # The full runs before the snapshot are gone; the recent costs it kept are one
        # each, all of them unless RECENT_FULL_RUNS were kept (then a lower bound).
        health: h.Health = state["state"]
        health.full_runs = len(health.full_run_costs)

    @staticmethod
    def upcast_v3_v4(state: dict[str, Any]) -> None:
        # Nothing to do: before v4 no version was a candidate, which is what a version
        # read without the flag says (VersionState.candidate's default).
        return

    @staticmethod
    def upcast_v4_v5(state: dict[str, Any]) -> None:
        # Nothing to do: before v5 no version was healed, nor any replay, which is what
        # a state read without the fields says (their defaults).
        return

    @classmethod
    def start(cls, event: ev.Created) -> h.Health:
        return h.new(event.task_id)

    def fold(self, event: ev.HealthEvent) -> None:
        h.apply(self.state, event)

    @classmethod
    def id_of(cls, opening: ev.Created) -> uuid.UUID:
        return aggregate_id(opening.task_id)

    def context(self) -> dict[str, Any]:
        return {"task_id": self.state.task_id}


def health_event(stored: object) -> tuple[str, ev.HealthEvent] | None:
    """The task and the health event a stored event holds (None: the aggregate's
    creation)."""
    if isinstance(stored, StoredWithTask | ExecutorAggregate.Recorded):
        event: ev.HealthEvent = stored.event
        return stored.task_id, event
    return None


register_topic(OLD_TOPIC, ExecutorAggregate)
# Every task's first event, in either place: the list of tasks with an executor.
CREATED_TOPICS = [f"{OLD_TOPIC}.Created", get_topic(ExecutorAggregate.Created)]
