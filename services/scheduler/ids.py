"""Task and run ids (NATS subject tokens), and the aggregate ids behind them."""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, date, datetime

_NOT_TOKEN = re.compile(r"[^a-z0-9_-]+")
_NAMESPACE = uuid.UUID("5d0f1f8e-51a4-4c36-9a43-6f1ab0c3a8a1")
MAX_TOKEN = 64


def task_id_from_name(name: str) -> str:
    """`"Check ACME price!"` -> `"check-acme-price"`: a readable, valid subject token."""
    slug = _NOT_TOKEN.sub("-", name.lower()).strip("-_")[:MAX_TOKEN].strip("-_")
    if slug:
        return slug
    return "task-" + hashlib.sha256(name.encode()).hexdigest()[:12]


def new_run_id(now: datetime) -> str:
    """Sortable by time, unique by a random suffix: `20250101T090000-3f2a9c1b7e40`."""
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"


def run_id_for_key(key: str) -> str:
    """A run id derived from an idempotency key (an intake message's Nats-Msg-Id), so a
    message delivered twice asks for the same run."""
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def task_uuid(task_id: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"task:{task_id}")


def untracked_uuid(day: date) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"untracked-runs:{day.isoformat()}")
