"""The checks a task spec passes before anything acts on it: its trigger is valid (the
rules of triggers.validate) and it fits one bus message. Pure: the scheduler applies
them to tasks.create/update and to rote.api.runs.start's inline spec (adhoc.py), so a spec
the scheduler refuses is not run through the back door either."""

from __future__ import annotations

from contracts.tasks import MAX_SPEC_BYTES, TaskSpec, Trigger
from services.kernel.codec import encode
from services.kernel.errors import ServiceError
from services.scheduler.triggers import TriggerError, validate

SPEC_FIELDS = TaskSpec.__struct_fields__


def checked_trigger(trigger: Trigger) -> Trigger:
    """The trigger validated and normalised as it is stored, or `invalid_request`."""
    try:
        return validate(trigger)
    except TriggerError as exc:
        raise ServiceError("invalid_request", exc.message, field=exc.field) from None


def checked_spec(spec: TaskSpec, *, trigger_checked: bool = False) -> TaskSpec:
    """A plain TaskSpec (not a subclass such as CreateTask) with a validated trigger
    (unless `trigger_checked` says it is already), small enough to travel on the bus."""
    values = {name: getattr(spec, name) for name in SPEC_FIELDS}
    if not trigger_checked:
        values["trigger"] = checked_trigger(values["trigger"])
    checked = TaskSpec(**values)
    # Checked before anything is recorded: every spec event, run-requested event and run
    # request carries the whole spec in one NATS message, and a recorded event the bus
    # cannot carry is an event no one ever sees.
    size = len(encode(checked))
    if size > MAX_SPEC_BYTES:
        raise ServiceError(
            "too_large",
            f"the task spec is {size} bytes as JSON, over the limit of {MAX_SPEC_BYTES}"
            " (shorten the prompt, the condition input or allowed_tools)",
            field="spec",
            details={"size": size, "limit": MAX_SPEC_BYTES},
        )
    return checked
