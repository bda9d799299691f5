"""Run ids for idempotency keys, and the aggregate ids behind tasks. Task ids from names
and fresh run ids come from services.kernel.ids."""

from __future__ import annotations

import hashlib
import uuid
from datetime import date

_NAMESPACE = uuid.UUID("5d0f1f8e-51a4-4c36-9a43-6f1ab0c3a8a1")


def run_id_for_key(key: str) -> str:
    """A run id derived from an idempotency key (an intake message's Nats-Msg-Id), so a
    message delivered twice asks for the same run."""
    return "k-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def task_uuid(task_id: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"task:{task_id}")


def untracked_uuid(day: date) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"untracked-runs:{day.isoformat()}")
