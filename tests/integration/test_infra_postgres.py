"""infra/postgres/setup.sql, run with psql as the README says, gives a role that is
enough for rote: the compiler and the scheduler create their tables in its schema and
keep events there, with no superuser and no other grant."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

from contracts.tasks import CreateTask
from services.compiler.store import ExecutorStore
from services.kernel.event_store import application_env
from services.kernel.secrets import redact
from services.kernel.settings import Settings
from services.scheduler.application import Tasks

pytestmark = pytest.mark.postgres

SETUP_SQL = Path(__file__).resolve().parents[2] / "infra" / "postgres" / "setup.sql"


@pytest.fixture
def rote_database(postgres_base_url: str) -> Iterator[dict[str, str]]:
    """setup.sql run for a throw-away role and database; both dropped afterwards."""
    import psycopg

    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed")
    token = uuid.uuid4().hex[:10]
    names = {
        "role": f"rote_it_{token}",
        "password": f"pw/{token}:@x",  # characters that need quoting in a URL
        "dbname": f"rote_it_{token}",
        "schema": "rote",
    }
    admin = urlsplit(postgres_base_url)
    try:
        done = subprocess.run(
            [
                psql,
                postgres_base_url.split("?")[0],
                *(arg for key, value in names.items() for arg in ("-v", f"{key}={value}")),
                "-f",
                str(SETUP_SQL),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PGCONNECT_TIMEOUT": "5"},
        )
        assert done.returncode == 0, done.stderr
        host = admin.hostname or "127.0.0.1"
        port = admin.port or 5432
        names["url"] = (
            f"postgresql://{names['role']}:{quote(names['password'], safe='')}@{host}:{port}"
            f"/{names['dbname']}?schema={names['schema']}&pool_size=2"
        )
        yield names
    finally:
        with psycopg.connect(postgres_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{names["dbname"]}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{names["role"]}"')


def test_setup_sql_gives_rote_what_it_needs(rote_database: dict[str, str]) -> None:
    import psycopg

    settings = Settings(event_store=rote_database["url"])
    env = application_env(settings, "compiler")
    assert env["POSTGRES_USER"] == rote_database["role"]
    assert env["POSTGRES_PASSWORD"] == rote_database["password"]
    assert env["POSTGRES_SCHEMA"] == "rote"
    assert env["POSTGRES_POOL_SIZE"] == "2"

    # The role is no superuser: it may do only what setup.sql gave it.
    with psycopg.connect(rote_database["url"].split("?")[0]) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = current_user"
        )
        assert row.fetchone() == (False, False)

    when = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
    compiler = ExecutorStore(application_env(settings, "compiler"))
    scheduler = Tasks(env=application_env(settings, "scheduler"))
    try:
        scheduler.create(CreateTask(name="infra check", prompt="p"), when)
        compiler.record_full_run("infra-check", run_id="r1", cost_usd=0.25)
    finally:
        compiler.close()
        scheduler.close()

    # A fresh process reads back what the first one wrote.
    scheduler = Tasks(env=application_env(settings, "scheduler"))
    try:
        assert scheduler.get("infra-check").state.spec.prompt == "p"
    finally:
        scheduler.close()

    with psycopg.connect(rote_database["url"].split("?")[0]) as conn:
        tables = conn.execute(
            "SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'rote'"
        ).fetchall()
        counts = {
            table: conn.execute(f'SELECT count(*) FROM rote."{table}"').fetchone()[0]  # type: ignore[index]
            for table, _ in tables
        }
    assert {t for t, _ in tables} == {
        "compiler_events",
        "compiler_snapshots",
        "scheduler_events",
        "scheduler_snapshots",
    }
    assert {owner for _, owner in tables} == {rote_database["role"]}
    assert counts["compiler_events"] >= 1
    assert counts["scheduler_events"] >= 1

    # The password in ROTE_EVENT_STORE never shows in a log line or an error.
    assert quote(rote_database["password"], safe="") not in redact(rote_database["url"])
