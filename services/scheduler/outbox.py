"""What each recorded Task event becomes on the bus.

Every task event is published on rote.evt.task.<task_id>.<event>. A dispatched run also
becomes `rote.evt.run.<task>.<run>.requested` and a RunRequest on the work queue
(Nats-Msg-Id = run_id), in that order, so a watcher sees "requested" before a runner can
say "started". A run asked for (tasks.run) is `requested` from then on, while it waits
to go out. A run the scheduler abandoned becomes the run's terminal `failed` event; so
does a queued run skipped before it went out (reason `skipped`): whoever asked for it
holds its run_id and waits on its events.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from contracts import subjects as s
from contracts.runs import FailureReason, RunEvent, RunOrigin, RunRequest
from contracts.tasks import TaskEvent, TaskEventName, TaskSpec
from services.kernel.secrets import redact, redact_struct
from services.scheduler import task_events as ev


def _shown(spec: TaskSpec | None) -> TaskSpec | None:
    # Events show a spec with secrets masked; the run request carries it as written
    # (the run needs it).
    return None if spec is None else redact_struct(spec)


def _said(text: str | None) -> str | None:
    # An operator's pause/update reason or a run's error may quote a secret (a URL
    # with its password, a key pasted by mistake).
    return None if text is None else redact(text)


@dataclass(frozen=True)
class Message:
    subject: str
    event: msgspec.Struct
    msg_id: str


_NAMES: dict[type[Any], TaskEventName] = {
    ev.Defined: "defined",
    ev.Redefined: "defined",
    ev.Updated: "updated",
    ev.Paused: "paused",
    ev.Resumed: "resumed",
    ev.Deleted: "deleted",
    ev.RunRequested: "run_requested",
    ev.RunDispatched: "run_dispatched",
    ev.RunStarted: "run_started",
    ev.RunFinished: "run_finished",
    ev.RunSkipped: "run_skipped",
}


def messages_for(stored: Any, task_id: str) -> list[Message]:
    """The messages for one stored Task event (a Task.Stored or its creation)."""
    e = stored.event
    name = _NAMES.get(type(e))
    if name is None:
        return []
    at: datetime = e.at
    task_event = TaskEvent(
        task_id=task_id,
        event=name,
        version=stored.originator_version,
        at=at,
        spec=_shown(getattr(e, "spec", None)),
        reason=_said(getattr(e, "reason", None)),
        run_id=getattr(e, "run_id", None),
        status=getattr(e, "status", None),
        cost_usd=getattr(e, "cost_usd", None),
        origin=getattr(e, "origin", None),
        error=_said(getattr(e, "error", None)),
        changed=getattr(e, "changed", None),
    )
    out = _run_messages(e, task_id)
    out.append(
        Message(
            s.task_event(task_id, name),
            task_event,
            f"scheduler:{stored.originator_id}:{stored.originator_version}",
        )
    )
    return out


def _run_messages(e: ev.TaskEvent, task_id: str) -> list[Message]:
    """What a run's watchers and the work queue get of a task event."""
    match e:
        case ev.RunRequested():
            return [_requested(task_id, e.run_id, e.at, e.origin)]
        case ev.RunDispatched():
            request = RunRequest(
                run_id=e.run_id,
                task_id=task_id,
                spec=e.spec,
                requested_at=e.at,
                origin=e.origin,
                budget_left_usd=e.budget_left_usd,
            )
            return [
                _requested(task_id, e.run_id, e.at, e.origin, _shown(e.spec)),
                Message(s.WORK_RUNS, request, e.run_id),
            ]
        case ev.RunFinished() if e.reported_by == "scheduler":
            reason: Any = e.reason  # a FailureReason: the scheduler wrote it
            return [
                _failed(
                    task_id,
                    e.run_id,
                    e.at,
                    reason,
                    _said(e.error),
                    infrastructure=e.infrastructure,
                )
            ]
        case ev.RunSkipped() if e.run_id is not None:
            # Only a queued run has an id (tasks.run gave it out); a skipped slot has none.
            return [_failed(task_id, e.run_id, e.at, "skipped", _said(e.reason), e.origin)]
    return []


def _requested(
    task_id: str, run_id: str, at: datetime, origin: RunOrigin, spec: TaskSpec | None = None
) -> Message:
    """A run's `requested` event: when it is asked for (tasks.run), so runs.get finds
    the run_id it gave out even while the run waits, and again when it goes out, with
    its spec. One Nats-Msg-Id for both: the stream keeps the first (within its
    duplicate window)."""
    return Message(
        s.run_event(task_id, run_id, "requested"),
        RunEvent(
            task_id=task_id,
            run_id=run_id,
            event="requested",
            at=at,
            status="requested",
            spec=spec,
            origin=origin,
        ),
        f"{run_id}:requested",
    )


def _failed(
    task_id: str,
    run_id: str,
    at: datetime,
    reason: FailureReason,
    error: str | None,
    origin: RunOrigin | None = None,
    *,
    infrastructure: bool = False,
) -> Message:
    """A run's terminal `failed` event, written by the scheduler."""
    return Message(
        s.run_event(task_id, run_id, "failed"),
        RunEvent(
            task_id=task_id,
            run_id=run_id,
            event="failed",
            at=at,
            status="failed",
            reason=reason,
            error=error,
            origin=origin,
            infrastructure=infrastructure,
        ),
        # The runner's terminal msg-id: a late completion of this run is dropped by the
        # stream, so runs.get and the scheduler's ledger stay agreed.
        f"{run_id}:finished",
    )
