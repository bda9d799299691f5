"""Compiler and scheduler processes started together on an empty PostgreSQL schema (a
first distributed deployment) each create the tables; every one of them comes up."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from services.compiler.store import ExecutorStore
from services.kernel.event_store import application_env, open_application
from services.kernel.settings import Settings
from services.scheduler.application import Tasks

STARTS = 4  # processes starting at once
ROUNDS = 4  # each on a fresh, empty schema


@pytest.fixture
def empty_schemas(postgres_base_url: str) -> Iterator[Callable[[], str]]:
    """Makes an empty schema and returns its event store URL; drops them all after."""
    made: list[str] = []

    def make() -> str:
        schema = f"rote_open_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(postgres_base_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        made.append(schema)
        sep = "&" if "?" in postgres_base_url else "?"
        return f"{postgres_base_url}{sep}schema={schema}"

    yield make
    with psycopg.connect(postgres_base_url, autocommit=True) as conn:
        for schema in made:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _start_together(factory: Callable[[], Any]) -> list[BaseException]:
    """Open `STARTS` applications at the same instant; what each failed with."""
    barrier = threading.Barrier(STARTS)
    failures: list[BaseException] = []
    opened: list[Any] = []

    def start() -> None:
        barrier.wait()
        try:
            opened.append(factory())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(STARTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for app in opened:
        app.close()
    return failures


@pytest.mark.parametrize(
    ("name", "app"),
    [("compiler", ExecutorStore), ("scheduler", Tasks)],
    ids=["compiler", "scheduler"],
)
def test_services_started_together_on_an_empty_schema_all_come_up(
    empty_schemas: Callable[[], str], tmp_path: Path, name: str, app: type
) -> None:
    for _ in range(ROUNDS):
        settings = Settings(data_dir=tmp_path, event_store=empty_schemas())
        env = application_env(settings, name)
        failures = _start_together(partial(open_application, partial(app, env=env), name))
        assert failures == []
