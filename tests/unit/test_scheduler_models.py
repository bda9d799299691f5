"""A task may name only models with a price: an unpriced one (a typo, a made-up id) would
reach the API as typed and count as $0, so its runs would go on past the daily budget.
The check (spec.checked_models) is part of checked_spec, which tasks.create/update and
runs.start all apply; over NATS in tests/integration/test_scheduler_intake.py."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from contracts.tasks import CreateTask, TaskRef, TaskSpec, UpdateTask
from services.kernel.errors import ServiceError
from services.kernel.event_store import application_env
from services.kernel.pricing import default_table, load_price_table
from services.kernel.settings import Settings
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock
from services.scheduler.spec import checked_spec
from services.scheduler.task import Task
from services.scheduler.task_events import Defined
from tests.unit.conftest import T0
from tests.unit.test_scheduler_engine import scheduler, stored

pytestmark = pytest.mark.anyio
PRICES = default_table()


@pytest.mark.parametrize(
    ("model", "small_model"),
    [
        ("sonnet", "haiku"),  # the defaults: aliases
        ("opus", "claude-haiku-5-5"),  # a model id
        ("claude-sonnet-4-5-20250929", "haiku"),  # a dated snapshot of a priced id
    ],
)
def test_priced_models_pass(model: str, small_model: str) -> None:
    spec = TaskSpec(name="n", prompt="p", model=model, small_model=small_model)
    assert checked_spec(spec, PRICES) == spec


@pytest.mark.parametrize(
    ("field", "model"),
    [("model", "gpt-9"), ("small_model", "haiku-9"), ("model", "claude-sonnet-5-5-preview")],
)
def test_an_unpriced_model_is_refused_naming_the_field_and_the_priced_models(
    field: str, model: str
) -> None:
    spec = msgspec.structs.replace(TaskSpec(name="n", prompt="p"), **{field: model})
    with pytest.raises(ServiceError) as refused:
        checked_spec(spec, PRICES)
    error = refused.value
    assert (error.code, error.field) == ("invalid_request", field)
    assert f"{field} {model!r} has no price" in error.message
    priced = ["sonnet", "haiku", "opus", "claude-sonnet-5-5", "claude-opus-5-5"]
    assert all(name in error.message for name in priced)
    assert error.details is not None and error.details["model"] == model
    assert set(priced) <= set(error.details["priced"])


def test_a_model_the_price_file_adds_is_accepted(tmp_path: Path) -> None:
    # A local model behind ANTHROPIC_BASE_URL runs once ROTE_PRICES_FILE prices it (at 0).
    path = tmp_path / "prices.json"
    free = [{"input_per_mtok": 0.0, "output_per_mtok": 0.0}]
    path.write_text(json.dumps({"aliases": {"local": "llama3.2"}, "models": [
        {"id": "llama3.2", "bands": free}
    ]}))  # fmt: skip
    table = load_price_table(path)
    for model in ("local", "llama3.2"):
        spec = TaskSpec(name="n", prompt="p", model=model, small_model=model)
        assert checked_spec(spec, table) == spec
    with pytest.raises(ServiceError):
        checked_spec(TaskSpec(name="n", prompt="p", model="llama3.2"), PRICES)


async def test_create_and_update_refuse_an_unpriced_model_and_record_nothing(
    app: Tasks, clock: ManualClock
) -> None:
    engine = scheduler(app, clock)
    with pytest.raises(ServiceError) as refused:
        await engine.create(CreateTask(task_id="t", name="t", prompt="p", model="gpt-9"))
    assert refused.value.field == "model"
    assert not stored(app, Task.Defined)
    view = await engine.create(CreateTask(task_id="t", name="t", prompt="p"))
    with pytest.raises(ServiceError) as refused:
        await engine.update(UpdateTask(task_id="t", small_model="gpt-9-mini"))
    assert refused.value.field == "small_model"
    got = await engine.get(TaskRef(task_id="t"))
    assert (got.version, got.spec.small_model) == (view.version, "haiku")
    assert not stored(app, Task.Updated)


async def test_a_task_stored_with_an_unpriced_model_is_edited_only_with_a_priced_one(
    app: Tasks, clock: ManualClock
) -> None:
    # Saved before the check existed: an edit of its prompt alone would keep it running
    # outside the budget, so the edit is refused until it names a priced model too.
    old = TaskSpec(name="old", prompt="p", model="gpt-9")
    app.save(Task.open(Defined(task_id="old", spec=old, at=T0)))
    engine = scheduler(app, clock)
    with pytest.raises(ServiceError) as refused:
        await engine.update(UpdateTask(task_id="old", prompt="q"))
    assert refused.value.field == "model"
    await engine.update(UpdateTask(task_id="old", prompt="q", model="sonnet"))
    got = await engine.get(TaskRef(task_id="old"))
    assert (got.spec.prompt, got.spec.model) == ("q", "sonnet")


async def test_the_scheduler_checks_against_the_table_it_was_given(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "prices.json"
    free = [{"input_per_mtok": 0.0, "output_per_mtok": 0.0}]
    path.write_text(json.dumps({"models": [{"id": "llama3.2", "bands": free}]}))
    env = application_env(Settings(data_dir=tmp_path, event_store="memory"), "sched")
    app = Tasks(env=env, prices=load_price_table(path))
    try:
        engine = scheduler(app, clock)
        view = await engine.create(CreateTask(name="local", prompt="p", model="llama3.2"))
        assert view.spec.model == "llama3.2"
    finally:
        app.close()
