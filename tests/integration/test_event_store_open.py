"""Compiler and scheduler processes started together on an empty PostgreSQL schema (a
first distributed deployment) each create the tables; every one of them comes up."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from services.compiler.store import ExecutorStore
from services.kernel.event_store import application_env, open_application
from services.kernel.settings import Settings, SettingsError
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


def test_an_event_store_url_option_rote_does_not_know_is_refused() -> None:
    # Passed over, `sslmode=require` would leave the connection unencrypted, and a
    # misspelt `poolsize` would leave the pool at its default, both without a word.
    for option in ("sslmode=require", "poolsize=3"):
        url = f"postgresql://rote:pw@db.internal:5432/rote?schema=rote&{option}"
        with pytest.raises(SettingsError) as caught:
            application_env(Settings(event_store=url), "compiler")
        name = option.partition("=")[0]
        assert str(caught.value) == (
            f"ROTE_EVENT_STORE: unknown option {name!r} "
            "(known: connect_timeout, lock_timeout, pool_size, schema)"
        )


def test_an_event_store_url_option_that_is_not_a_number_names_the_option() -> None:
    for option, value in (("pool_size", "five"), ("connect_timeout", "0"), ("lock_timeout", "-1")):
        url = f"postgresql://rote@db.internal/rote?{option}={value}"
        with pytest.raises(SettingsError) as caught:
            application_env(Settings(event_store=url), "compiler")
        assert str(caught.value).startswith(f"ROTE_EVENT_STORE: {option} must be a whole number")
        assert repr(value) in str(caught.value)


def test_a_password_with_a_reserved_character_is_refused_without_showing_it() -> None:
    # Unencoded, `#`, `/` or `?` ends the host part early: the password's start was
    # taken for the port, and the parser's error quoted it (or, all digits, it was
    # taken for a port on the host named by the user name).
    for password in ("s3cretpass#1", "s3cretpass/1", "s3cretpass?1", "5432#s3cret"):
        url = f"postgresql://rote:{password}@db.internal:5432/rote"
        with pytest.raises(SettingsError) as caught:
            application_env(Settings(event_store=url), "compiler")
        message = str(caught.value)
        assert "s3cret" not in message
        assert message.startswith("ROTE_EVENT_STORE: not a usable PostgreSQL URL")
        assert "percent-encode" in message


def test_a_url_without_a_password_leaves_it_to_pgpassword(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libpq takes the password from PGPASSWORD when none is given; an empty one passed
    # in its place hides it, and a server asking for a password refuses every connection.
    monkeypatch.setenv("PGPASSWORD", "from-the-environment")
    parts = urlsplit(postgres_url)
    host = f"{parts.hostname}:{parts.port or 5432}"
    url_without = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@{host}"))
    settings = Settings(data_dir=tmp_path, event_store=url_without)
    app = open_application(partial(Tasks, env=application_env(settings, "scheduler")), "scheduler")
    try:
        with app.recorder.datastore.get_connection() as conn:  # type: ignore[attr-defined]
            assert conn.info.password == "from-the-environment"
    finally:
        app.close()
    # A password in the URL (even an empty one, `user:@host`) is the one used.
    for given in ("in-the-url", ""):
        url = url_without.replace("@", f":{given}@", 1)
        env = application_env(Settings(data_dir=tmp_path, event_store=url), "scheduler")
        assert env["POSTGRES_PASSWORD"] == given


@pytest.mark.parametrize(
    "variable", ["POSTGRES_ENABLE_DB_FUNCTIONS", "SCHEDULER_POSTGRES_ENABLE_DB_FUNCTIONS"]
)
def test_events_are_always_written_under_the_table_lock(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    # The library's database-function insert takes no table lock: notification ids can
    # then commit out of order, and the relay, reading past the highest, skips an event
    # for good. The README invites POSTGRES_* variables, so this one is overruled.
    monkeypatch.setenv(variable, "y")
    settings = Settings(data_dir=tmp_path, event_store=postgres_url)
    app = open_application(partial(Tasks, env=application_env(settings, "scheduler")), "scheduler")
    try:
        assert app.recorder.datastore.enable_db_functions is False  # type: ignore[attr-defined]
    finally:
        app.close()
