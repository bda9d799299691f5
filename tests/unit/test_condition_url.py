"""A browser tool that acts on the current page (`browser_extract`, `browser_read_page`, …)
checks a page the condition opens first: its `url`. Each check runs in a fresh browser
session, which starts blank, so such a trigger without `url` is refused on create and
update; `url` is refused where nothing would open it; a task stored before the field
existed still loads and can be edited."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from contracts.tasks import (
    Above,
    ConditionTrigger,
    Contains,
    CreateTask,
    TaskSpec,
    UpdateTask,
)
from services.kernel.errors import ServiceError
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.engine import Scheduler
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from services.scheduler.triggers import TriggerError, validate
from tests.unit.conftest import T0

pytestmark = pytest.mark.anyio

PAGE = "https://shop.example/item/42"


def condition(tool: str, url: str | None = None, **fields: Any) -> ConditionTrigger:
    return ConditionTrigger(
        tool=tool,
        input=fields.pop("input", {"selector": ".price"}),
        url=url,
        predicate=Above(value=20),
        every_s=60,
        **fields,
    )


@pytest.mark.parametrize(
    "tool", ["browser_extract", "browser_read_page", "browser_click", "browser_screenshot"]
)
def test_a_page_tool_without_url_is_refused_asking_for_it(tool: str) -> None:
    with pytest.raises(TriggerError) as caught:
        validate(condition(tool))
    assert caught.value.field == "trigger.url"
    assert tool in caught.value.message
    assert "starts blank" in caught.value.message and "`url`" in caught.value.message


@pytest.mark.parametrize(
    ("trigger", "says"),
    [
        (condition("shell_exec", PAGE, input={"command": "df -h"}), "shell_exec"),
        (condition("browser_navigate", PAGE, input={"url": PAGE}), "browser_navigate"),
        (condition("browser_extract", "ftp://shop.example/item"), "http"),
        (condition("browser_extract", "shop.example/item"), "http"),
        (condition("browser_extract", "https:///item"), "host"),
        (condition("browser_extract", "javascript:alert(1)"), "http"),
    ],
    ids=["not-a-browser-tool", "navigate", "ftp", "no-scheme", "no-host", "javascript"],
)
def test_a_url_where_nothing_would_open_it_or_not_a_web_page_is_refused(
    trigger: ConditionTrigger, says: str
) -> None:
    with pytest.raises(TriggerError) as caught:
        validate(trigger)
    assert caught.value.field == "trigger.url"
    assert says in caught.value.message


@pytest.mark.parametrize(
    "trigger",
    [
        condition("browser_extract", PAGE),
        condition("browser_read_page", "http://127.0.0.1:8080/status", input={}),
        condition("browser_navigate", input={"url": PAGE}),
        condition("shell_exec", input={"command": "df -h"}),
    ],
    ids=["extract", "read-page", "navigate", "shell"],
)
def test_a_trigger_that_opens_its_page_or_needs_none_is_accepted(
    trigger: ConditionTrigger,
) -> None:
    assert validate(trigger) == trigger


async def test_create_and_update_refuse_it_as_an_invalid_request_naming_trigger_url(
    app: Tasks, clock: ManualClock
) -> None:
    engine = Scheduler(app, clock)
    with pytest.raises(ServiceError) as caught:
        await engine.create(
            CreateTask(name="price", prompt="p", trigger=condition("browser_extract"))
        )
    assert (caught.value.code, caught.value.field) == ("invalid_request", "trigger.url")
    view = await engine.create(
        CreateTask(name="price", prompt="p", trigger=condition("browser_extract", PAGE))
    )
    assert isinstance(view.spec.trigger, ConditionTrigger) and view.spec.trigger.url == PAGE
    with pytest.raises(ServiceError) as caught:
        await engine.update(
            UpdateTask(task_id="price", trigger=condition("browser_extract", url=None))
        )
    assert (caught.value.code, caught.value.field) == ("invalid_request", "trigger.url")


async def test_a_task_stored_before_url_existed_loads_and_takes_other_edits(
    app: Tasks, clock: ManualClock
) -> None:
    # Stored by an earlier version (the aggregate, not a command): no `url` at all.
    old = msgspec.json.decode(
        b'{"kind":"condition","tool":"browser_extract","input":{"selector":".price"},'
        b'"predicate":{"op":"above","value":20},"every_s":60}',
        type=ConditionTrigger,
    )
    assert old.url is None
    app.save(
        Task.open(Defined(task_id="old", spec=TaskSpec(name="old", prompt="p", trigger=old), at=T0))
    )
    engine = Scheduler(app, clock)
    assert app.get("old").state.spec.trigger == old
    view = await engine.update(UpdateTask(task_id="old", prompt="check the price"))
    assert view.spec.prompt == "check the price"
    # Fixed by giving the page.
    fixed = msgspec.structs.replace(old, url=PAGE)
    view = await engine.update(UpdateTask(task_id="old", trigger=fixed))
    assert view.spec.trigger == fixed


def test_the_url_is_part_of_the_trigger_on_the_wire() -> None:
    body = (
        b'{"kind":"condition","tool":"browser_extract","input":{"selector":".price"},'
        b'"url":"https://shop.example/item/42","predicate":{"op":"contains","text":"x"},'
        b'"every_s":60}'
    )
    trigger = msgspec.json.decode(body, type=ConditionTrigger)
    assert trigger.url == PAGE and trigger.predicate == Contains(text="x")
