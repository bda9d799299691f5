"""The checks a task spec passes before anything acts on it: its trigger is valid (the
rules of triggers.validate), its models have a price, and it fits one bus message. Pure:
the scheduler applies them to tasks.create/update and to rote.api.runs.start's inline spec
(adhoc.py), so a spec the scheduler refuses is not run through the back door either."""

from __future__ import annotations

from contracts.tasks import MAX_SPEC_BYTES, TaskSpec, Trigger
from services.kernel.codec import encode
from services.kernel.errors import ServiceError
from services.kernel.pricing import PriceTable
from services.scheduler.triggers import TriggerError, validate

SPEC_FIELDS = TaskSpec.__struct_fields__


def checked_trigger(trigger: Trigger) -> Trigger:
    """The trigger validated and normalised as it is stored, or `invalid_request`."""
    try:
        return validate(trigger)
    except TriggerError as exc:
        raise ServiceError("invalid_request", exc.message, field=exc.field) from None


def priced_models(prices: PriceTable) -> list[str]:
    """What a task may name as a model: the aliases, then the model ids."""
    return [*prices.aliases, *(m for m in prices.models if m not in prices.aliases)]


def checked_models(spec: TaskSpec, prices: PriceTable) -> None:
    """Both models have a price, or `invalid_request` naming the field. An unpriced
    model's calls cost $0 in every figure rote keeps, so its runs would go on past
    ROTE_DAILY_BUDGET_USD (and a made-up id would reach the API as typed)."""
    for name in ("model", "small_model"):
        model: str = getattr(spec, name)
        if prices.price(prices.resolve(model)) is not None:
            continue
        priced = priced_models(prices)
        raise ServiceError(
            "invalid_request",
            f"{name} {model!r} has no price, so its runs would not count against the daily"
            f" budget; use one of {', '.join(priced)} (or a dated snapshot of a model id),"
            " or add it to ROTE_PRICES_FILE",
            field=name,
            details={"model": model, "priced": priced},
        )


def checked_spec(spec: TaskSpec, prices: PriceTable, *, trigger_checked: bool = False) -> TaskSpec:
    """A plain TaskSpec (not a subclass such as CreateTask) with a validated trigger
    (unless `trigger_checked` says it is already) and priced models (in `prices`, the
    table the llm service prices calls by), small enough to travel on the bus."""
    values = {name: getattr(spec, name) for name in SPEC_FIELDS}
    if not trigger_checked:
        values["trigger"] = checked_trigger(values["trigger"])
    checked_models(spec, prices)
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
