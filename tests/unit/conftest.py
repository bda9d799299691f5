"""Fixtures shared by the scheduler's unit tests: a task application on an in-memory
event store and a manual clock starting at T0 (a Monday morning)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.kernel.event_store import application_env
from services.kernel.settings import Settings
from services.scheduler.application import Tasks
from services.scheduler.clock import ManualClock

T0 = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Tasks]:
    tasks = Tasks(env=application_env(Settings(data_dir=tmp_path, event_store="memory"), "sched"))
    yield tasks
    tasks.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)
