"""Running a command on an event-sourced aggregate: load it, let the command record on
it, save; when another writer saved first (RecordConflictError), load again and run the
command again on what it saved. Blocking, like the eventsourcing library: call it from a
worker thread.

Between attempts, CommandRunner.run waits a short, growing, jittered while: retried at
once, writers that just collided collide again, and under contention most attempts are
lost to conflicts. Writers in one process take turns per aggregate (striped locks), so
conflicts come only from other processes.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import RecordConflictError

from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger

log = get_logger("rote.commands")

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R")

# A command: given the aggregate as stored (None: there is none yet), the aggregate with
# the events it recorded (None or none recorded: nothing to save), and its answer.
Command = Callable[[A | None], tuple[A | None, R]]


@dataclass(frozen=True)
class Retries:
    """Up to `attempts` tries, waiting between them from `base_s` doubling up to `cap_s`,
    and no more than `max_wait_s` in all (the caller is a request or a consumer)."""

    attempts: int = 25
    base_s: float = 0.005
    cap_s: float = 0.2
    max_wait_s: float = 2.0

    def wait_s(self, attempt: int, waited_s: float) -> float:
        """The wait after the `attempt`-th conflict: full jitter over an exponential
        ceiling (writers that collided spread out), within what is left of max_wait_s."""
        ceiling = min(self.cap_s, self.base_s * 2 ** min(attempt - 1, 16))
        return min(random.uniform(0, ceiling), max(0.0, self.max_wait_s - waited_s))


class CommandRunner:
    """Runs commands on the aggregates of one application."""

    def __init__(
        self, app: Application[UUID], *, retries: Retries = Retries(), stripes: int = 64
    ) -> None:
        self.app = app
        self.retries = retries
        # Striped: bounded memory however many aggregates there are.
        self._locks = [threading.Lock() for _ in range(stripes)]

    def load(self, aggregate_id: UUID) -> Any:
        """The aggregate as stored, or None."""
        try:
            return self.app.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None

    def run(self, aggregate_id: UUID, command: Command[A, R], *, busy: str) -> R:
        """The command's answer once what it recorded is saved. `busy`: the message of
        the `conflict` error raised when every attempt lost to another writer."""
        with self._locks[hash(aggregate_id) % len(self._locks)]:
            waited_s = 0.0
            for attempt in range(1, self.retries.attempts + 1):
                changed, answer = command(self.load(aggregate_id))
                if changed is None or not changed.pending_events:
                    return answer
                try:
                    self.app.save(changed)
                except RecordConflictError:
                    log.info(
                        "aggregate_save_conflict",
                        application=self.app.name,
                        aggregate_id=str(aggregate_id),
                        attempt=attempt,
                    )
                    if attempt < self.retries.attempts:
                        wait_s = self.retries.wait_s(attempt, waited_s)
                        time.sleep(wait_s)
                        waited_s += wait_s
                    continue
                return answer
        raise ServiceError("conflict", busy)
